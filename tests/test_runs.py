"""Runs (``ops/runs.py``): a transmit round starts, at the ports with packets queued
behind their first, the packets the next rounds would start there one by one. The
results must be those of one packet a port a round (``Static.run_packets`` 1), bit for
bit, whatever the run length and however few ports may run: PFC pauses in the middle of
a run, ACK trains in the data class (htsim) and in the control class, two priorities, a
NIC's ACKs against its own offers, ECN marks and HPCC's telemetry read from the queue
before each packet of a run."""

import dataclasses
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import SMALL, padded_size, run_small
from multiverse_jax import engine
from multiverse_jax.batch import build_batch, needed_static
from multiverse_jax.components.static import RUN_PACKETS, RUN_PACKETS_SINGLE_CLASS, RUN_PORTS_SINGLE_CLASS
from multiverse_jax.conf.schema import CcKind, PacketConfig, SimConfig, SwitchConfig
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops import fifo_pass, nic_pass, queues, runs
from multiverse_jax.systems import transmit
from multiverse_jax.topology import fattree
from multiverse_jax.units import NEVER
from multiverse_jax.workload.flows import make_flows

PS = 1_000_000  # ps per µs
FAT_TREE = fattree(4, 100.0, 1.0)
# Two incasts (9 hosts to 0, 8 hosts to 15) and a flow the other way, in two priorities:
# PFC pauses the senders of both, ACK trains leave the two receivers.
INCAST = make_flows(
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 9, 10, 11, 12, 13, 14],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15, 15, 15, 1],
    [60_000] * 15 + [20_000],
    [0] * 10 + [2 * PS] * 5 + [5 * PS],
    prio=[0, 1] * 8,
)
PFC = SwitchConfig(pfc_xoff_bytes=40_000, pfc_xon_bytes=20_000, ecn_kmin_bytes=10_000, ecn_kmax_bytes=60_000)
EXPERIMENTS = [
    Experiment(FAT_TREE, INCAST, switch=PFC, packet=PacketConfig(ack_class="data"), sim=SimConfig(seed=1)),
    Experiment(FAT_TREE, INCAST, switch=PFC, packet=PacketConfig(ack_class="control"), sim=SimConfig(seed=2)),
    Experiment(FAT_TREE, INCAST, switch=PFC, cc=CcKind.dctcp, sim=SimConfig(seed=3)),
    Experiment(FAT_TREE, INCAST, switch=PFC, cc=CcKind.hpcc, packet=PacketConfig(ack_class="data"), sim=SimConfig(seed=4)),
]
SHAPES = {"n_data_classes": 2, "int_hops": 5, "lockstep_experiments": 0}  # two priorities; HPCC telemetry over 5 switch hops; vmap: the whole batch at once
RUNS = {**SHAPES, "run_packets": RUN_PACKETS}  # runs of packets (SMALL runs one a round)
ONE_QUEUE, ONE_QUEUE_RUNS = ({**shapes, "n_data_classes": 1} for shapes in (SHAPES, RUNS))  # one priority: one class queue a port


def outcome(result) -> dict:
    """What a run reports: every flow column, the summary's figures and each port's largest queue."""
    figures = {k: v for k, v in result.summary.items() if not k.startswith(("wall", "batch_", "windows_per"))}
    return {**{k: np.asarray(v) for k, v in result.flows.items()}, **figures, "max_queue": result.port_max_queue_bytes}


@pytest.fixture(scope="module")
def one_a_round():
    """The experiments with one packet a port a round: the reference."""
    return [outcome(r) for r in run_small(EXPERIMENTS, run_packets=1, **SHAPES)]


def assert_same(results, reference):
    for result, expected in zip(results, reference):
        assert result["status"] == "ok"
        assert result.keys() == expected.keys()
        for key in expected:
            np.testing.assert_array_equal(result[key], expected[key], err_msg=key)


def test_runs_equal_one_packet_a_round(one_a_round):
    assert_same([outcome(r) for r in run_small(EXPERIMENTS, **RUNS)], one_a_round)
    assert all(r["pfc_pauses"] > 0 for r in one_a_round)  # runs meet pauses


