"""Property tests on random small networks and flow sets: every byte is delivered exactly
once, every flow finishes, clocks never go back, the pool drains."""

import jax
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SMALL
from multiverse_jax import engine
from multiverse_jax.batch import Experiment, build_batch
from multiverse_jax.simulate import results
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload.flows import make_flows

PS = 1_000_000


@st.composite
def networks(draw):
    """A random connected switch graph (2-5 switches, tree plus extra links) with 2-8 hosts."""
    n_switches = draw(st.integers(2, 5))
    n_hosts = draw(st.integers(2, 8))
    rates = st.sampled_from([25.0, 40.0, 100.0, 200.0, 400.0])
    delays = st.sampled_from([1.0, 1.5, 2.0, 3.0])
    cables = []
    for h in range(n_hosts):
        cables.append((h, n_hosts + draw(st.integers(0, n_switches - 1)), draw(rates), draw(delays)))
    for s in range(1, n_switches):  # a random spanning tree keeps it connected
        cables.append((n_hosts + s, n_hosts + draw(st.integers(0, s - 1)), draw(rates), draw(delays)))
    for _ in range(draw(st.integers(0, 3))):  # extra links make equal-cost paths
        a, b = draw(st.integers(0, n_switches - 1)), draw(st.integers(0, n_switches - 1))
        if a != b:
            cables.append((n_hosts + a, n_hosts + b, draw(rates), draw(delays)))
    names = [f"h{i}" for i in range(n_hosts)] + [f"s{i}" for i in range(n_switches)]
    topo = from_cables("random", names, n_hosts, cables)
    n_flows = draw(st.integers(1, 10))
    src = [draw(st.integers(0, n_hosts - 1)) for _ in range(n_flows)]
    dst = [(s + draw(st.integers(1, n_hosts - 1))) % n_hosts for s in src]
    size = [draw(st.integers(1, 60_000)) for _ in range(n_flows)]
    start = [draw(st.integers(0, 20)) * PS // 2 for _ in range(n_flows)]
    return Experiment(topo, make_flows(src, dst, size, start), seed=draw(st.integers(0, 1000)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(networks(), min_size=1, max_size=3))
def test_conservation_and_monotone_clocks(experiments):
    batch = build_batch(experiments, static=SMALL, slots_per_host=SMALL.slots_per_host)
    clocks = [np.asarray(batch.state.time_ps)]
    state, _ = engine.run(
        batch.params, batch.state, steps_per_call=4, on_progress=lambda s: clocks.append(np.asarray(s.time_ps))
    )
    assert np.all(np.diff(np.stack(clocks), axis=0) >= 0), "a clock went back"
    for exp, result in zip(experiments, results(batch, state)):
        assert result.ok, result.summary
        flows = result.flows
        np.testing.assert_array_equal(flows["rx_bytes"], exp.flows.size_bytes)  # each byte once
        assert np.all(flows["start_us"] <= flows["rx_finish_us"])
        assert np.all(flows["rx_finish_us"] < flows["finish_us"])
    pool = jax.device_get(state.packets.pkt_valid)
    assert not pool.any(), "packets left in the network after every flow finished"
    fs = jax.device_get(state.flows)
    n = [len(e.flows) for e in experiments]
    for e, count in enumerate(n):
        expected_packets = -(-experiments[e].flows.size_bytes // 4096)
        np.testing.assert_array_equal(fs.flow_rx_packets[e, :count], expected_packets)
        np.testing.assert_array_equal(fs.flow_acked_packets[e, :count], expected_packets)
