"""The pool's live prefix (``ops/pool.py``): windows run on the first columns of every
host, or on each host's own columns in use (per host), compute what the whole pool
computes, bit for bit, in both batching modes; the bound on the packets a window
creates, which makes that so, holds window by window; a per-host prefix keeps the whole
pool's slot order, host order and free slots."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import SMALL
from multiverse_jax import engine
from multiverse_jax.batch import build_batch, needed_static
from multiverse_jax.conf.schema import SimConfig
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops import nic, pool
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows
from test_engine import _mixed_experiments

FAT_TREE = fattree(4, 100.0, 1.0)

# Columns of SMALL's 128. The mixed experiments hold up to 37 columns and can create up to
# 6 packets a window: their windows fit at first, then not, then again (checked below).
PREFIX = 32
# A prefix around that one (``Static.prefix_columns``, PREFIX inside it): some windows need
# more than PREFIX but fit in it, some need more than it (checked below).
OUTER = 40
# Per-host prefixes (``Static.prefix_per_host``) of PER_HOST H places, PER_HOST_INNER H inside
# them and PER_HOST_INNERMOST H inside those: each host's own columns in use, so they hold
# more windows than the first columns would; the mixed experiments' windows fit all three,
# the outer two, the outer only, and none (checked below).
PER_HOST, PER_HOST_INNER, PER_HOST_INNERMOST = 12, 10, 8


def _leaves_differing(a, b) -> list[str]:
    return [
        jax.tree_util.keystr(path)
        for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b))
        if not np.array_equal(np.asarray(x), np.asarray(y))
    ]


def _mixed_final(batching: str, columns: int = 0, inner: tuple[int, ...] = (), per_host: bool = False):
    static = dataclasses.replace(
        SMALL, prefix_columns=columns, prefix_inner_columns=inner, prefix_per_host=per_host, lockstep_experiments=0
    )  # vmap: the whole batch at once (an accelerator's path)
    batch = build_batch(_mixed_experiments(), static=static, slots_per_host=static.slots_per_host)
    return engine.run(batch.params, batch.state, batching=batching)[0]


@functools.cache
def _whole_pool_final():
    """The mixed experiments on the whole pool, once for both modes (``map`` and ``vmap``
    give the same results bit for bit: ``test_engine``)."""
    return _mixed_final("map")


# ``map`` with two per-host prefixes, one inside the other (the default's form on a CPU,
# which has three: a third is one more of the same, and its program took 55 s to compile on
# 2 cores against ~35 s for two): windows on the whole pool, on PER_HOST's places and
# PER_HOST_INNER's, and every switch between them. ``vmap`` with one prefix of the first
# columns (the default's form on a GPU, where the lockstep path runs: ``build_batch``), each
# experiment's window fitting or not: marked slow (a 30-37 s compile on 2 cores), as CI on a
# CPU may skip the GPU's layout (its pool operations keep their own tests below, and the CPU's
# layout runs end to end here); ``pytest -m slow`` runs it.
@pytest.mark.parametrize(
    "batching, columns, inner, per_host",
    [("map", PER_HOST, (PER_HOST_INNER,), True), pytest.param("vmap", PREFIX, (), False, marks=pytest.mark.slow)],
)
def test_windows_on_the_live_prefix_equal_the_whole_pool(batching, columns, inner, per_host):
    whole = _whole_pool_final()
    assert np.all(whole.done) and not np.any(whole.error)
    assert _leaves_differing(whole, _mixed_final(batching, columns, inner, per_host)) == []


@jax.jit
def _columns_and_bound(params, state):
    fits = [jax.vmap(lambda p, s: pool.prefix_fits(p, s, columns))(params, state) for columns in (PREFIX, OUTER)]
    per_host = [
        jax.vmap(lambda p, s: pool.per_host_fits(p, s, columns, inside=False))(params, state)
        for columns in (PER_HOST_INNERMOST, PER_HOST_INNER, PER_HOST)
    ]  # fmt: skip
    in_use = jax.vmap(lambda p, s: pool.columns_in_use(p, s.packets))(params, state)
    levels = fits[0].astype(int) + fits[1].astype(int), sum(level.astype(int) for level in per_host)
    return in_use, jax.vmap(pool.creatable_packets)(params, state), levels


def test_a_window_takes_no_column_past_the_bound():
    # What the prefix relies on: a window's packets end below the columns in use at its
    # start plus the packets one host can create in it (each host takes its lowest free
    # column). Window by window over the mixed experiments, which also cross the prefix.
    batch = build_batch(_mixed_experiments(), static=SMALL, slots_per_host=SMALL.slots_per_host)
    params, state = batch.params, batch.state
    seen_fit, seen_per_host = set(), set()
    while not np.all(state.done):
        in_use, bound, (fits, per_host) = jax.device_get(_columns_and_bound(params, state))
        state = engine.advance(params, state, 1, batching="map")
        after, _, _ = jax.device_get(_columns_and_bound(params, state))
        assert np.all(after <= in_use + bound), (in_use, bound, after)
        seen_fit.update(fits.tolist())
        seen_per_host.update(per_host.tolist())
    assert seen_fit == {0, 1, 2}  # windows that fit the first columns of every host: none, OUTER's and PREFIX's
    assert seen_per_host == {0, 1, 2, 3}  # the prefix test's windows run on the whole pool and each per-host level


def test_default_prefix_only_for_large_pools():
    assert pool.default_prefix_columns(16, 256) == (0, (), False)  # the quick start's pool: 4,096 slots
    assert pool.default_prefix_columns(128, 512) == (256, (128, 64), True)  # a CPU's: per host, three levels
    assert pool.default_prefix_columns(128, 512, on_cpu=False) == (256, (), False)


def test_sim_live_prefix_chooses_the_layout():
    """``sim.live_prefix``: auto by backend and pool size; a choice holds for any pool, the
    batch running its first experiment's; a wrong value is an error naming the key."""
    flows = make_flows([1], [0], [10_000])
    auto, per_host, columns, none = (Experiment(FAT_TREE, flows, sim=SimConfig(live_prefix=c)) for c in ("auto", "per_host", "columns", "none"))

    def layout(experiments, slots=512):
        static = needed_static(experiments, slots_per_host=slots)
        return static.prefix_columns, static.prefix_inner_columns, static.prefix_per_host

    assert layout([auto], slots=256) == (0, (), False)  # 16 hosts x 256: under PREFIX_MIN_SLOTS
    assert layout([auto], slots=2048) == pool.default_prefix_columns(16, 2048, on_cpu=jax.default_backend() == "cpu")
    assert layout([auto, per_host]) == (256, (128, 64), True)
    assert layout([columns, per_host]) == (256, (), False)
    assert layout([none, auto]) == (0, (), False)
    with pytest.raises(InputError, match="sim.live_prefix"):
        SimConfig(live_prefix="first")


