"""Property tests on random small networks and flow sets: every byte is delivered exactly
once, every flow finishes, clocks never go back, the pool drains."""

import dataclasses

import jax
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SMALL, padded_size
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.conf.schema import HybridConfig, SimConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.simulate import results
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.topology.routing import ecmp_table
from multiverse_jax.workload.flows import TRIGGER_ONESHOT, FlowSet, Triggers, make_flows
from multiverse_jax.workload.routes import PinnedRoutes

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
    flows = make_flows(src, dst, size, start)
    # Some flows wait on the previous flow's completion (sender's last ACK or receiver's
    # last byte), through a oneshot trigger of their own.
    waits = [f > 0 and draw(st.booleans()) for f in range(n_flows)]
    on_recv = [draw(st.booleans()) for _ in range(n_flows)]
    triggers = [f for f in range(n_flows) if waits[f]]
    trigger_of = {f: t for t, f in enumerate(triggers)}
    send_done = np.full(n_flows, -1, np.int32)
    recv_done = np.full(n_flows, -1, np.int32)
    for f in triggers:
        (recv_done if on_recv[f] else send_done)[f - 1] = trigger_of[f]
    flows = FlowSet(
        flow_id=flows.flow_id,
        src=flows.src,
        dst=flows.dst,
        size_bytes=flows.size_bytes,
        start_ps=np.where(waits, -1, flows.start_ps),
        prio=flows.prio,
        trigger=np.array([trigger_of.get(f, -1) for f in range(n_flows)], np.int32),
        send_done_trigger=send_done,
        recv_done_trigger=recv_done,
        triggers=Triggers(
            np.arange(len(triggers), dtype=np.int64),
            np.full(len(triggers), TRIGGER_ONESHOT, np.int8),
            np.ones(len(triggers), np.int32),
            np.zeros(len(triggers), np.int32),
        ),
    )
    return Experiment(topo, flows, routes=draw(pinned_routes(topo, flows)), sim=SimConfig(seed=draw(st.integers(0, 1000))))


@st.composite
def pinned_routes(draw, topo, flows):
    """Pin some flows' data and/or ACK packets to a random shortest path."""
    table = ecmp_table(topo)
    longest = 8

    def walk(a, b):
        ports, node = [], a
        while node != b:
            port = int(table.next_port[node, b, draw(st.integers(0, table.n_next[node, b] - 1))])
            ports.append(port)
            node = int(topo.link_dst[port])
        return ports + [-1] * (longest - len(ports))

    data, ack = [], []
    for f in range(len(flows)):
        a, b = int(flows.src[f]), int(flows.dst[f])
        data.append(walk(a, b) if draw(st.booleans()) else [-1] * longest)
        ack.append(walk(b, a) if draw(st.booleans()) else [-1] * longest)
    return PinnedRoutes(np.array(data, np.int32), np.array(ack, np.int32))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(networks(), min_size=1, max_size=3))
def test_conservation_and_monotone_clocks(experiments):
    check_invariants(experiments)


# Hybrid mode at its most eager: two samples half a microsecond apart make a flow steady, so
# even these small flows freeze and thaw many times (and every restore policy drains or keeps
# queues), and the invariants must hold across every phase.
EAGER = dict(theta=0.5, window=2, sample_interval_us=0.5)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(networks(), min_size=1, max_size=3), st.sampled_from(["freeze", "empty", "last", "mean"]))
def test_conservation_in_hybrid_mode(experiments, restore):
    hybrid = [
        dataclasses.replace(e, sim=dataclasses.replace(e.sim, mode="hybrid"), hybrid=HybridConfig(restore=restore, **EAGER))
        for e in experiments
    ]
    check_invariants(hybrid, dataclasses.replace(SMALL, steady_window=EAGER["window"]))


def check_invariants(experiments, shapes=SMALL):  # SMALL: up to one trigger per flow
    """Run ``experiments`` as one batch (padded to ``shapes`` and to ``padded_size``: one
    program for 1 to 3 experiments) and check every invariant; the final state."""
    batch = build_batch(experiments, static=shapes, slots_per_host=shapes.slots_per_host, batch_size=padded_size(len(experiments)))
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
        for f in np.nonzero(exp.flows.trigger >= 0)[0]:  # started exactly at its activation
            activation = flows["rx_finish_us"] if exp.flows.recv_done_trigger[f - 1] >= 0 else flows["finish_us"]
            assert flows["start_us"][f] == activation[f - 1]
    pool = jax.device_get(state.packets.pkt_valid)
    assert not pool.any(), "packets left in the network after every flow finished"
    fs = jax.device_get(state.flows)
    n = [len(e.flows) for e in experiments]
    for e, count in enumerate(n):
        expected_packets = -(-experiments[e].flows.size_bytes // 4096)
        np.testing.assert_array_equal(fs.flow_rx_packets[e, :count], expected_packets)
        np.testing.assert_array_equal(fs.flow_acked_packets[e, :count], expected_packets)
    return state