def test_a_round_starts_trains_of_packets():
    """The runs happen: in the busy windows of the experiments (the batch of the test
    above, its compiled program), some port starts several packets in one round, with
    ACKs in the data FIFO and with control ACKs alike."""
    static = dataclasses.replace(SMALL, **RUNS)
    batch = build_batch(EXPERIMENTS, static=static, slots_per_host=static.slots_per_host, batch_size=padded_size(4))

    @jax.jit
    @jax.vmap
    def most_in_one_round(params, state):
        end = state.time_ps + params.window_ps
        state = engine.systems_before("transmit", params, state, end)
        serving, order, free, upcoming = transmit.window_start(params, state, end)
        served = transmit.serve_round(params, serving, end, order, free, upcoming)
        return jnp.max((served.head - serving.head).reshape(params.static.n_ports, -1).sum(axis=1))

    state, most = batch.state, np.zeros(4, np.int64)
    for _ in range(8):
        state = engine.advance(batch.params, state, 8)
        most = np.maximum(most, np.asarray(most_in_one_round(batch.params, state)))
    assert most[0] > 1 and most[1] > 1, most


def test_few_ports_running_equal_one_packet_a_round(one_a_round, monkeypatch):
    """Two ports may run a round, four packets each: most ports with packets behind wait."""
    monkeypatch.setattr(runs, "run_ports", lambda static: 2)
    assert_same([outcome(r) for r in run_small(EXPERIMENTS, run_packets=4, **SHAPES)], one_a_round)


def test_sim_run_packets_chooses_runs_unless_asked():
    """0 (the default) chooses runs, whatever the ACK class; a value asked for holds for the
    batch (its largest, 1 included: no runs); out of range is an error naming the key."""
    flows = make_flows([1], [0], [10_000])
    control, data = (Experiment(FAT_TREE, flows, packet=PacketConfig(ack_class=c)) for c in ("control", "data"))
    assert needed_static([control]).run_packets == RUN_PACKETS
    assert needed_static([control, data]).run_packets == RUN_PACKETS
    assert needed_static([Experiment(FAT_TREE, flows, sim=SimConfig(run_packets=1))]).run_packets == 1
    asked = Experiment(FAT_TREE, flows, sim=SimConfig(run_packets=4))
    assert needed_static([control, asked]).run_packets == 4
    # Long single-class runs only off the CPU, where rounds cost kernel latency (a choice, not a
    # shape), unless an experiment asks: always wins, then never.
    assert needed_static([control]).long_runs == (jax.default_backend() != "cpu")
    always, never = (Experiment(FAT_TREE, flows, sim=SimConfig(long_runs=choice)) for choice in ("always", "never"))
    assert needed_static([control, always]).long_runs and not needed_static([control, never]).long_runs
    assert needed_static([always, never]).long_runs
    # The FIFO pass likewise (sim.fifo_pass: the same choices).
    assert needed_static([control]).fifo_pass == (jax.default_backend() != "cpu")
    always, never = (Experiment(FAT_TREE, flows, sim=SimConfig(fifo_pass=choice)) for choice in ("always", "never"))
    assert needed_static([control, always]).fifo_pass and not needed_static([control, never]).fifo_pass
    # The NIC pass likewise (sim.nic_pass).
    assert needed_static([control]).nic_pass == (jax.default_backend() != "cpu")
    always, never = (Experiment(FAT_TREE, flows, sim=SimConfig(nic_pass=choice)) for choice in ("always", "never"))
    assert needed_static([control, always]).nic_pass and not needed_static([control, never]).nic_pass
    with pytest.raises(InputError, match="sim.nic_pass"):
        SimConfig(nic_pass="sometimes")
    with pytest.raises(InputError, match="sim.fifo_pass"):
        SimConfig(fifo_pass="sometimes")
    with pytest.raises(InputError, match="sim.run_packets"):
        SimConfig(run_packets=-1)


def test_runners_full_runs_first_then_the_rest_in_port_order():
    n_behind = jnp.array([0, 3, 9, 1, 0, 12, 2], jnp.int32)
    np.testing.assert_array_equal(runs.runners(n_behind, 4, 7), [2, 5, 1, 3])
    np.testing.assert_array_equal(runs.runners(n_behind, 8, 7), [2, 5, 1, 3, 6, 7, 7, 7])


