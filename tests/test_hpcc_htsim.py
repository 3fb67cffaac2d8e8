"""HPCC configured like htsim's hpcc.cpp (the hpcc.* convention keys of ``peers/htsim.our_config``):
the keys' validation, the per-ACK rule against numbers htsim printed, the whole-packet window
gate, and an idle path whose FCTs must be htsim's."""

import copy

import jax
import numpy as np
import pytest

import multiverse_jax  # noqa: F401  (switches on 64-bit JAX)
from multiverse_jax.cc import hpcc
from multiverse_jax.components.cc import whole_packet_allowance
from multiverse_jax.conf.schema import HpccConfig
from multiverse_jax.config import experiment_from_config
from multiverse_jax.errors import InputError
from multiverse_jax.peers import htsim
from multiverse_jax.simulate import simulate
from test_cc_rules import PS_PER_S, US, hops_ack, make_params, make_state, prev_lane

HTSIM_KEYS = {
    "window_update": "ack",
    "int_reference": "first",
    "u_update": "whole_rtt",
    "first_ack": "update",
    "int_queue": "with_packet",
    "window_cap": "none",
    "window_gate": "whole_packet",
    "pacing": "ticks",
}
HTSIM_FLAGS = {
    "hpcc_window_per_ack": True,
    "hpcc_int_first": True,
    "hpcc_u_whole_rtt": True,
    "hpcc_first_update": True,
    "hpcc_int_queue_with_packet": True,
    "hpcc_window_capped": False,
    "hpcc_gate_whole_packet": True,
    "hpcc_pacing_ticks": True,
}
LINE = 100e9
T = 12 * US  # htsim's _T
WIRE = 9064  # one 9000 B packet on the wire


def test_defaults_are_ns3_and_choices_are_checked():
    cfg = HpccConfig()
    assert {k: str(getattr(cfg, k)) for k in HTSIM_KEYS} == {
        "window_update": "round",
        "int_reference": "last",
        "u_update": "ewma",
        "first_ack": "record",
        "int_queue": "behind",
        "window_cap": "line_rate",
        "window_gate": "open",
        "pacing": "rate",
    }
    assert {k: str(getattr(HpccConfig(**HTSIM_KEYS), k)) for k in HTSIM_KEYS} == HTSIM_KEYS
    for key in HTSIM_KEYS:
        with pytest.raises(InputError, match=f"hpcc.{key} must be one of"):
            HpccConfig(**{key: "bogus"})
    assert {k: htsim.our_config(htsim.HtsimNetwork(), "hpcc", "x.cm")["hpcc"][k] for k in HTSIM_KEYS} == HTSIM_KEYS


hpcc_on_ack = jax.jit(hpcc.on_ack)


def test_per_ack_rule_gives_htsims_windows():
    """htsim's CWND lines of a lone flow (uncongested, HPCCsrc 1): 150000 -> 159000 on the
    first ACK (U = eta: W + W_AI), 168000 on the next (U only moves once tau reaches T; the
    window, not W_c, grows), and 303000 -> 280447 once tau = T with the port at line rate
    and one packet queued (u = 1 + 9064 * 8 / (B T))."""
    flags = {**HTSIM_FLAGS, "hpcc_base_rtt_ps": T, "hpcc_w_ai_bytes": 9000.0, "hpcc_min_rate_bps": 1e3}
    cp, _ = make_params(**flags)
    first = [(1, 0, 0, WIRE, LINE), (-1, 0, 0, 0, LINE), (-1, 0, 0, 0, LINE)]
    soon = [(1, 725_120, WIRE, WIRE, LINE), (-1, 0, 0, 0, LINE), (-1, 0, 0, 0, LINE)]
    later = [(1, T, 150_000, WIRE, LINE), (-1, 0, 0, 0, LINE), (-1, 0, 0, 0, LINE)]
    started = {**prev_lane([h[:4] for h in first]), "flow_has_int": True, "flow_inflight_u": 0.95}
    lanes = [
        {"flow_window_bytes": 150_000.0, "flow_ref_window_bytes": 150_000.0},  # first ACK
        {**started, "flow_window_bytes": 159_000.0, "flow_ref_window_bytes": 159_000.0, "flow_round_end_seq": 20},
        {**started, "flow_window_bytes": 303_000.0, "flow_ref_window_bytes": 100_000.0, "flow_round_end_seq": 40},
    ]
    st = make_state(lanes, "hpcc")
    ev = hops_ack([first, soon, later], acked_packets=[1, 2, 18, 0, 0, 0], sent_packets=[20, 21, 40, 0, 0, 0])
    host = jax.device_get(hpcc_on_ack(cp, st, ev))
    assert list(host.flow_window_bytes[:3]) == [159_000, 168_000, 280_447]
    assert host.hpcc.flow_inflight_u[0] == 0.95 and host.hpcc.flow_inflight_u[1] == 0.95
    assert host.hpcc.flow_inflight_u[2] == pytest.approx(1 + WIRE * 8 / (LINE * T / PS_PER_S))
    assert host.flow_rate_bps[2] == pytest.approx(280_447 * 8 / (T / PS_PER_S))  # above line rate: no cap
    # the first ACK's telemetry stays the reference
    assert list(host.hpcc.flow_int_ts_ps[1]) == [0, 0, 0] and list(host.hpcc.flow_int_ts_ps[0]) == [0, 0, 0]
    assert host.hpcc.flow_int_tx_bytes[2, 0] == 0
    # ns-3's rules on the same ACKs: the first only records, the others start from W_c
    cp_ns3, _ = make_params(hpcc_base_rtt_ps=T, hpcc_w_ai_bytes=9000.0, hpcc_min_rate_bps=1e3)
    ns3 = jax.device_get(hpcc_on_ack(cp_ns3, st, ev))
    assert ns3.flow_window_bytes[0] == 150_000 and ns3.flow_window_bytes[1] != 168_000


