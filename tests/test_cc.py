"""Congestion control in the engine: convergence and fairness, queues, incast, marking,
CNP pacing, and mixed-algorithm batches (the update rules themselves: test_cc_rules.py)."""

import dataclasses

import numpy as np
import pytest

from conftest import SMALL, run_small
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.conf.schema import DcqcnConfig, HpccConfig, SimConfig, SwitchConfig, TimelyConfig
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.simulate import simulate
from multiverse_jax.ops.marking import red_probability
from multiverse_jax.topology import fattree
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload.flows import make_flows

K4 = fattree(4, 100.0, 1.0)
# h0, h1 -> s0 -> s1 -> h2: two senders share the s0 -> s1 bottleneck (100 Gb/s, 1 us links).
DUMBBELL = from_cables(
    "dumbbell", ["h0", "h1", "h2", "s0", "s1"], 3, [(0, 3, 100, 1), (1, 3, 100, 1), (3, 4, 100, 1), (4, 2, 100, 1)]
)
K_BYTES = 100_000  # DCTCP's marking threshold in the convergence run
# Parameters for two flows on a 9 us RTT (each documented in the README's CC section):
CONVERGENCE = {
    "dcqcn": {},  # the defaults
    "dctcp": {"switch": SwitchConfig(ecn_kmin_bytes=K_BYTES, ecn_kmax_bytes=K_BYTES, ecn_pmax=1.0)},  # step marking at K
    # W_AI = W_init (1 - eta) / N for N = 2 flows (HPCC paper §3.3): 2 Gb/s x T
    "hpcc": {"hpcc": HpccConfig(rate_ai_mbps=2000.0)},
    # T_low / T_high scaled from the paper's 10 Gb/s network to this 9 us RTT, so that the
    # delay thresholds (AIMD), not the gradient, set the operating point: TIMELY's gradient
    # region has a continuum of fixed points (Zhu et al., CoNEXT 2016) and no fairness.
    "timely": {"timely": TimelyConfig(t_low_us=10.0, t_high_us=20.0, min_rtt_us=10.0)},
}


@pytest.fixture(scope="module")
def two_long_flows():
    """Two 8 MB flows into h2 under each CC, run as ONE batch (sampled every 10 us)."""
    flows = make_flows(np.array([0, 1]), np.array([2, 2]), 8_000_000, 0)
    exps = [
        Experiment(DUMBBELL, flows, cc=cc, sim=SimConfig(sample_interval_us=10.0), **kw) for cc, kw in CONVERGENCE.items()
    ]
    return dict(zip(CONVERGENCE, simulate(exps, slots_per_host=256)))


def _goodput_gbps(result, t0_us, t1_us):
    """(2,) each flow's delivered payload rate between two sample times."""
    fs = result.flow_series
    time_us = fs["time_us"].reshape(-1, 2)[:, 0]
    rx = fs["rx_bytes"].reshape(-1, 2)
    i0, i1 = np.searchsorted(time_us, t0_us), np.searchsorted(time_us, t1_us)
    return (rx[i1] - rx[i0]) * 8 / ((time_us[i1] - time_us[i0]) * 1e3)


def _bottleneck_queue(result):
    """(samples,) queue of the s0 -> s1 port over time, and the sample times (us)."""
    ps = result.port_series
    port = np.flatnonzero((DUMBBELL.link_src == 3) & (DUMBBELL.link_dst == 4))[0]
    rows = ps["port"] == port
    return ps["queue_bytes"][rows], ps["time_us"][rows]


@pytest.mark.parametrize("cc", list(CONVERGENCE))
def test_two_flows_converge_to_fair_shares_at_full_utilisation(two_long_flows, cc):
    result = two_long_flows[cc]
    assert result.ok, result.summary
    # After convergence (from 600 us) and while both flows run (until the first ends).
    end_us = np.nanmin(result.flows["finish_us"]) - 20
    goodput = _goodput_gbps(result, 600.0, end_us)
    fair = goodput.sum() / 2
    assert np.all(np.abs(goodput - fair) <= 0.10 * fair), (cc, goodput)
    wire_gbps = goodput.sum() * (4096 + 64) / 4096  # payload rate -> wire rate
    assert wire_gbps >= 0.90 * 100, (cc, goodput)