def test_starts_merge_the_class_queues_by_strict_priority():
    """``behind``'s rows against non-preemptive strict priority in plain Python, on a
    port with random control and data arrivals and sizes behind a first departure: when
    the port falls free, an arrived control packet first, else an arrived data packet,
    else whichever arrives first (ties to control); each class a FIFO. With one class
    only, the rows are that FIFO's max-plus recurrence."""
    rng = np.random.default_rng(0)
    static = dataclasses.replace(SMALL, run_packets=12, n_data_classes=1)
    n_rows = static.run_packets - 1
    rate = 100 * 10**9
    for trial in range(6):
        n_control = 0 if trial == 0 else int(rng.integers(1, n_rows))
        arrival_ps = [np.sort(rng.integers(0, 4_000, size=n)).astype(np.int64) for n in (n_control, n_rows)]
        wire_bytes = [rng.integers(64, 4_200, size=n).astype(np.int32) for n in (n_control, n_rows)]
        first_end_ps = int(rng.integers(0, 1_500))
        expected, free, position = [], first_end_ps, [0, 0]
        for _ in range(n_rows):
            ready = [a[i] if i < len(a) else None for a, i in zip(arrival_ps, position)]
            start = [None if r is None else max(r, free) for r in ready]
            k = 0 if start[0] is not None and (start[1] is None or start[0] <= start[1]) else 1
            ser = (int(wire_bytes[k][position[k]]) * 8 * 10**12 + rate - 1) // rate
            expected.append((k, start[k]))
            free, position[k] = start[k] + ser, position[k] + 1
        order, head, params = _two_queues(static, arrival_ps, wire_bytes)
        held = (jnp.zeros(1, jnp.int64), jnp.full(1, NEVER, jnp.int64))  # no pause
        no_offer = jnp.full((1, 1), NEVER, jnp.int64)
        first_end = jnp.full(1, first_end_ps, jnp.int64)
        nxt = runs.behind(params, order, head, first_end, jnp.ones(1, jnp.int32), jnp.zeros(1, jnp.int32), held, no_offer, 10**9)
        assert np.all(np.asarray(nxt.chosen_ok))
        np.testing.assert_array_equal(np.asarray(nxt.queue_class)[:, 0], [k for k, _ in expected])
        np.testing.assert_array_equal(np.asarray(nxt.start)[:, 0], [start for _, start in expected])


def _two_queues(static, arrival_ps, wire_bytes):
    """A service order whose queue 0 (control) holds ``arrival_ps[0]`` and queue 1 (data)
    a first packet then ``arrival_ps[1]``, its pointers, and 100 Gb/s links (a window of 1 ms)."""
    time_ps = np.concatenate([arrival_ps[0], [0], arrival_ps[1]]).astype(np.int64)
    wire = np.concatenate([wire_bytes[0], [0], wire_bytes[1]]).astype(np.int32)
    n, pad = len(time_ps), 8
    time_ps = np.concatenate([time_ps, np.full(pad, NEVER, np.int64)])
    wire = np.concatenate([wire, np.zeros(pad, np.int32)])
    packet = queues.QueuedPacket(
        jnp.zeros(n + pad, bool), jnp.asarray(wire), *(jnp.zeros(n + pad, jnp.int32) for _ in range(4))
    )
    order = queues.ServiceOrder(
        jnp.arange(n + pad, dtype=jnp.int32), jnp.asarray(time_ps), jnp.zeros(n + pad + 1, jnp.int64),
        jnp.array([len(arrival_ps[0]), n], jnp.int32), packet,
    )  # fmt: skip
    params = SimpleNamespace(
        static=static, window_ps=10**9, links=SimpleNamespace(link_rate_bps=jnp.full(1, 100 * 10**9, jnp.int64))
    )
    return order, jnp.array([0, len(arrival_ps[0])], jnp.int32), params