def test_whole_packet_gate():
    """sent < allowance iff sent + payload <= window (htsim: cwnd >= flightsize + mss)."""
    window, payload = np.array([27_000.0, 26_999.0, 9_000.0]), 9000
    allow = whole_packet_allowance(window, payload)
    for sent in (0, 9000, 18_000, 27_000):
        assert list(sent < allow) == list(sent + payload <= window), sent


def test_idle_path_fcts_are_htsims(tmp_path):
    """A lone flow on an idle path, as htsim_hpcc printed it (uncongested scenario: h4 -> h5,
    1.8 MB, under a ToR, finished at 156.25606 us; h0 -> h15, 900 kB across the core, at
    93.24416 us): within 1 % with htsim's conventions; ns-3's are 4-16 % off."""
    cm = tmp_path / "idle.cm"
    cm.write_text("Nodes 16\nConnections 2\n0->15 id 1 start 0 size 900000\n4->5 id 2 start 0 size 1800000\n")
    config = htsim.our_config(htsim.HtsimNetwork(), "hpcc", cm)
    config["sim"]["sample_interval_us"] = 0.0
    ns3 = copy.deepcopy(config)
    for key in HTSIM_KEYS:
        del ns3["hpcc"][key]
    ours, plain = simulate([experiment_from_config(config), experiment_from_config(ns3)])
    theirs = np.array([93_244_160, 156_256_060])
    error = (np.asarray(ours.flows["fct_ps"]) - theirs) / theirs
    assert np.all(np.abs(error) < 0.01), error
    assert np.all(np.abs((np.asarray(plain.flows["fct_ps"]) - theirs) / theirs) > 0.03)


