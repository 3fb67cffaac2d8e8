"""Flow mode (sim.mode=flow): max-min fair rates against hand computations and a plain NumPy
water-filling, completion times in integer ps, task workloads, batching, and the CLI.

Hand-computed times use the flow-level model of ``systems/fluid.py``: wire bytes (4096-byte
payloads + 64-byte headers) drain from the sender at the flow's max-min rate; the receiver
has the last byte after every link's delay plus one full packet's serialisation on every
link after the first; the sender has the last ACK after each link's 64-byte ACK
serialisation and delay on the way back.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SMALL, padded_size, run_small, store_and_forward_ps, wire_sizes
from test_invariants import networks
from multiverse_jax import engine
from multiverse_jax.batch import build_batch, needed_static
from multiverse_jax.conf.schema import SimConfig
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops.maxmin import maxmin_rates
from multiverse_jax.ops.paths import flow_paths
from multiverse_jax.simulate import results, simulate
from multiverse_jax.sweep.groups import simulate_many
from multiverse_jax.topology import fattree
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload.flows import make_flows
from multiverse_jax.workload.tasks import TaskGraphBuilder

US = 1_000_000  # ps per µs
GBPS = 10**9
K4 = fattree(4, 100.0, 1.0)
FLOW = SimConfig(mode="flow")
# One shape for every flow-mode test (one compiled flow-level program); no packet pool needed.
FLOW_SMALL = dataclasses.replace(SMALL, slots_per_host=1, path_len=8, flow_level=True, n_data_classes=2, lockstep_experiments=0)


def run_flow(experiments, batching="auto"):
    """Simulate at FLOW_SMALL, padded to ``padded_size`` experiments (as ``run_small``): one
    program per batching mode for 1 to 4 experiments."""
    return simulate(experiments, slots_per_host=1, static=FLOW_SMALL, batching=batching, batch_size=padded_size(len(experiments)))


def flow_exp(topology, flows, **kw):
    return Experiment(topology, flows, sim=FLOW, **kw)


def wire(packets):
    """Wire bytes of a flow of ``packets`` full 4096-byte packets."""
    return packets * 4160


def tail_ps(links):
    """(last byte sent -> receiver has it, receiver -> sender has the last ACK) over
    ``links`` [(Gb/s, µs)] from sender to receiver, for full-packet flows."""
    ser = [4160 * 8 * 10**12 // (r * GBPS) for r, _ in links]
    ack = [64 * 8 * 10**12 // (r * GBPS) for r, _ in links]
    delays = [d * US for _, d in links]
    return sum(delays) + sum(ser[1:]), sum(delays) + sum(ack)


def assert_times(result, flow, drain_ps, links):
    rx, back = tail_ps(links)
    assert result.flows["rx_finish_ps"][flow] == drain_ps + rx
    assert result.flows["finish_ps"][flow] == drain_ps + rx + back


# --- Hand-computed networks ------------------------------------------------------------


def parking_lot():
    """s0 - s1 - s2 - s3 at 100 Gb/s, 1 µs. Hosts: 0 at s0 -> 1 at s3 (the long flow);
    short flow i from host 2 + 2i at s_i to host 3 + 2i at s_(i+1)."""
    names = [f"h{i}" for i in range(8)] + ["s0", "s1", "s2", "s3"]
    s = [8, 9, 10, 11]
    cables = [(s[i], s[i + 1], 100, 1.0) for i in range(3)] + [(0, s[0], 100, 1.0), (1, s[3], 100, 1.0)]
    for i in range(3):
        cables += [(2 + 2 * i, s[i], 100, 1.0), (3 + 2 * i, s[i + 1], 100, 1.0)]
    return from_cables("parking_lot", names, 8, cables)


def test_parking_lot():
    """Every link carries the long flow and one short one: all get 50 Gb/s (160 ps per
    byte). Short flows of 2, 4, 6 packets drain at 2 x 4160 x 160 ps, ...; the long flow
    (20 packets) has sent 3,993,600 / 160 = 24,960 bytes when the last short one ends,
    then has the whole path at 100 Gb/s: 58,240 x 80 ps more."""
    flows = make_flows([0, 2, 4, 6], [1, 3, 5, 7], [20 * 4096, 2 * 4096, 4 * 4096, 6 * 4096], 0)
    result = run_flow([flow_exp(parking_lot(), flows)])[0]
    assert result.ok, result.summary
    hop = (100, 1)
    for i, packets in enumerate([2, 4, 6]):
        assert_times(result, 1 + i, wire(packets) * 160, [hop] * 3)
    short_end = wire(6) * 160
    assert_times(result, 0, short_end + (wire(20) - short_end // 160) * 80, [hop] * 5)
    assert result.summary["n_windows"] == 4  # one event per flow drained
    assert result.summary["n_packet_hops"] == 0
    np.testing.assert_array_equal(result.flows["rx_bytes"], flows.size_bytes)


def two_bottlenecks():
    """s0 -100G- s1 -40G- s2 (1 µs). f1: h0 (s0) -> h4 (s2); f2: h1 (s0) -> h2 (s1);
    f3: h3 (s1) -> h5 (s2). Host links 100 Gb/s."""
    names = [f"h{i}" for i in range(6)] + ["s0", "s1", "s2"]
    cables = [(6, 7, 100, 1.0), (7, 8, 40, 1.0), (0, 6, 100, 1.0), (1, 6, 100, 1.0), (2, 7, 100, 1.0)]
    cables += [(3, 7, 100, 1.0), (4, 8, 100, 1.0), (5, 8, 100, 1.0)]
    return from_cables("two_bottlenecks", names, 6, cables)


def test_three_flows_over_two_bottlenecks():
    """The 40G link is shared by f1 and f3: 20 Gb/s each (400 ps per byte); f2 gets the
    80 Gb/s f1 leaves on the 100G link (100 ps per byte). f2 (10 packets) ends at
    4,160,000 ps without changing f1's share; f3 (5 packets) at 8,320,000 ps, when f1 has
    sent 20,800 of its 83,200 bytes and takes the whole 40G link (200 ps per byte)."""
    flows = make_flows([0, 1, 3], [4, 2, 5], [20 * 4096, 10 * 4096, 5 * 4096], 0)
    result = run_flow([flow_exp(two_bottlenecks(), flows)])[0]
    assert result.ok, result.summary
    assert_times(result, 1, wire(10) * 100, [(100, 1), (100, 1), (100, 1)])
    f3_end = wire(5) * 400
    assert_times(result, 2, f3_end, [(100, 1), (40, 1), (100, 1)])
    assert_times(result, 0, f3_end + (wire(20) - f3_end // 400) * 200, [(100, 1), (100, 1), (40, 1), (100, 1)])


def test_priority_pair():
    """Two flows into h2 through one switch: the class-0 flow takes the whole bottleneck,
    the class-1 flow starts sending only when it has drained, then at full rate."""
    topo = from_cables("pair", ["h0", "h1", "h2", "s"], 3, [(0, 3, 100, 1.0), (1, 3, 100, 1.0), (2, 3, 100, 1.0)])
    flows = make_flows([0, 1], [2, 2], [10 * 4096, 5 * 4096], 0, prio=[1, 0])
    result = run_flow([flow_exp(topo, flows)])[0]
    assert result.ok, result.summary
    links = [(100, 1), (100, 1)]
    assert_times(result, 1, wire(5) * 80, links)
    assert_times(result, 0, wire(5) * 80 + wire(10) * 80, links)


@pytest.mark.parametrize("size", [1, 10_000, 64 * 4096])
def test_lone_flow_is_the_store_and_forward_closed_form(size):
    """Alone on a path of equal rates, flow mode finishes exactly as the packet engine."""
    result = run_flow([flow_exp(K4, make_flows([0], [15], [size], [3 * US]))])[0]
    rx, ack = store_and_forward_ps(wire_sizes(size), [100 * GBPS] * 6, [US] * 6, start_ps=3 * US)
    assert (result.flows["rx_finish_ps"][0], result.flows["finish_ps"][0]) == (rx, ack)


@pytest.mark.parametrize("batching", ["map", "vmap"])
def test_batch_equals_each_alone(batching):
    exps = [
        flow_exp(parking_lot(), make_flows([0, 2], [1, 3], [50_000, 9_000], [0, 2 * US])),
        flow_exp(two_bottlenecks(), make_flows([0, 1, 3], [4, 2, 5], [30_000, 70_000, 5_000], 0)),
        flow_exp(K4, make_flows(np.arange(8), np.arange(8, 16), 40_000, 0)),
    ]
    together = run_flow(exps, batching)
    for exp, batched in zip(exps, together):
        alone = run_flow([exp], batching)[0]
        for column in ("start_ps", "rx_finish_ps", "finish_ps", "rx_bytes"):
            np.testing.assert_array_equal(batched.flows[column], alone.flows[column])
        assert batched.summary["n_windows"] == alone.summary["n_windows"]


def test_time_limit_fails_the_experiment():
    """A 1 MB flow needs 80 µs at 100 Gb/s: with sim.max_time_us=50 it fails, naming the key."""
    exp = Experiment(K4, make_flows([0], [15], [1_000_000], 0), sim=SimConfig(mode="flow", max_time_us=50.0))
    result = run_flow([exp])[0]
    assert not result.ok and "sim.max_time_us" in result.summary["error"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(networks(), min_size=1, max_size=3))
def test_random_networks_conserve_bytes_and_respect_capacity(experiments):
    """Random topologies (mixed rates, pinned paths, trigger chains) at flow level: every
    flow finishes with all its bytes, triggers fire at their activation, no flow drains
    faster than its slowest link, and no link carries more data than its rate allows
    over the run."""
    experiments = [dataclasses.replace(e, sim=dataclasses.replace(e.sim, mode="flow")) for e in experiments]
    batch = build_batch(experiments, static=FLOW_SMALL, slots_per_host=1, batch_size=padded_size(len(experiments)))
    state, _ = engine.run(batch.params, batch.state, steps_per_call=4)
    data_paths = np.asarray(jax.jit(jax.vmap(lambda p: flow_paths(p)[0]))(batch.params))
    for e, (exp, result) in enumerate(zip(experiments, results(batch, state))):
        assert result.ok, result.summary
        flows, n = result.flows, len(exp.flows)
        np.testing.assert_array_equal(flows["rx_bytes"], exp.flows.size_bytes)
        assert np.all(flows["start_ps"] <= flows["rx_finish_ps"]) and np.all(flows["rx_finish_ps"] < flows["finish_ps"])
        for f in np.nonzero(exp.flows.trigger >= 0)[0]:
            activation = flows["rx_finish_ps"] if exp.flows.recv_done_trigger[f - 1] >= 0 else flows["finish_ps"]
            assert flows["start_ps"][f] == activation[f - 1]
        paths = [path[path >= 0] for path in data_paths[e, :n]]
        size = exp.flows.size_bytes
        wire_bytes = size + 64 * -(-size // 4096)
        topo = exp.topology
        ps_per_byte = 8e12 / topo.link_rate_bps
        # The model's tail: every link's delay, the largest packet's serialisation after the first link.
        largest_bits = (np.minimum(size, 4096) + 64) * 8 * 10**12
        tail = [
            topo.link_delay_ps[p].sum() + (-(-largest_bits[f] // topo.link_rate_bps[p[1:]])).sum()
            for f, p in enumerate(paths)
        ]
        sent_ps = flows["rx_finish_ps"] - np.array(tail)  # the last byte leaves the sender
        slowest = np.array([ps_per_byte[p].max() for p in paths])
        assert np.all(sent_ps - flows["start_ps"] >= wire_bytes * slowest * (1 - 1e-12))
        carried = np.zeros(topo.n_links)
        for f, p in enumerate(paths):
            carried[p] += wire_bytes[f]
        assert np.all(carried * ps_per_byte <= (sent_ps.max() - flows["start_ps"].min()) * (1 + 1e-12))


# --- The max-min operation ----------------------------------------------------------------


def reference_maxmin(links, active, prio, capacity, weights):
    """Plain water-filling, one link at a time: within each class (0 first), raise every
    unfrozen flow's rate in proportion to its weight until a link is full, freeze the
    flows on it, repeat."""
    n_flows = len(links)
    paths = [[l for l in links[f] if l >= 0] for f in range(n_flows)]
    rates = np.zeros(n_flows)
    residual = np.array(capacity, float)
    for klass in sorted({prio[f] for f in range(n_flows) if active[f] and paths[f]}):
        growing = {f for f in range(n_flows) if active[f] and paths[f] and prio[f] == klass}
        while growing:
            load = np.zeros(len(capacity))
            for f in growing:
                for l in paths[f]:
                    load[l] += weights[f]
            used = load > 0
            step = min(residual[used] / load[used])
            for f in growing:
                rates[f] += weights[f] * step
            residual = np.maximum(residual - load * step, 0)
            full = used & (residual <= 1e-9 * np.asarray(capacity))
            growing = {f for f in growing if not any(full[l] for l in paths[f])}
    return rates


def random_instance(rng, n_flows=7, n_links=6, width=3):
    links = np.full((n_flows, width), -1, np.int32)
    for f in range(n_flows):
        k = rng.integers(1, width + 1)
        links[f, :k] = rng.choice(n_links, k, replace=False)
    active = rng.random(n_flows) < 0.8
    prio = rng.integers(0, 2, n_flows).astype(np.int32)
    capacity = rng.choice([10.0, 25.0, 40.0, 100.0], n_links)
    weights = rng.choice([1.0, 2.0, 3.0], n_flows)
    return links, active, prio, capacity, weights


maxmin_jit = jax.jit(maxmin_rates)


@pytest.mark.parametrize("seed", range(6))
def test_maxmin_matches_numpy_water_filling(seed):
    links, active, prio, capacity, weights = random_instance(np.random.default_rng(seed))
    rates = np.asarray(maxmin_jit(links, active, prio, capacity, weights))
    np.testing.assert_allclose(rates, reference_maxmin(links, active, prio, capacity, weights), rtol=1e-9, atol=1e-9)
    assert_max_min_fair(links, active, prio, capacity, weights, rates)


def assert_max_min_fair(links, active, prio, capacity, weights, rates):
    """The definition: no link is over capacity, and every active flow has a bottleneck, a
    link that the flows of its class and above fill, on which no flow of its class has a
    larger rate per weight."""
    load = np.zeros(len(capacity))
    for f in np.flatnonzero(active):
        load[links[f][links[f] >= 0]] += rates[f]
    assert np.all(load <= np.asarray(capacity) * (1 + 1e-9))
    assert np.all(rates[~active] == 0)
    for f in np.flatnonzero(active):
        above = active & (prio <= prio[f])
        ok = False
        for l in links[f][links[f] >= 0]:
            on_l = np.array([l in links[g] for g in range(len(links))]) & above
            full = rates[on_l].sum() >= capacity[l] * (1 - 1e-9)
            same = on_l & (prio == prio[f])
            ok |= full and rates[f] / weights[f] >= (rates[same] / weights[same]).max() * (1 - 1e-9)
        assert ok, f"flow {f} has no bottleneck"


def test_maxmin_vmaps_and_defaults_to_equal_weights():
    rng = np.random.default_rng(42)
    instances = [random_instance(rng) for _ in range(4)]
    stacked = [np.stack(column) for column in zip(*instances)]
    batched = jax.vmap(lambda l, a, p, c: maxmin_rates(l, a, p, c))(*stacked[:4])
    for i, (links, active, prio, capacity, _) in enumerate(instances):
        expected = reference_maxmin(links, active, prio, capacity, np.ones(len(links)))
        np.testing.assert_allclose(np.asarray(batched[i]), expected, rtol=1e-9)


def test_maxmin_weights_split_a_shared_link():
    """Weights 2 : 1 on one 90-unit link: 60 and 30; a third flow on its own link: all of it."""
    links = jnp.array([[0, -1], [0, 1], [2, -1]], jnp.int32)
    capacity, weights = jnp.array([90.0, 100.0, 7.0]), jnp.array([2.0, 1.0, 1.0])
    rates = maxmin_rates(links, jnp.ones(3, bool), jnp.zeros(3, jnp.int32), capacity, weights)
    np.testing.assert_allclose(np.asarray(rates), [60.0, 30.0, 7.0])


# --- Paths ------------------------------------------------------------------------------------


def port_tx_bytes(experiment, static, slots_per_host):
    """(P,) wire bytes each port sent over the experiment's run (its own batch, padded to
    ``padded_size``: a packet-mode run at SMALL shares the program of conftest's ``run_small``)."""
    batch = build_batch([experiment], static=static, slots_per_host=slots_per_host, batch_size=padded_size(1))
    state, _ = engine.run(batch.params, batch.state)
    assert bool(state.done[0]) and int(state.error[0]) == 0
    return np.asarray(state.ports.port_tx_bytes[0])


