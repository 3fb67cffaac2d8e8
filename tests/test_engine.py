"""Backpressure, triggers, pinned routes, batching and capacity errors of the engine."""

import dataclasses

import chex
import jax
import numpy as np
import pytest

from conftest import SMALL, padded_size, run_small, wire_sizes
from multiverse_jax import engine
from multiverse_jax.batch import build_batch, needed_static
from multiverse_jax.components.experiment import ERROR_POOL_FULL
from multiverse_jax.conf.schema import SimConfig, SwitchConfig
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.simulate import results, simulate
from multiverse_jax.topology import fattree, leafspine
from multiverse_jax.workload.flows import TRIGGER_BARRIER, TRIGGER_ONESHOT, FlowSet, Triggers, make_flows
from multiverse_jax.workload.routes import PinnedRoutes

PS = 1_000_000
K4 = fattree(4, 100.0, 1.0)


def test_incast_finishes_at_bottleneck_rate_without_overflow():
    """8 senders into h0: the last flow ends within 1 % of (all wire bytes at the bottleneck
    rate + path latency), PFC pauses upstream and no queue exceeds its buffer."""
    senders, size = 8, 500_000
    exp = Experiment(K4, make_flows(np.arange(1, senders + 1), 0, size, 0), switch=SwitchConfig(buffer_bytes=1_000_000))
    result = run_small([exp])[0]
    assert result.ok, result.summary
    total_wire = senders * sum(wire_sizes(size))
    rate_bytes_per_ps = 100e9 / 8 / 1e12
    # path latency: the first packet reaches the bottleneck (h1 -> tor0), the last one
    # crosses the bottleneck link, and its ACK returns over up to 6 hops.
    latency_ps = (4160 / rate_bytes_per_ps + PS) + PS + 6 * (PS + 64 / rate_bytes_per_ps)
    expected_us = (total_wire / rate_bytes_per_ps + latency_ps) / PS
    assert np.nanmax(result.flows["finish_us"]) == pytest.approx(expected_us, rel=0.01)
    assert result.summary["pfc_pauses"] > 0
    assert result.summary["max_queue_bytes"] <= 1_000_000
    assert (result.flows["rx_bytes"] == size).all()


def test_small_buffer_is_an_error_not_a_loss():
    exp = Experiment(K4, make_flows(np.arange(1, 9), 0, 200_000, 0), switch=SwitchConfig(buffer_bytes=20_000, pfc_xoff_bytes=20_000, pfc_xon_bytes=10_000))
    result = run_small([exp])[0]
    assert not result.ok
    assert "switch.buffer_bytes" in result.summary["error"]


def test_pool_exhaustion_is_an_error():
    # 10 µs links: a 6-hop path's round trip holds ~370 packets of the flow in flight, more
    # than SMALL's 128 slots per host (and SMALL's program, shared with the other tests).
    far = fattree(4, 100.0, 10.0)
    exp = Experiment(far, make_flows([0], [15], [2_000_000], [0]))
    result = run_small([exp])[0]
    assert not result.ok
    assert "sim.packets_per_host" in result.summary["error"]


def test_pool_exhaustion_is_flagged_in_the_window_it_happens():
    """A NIC that would start a packet but finds every slot of its host taken raises the
    error in that window, also where no other port starts anything after it (the window's
    last round, which ``transmit`` no longer runs: the error comes from the last round's
    look-ahead). One flow from h0 on 10 µs links, window by window: the error appears in
    the first window that ends with all of h0's slots holding packets while h0's NIC port
    fell free before the window's end (it would have started the next), and not before."""
    far = fattree(4, 100.0, 10.0)
    exp = Experiment(far, make_flows([0], [15], [2_000_000], [0]))
    batch = build_batch([exp], static=SMALL, slots_per_host=SMALL.slots_per_host, batch_size=padded_size(1))
    params, state = batch.params, batch.state
    of_h0 = np.arange(SMALL.n_slots) % SMALL.n_hosts == 0  # the slots host 0 owns (column-major pool)
    nic_port = int(np.asarray(params.nics.nic_port)[0, 0])
    for _ in range(100):
        window_end_ps = np.asarray(state.time_ps + params.window_ps)[0]
        state = engine.advance(params, state, 1, batching="map")
        all_taken = np.sum(np.asarray(state.packets.pkt_valid)[0] & of_h0) == SMALL.slots_per_host
        would_send = np.asarray(state.ports.port_free_ps)[0, nic_port] < window_end_ps
        flagged = bool(np.asarray(state.error)[0] & ERROR_POOL_FULL)
        assert flagged == (all_taken and would_send), (all_taken, would_send, flagged)
        if flagged:
            return
    pytest.fail("host 0's slots never ran out")