def test_the_prefix_of_a_prefix():
    """``shrink`` gives the prefix's pool its own prefix (the first of
    ``Static.prefix_inner_columns``), that one the next, and the last none: the engine nests
    them once per level."""
    static = dataclasses.replace(SMALL, prefix_columns=OUTER, prefix_inner_columns=(PREFIX,))
    batch = build_batch(_mixed_experiments(), static=static, slots_per_host=SMALL.slots_per_host)
    params, state = jax.tree.map(lambda x: x[0], (batch.params, batch.state))
    small_params, _ = pool.shrink(params, state, OUTER)
    assert (small_params.static.slots_per_host, small_params.static.prefix_columns) == (OUTER, PREFIX)
    smaller_params, _ = pool.shrink(small_params, state, PREFIX)
    assert (smaller_params.static.slots_per_host, smaller_params.static.prefix_columns) == (PREFIX, 0)
    three = params.replace(static=dataclasses.replace(static, prefix_inner_columns=(PREFIX, PREFIX // 2)))
    levels = []
    for columns in (OUTER, PREFIX, PREFIX // 2):
        three, _ = pool.shrink(three, state, columns)
        levels.append((three.static.slots_per_host, three.static.prefix_columns, three.static.prefix_inner_columns))
    assert levels == [(OUTER, PREFIX, (PREFIX // 2,)), (PREFIX, PREFIX // 2, ()), (PREFIX // 2, 0, ())]


def test_a_prefix_stretch_of_no_window_keeps_the_whole_pools_order():
    """The engine copies the prefix out and back even where no window runs on it. The
    whole pool's kept service order must come back as it was: ``shrink`` marks a kept
    packet past the prefix as none, and an order that no longer holds makes the next
    window sort every queued packet instead of merging its arrivals. Where a window ran
    (or the experiment's last, which counts none), the prefix's order comes back."""
    batch = build_batch(_mixed_experiments(), static=SMALL, slots_per_host=SMALL.slots_per_host)
    params, state = jax.tree.map(lambda x: x[0], (batch.params, batch.state))
    n_slots, n = SMALL.n_slots, PREFIX * SMALL.n_hosts
    slot = np.arange(n_slots, dtype=np.int32)[::-1].copy()  # a kept order naming slots past the prefix
    state = state.replace(order=state.order.replace(order_slot=slot, order_time_ps=np.arange(n_slots, dtype=np.int64)))
    _, small = pool.shrink(params, state, PREFIX)
    assert np.any(np.asarray(small.order.order_slot) == n)  # what shrink marks as none
    kept = pool.grow(SMALL, state, small)
    assert _leaves_differing(kept.order, state.order) == []
    for ran in (small.replace(n_windows=small.n_windows + 1), small.replace(done=~small.done)):
        grown = pool.grow(SMALL, state, ran)
        assert np.array_equal(grown.order.order_slot[:n], np.where(slot[:n] >= n, n_slots, slot[:n]))


@functools.cache
def _busy_experiment():
    """The second mixed experiment (params, state) after 14 windows on the whole pool: three
    hosts hold 14-28 packets, the others none; both per-host prefixes hold its next window."""
    batch = build_batch(_mixed_experiments(), static=SMALL, slots_per_host=SMALL.slots_per_host)
    state = engine.advance(batch.params, batch.state, 14, batching="map")
    return jax.tree.map(lambda x: x[1], (batch.params, state))


def test_a_per_host_prefix_holds_each_hosts_columns_in_slot_order():
    """``shrink_per_host``: each host's first columns, at least those in use plus what a
    window may create, in the whole pool's slot order (every tie-break by slot kept); host
    order lists each host's places column by column; copied out and back unchanged."""
    params, state = _busy_experiment()
    needed = np.asarray(pool.host_columns_in_use(params, state.packets)) + int(pool.creatable_packets(params, state))
    assert len(set(needed.tolist())) > 2  # hosts need different columns: not the first columns of every host
    assert pool.per_host_fits(params, state, PER_HOST_INNER, inside=False)
    small_params, small = pool.shrink_per_host(params, state, PER_HOST)
    layout = jax.device_get(small_params.pool_layout)
    n_hosts, n_places = SMALL.n_hosts, PER_HOST * SMALL.n_hosts
    held = layout.parent_place < SMALL.n_slots
    assert np.all(layout.host_columns >= needed) and held.sum() == layout.host_columns.sum() <= n_places
    np.testing.assert_array_equal(np.diff(layout.parent_place[held]) > 0, True)  # slot order
    np.testing.assert_array_equal(layout.place_host[held], layout.parent_place[held] % n_hosts)
    in_order = layout.host_order[: held.sum()]
    expected = sorted(layout.parent_place[held].tolist(), key=lambda slot: (slot % n_hosts, slot // n_hosts))
    assert layout.parent_place[in_order].tolist() == expected  # host order: (host, column)
    valid = np.asarray(state.packets.pkt_valid)
    assert np.asarray(small.packets.pkt_valid).sum() == valid.sum()  # every packet is in it
    assert _leaves_differing(pool.grow_per_host(SMALL, state, small_params, small), state) == []


def test_a_per_host_prefix_lists_each_hosts_free_columns_as_the_whole_pool():
    """A NIC takes its host's lowest free column: on a per-host prefix, each host's free
    places, lowest first, are the whole pool's free slots of that host (as many as the
    prefix lists), and a prefix nested in it lists them too."""
    params, state = _busy_experiment()
    whole = jax.device_get(nic.free_slots(params, state.packets))
    small_params, small = pool.shrink_per_host(params, state, PER_HOST)
    smaller_params, smaller = pool.shrink_per_host(small_params, small, PER_HOST_INNER)
    for prefixes in ((small_params,), (small_params, smaller_params)):
        packets = small if len(prefixes) == 1 else smaller
        free = jax.device_get(nic.free_slots(prefixes[-1], packets.packets))
        # A window that creates few packets a host searches its first free places instead.
        searched = jax.device_get(nic.free_slots(prefixes[-1], packets.packets, jnp.int32(nic.FREE_SEARCHED)))
        np.testing.assert_array_equal(searched.count, free.count)
        first = np.minimum(free.count, nic.FREE_SEARCHED)
        assert first.max() == nic.FREE_SEARCHED  # some host has more free places than searched
        for host in range(SMALL.n_hosts):
            np.testing.assert_array_equal(searched.slot[host, : first[host]], free.slot[host, : first[host]])
        slot = free.slot
        for prefix in reversed(prefixes):  # places -> the whole pool's slots
            slot = np.asarray(prefix.pool_layout.parent_place)[slot]
        width = slot.shape[1]
        for host in range(SMALL.n_hosts):
            listed = min(free.count[host], width)
            np.testing.assert_array_equal(slot[host, :listed], whole.slot[host, :listed])