def pipeline_with_pinned_routes():
    """examples/: a triggered .cm pipeline with pinned routes on a k=4 fat-tree."""
    from test_cli import config

    from multiverse_jax.config import experiment_from_config

    examples = __import__("pathlib").Path(__file__).parent.parent / "examples"
    workload = f"workload.path={examples / 'pipeline.cm'}"
    return experiment_from_config(config("workload.kind=cm", workload, f"workload.routes={examples / 'routes_k4.csv'}"))


def test_flow_paths_carry_the_packet_engine_bytes():
    """Per port, flow mode's wire bytes (each flow's data on its data path, one ACK per
    packet on its ACK path) equal what the packet engine sent: the same ECMP paths."""
    flows = make_flows(np.arange(16), (np.arange(16) + 5) % 16, 30_000, np.arange(16) * 10 * US)
    packet = Experiment(K4, flows, sim=SimConfig(seed=3))
    fluid = Experiment(K4, flows, sim=SimConfig(seed=3, mode="flow"))
    expected = port_tx_bytes(packet, SMALL, SMALL.slots_per_host)
    np.testing.assert_array_equal(port_tx_bytes(fluid, FLOW_SMALL, 1), expected)
    batch = build_batch([fluid], static=FLOW_SMALL, slots_per_host=1)
    data, ack = jax.jit(jax.vmap(flow_paths))(batch.params)
    assert np.all(np.asarray(data)[0, :16, :6] >= 0) and np.all(np.asarray(data)[0, :16, 6:] == -1)
    assert np.all(np.asarray(ack)[0, 16:] == -1)  # padded flows have no path
    np.testing.assert_array_equal(batch.params.flows.flow_data_path, data)  # routed once, by build_batch
    np.testing.assert_array_equal(batch.params.flows.flow_ack_path, ack)