def _chained_flows(kind, count=1):
    """Flows 1 and 2 activate trigger 0 (at send_done and recv_done); flow 3 waits on it."""
    return FlowSet(
        flow_id=np.array([1, 2, 3]),
        src=np.array([0, 4, 8], np.int32),
        dst=np.array([15, 12, 3], np.int32),
        size_bytes=np.array([50_000, 20_000, 30_000]),
        start_ps=np.array([0, 2 * PS, -1]),
        prio=np.zeros(3, np.int32),
        trigger=np.array([-1, -1, 0], np.int32),
        send_done_trigger=np.array([0, -1, -1], np.int32),
        recv_done_trigger=np.array([-1, 0, -1], np.int32),
        triggers=Triggers(np.array([7]), np.array([kind], np.int8), np.array([count], np.int32), np.array([0], np.int32)),
    )


@pytest.mark.parametrize("kind,count", [(TRIGGER_ONESHOT, 1), (TRIGGER_BARRIER, 2)])
def test_trigger_starts_flow_at_exact_activation(kind, count):
    result = run_small([Experiment(K4, _chained_flows(kind, count))])[0]
    assert result.ok, result.summary
    f = result.flows
    activations = sorted([f["finish_ps"][0], f["rx_finish_ps"][1]])
    assert f["start_ps"][2] == activations[count - 1]
    assert f["finish_us"][2] > f["start_us"][2]


def test_pinned_route_is_followed():
    """h0 -> h15 pinned through core3 (data) and core0 (ACKs): only those cores carry bytes."""
    flows = make_flows([0], [15], [100_000], [0])
    names = K4.node_names

    def ports(path):
        ids = [names.index(n) for n in path.split()]
        return [K4.link_between(a, b) for a, b in zip(ids, ids[1:])]

    data = ports("h0 tor0 agg1 core3 agg7 tor7 h15")
    ack = ports("h15 tor7 agg6 core0 agg0 tor0 h0")
    routes = PinnedRoutes(np.array([data], np.int32), np.array([ack], np.int32))
    batch = build_batch([Experiment(K4, flows, routes=routes)], static=SMALL, slots_per_host=SMALL.slots_per_host, batch_size=padded_size(1))
    state, _ = engine.run(batch.params, batch.state)
    tx = np.asarray(state.ports.port_tx_bytes[0, : K4.n_links])
    used = set(np.nonzero(tx)[0])
    assert used == set(data) | set(ack)
    assert tx[data[0]] == sum(wire_sizes(100_000))
    assert tx[ack[0]] == 64 * len(wire_sizes(100_000))


def _mixed_experiments():
    """Four experiments that differ in everything but shape: topology, rates, delays,
    buffers, thresholds, flows, seed and load balancing."""
    ls = leafspine(4, 4, 2, 100.0, 1.0)
    rng = np.random.default_rng(7)
    exps = []
    for e, topo in enumerate([K4, ls, fattree(4, 40.0, 2.0), K4]):
        n = 8
        src = rng.integers(0, topo.n_hosts, n)
        dst = (src + 1 + rng.integers(0, topo.n_hosts - 1, n)) % topo.n_hosts
        flows = make_flows(src, dst, rng.integers(1_000, 120_000, n), rng.integers(0, 5 * PS, n))
        lb = ("ecmp", "spray", "flowlet", "spray")[e]
        exps.append(
            Experiment(
                topo,
                flows,
                lb=lb,
                switch=SwitchConfig(flowlet_gap_us=0.5, buffer_bytes=1_500_000 - 100_000 * e, pfc_xoff_bytes=150_000 + 20_000 * e),
                sim=SimConfig(seed=e),
            )
        )
    return exps