def test_hpcc_queue_stays_far_below_dctcp_which_oscillates_around_k(two_long_flows):
    hpcc_q, hpcc_t = _bottleneck_queue(two_long_flows["hpcc"])
    dctcp_q, dctcp_t = _bottleneck_queue(two_long_flows["dctcp"])
    hpcc_q, dctcp_q = hpcc_q[hpcc_t > 200], dctcp_q[dctcp_t > 200]  # past the start-up burst
    assert hpcc_q.mean() < 0.2 * dctcp_q.mean(), (hpcc_q.mean(), dctcp_q.mean())
    # DCTCP: the queue hovers around K, above and below it again and again.
    assert 0.5 * K_BYTES < dctcp_q.mean() < 1.5 * K_BYTES, dctcp_q.mean()
    crossings = np.sum(np.diff(np.sign(dctcp_q - K_BYTES)) != 0)
    assert crossings >= 10, crossings


@pytest.mark.parametrize("cc", ["dcqcn", "hpcc", "dctcp", "timely"])
def test_incast_of_8_finishes_every_flow_without_overflow(cc):
    flows = make_flows(np.arange(1, 9), 0, 300_000, 0)
    result = run_mixed([Experiment(K4, flows, cc=cc)])[0]
    assert result.ok, result.summary  # an overflow would be ERROR_BUFFER_OVERFLOW
    assert result.summary["flows_finished"] == 8
    assert result.summary["max_queue_bytes"] <= 2_000_000


def test_red_probability_matches_its_definition():
    queue = np.array([0, 99_999, 100_000, 100_001, 250_000, 400_000, 400_001, 10**7])
    expected = np.where(queue <= 100_000, 0.0, np.where(queue > 400_000, 1.0, 0.2 * (queue - 100_000) / 300_000))
    np.testing.assert_allclose(np.asarray(red_probability(queue, 100_000, 400_000, 0.2)), expected, rtol=1e-12)
    step = np.asarray(red_probability(np.array([K_BYTES, K_BYTES + 1]), K_BYTES, K_BYTES, 1.0))
    np.testing.assert_array_equal(step, [0.0, 1.0])  # DCTCP: mark above K


def test_receiver_sends_at_most_one_cnp_per_flow_per_interval():
    flows = make_flows(np.arange(1, 9), 0, 300_000, 0)
    interval_us = 20.0
    exp = Experiment(K4, flows, cc="dcqcn", dcqcn=DcqcnConfig(cnp_interval_us=interval_us))
    result = run_mixed([exp])[0]
    assert result.ok
    f = result.flows
    assert np.all(f["ecn_marked_packets"] > 0)  # the incast queue is far above Kmin
    assert np.all(f["cnps"] >= 1)
    assert np.all(f["cnps"] <= np.ceil(f["fct_us"] / interval_us) + 1), (f["cnps"], f["fct_us"])


def _mixed_cc_experiments():
    """Experiments that differ in CC, LB, ECN and flows, one compiled batch."""
    rng = np.random.default_rng(3)
    exps = []
    for e, (cc, lb) in enumerate(
        [("none", "ecmp"), ("dcqcn", "spray"), ("dctcp", "flowlet"), ("hpcc", "ecmp"), ("timely", "spray"), ("hpcc", "spray")]
    ):
        n = 8
        src = rng.integers(0, 16, n)
        dst = (src + 1 + rng.integers(0, 15, n)) % 16
        flows = make_flows(src, dst, rng.integers(20_000, 300_000, n), rng.integers(0, 3_000_000, n), prio=rng.integers(0, 2, n))
        switch = SwitchConfig(ecn_kmin_bytes=20_000 + 10_000 * e, ecn_kmax_bytes=200_000, ecn_pmax=0.5, flowlet_gap_us=0.5)
        exps.append(Experiment(K4, flows, cc=cc, lb=lb, switch=switch, sim=SimConfig(seed=e, sample_interval_us=5.0)))
    return exps


# HPCC's telemetry and three data classes: one program for every test of this module on K4.
MIXED_STATIC = dataclasses.replace(SMALL, int_hops=5, n_data_classes=3, lockstep_experiments=0)  # vmap: the whole batch at once
MIXED_BATCH = 6  # experiments per batch (the mixed-CC batch; smaller ones are padded with done copies)


def run_mixed(experiments, batching="auto"):
    """Simulate on K4 at MIXED_STATIC, padded to MIXED_BATCH experiments (one shared program)."""
    return simulate(
        experiments, slots_per_host=SMALL.slots_per_host, static=MIXED_STATIC, batching=batching, batch_size=MIXED_BATCH
    )