def test_a_polling_sender_polls_on_its_grid_and_hands_packets_to_its_nic():
    """htsim's HPCCSrc::doNextEvent (ops/polls.py), incast 4 x 2 MB, seed 1, HPCCsrc 0: 16
    packets handed over at line rate, then blocked by the window; it polls every 725120 ps in
    vain until the first ACK at 16.73216 us sets cwnd 159000, and the 17th packet is handed over
    at the poll 24 x 725120 = 17.40288 us (not at the ACK). The next poll is one new gap later
    (htsim rounds _packet_spacing down: 684075 ps) whether or not the NIC is free. After a cut of
    the rate the poll already scheduled does not count, and the next is a new gap after the last
    one that did."""
    from types import SimpleNamespace

    from multiverse_jax.components.experiment import CC_HPCC
    from multiverse_jax.ops import cc as ops_cc
    from multiverse_jax.ops import polls

    cp, _ = make_params(**HTSIM_FLAGS, hpcc_base_rtt_ps=T, hpcc_w_ai_bytes=9000.0, hpcc_min_rate_bps=1e3)
    params = SimpleNamespace(cc_kind=np.int32(CC_HPCC), payload_bytes=np.int64(9000), header_bytes=np.int64(64), cc=cp)
    gap = 725_120
    # lane 0 blocked (16 handed over, none acked, window 150000); the others may send (window 300000)
    lanes = [{"flow_window_bytes": 150_000.0, "flow_rate_bps": LINE}] + [{"flow_window_bytes": 300_000.0, "flow_rate_bps": LINE}] * 5
    st = make_state(lanes, "hpcc")
    acked, every = np.zeros(6, np.int32), np.ones(6, bool)
    p = polls.Polls(np.full(6, 16, np.int32), np.full(6, 15 * gap), np.full(6, 16 * gap), np.zeros((6, 16), np.int64))
    p = polls.poll(params, st, acked, p, p.next_poll_ps, every)
    assert p.admitted.tolist() == [16, 17, 17, 17, 17, 17] and int(p.admit_ps[1, 0]) == 16 * gap
    ack_ps = 16_732_160
    p = jax.device_get(polls.skip_blocked(params, st, acked, p, np.full(6, ack_ps), every))
    assert int(p.next_poll_ps[0]) == 24 * gap == 17_402_880 and int(p.last_poll_ps[0]) == 23 * gap
    assert int(p.next_poll_ps[1]) == 17 * gap  # a flow that handed a packet over is not skipped
    new_rate = np.asarray(hpcc_on_ack(cp, st, hops_ack([[(1, 0, 0, WIRE, LINE)] + [(-1, 0, 0, 0, LINE)] * 2] * 6)).flow_rate_bps)
    assert float(new_rate[0]) == pytest.approx(159_000 * 8.0 * PS_PER_S / T, rel=1e-14)
    assert int(ops_cc.poll_gap_ps(new_rate[0], float(WIRE))) == 684_075
    rated = st.replace(flow_rate_bps=new_rate, flow_window_bytes=np.full(6, 159_000.0))
    p = jax.device_get(polls.poll(params, rated, np.ones(6, np.int32), p, p.next_poll_ps, every))
    assert int(p.admitted[0]) == 17 and int(p.admit_ps[0, 16 % 16]) == 17_402_880
    assert int(p.next_poll_ps[0]) == 17_402_880 + 684_075
    # a slower rate: the poll scheduled at the old gap does not count
    slow = rated.replace(flow_rate_bps=new_rate / 2)
    q = jax.device_get(polls.poll(params, slow, np.ones(6, np.int32), p, p.next_poll_ps, every))
    assert int(q.admitted[0]) == 17 and int(q.last_poll_ps[0]) == 17_402_880
    assert int(q.next_poll_ps[0]) == 17_402_880 + int(ops_cc.poll_gap_ps(new_rate[0] / 2, float(WIRE)))


@pytest.mark.slow  # two compiles of a single step (11 s); test_ring_step_fcts_are_htsims covers it at the FCT level in CI
def test_simultaneous_arrivals_pass_a_switch_one_at_a_time(tmp_path):
    """htsim's FatTreeSwitch passes every packet through one CallbackPipe, which schedules its
    next packet only when the previous one leaves it: of two packets reaching a switch at the same
    instant, the second's egress events come after every switch's first (switch.pipeline=serial).
    ring8-8MiB-s0, htsim_hpcc: flows 1 (h2) and 3 (h3) reach tor1 and flow 5 (h0) tor0 at
    1.72512 us; flow 3 is tor1's second, so at agg0->core0 flow 5's first packet leaves first
    (4.17536 us) and flow 3's after it (4.90048 us); ordered by flow alone, 3 went first."""
    from multiverse_jax.peers.trace import our_hops

    cm = tmp_path / "ring.cm"
    cm.write_text(
        "Nodes 16\nConnections 3\n2->11 id 1 start 0 size 18000\n3->10 id 3 start 0 size 18000\n0->4 id 5 start 0 size 18000\n"
    )
    routes = tmp_path / "routes.csv"
    routes.write_text(
        "id,kind,path\n"
        "1,data,h2 tor1 agg1 core1 agg5 tor5 h11\n1,ack,h11 tor5 agg5 core1 agg1 tor1 h2\n"
        "3,data,h3 tor1 agg0 core0 agg4 tor5 h10\n3,ack,h10 tor5 agg4 core2 agg0 tor1 h3\n"
        "5,data,h0 tor0 agg0 core0 agg2 tor2 h4\n5,ack,h4 tor2 agg3 core1 agg1 tor0 h0\n"
    )
    config = htsim.our_config(htsim.HtsimNetwork(), "hpcc", cm, routes)
    assert config["switch"]["pipeline"] == "serial"
    hops = our_hops(experiment_from_config(config), slots_per_host=64)
    assert hops[("agg0->core0", 5, False, 0)] == 4_175_360
    assert hops[("agg0->core0", 3, False, 0)] == 4_900_480
    config["switch"]["pipeline"] = "parallel"
    hops = our_hops(experiment_from_config(config), slots_per_host=64)
    assert hops[("agg0->core0", 3, False, 0)] == 4_175_360