@pytest.mark.parametrize("batching", ["vmap", "map"])
def test_batch_equals_each_experiment_alone(batching):
    exps = _mixed_experiments()
    if batching == "vmap":
        # SMALL's two lanes in lockstep (its vmap program): an experiment that stops gives
        # its lane to the next, and calls of 7 windows stop lanes at the call's last window too.
        assert engine.lockstep_lanes(SMALL, len(exps)) == 2
        together = simulate(
            exps, slots_per_host=SMALL.slots_per_host, static=SMALL, batching="vmap", batch_size=padded_size(len(exps)), steps_per_call=7
        )
        assert together[0].summary["batch_n_calls"] > 1
    else:
        together = run_small(exps, batching=batching)
    # Alone: at the shapes its topology's experiments need (not SMALL's padding): the
    # fat-trees' (one program for three) and the leaf-spine's. Without HPCC those have no
    # telemetry columns (int_hops 0, transmit records none), SMALL has one.
    for exp, batched in zip(exps, together):
        peers = [e for e in exps if e.topology.n_nodes == exp.topology.n_nodes]
        own = needed_static(peers, slots_per_host=SMALL.slots_per_host)
        assert own.int_hops == 0 < SMALL.int_hops
        alone = simulate([exp], slots_per_host=SMALL.slots_per_host, static=own)[0]
        assert batched.ok and alone.ok
        for column in ("start_us", "finish_us", "rx_finish_us", "rx_bytes"):
            np.testing.assert_array_equal(batched.flows[column], alone.flows[column])
        np.testing.assert_array_equal(batched.port_max_queue_bytes, alone.port_max_queue_bytes)
        assert batched.summary["n_packet_hops"] == alone.summary["n_packet_hops"]
        assert batched.summary["n_windows"] == alone.summary["n_windows"]


def test_lockstep_lanes_by_backend_or_asked():
    """A CPU steps a cache's worth of pools in lockstep, an accelerator the whole batch; an
    explicit ``sim.lockstep_experiments`` (the batch's largest) holds, up to the batch."""
    asked = lambda b: dataclasses.replace(SMALL, lockstep_experiments=b)  # noqa: E731
    assert engine.lockstep_lanes(asked(10), 64) == 10
    assert engine.lockstep_lanes(asked(100), 12) == 12
    flows = make_flows([1], [0], [10_000])
    assert needed_static([Experiment(K4, flows)]).lockstep_experiments == 0  # 0: by backend
    assert needed_static([Experiment(K4, flows), Experiment(K4, flows, sim=SimConfig(lockstep_experiments=8))]).lockstep_experiments == 8
    with pytest.raises(InputError, match="sim.lockstep_experiments"):
        SimConfig(lockstep_experiments=-2)
    pool = dataclasses.replace(SMALL, slots_per_host=1024, n_hosts=16, lockstep_experiments=0)  # 16,384 slots an experiment, lanes by backend
    if jax.default_backend() == "cpu":
        assert engine.lockstep_lanes(pool, 64) == engine.LOCKSTEP_SLOTS_ON_CPU // pool.n_slots == 16
    else:
        assert engine.lockstep_lanes(pool, 64) == 64


def test_new_parameters_same_shapes_do_not_retrace():
    # The engine's own program (``engine._advance`` under vmap: the program ``run_small``
    # compiles for test_batch_equals_each_experiment_alone[vmap], so the persistent
    # compilation cache can hand it back), traced once for both batches.
    advance = jax.jit(chex.assert_max_traces(engine._advance, n=1), static_argnames=("batching",), compiler_options=engine.compiler_options())

    def two_windows(params, state):
        return advance(params, state, 2, batching="vmap")

    exps = _mixed_experiments()
    first = build_batch(exps[:2], static=SMALL, slots_per_host=SMALL.slots_per_host, batch_size=padded_size(2))
    other = [dataclasses.replace(
            e, sim=SimConfig(seed=e.sim.seed + 10), switch=dataclasses.replace(e.switch, buffer_bytes=900_000)
        ) for e in exps[2:]]
    second = build_batch(other, static=SMALL, slots_per_host=SMALL.slots_per_host, batch_size=padded_size(2))
    two_windows(first.params, first.state)
    two_windows(second.params, second.state)  # a second trace would raise here
    # The engine's own compiled loop is reused too.
    engine.run(first.params, first.state)
    programs = engine.compiled_programs()
    engine.run(second.params, second.state)
    assert engine.compiled_programs() == programs
    # On a CPU, compiled without XLA's tree reductions (engine.CPU_COMPILER_OPTIONS): no
    # reduction of more than 32 entries split into windows of 32 (the program run just compiled).
    compiled = engine.lower_advance(first.params, first.state, 2).compile().as_text()
    assert "reduce-window" in compiled and "window={size=32 stride=32}" not in compiled
    bigger = build_batch(exps[:2], static=dataclasses.replace(SMALL, n_flows=32), slots_per_host=SMALL.slots_per_host, batch_size=padded_size(2))
    with pytest.raises(AssertionError):
        two_windows(bigger.params, bigger.state)  # the guard does fire on a new shape