def test_pinned_routes_and_triggers():
    """The pinned pipeline: the same per-port bytes as the packet engine (pinned paths),
    and its triggers at flow level: a stage starts when the previous receiver has the
    last byte; flow 5 at the barrier of flows 3 and 4's last ACKs."""
    packet = pipeline_with_pinned_routes()
    fluid = dataclasses.replace(packet, sim=FLOW)
    np.testing.assert_array_equal(port_tx_bytes(packet, SMALL, SMALL.slots_per_host), port_tx_bytes(fluid, FLOW_SMALL, 1))
    result = run_flow([fluid])[0].flows
    rows = {int(i): k for k, i in enumerate(result["id"])}
    assert result["start_ps"][rows[2]] == result["rx_finish_ps"][rows[1]]
    assert result["start_ps"][rows[3]] == result["rx_finish_ps"][rows[2]]
    assert result["start_ps"][rows[5]] == max(result["finish_ps"][rows[3]], result["finish_ps"][rows[4]])


def test_new_experiments_same_shapes_do_not_recompile():
    run_flow([flow_exp(parking_lot(), make_flows([0], [1], [10_000], 0))])
    programs = engine.compiled_programs()
    other = from_cables("other", ["h0", "h1", "s"], 2, [(0, 2, 400, 0.5), (1, 2, 25, 2.0)])
    result = run_flow([flow_exp(other, make_flows([0, 1], [1, 0], [5_000, 70_000], [0, 3 * US]))])[0]
    assert engine.compiled_programs() == programs and result.ok


