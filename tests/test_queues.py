"""The service order a transmit window starts from (``ops/queues.py``): the queued packets
compacted and sorted in 4096, 16,384, ... places, the whole pool when they do not fit.
The shared test shape (2,048 slots) sorts its whole pool; here the smallest sort is made
32 places, so that an incast's queues go through every size (32, 128, 512 and the whole
pool) as they grow and drain, and the results must not change by a bit."""

import jax
import jax.numpy as jnp
import numpy as np

from conftest import SMALL, build_batch, run_small
from multiverse_jax import engine
from multiverse_jax.conf.schema import SwitchConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops import queues
from multiverse_jax.ops.packets import queued
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows


def incast_results():
    k4 = fattree(4, 100.0, 1.0)
    switch = SwitchConfig(buffer_bytes=8_000_000, pfc_xoff_bytes=7_000_000, pfc_xon_bytes=6_000_000)
    exp = Experiment(k4, make_flows(np.arange(1, 16), 0, 400_000, 0), switch=switch)  # 15 x 98 packets
    result = run_small([exp])[0]
    assert result.ok, result.summary
    return result


def test_sorting_the_queued_packets_in_fewer_places_changes_nothing(monkeypatch):
    whole_pool = incast_results()
    assert whole_pool.summary["max_queue_bytes"] > 600 * 4160  # more than 512 packets queued at once
    monkeypatch.setattr(queues, "SMALLEST_SORT", 32)
    jax.clear_caches()  # the engine's programs are cached by shape: trace them again with 32
    try:
        compacted = incast_results()
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    for column in ("start_us", "finish_us", "rx_bytes"):
        np.testing.assert_array_equal(compacted.flows[column], whole_pool.flows[column])
    for key in ("job_time_us", "n_packet_hops", "n_windows", "max_queue_bytes"):
        assert compacted.summary[key] == whole_pool.summary[key], key
    assert 512 < SMALL.n_slots  # 32, 128, 512 places, then the whole pool


def test_the_kept_order_with_the_new_arrivals_is_the_sorted_order(monkeypatch):
    """Window after window of the incast, the order a window starts from when it merges
    the last window's kept order with its new arrivals (``queues._merged``) equals the
    order sorted from scratch, array for array; and the merge is what most windows do."""
    monkeypatch.setattr(queues, "SMALLEST_SORT", 32)
    k4 = fattree(4, 100.0, 1.0)
    switch = SwitchConfig(buffer_bytes=8_000_000, pfc_xoff_bytes=7_000_000, pfc_xon_bytes=6_000_000)
    exp = Experiment(k4, make_flows(np.arange(1, 16), 0, 100_000, 0), switch=switch)
    batch = build_batch([exp], slots_per_host=SMALL.slots_per_host, static=SMALL)
    params, state = jax.tree.map(lambda x: x[0], (batch.params, batch.state))

    @jax.jit
    def window(params, state):
        end = state.time_ps + params.window_ps
        ready = engine.systems_before("transmit", params, state, end)
        pkts = ready.packets
        view = queues._kept_view(ready.order)
        counts, new = queues._kept_and_new(params, pkts, ready.order, view)
        holds = queues._kept_order_holds(counts, view)
        merged = queues._merged(params, pkts, end, ready.order, view, new, queues.SMALLEST_SORT)
        sorted_whole = queues._order_of(params, pkts, end, jnp.arange(params.static.n_slots, dtype=jnp.int32))
        mergeable = holds & (jnp.sum(new) <= queues.SMALLEST_SORT) & jnp.any(queued(pkts))
        return merged, sorted_whole, mergeable, state.time_ps, engine.step(params, state)

    merges = 0
    for _ in range(60):
        merged, sorted_whole, mergeable, window_start_ps, state = window(params, state)
        if mergeable:
            merges += 1
            orders = (merged._replace(arrived_before=None), sorted_whole._replace(arrived_before=None))  # compared below
            for got, want in zip(*map(jax.tree.leaves, orders)):
                np.testing.assert_array_equal(got, want)
            # The merge also knows where each queue's packets from before the window end:
            # its kept ones, exactly those that arrived before the window start.
            start = np.concatenate([[0], np.asarray(sorted_whole.queue_end)[:-1]])
            earlier = np.asarray(sorted_whole.time_ps) < int(window_start_ps)
            before = [start[q] + earlier[start[q] : end].sum() for q, end in enumerate(np.asarray(sorted_whole.queue_end))]
            np.testing.assert_array_equal(merged.arrived_before, before)
    assert merges > 30, merges


def test_arrived_by_with_any_hint_is_numpys_searchsorted():
    """``queues.arrived_by``: for queues of sorted arrival times (ties included), the end of
    what has arrived by an instant is NumPy's ``searchsorted(side="right")`` from the
    queue's pointer on, whatever the hint: none (binary search), below the answer
    (exponential search from it), equal, past it (detected, dropped) or outside the queue."""
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 40, 48)
    lengths[:3] = (0, 1, 200)  # an empty queue, a single packet, a long backlog
    queue_end = np.cumsum(lengths).astype(np.int32)
    begin = queue_end - lengths
    n_positions = int(queue_end[-1]) + 5  # positions past the queues, as in a pool
    time_ps = np.full(n_positions, np.iinfo(np.int64).max // 4, np.int64)
    for b, e in zip(begin, queue_end):
        time_ps[b:e] = np.sort(rng.integers(0, 50, e - b)) * 1000  # ties: equal arrivals
    head = (begin + rng.integers(0, np.maximum(lengths, 1))).clip(begin, queue_end).astype(np.int32)
    at_ps = rng.integers(-1, 52, len(lengths)) * 1000
    expected = np.array([h + np.searchsorted(time_ps[h:e], t, side="right") for h, e, t in zip(head, queue_end, at_ps)])
    order = queues.ServiceOrder(
        slot=jnp.zeros(n_positions, jnp.int32), time_ps=jnp.asarray(time_ps), bytes_before=None,
        queue_end=jnp.asarray(queue_end), packet=None,
    )  # fmt: skip
    search = jax.jit(queues.arrived_by)
    hints = {
        "none": None,
        "head": head,
        "below": np.maximum(head, expected - rng.integers(0, 5, len(head))),
        "equal": expected,
        "past": expected + rng.integers(1, 5, len(head)),
        "outside": rng.integers(-10, n_positions + 10, len(head)),
    }
    for name, hint in hints.items():
        got = search(order, jnp.asarray(head), jnp.asarray(at_ps), None if hint is None else jnp.asarray(hint, jnp.int32))
        np.testing.assert_array_equal(np.asarray(got), expected, err_msg=name)