def test_results_of_a_failed_point_do_not_stop_the_others():
    good = Experiment(K4, make_flows([0], [15], [10_000], [0]))
    bad = Experiment(K4, make_flows(np.arange(1, 9), 0, 200_000, 0), switch=SwitchConfig(buffer_bytes=20_000, pfc_xoff_bytes=20_000, pfc_xon_bytes=10_000))
    out = run_small([good, bad])
    assert out[0].ok and not out[1].ok
    assert out[0].flows["finish_ps"][0] == 14_510_080


def test_acks_bypass_a_congested_data_queue():
    """Strict priority: h0 sends to h15 while 8 hosts incast into h0. The ACKs of h0's flow
    come back through tor0 -> h0, whose data queue is long; they overtake it, so the
    flow finishes close to its idle-path closed form (its NIC also sends the incast's
    ACKs first, about 64/4160 of the line rate)."""
    from conftest import store_and_forward_ps

    size = 200_000
    flows = make_flows([0] + list(range(1, 9)), [15] + [0] * 8, [size] + [400_000] * 8, 0)
    result = run_small([Experiment(K4, flows)])[0]
    assert result.ok, result.summary
    _, idle_finish_ps = store_and_forward_ps(wire_sizes(size), [100 * 10**9] * 6, [PS] * 6)
    tor0_to_h0 = K4.link_between(K4.node_index("tor0"), 0)
    queue_delay_us = result.port_max_queue_bytes[tor0_to_h0] * 8 / 100e9 * 1e6
    assert queue_delay_us > 10  # a FIFO would have held each ACK this long
    assert result.flows["fct_us"][0] <= idle_finish_ps / PS * 1.03 + 1.0


def test_ecmp_is_seeded_and_deterministic():
    """Same seed: the same paths, bit for bit; another seed: other paths for some flows."""
    from multiverse_jax.config import derangement

    flows = make_flows(np.arange(16), derangement(16, 3), 50_000, 0)
    a, b, c = run_small([Experiment(K4, flows, sim=SimConfig(seed=1)), Experiment(K4, flows, sim=SimConfig(seed=1)), Experiment(K4, flows, sim=SimConfig(seed=2))])
    np.testing.assert_array_equal(a.flows["finish_us"], b.flows["finish_us"])
    np.testing.assert_array_equal(a.port_max_queue_bytes, b.port_max_queue_bytes)
    assert not np.array_equal(a.port_max_queue_bytes, c.port_max_queue_bytes)


def test_pfc_bounds_ingress_bytes_by_xoff_plus_headroom():
    """h0 -> s0 -> s1 -> h1 with a 25 Gb/s last link: s1's queue toward h1 has one ingress,
    so PFC keeps it within XOFF + headroom, where headroom = what s0 can still send after
    the crossing: up to one window (Δ) until the decision, one link delay for the pause
    to arrive, one delay of bytes already on the wire, and one packet being serialised.
    Pause and resume both work: the flow ends at the bottleneck rate."""
    from conftest import chain

    topo = chain([100, 100, 25], [1.0, 1.0, 1.0])
    size, xoff = 2_000_000, 100_000
    exp = Experiment(topo, make_flows([0], [1], [size], [0]), switch=SwitchConfig(pfc_xoff_bytes=xoff, pfc_xon_bytes=50_000))
    result = run_small([exp])[0]
    assert result.ok, result.summary
    s1_to_h1 = topo.link_between(topo.node_index("s1"), 1)
    headroom = (3 * PS) * 100e9 / 8 / 1e12 + 4160
    assert xoff < result.port_max_queue_bytes[s1_to_h1] <= xoff + headroom
    assert result.summary["pfc_pauses"] > 1
    bottleneck_us = sum(wire_sizes(size)) * 8 / 25e9 * 1e6
    assert result.flows["rx_finish_us"][0] == pytest.approx(bottleneck_us + 3.0, rel=0.01)


