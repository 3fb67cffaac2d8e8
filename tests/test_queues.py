"""The service order a transmit window starts from (``ops/queues.py``): the queued packets
compacted and sorted in 4096, 16,384, ... places, the whole pool when they do not fit.
The shared test shape (2,048 slots) sorts its whole pool; here the smallest sort is made
32 places, so that an incast's queues go through every size (32, 128, 512 and the whole
pool) as they grow and drain, and the results must not change by a bit."""

import jax
import numpy as np

from conftest import SMALL, run_small
from multiverse_jax.conf.schema import SwitchConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops import queues
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
