"""Lockstep helpers (``ops/lockstep.py``): under vmap each gives every experiment what it
gives it alone, and the engine's sort sizes (service order, PFC events) chosen per batch
leave a vmap batch equal to each experiment alone, bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import run_small
from multiverse_jax.conf.schema import SimConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops import lockstep, queues
from multiverse_jax.systems import pfc
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows


def test_while_any_runs_until_every_experiment_is_done():
    """Count down to 0 (a fixed point): vmapped equals each alone, however far each starts."""
    def count_down(start):
        return lockstep.while_any(lambda c, x: x > 0, lambda c, x: jnp.maximum(x - c, 0), start, jnp.int32(1))

    starts = jnp.array([0, 3, 7], jnp.int32)
    np.testing.assert_array_equal(jax.jit(jax.vmap(count_down))(starts), [0, 0, 0])
    assert int(jax.jit(count_down)(jnp.int32(5))) == 0


def test_at_most_once_keeps_the_values_of_experiments_that_do_not_need_it():
    scale = jnp.array([10, 20, 30])

    def f(needed, x, s):
        return lockstep.at_most_once(needed, lambda go, v: jnp.where(go, v * s, -1), x)

    needed = jnp.array([True, False, True])
    out = jax.jit(jax.vmap(f))(needed, jnp.array([1, 2, 3]), scale)
    np.testing.assert_array_equal(out, [10, 2, 90])
    none = jax.jit(jax.vmap(f))(jnp.zeros(3, bool), jnp.array([1, 2, 3]), scale)
    np.testing.assert_array_equal(none, [1, 2, 3])


def test_switch_largest_runs_the_largest_branch_asked_for():
    """Branch i rounds up to a multiple of 4**i: the larger branch gives the smaller's result
    for numbers below 4**i, the contract. Vmapped, all take the largest; alone, its own."""
    branches = [lambda x, i=i: x + 100 * i for i in range(3)]

    def f(x):
        return lockstep.switch_largest(lambda x: jnp.minimum(x, 2), branches, x)

    np.testing.assert_array_equal(jax.jit(jax.vmap(f))(jnp.array([0, 1, 2])), [200, 201, 202])
    assert int(jax.jit(f)(jnp.int32(1))) == 101


def test_switch_in_place_runs_one_branch_alone_and_the_largest_vmapped():
    """As ``switch_largest``, for branches that update a carry (here one entry of an array)
    in place: alone, one branch runs (a chain of one-trip loops), in a ``lax.map`` too;
    vmapped, the largest any experiment asks for; the others' entries stay as they were."""
    branches = [lambda go, c, k, i=i: c.at[k].add(jnp.where(go, 100 * i + 1, 0)) for i in range(3)]

    def f(x, k):
        return lockstep.switch_in_place(lambda c, k: jnp.minimum(c[k], 2), branches, x, k)

    rows = jnp.array([[0, 5], [1, 5], [2, 5]], jnp.int32)
    np.testing.assert_array_equal(jax.jit(jax.vmap(f))(rows, jnp.zeros(3, jnp.int32)), [[201, 5], [202, 5], [203, 5]])
    np.testing.assert_array_equal(jax.jit(f)(jnp.array([1, 5], jnp.int32), jnp.int32(0)), [102, 5])
    mapped = jax.jit(lambda r: jax.lax.map(lambda x: f(x, jnp.int32(1)), r))(jnp.array([[7, 0], [7, 1], [7, 9]], jnp.int32))
    np.testing.assert_array_equal(mapped, [[7, 1], [7, 102], [7, 210]])


# Slow (its program, four sort sizes in three places under vmap, compiles in 30-35 s on 2 cores):
# CI may skip it, as test_queues sorts in fewer places in map, test_pfc_exact sorts PFC's
# events past the compact buffer, and the switches above run lockstep's rules.
@pytest.mark.slow
def test_sort_sizes_chosen_per_batch_keep_batch_equal_to_alone(monkeypatch):
    """With the smallest sorts at 64 places, windows of a light and a heavy experiment need
    different sort sizes for their queues (64, 256, 1024, the whole pool), their arrivals
    to route and their PFC events, and the heavy one merges its kept order while the light
    one sorts; under vmap the batch sorts queues (in the largest size any needs, if any
    must sort) and routes arrivals in the largest size any needs, and PFC events in each
    size some experiment needs. FCTs equal each run alone (the same vmap program, the others
    padding that never steps), bit for bit, and those of the whole-pool sort under ``map``."""
    monkeypatch.setattr(queues, "SMALLEST_SORT", 64)  # queues and PFC events: 64, 256, 1024 places; arrivals (forward) also 16
    monkeypatch.setattr(pfc, "PFC_COMPACT_ABOVE", 0)
    monkeypatch.setattr(pfc, "PFC_EVENTS_PER_LINK", 0)
    topo = fattree(4, 100.0, 1.0)
    # A short flow every 25 µs: while the incast merges its kept order with its arrivals
    # (over 64 queued), the light experiment sorts its few (``queues.service_order``'s join).
    light = make_flows(np.tile([0, 5], 5), np.tile([9, 12], 5), 30_000, np.arange(10) * 25_000_000)
    heavy = make_flows(np.arange(1, 16), np.zeros(15, np.int64), 200_000, 0)  # 15 -> 1 incast
    exps = [Experiment(topo, flows, sim=SimConfig(sample_interval_us=0)) for flows in (light, heavy)]
    shapes = {"slots_per_host": 88, "n_samples": 1}  # shapes of this test only: compiled with the patch
    together = run_small(exps, batching="vmap", **shapes)
    assert together[1].port_max_queue_bytes.max() > 64 * 4160  # over 64 packets queued: a larger sort
    for exp, batched in zip(exps, together):  # alone: padded with done copies, which never step
        alone = run_small([exp], batching="vmap", **shapes)[0]
        assert batched.ok and alone.ok
        np.testing.assert_array_equal(batched.flows["fct_ps"], alone.flows["fct_ps"])
        np.testing.assert_array_equal(batched.port_max_queue_bytes, alone.port_max_queue_bytes)
    # And every size gives what one sort of the whole pool gives (SMALL's pool, 2,048 slots,
    # is below 4096: no smaller size; run_small's own program, unpatched, shared with other tests).
    monkeypatch.undo()
    whole = run_small(exps, batching="map")
    for tiered, reference in zip(together, whole):
        np.testing.assert_array_equal(tiered.flows["fct_ps"], reference.flows["fct_ps"])