# Where a NIC's new packet leads a run: host 0 sends a flow while 8 flows come in, and 15
# likewise, all in one priority with ACKs in the data FIFO (htsim's configuration), so the
# ACKs that arrive while a NIC serialises its own packet queue behind it, in the one class.
BOTH_WAYS = make_flows(
    [1, 2, 3, 4, 5, 6, 7, 8, 0, 9, 10, 11, 12, 13, 14, 15],
    [0, 0, 0, 0, 0, 0, 0, 0, 9, 15, 15, 15, 15, 15, 15, 1],
    [40_000] * 8 + [200_000] + [40_000] * 6 + [200_000],
    [0] * 9 + [PS] * 7,
)
BOTH_WAYS_EXPERIMENTS = [
    Experiment(FAT_TREE, BOTH_WAYS, switch=PFC, packet=PacketConfig(ack_class="data"), sim=SimConfig(seed=5)),
    Experiment(FAT_TREE, BOTH_WAYS, switch=PFC, cc=CcKind.hpcc, packet=PacketConfig(ack_class="data"), sim=SimConfig(seed=6)),
]

# Where a NIC's offers follow one another in the NIC pass, or stop it: hosts 1 and 2 send
# several flows (round robin, flows joining the cycle later), the others one; DCQCN's pacing
# and byte counter, HPCC's window and pacing, DCTCP's window gate, spraying and flowlets (a gap short
# enough to start new ones), ACKs in the data FIFO with PFC.
MANY_FLOWS = make_flows(
    [1, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 0, 9, 10, 11, 12],
    [0, 5, 9, 0, 6, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15, 15],
    [30_000, 20_000, 40_000, 30_000, 25_000] + [30_000] * 6 + [120_000] + [30_000] * 4,
    [0, PS, 2 * PS, 0, 3 * PS // 2] + [0] * 8 + [PS] * 3,
)
SHORT_FLOWLETS = dataclasses.replace(PFC, flowlet_gap_us=0.5)
MANY_FLOWS_EXPERIMENTS = [
    Experiment(FAT_TREE, MANY_FLOWS, switch=SHORT_FLOWLETS, cc=cc, lb=lb, packet=PacketConfig(ack_class="data"), sim=SimConfig(seed=seed), **more)
    for seed, (cc, lb, more) in enumerate([
        (CcKind.dcqcn, "spray", {}), (CcKind.hpcc, "flowlet", {}),
        (CcKind.dctcp, "ecmp", {}), (CcKind.none, "flowlet", {}),
    ])
]  # fmt: skip


def _count_single_class(monkeypatch) -> list:
    """A list that gets, each time ``runs.single_class`` runs in a program traced from now
    on, (rows started, of which behind a NIC's new packet)."""
    rows_started = []
    original = runs.single_class

    def counted(*args, **kwargs):
        nxt, queue_bytes, ends, known = out = original(*args, **kwargs)
        started, first = nxt.chosen_ok & known, args[4]
        after_creates = jnp.sum(started & first.creates[None, :])
        jax.debug.callback(lambda n, c: rows_started.append((int(n), int(c))), jnp.sum(started), after_creates)
        return out

    monkeypatch.setattr(runs, "single_class", counted)
    return rows_started


def _count_fifo_pass(monkeypatch) -> list:
    """A list that gets, each time the FIFO pass (``fifo_pass.drain``) runs in a program
    traced from now on, the packets it started."""
    started = []
    original = fifo_pass.drain

    def counted(*args, **kwargs):
        rows, arrived_ps = original(*args, **kwargs)
        jax.debug.callback(lambda n: started.append(int(n)), jnp.sum(rows.dep.sends))
        return rows, arrived_ps

    monkeypatch.setattr(fifo_pass, "drain", counted)
    return started


def _count_nic_pass(monkeypatch) -> list:
    """A list that gets, each time the NIC pass (``nic_pass.drain``) runs in a program traced
    from now on, (the packets it started, of which new ones)."""
    started = []
    original = nic_pass.drain

    def counted(*args, **kwargs):
        rows, made, arrived_ps = original(*args, **kwargs)
        n_made = jnp.sum(made.count)
        jax.debug.callback(lambda n, m: started.append((int(n), int(m))), jnp.sum(rows.dep.sends), n_made)
        return rows, made, arrived_ps

    monkeypatch.setattr(nic_pass, "drain", counted)
    return started


def _count_nic_rounds(monkeypatch) -> list:
    """A list that gets, each time a window's last rounds run on the NICs' ports alone
    (``transmit.nic_rounds``, with the FIFO pass) in a program traced from now on, the
    packets they started."""
    started = []
    original = transmit.nic_rounds

    def counted(params, serving, *args):
        after = original(params, serving, *args)
        sent = after.state.n_packet_hops - serving.state.n_packet_hops
        jax.debug.callback(lambda n: started.append(int(n)), sent)
        return after

    monkeypatch.setattr(transmit, "nic_rounds", counted)
    return started


# Slow (a ~15 s compile on 2 cores): the pass is an accelerator's default, which runs it in
# lockstep (test_one_class_queue_per_port_takes_the_closed_form_alone, by default); the pass
# alone against a plain FIFO is test_fifo_pass's, and its size switch in map is forward's mechanism.
@pytest.mark.slow
def test_fifo_pass_equals_one_packet_a_round(monkeypatch):
    """The FIFO pass (``ops/fifo_pass.py``, ``Static.fifo_pass``): every switch port's
    departures of a window at its start, in closed form over its queue, the rounds serving
    the NICs and the ports it stops (a PFC pause, the window's end, arrivals past its
    search). In ``map`` with one packet a port a round otherwise, the results are those of
    the rounds alone, bit for bit (PFC pauses, ACK trains in the data FIFO, HPCC's
    telemetry); and it starts most of the switch ports' packets."""
    reference = [outcome(r) for r in run_small(BOTH_WAYS_EXPERIMENTS, batch_size=4, run_packets=1, **SHAPES)]
    passed, on_nics = _count_fifo_pass(monkeypatch), _count_nic_rounds(monkeypatch)
    results = run_small(BOTH_WAYS_EXPERIMENTS, batch_size=4, rival_classes=False, fifo_pass=True, **ONE_QUEUE)
    assert_same([outcome(r) for r in results], reference)
    assert all(r["pfc_pauses"] > 0 for r in reference)  # the pass meets pauses
    hops = sum(int(r.summary["n_packet_hops"]) for r in results)
    assert sum(passed) > hops / 4, (sum(passed), hops)  # of 4-6 hops a packet, 2 at NICs: most switch hops
    assert sum(on_nics) > hops / 8, (sum(on_nics), hops)  # the NICs' rounds (no NIC pass): most NIC hops


# Slow (a 20-24 s compile on 2 cores): long runs are an accelerator's default, and CI on a CPU
# may skip them where ports have rival classes; ways 1 and 2 in lockstep stay in
# test_one_class_queue_per_port_takes_the_closed_form_alone, way 3 (a CPU's) in the first tests.
@pytest.mark.slow
@pytest.mark.parametrize("batching", ["vmap"])
def test_long_single_class_runs_equal_one_packet_a_round(one_a_round, batching, monkeypatch):
    """``Static.long_runs`` (an accelerator's default): where every port with packets
    behind its first has them in one class queue, a round starts them in closed form
    (``follow``'s ways 1 and 2: up to ``runs.long_rows`` packets at ``runs.LONG_PORTS``
    ports, or ``run_rows`` - 1 at more), a NIC's new packet leading some runs. In lockstep
    (the accelerator's batching), the batch takes them where every experiment can. They
    are taken here, and the results are those of one packet a round."""
    rows_started = _count_single_class(monkeypatch)
    assert_same([outcome(r) for r in run_small(EXPERIMENTS, batching=batching, long_runs=True, **RUNS)], one_a_round)
    # The same program (traced above, with the count) on the second batch, against its run of one packet a round.
    reference = [outcome(r) for r in run_small(BOTH_WAYS_EXPERIMENTS, batch_size=4, run_packets=1, **SHAPES)]
    results = run_small(BOTH_WAYS_EXPERIMENTS, batching=batching, batch_size=4, long_runs=True, **RUNS)
    assert_same([outcome(r) for r in results], reference)
    assert sum(n for n, _ in rows_started) > 0, "ways 1 and 2 never started a packet"
    assert sum(c for _, c in rows_started) > 0, "no run followed a NIC's new packet"


def test_one_class_queue_per_port_takes_the_closed_form_alone(monkeypatch):
    """Where every experiment queues ACKs with data at one priority (``Static.rival_classes``
    off: htsim's configuration), every round's runs take ``follow``'s way 2 without way 3
    (on a CPU, where way 1 is off), at ``RUN_PACKETS_SINGLE_CLASS`` packets a round at
    ``RUN_PORTS_SINGLE_CLASS`` ports; a
    NIC's new packet leads some of them. With long runs (an accelerator's default), ways 1
    and 2, and the FIFO and NIC passes. The results are those of one packet a round.
    ``build_batch`` turns it on only for such batches, and a given ``Static`` without rival
    classes is refused for one with them."""
    reference = [outcome(r) for r in run_small(BOTH_WAYS_EXPERIMENTS, batch_size=4, run_packets=1, **SHAPES)]
    rows_started = _count_single_class(monkeypatch)  # this static's program is traced here only
    results = run_small(
        BOTH_WAYS_EXPERIMENTS, batch_size=4, rival_classes=False, run_packets=RUN_PACKETS_SINGLE_CLASS,
        run_ports=RUN_PORTS_SINGLE_CLASS, **SHAPES,
    )  # a CPU's choices for such a batch
    assert_same([outcome(r) for r in results], reference)
    assert sum(c for _, c in rows_started) > 0, "no run followed a NIC's new packet"
    # An accelerator's form: long runs and the FIFO pass on too, in lockstep (the switch takes
    # ways 1 and 2 only; the pass, its largest size any experiment needs).
    passed, on_nics, nic_passed = _count_fifo_pass(monkeypatch), _count_nic_rounds(monkeypatch), _count_nic_pass(monkeypatch)
    accelerator = {
        "batching": "vmap", "batch_size": 4, "rival_classes": False, "long_runs": True, "fifo_pass": True, "nic_pass": True,
        **ONE_QUEUE_RUNS,
    }  # fmt: skip
    locked = run_small(BOTH_WAYS_EXPERIMENTS, **accelerator)
    assert_same([outcome(r) for r in locked], reference)
    assert sum(passed) > 0, "the FIFO pass never started a packet"
    hops = sum(int(r.summary["n_packet_hops"]) for r in locked)
    nic_hops, made = (sum(column) for column in zip(*nic_passed))
    assert nic_hops > hops / 8 and made > hops / 16, (nic_hops, made, hops)  # the NIC pass: most NIC hops, new packets among them
    assert sum(on_nics) < nic_hops / 10, (sum(on_nics), nic_hops)  # the NICs' rounds: where the pass stopped
    # The NIC pass (``ops/nic_pass.py``): where a NIC's offers follow one another or stop it
    # (a host with several flows at its second offer; the rounds go on there), whatever the
    # congestion control and load balancing; the results are those of one packet a round.
    del on_nics[:], nic_passed[:]
    reference = [outcome(r) for r in run_small(MANY_FLOWS_EXPERIMENTS, batch_size=4, run_packets=1, **SHAPES)]
    assert all(r["pfc_pauses"] > 0 for r in reference)  # the pass meets pauses
    assert_same([outcome(r) for r in run_small(MANY_FLOWS_EXPERIMENTS, **accelerator)], reference)
    nic_hops, made = (sum(column) for column in zip(*nic_passed))
    assert made > 0 and nic_hops > 2 * sum(on_nics), (nic_hops, made, sum(on_nics))
    assert sum(on_nics) > 0, "no round ran on the NICs' ports alone (where the NIC pass stopped)"
    data = needed_static(BOTH_WAYS_EXPERIMENTS)
    assert not data.rival_classes
    assert data.run_packets == (RUN_PACKETS_SINGLE_CLASS if jax.default_backend() == "cpu" else RUN_PACKETS)
    assert data.run_ports == (RUN_PORTS_SINGLE_CLASS if jax.default_backend() == "cpu" else 0)
    assert needed_static(EXPERIMENTS[:1]).run_ports == 0  # rival classes: the default max(32, P / 8)
    assert needed_static(EXPERIMENTS[:1]).rival_classes  # two priorities
    assert needed_static([dataclasses.replace(BOTH_WAYS_EXPERIMENTS[0], packet=PacketConfig())]).rival_classes  # control ACKs
    static = dataclasses.replace(SMALL, rival_classes=False, **SHAPES)
    with pytest.raises(InputError, match="rival_classes"):
        build_batch(EXPERIMENTS[1:2], static=static, slots_per_host=static.slots_per_host)