# --- Task workloads, batching rules, CLI ---------------------------------------------------


def ring(n_gpus=8, rounds=2, size=200_000):
    """A ring exchange: in each round GPU g computes 2 µs, then sends to g + 1 (another pod
    for half of them); round r + 1 waits for the send it received in round r."""
    b = TaskGraphBuilder(16)
    received = [None] * n_gpus
    for _ in range(rounds):
        sends = []
        for g in range(n_gpus):
            compute = b.delay(2 * g, 2 * US, [received[g]] if received[g] is not None else [])
            sends.append(b.send(2 * g, 2 * ((g + 1) % n_gpus), size, [compute]))
        received = [sends[(g - 1) % n_gpus] for g in range(n_gpus)]
    return b.build()


def run_both(graph):
    """(flow mode, packet mode) results of one task graph on the k=4 fat-tree."""
    fluid = run_flow([flow_exp(K4, graph.flow_set(), tasks=graph)])[0]
    packet = Experiment(K4, graph.flow_set(), tasks=graph)
    return fluid, run_small([packet])[0]  # the tests' shared packet program (SMALL has room for the tasks)


def test_task_ring_in_flow_mode():
    """The same task graph at flow level ends before the packet engine's (no queueing, no
    packet-level interleaving), by a sane margin; every task and flow finishes."""
    graph = ring()
    fluid, packet = run_both(graph)
    assert fluid.ok and packet.ok, (fluid.summary, packet.summary)
    assert fluid.summary["flows_finished"] == len(graph.flow_tasks)
    assert np.all(fluid.tasks["finish_ps"] >= 0)
    packet_ps = packet.summary["iteration_time_ps"]
    assert 0.9 * packet_ps <= fluid.summary["iteration_time_ps"] <= packet_ps