def _core_bytes(state, e, names):
    """Wire bytes each core received from pod 0 (agg0, agg1) in experiment e: the data of
    flows leaving h0 (their ACKs come down into pod 0, not up)."""
    tx = np.asarray(state.ports.port_tx_bytes[e, : K4.n_links])
    up = [l for l in range(K4.n_links) if names[K4.link_src[l]] in ("agg0", "agg1") and names[K4.link_dst[l]].startswith("core")]
    return {names[K4.link_dst[l]]: int(tx[l]) for l in up if tx[l] > 0}


def test_spraying_spreads_one_flow_over_all_paths():
    """One cross-pod flow of 4096 packets, sprayed per packet (a hash per packet, as random
    packet spraying does): all 4 cores carry its data, each within 10 % of the mean;
    per-flow ECMP puts it on exactly one core."""
    packets = 4096
    flows = make_flows([0], [15], [packets * 4096], [0])
    experiments = [Experiment(K4, flows, lb="spray"), Experiment(K4, flows, lb="ecmp")]
    batch = build_batch(experiments, static=SMALL, slots_per_host=SMALL.slots_per_host, batch_size=padded_size(2))
    state, _ = engine.run(batch.params, batch.state)
    sprayed, pinned = _core_bytes(state, 0, K4.node_names), _core_bytes(state, 1, K4.node_names)
    assert len(sprayed) == 4
    mean = np.mean(list(sprayed.values()))
    assert all(abs(b - mean) <= 0.1 * mean for b in sprayed.values()), sprayed
    assert len(pinned) == 1
    assert all(r.ok and r.flows["rx_bytes"][0] == packets * 4096 for r in results(batch, state))


def test_flowlets_change_path_only_after_a_gap():
    """Two flows share h0's NIC, so each sends every other packet slot: a gap of one packet
    time. With a flowlet gap below that, every packet starts a flowlet and the flow
    spreads over the cores; with a long gap a flow keeps one path, as with ECMP."""
    flows = make_flows([0, 0], [15, 14], [200 * 4096, 200 * 4096], [0, 0])
    experiments = [Experiment(K4, flows, lb="flowlet", switch=SwitchConfig(flowlet_gap_us=0.1)),
        Experiment(K4, flows, lb="flowlet", switch=SwitchConfig(flowlet_gap_us=1000.0)),
    ]
    batch = build_batch(experiments, static=SMALL, slots_per_host=SMALL.slots_per_host, batch_size=padded_size(2))
    state, _ = engine.run(batch.params, batch.state)
    assert len(_core_bytes(state, 0, K4.node_names)) == 4
    assert len(_core_bytes(state, 1, K4.node_names)) <= 2  # one core per flow
    flowlets = np.asarray(state.flows.flow_flowlet)
    assert flowlets[0, 0] == 200 and flowlets[1, 0] == 1


def test_serialisation_by_link_is_the_division_whatever_the_rates():
    """``link_serialization_ps`` multiplies by ps per byte when every rate divides 8e12
    bit-ps/s and divides (rounding up) when one does not: the same times either way."""
    import dataclasses

    import jax.numpy as jnp

    from multiverse_jax.components.static import Static
    from multiverse_jax.ops.packets import link_serialization_ps, serialization_ps

    class Links:
        link_rate_bps = jnp.array([100_000_000_000, 400_000_000_000, 3_000_000_000, 1], jnp.int64)

    static = Static(n_nodes=1, n_hosts=1, n_ports=4, n_flows=1, n_triggers=1, n_activators=1, route_width=1, pinned_len=1, slots_per_host=1, pfc_history=1)
    wire = jnp.array([64, 9064, 1500, 4160, 1], jnp.int32)
    link = jnp.array([0, 1, 0, 1, 3], jnp.int32)
    exact = type("P", (), {"links": Links, "static": static})
    assert np.array_equal(link_serialization_ps(exact, wire, link), serialization_ps(wire, Links.link_rate_bps[link]))
    inexact = type("P", (), {"links": Links, "static": dataclasses.replace(static, inexact_rates=True)})
    odd = jnp.array([2, 2, 2, 2, 2], jnp.int32)  # 3 Gb/s: 8e12 / 3e9 is not an integer
    assert np.array_equal(link_serialization_ps(inexact, wire, odd), serialization_ps(wire, Links.link_rate_bps[odd]))
    assert int(link_serialization_ps(inexact, wire, odd)[0]) == -(-64 * 8 * 10**12 // 3_000_000_000)