@pytest.mark.parametrize("batching", ["vmap", "map"])
def test_mixed_cc_batch_equals_each_experiment_alone(batching):
    """Six experiments mixing every CC (and LB, ECN, priorities) in one compiled batch give
    what each gives alone, bit for bit, time series included. Alone means one experiment
    (and five done copies that never step) at the same padded shapes: float CC state (HPCC's U, DCQCN's alpha) may differ in its
    last bit between differently padded programs (XLA vectorises them differently)."""
    exps = _mixed_cc_experiments()
    together = run_mixed(exps, batching=batching)
    for exp, batched in zip(exps, together):
        alone = run_mixed([exp], batching=batching)[0]
        assert batched.ok and alone.ok, (exp.cc, batched.summary, alone.summary)
        for column in ("start_us", "finish_us", "rx_finish_us", "rx_bytes", "ecn_marked_packets", "cnps"):
            np.testing.assert_array_equal(batched.flows[column], alone.flows[column])
        np.testing.assert_array_equal(batched.port_max_queue_bytes, alone.port_max_queue_bytes)
        for column in ("time_us", "rate_gbps", "window_bytes", "rx_bytes", "tx_bytes", "tx_gbps"):
            np.testing.assert_array_equal(batched.flow_series[column], alone.flow_series[column])
        assert batched.summary["n_packet_hops"] == alone.summary["n_packet_hops"]


def test_mixed_cc_batches_share_one_program():
    """A CC comparison with other constants is the same compiled program (no retrace)."""
    exps = _mixed_cc_experiments()
    first = build_batch(exps, static=MIXED_STATIC, slots_per_host=SMALL.slots_per_host)
    engine.run(first.params, first.state)
    programs = engine.compiled_programs()
    other = [
        dataclasses.replace(e, cc=cc, dcqcn=DcqcnConfig(g=0.01), hpcc=HpccConfig(eta=0.9), switch=SwitchConfig(ecn_pmax=0.5))
        for e, cc in zip(exps, ["hpcc", "timely", "none", "dcqcn", "dctcp", "dctcp"])
    ]
    second = build_batch(other, static=MIXED_STATIC, slots_per_host=SMALL.slots_per_host)
    state, _ = engine.run(second.params, second.state)
    assert engine.compiled_programs() == programs
    assert np.all(np.asarray(state.done)) and np.all(np.asarray(state.error) == 0)


def test_strict_priority_among_data_classes():
    """Three senders into h0, 400 KB each, priorities 0, 1, 2 (0 highest): the port into h0
    serves them in priority order, so they finish in that order, the first about as fast
    as alone; with equal priorities the same flow shares the port and takes longer."""
    src, size = np.array([4, 8, 12]), 400_000
    by_prio = make_flows(src, 0, size, 0, prio=np.array([2, 0, 1]))
    equal = make_flows(src, 0, size, 0)
    alone = make_flows(src[1:2], 0, size, 0)
    r_prio, r_equal, r_alone = run_mixed([Experiment(K4, by_prio), Experiment(K4, equal), Experiment(K4, alone)])
    finish = r_prio.flows["finish_us"]
    assert finish[1] < finish[2] < finish[0], finish  # prio 0 (h8), then 1 (h12), then 2 (h4)
    assert finish[1] <= 1.05 * r_alone.flows["finish_us"][0], (finish, r_alone.flows["finish_us"])
    assert r_equal.flows["finish_us"][1] > 1.3 * finish[1], (finish, r_equal.flows["finish_us"])


def test_a_batch_without_congestion_control_compiles_the_cc_system_out():
    """``Static.congestion_control`` is off where no experiment runs a CC, and the cc system
    is then left out of the step: an experiment without CC gives the same results, bit for
    bit, as in a program that runs the system (SMALL, as every other test's). A batch with a
    CC turns it on, and shapes that leave it off are refused for such a batch."""
    rng = np.random.default_rng(5)
    src = rng.integers(0, 16, 8)
    flows = make_flows(src, (src + 1 + rng.integers(0, 15, 8)) % 16, rng.integers(20_000, 300_000, 8), rng.integers(0, 3_000_000, 8))
    none, dcqcn = (Experiment(K4, flows, cc=cc) for cc in ("none", "dcqcn"))
    assert not build_batch([none], slots_per_host=SMALL.slots_per_host).params.static.congestion_control
    assert build_batch([none, dcqcn], slots_per_host=SMALL.slots_per_host).params.static.congestion_control
    with pytest.raises(InputError, match="congestion_control"):
        build_batch([dcqcn], slots_per_host=SMALL.slots_per_host, static=dataclasses.replace(SMALL, congestion_control=False))
    with_system = run_small([none])[0]
    without = run_small([none], congestion_control=False)[0]
    assert with_system.ok and without.ok
    for column in ("start_us", "finish_us", "rx_finish_us", "rx_bytes", "ecn_marked_packets"):
        np.testing.assert_array_equal(with_system.flows[column], without.flows[column])
    np.testing.assert_array_equal(with_system.port_max_queue_bytes, without.port_max_queue_bytes)
    assert with_system.summary["n_packet_hops"] == without.summary["n_packet_hops"]