RING_STEP1_CM = "Nodes 16\nConnections 8\n" + "".join(
    f"{a}->{b} id {i} start 0 size 1053000\n" for i, (a, b) in enumerate([(2, 11), (11, 3), (3, 10), (10, 0), (0, 4), (4, 7), (7, 5), (5, 2)], 1)
)
RING_STEP1_ROUTES = """id,kind,path
1,data,h2 tor1 agg1 core1 agg5 tor5 h11
1,ack,h11 tor5 agg5 core1 agg1 tor1 h2
2,data,h11 tor5 agg4 core0 agg0 tor1 h3
2,ack,h3 tor1 agg1 core3 agg5 tor5 h11
3,data,h3 tor1 agg0 core0 agg4 tor5 h10
3,ack,h10 tor5 agg4 core2 agg0 tor1 h3
4,data,h10 tor5 agg5 core1 agg1 tor0 h0
4,ack,h0 tor0 agg1 core1 agg5 tor5 h10
5,data,h0 tor0 agg0 core0 agg2 tor2 h4
5,ack,h4 tor2 agg3 core1 agg1 tor0 h0
6,data,h4 tor2 agg2 tor3 h7
6,ack,h7 tor3 agg3 tor2 h4
7,data,h7 tor3 agg3 tor2 h5
7,ack,h5 tor2 agg2 tor3 h7
8,data,h5 tor2 agg2 core0 agg0 tor1 h2
8,ack,h2 tor1 agg1 core1 agg3 tor2 h5
"""


def test_a_link_delivers_in_the_order_its_arrivals_were_scheduled(tmp_path):
    """htsim's Pipe schedules a packet's arrival only when the one before it on the link
    arrives, so of two arrivals scheduled at the same instant the one whose scheduling event was
    itself scheduled first goes first (``pkt_prior_ps``, switch.pipeline=serial). ring8-8MiB-s0,
    htsim_hpcc, the first step's 8 flows: flow 4's 5th ACK (after an ACK that left tor0 alone,
    fresh) and flow 8's 2nd (behind flow 2's ACK on tor1->agg1, a train) reach agg1 together;
    htsim sends flow 4's on to core1 first (15.26656 us), then flow 8's (15.27168 us)."""
    from multiverse_jax.peers.trace import our_hops

    cm, routes = tmp_path / "ring.cm", tmp_path / "routes.csv"
    cm.write_text(RING_STEP1_CM)
    routes.write_text(RING_STEP1_ROUTES)
    config = htsim.our_config(htsim.HtsimNetwork(), "hpcc", cm, routes)
    hops = our_hops(experiment_from_config(config), slots_per_host=64, max_windows=17)
    assert hops[("agg1->core1", 4, True, 4)] == 15_266_560
    assert hops[("agg1->core1", 8, True, 1)] == 15_271_680


def test_ring_step_fcts_are_htsims(tmp_path):
    """The first step of ring8-8MiB-s0 (8 flows of 1 MB, 117 packets each, htsim's routes),
    configured like htsim: its FCTs as htsim_hpcc printed them, within 0.02 % each (flows 3
    and 5 share agg0->core0 from time 0; before the polls handed packets to the NIC queue and
    switches passed simultaneous arrivals one at a time, they were 16 % and 13 % off). In the
    same batch, the same input with parallel switches (compiled with the serial ranking and
    the third sort key, which it must not use) runs as it does alone, and differently."""
    cm, routes = tmp_path / "ring.cm", tmp_path / "routes.csv"
    cm.write_text(RING_STEP1_CM)
    routes.write_text(RING_STEP1_ROUTES)
    config = htsim.our_config(htsim.HtsimNetwork(), "hpcc", cm, routes)
    config["sim"]["sample_interval_us"] = 0.0
    serial = experiment_from_config(config)
    config["switch"]["pipeline"] = "parallel"
    parallel = experiment_from_config(config)
    ours, together = simulate([serial, parallel], slots_per_host=64)
    theirs = np.array([110_648_874, 155_769_056, 217_571_419, 110_742_623, 195_806_303, 150_624_223, 116_330_657, 220_349_149])
    error = (np.asarray(ours.flows["fct_ps"]) - theirs) / theirs
    assert np.all(np.abs(error) < 2e-4), error
    alone = simulate([parallel], slots_per_host=64)[0]
    np.testing.assert_array_equal(together.flows["finish_ps"], alone.flows["finish_ps"])
    assert not np.array_equal(together.flows["finish_ps"], ours.flows["finish_ps"])