def test_ping_pong_tasks_are_exact():
    """Lone flows between tasks: flow mode gives the packet engine's task times, to the ps."""
    b = TaskGraphBuilder(16)
    c0 = b.delay(0, 5 * US)
    s1 = b.send(0, 1, 100_000, [c0])
    c1 = b.delay(1, 2 * US, [s1])
    s2 = b.send(1, 0, 50_000, [c1])
    b.delay(0, 1 * US, [s2])
    fluid, packet = run_both(b.build())
    np.testing.assert_array_equal(fluid.tasks["start_ps"], packet.tasks["start_ps"])
    np.testing.assert_array_equal(fluid.tasks["finish_ps"], packet.tasks["finish_ps"])


def test_flow_and_packet_points_run_in_separate_batches():
    flows = make_flows([0, 1], [15, 14], 20_000, 0)
    exps = [Experiment(K4, flows), flow_exp(K4, flows)]
    with pytest.raises(InputError, match="cannot share a batch"):
        build_batch(exps)
    with pytest.raises(InputError, match="flow-level step"):
        build_batch(exps[:1], static=FLOW_SMALL)
    packet, fluid = simulate_many(exps, {"slots_per_host": 16})
    assert packet.ok and fluid.ok
    shapes = needed_static(exps[1:])  # no packet pool, no time-series ring at flow level
    assert (shapes.slots_per_host, shapes.n_samples, shapes.flow_level) == (1, 1, True)
    assert fluid.summary["n_packet_hops"] == 0 < packet.summary["n_packet_hops"]


def test_cli_flow_mode_writes_the_usual_outputs(tmp_path):
    from test_cli import FCT_HEADER, config, read_fct

    from multiverse_jax.cli import run

    assert run(config("sim.mode=flow", "workload.flow_bytes=20000"), tmp_path) == 0
    assert {p.name for p in tmp_path.iterdir()} >= {"summary.json", "flows.parquet", "fct.csv"}
    header, rows = read_fct(tmp_path)
    assert header == FCT_HEADER and len(rows) == 16
    assert all(int(r["fct_ps"]) == int(r["finish_ps"]) - int(r["start_ps"]) > 0 for r in rows)


def test_cli_llm_iteration_in_flow_mode(tmp_path):
    """A tiny transformer (TP=2, PP=2, DP=4 on a k=4 fat-tree) at flow level: every task
    finishes, the split adds up, and the iteration ends before the packet engine's
    3237.03 µs (test_golden.py's small LLM iteration, the same point) by less than 10 %."""
    import json

    from test_cli import TINY_MODEL, config

    from multiverse_jax.cli import run

    overrides = ["workload.kind=llm", TINY_MODEL, "workload.tp=2", "workload.pp=2", "workload.dp=4", "sim.mode=flow"]
    assert run(config(*overrides, "output=minimal"), tmp_path) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["flows_finished"] == summary["n_flows"]
    split = summary["compute_us"] + summary["exposed_comm_us"] + summary["bubble_us"]
    assert split == pytest.approx(summary["iteration_time_us"])
    assert 0.9 * 3237.03 < summary["iteration_time_us"] < 3237.03
    assert (tmp_path / "tasks.parquet").is_file()
