"""Side by side with htsim (``multiverse_jax/peers``): its output and route prints parsed
from canned snippets, the scenarios' connection matrices, the config of htsim's network,
and -- when htsim can be built here (g++, make, patch and ../shared/peers) -- one
uncongested scenario run in both, which must agree to the picosecond per flow and equal
the store-and-forward closed form."""

import numpy as np
import pytest

from conftest import store_and_forward_ps, wire_sizes
from multiverse_jax.config import load_config
from multiverse_jax.peers import htsim, trace
from multiverse_jax.peers.scenarios import (
    MTU_BYTES,
    combine,
    elephant_suite,
    quick_suite,
    ring_allreduce,
    uncongested,
)
from multiverse_jax.simulate import simulate
from multiverse_jax.topology import fattree
from multiverse_jax.workload.htsim_cm import load_cm
from multiverse_jax.workload.routes import load_routes

QUEUE = "queue lossless output(100000Mb/s,900000bytes)"
# What the patched htsim_roce printed for flow 1 (h0 -> h15) of the uncongested scenario,
# with the lines around it that the parser must skip (an HPCC CWND line among them) and
# htsim's clock ticks ('.' and '|', every 50 ms of simulated time) before a line.
CANNED = f"""Nodes: 16 Connections: 5 Triggers: 0 Failures: 0
startflow Roce_0_15_1 at 0
Starting simulation
nexthop 1 15 {QUEUE}LS0->US0(0)
nexthop 2 5 {QUEUE}LS2->DST5(0)
nexthop 1 15 {QUEUE}US0->CS0(0)
nexthop 2 4 {QUEUE}LS2->DST4(0)
nexthop 1 15 {QUEUE}CS0->US6(0)
nexthop 1 15 {QUEUE}US6->LS_7(0)
nexthop 1 15 {QUEUE}LS7->DST15(0)
nexthop 1 0 {QUEUE}LS7->US6(0)
nexthop 1 0 {QUEUE}US6->CS2(0)
nexthop 1 0 {QUEUE}CS2->US0(0)
nexthop 1 0 {QUEUE}US0->LS_0(0)
nexthop 1 0 {QUEUE}LS0->DST0(0)
nexthop 1 0 {QUEUE}LS0->DST0(0)
CWND2 258000 ACKNO 108000 at 28.7085 src HPCCsrc 0
..|.Flow Roce_0_15_1 396 finished at 88.16832 total bytes 900000
Trigger 1 fired, 1 targets
.startflow Roce_4_5_2 at 88.16832
Flow HPCC_4_5_2 finished at 149.759360000001 total bytes 1800000
.Done
""".splitlines()


def test_parse_output_reads_starts_finishes_and_hops():
    start, finish, hops = htsim.parse_output(CANNED)
    assert start == {1: 0, 2: 88_168_320}
    assert finish == {1: 88_168_320, 2: 149_759_360}  # RoCE lines carry an object id, HPCC's do not
    assert hops[(1, 15)] == {"tor0": "agg0", "agg0": "core0", "core0": "agg6", "agg6": "tor7", "tor7": "h15"}
    assert hops[(1, 0)] == {"tor7": "agg6", "agg6": "core2", "core2": "agg0", "agg0": "tor0", "tor0": "h0"}
    assert hops[(2, 5)] == {"tor2": "h5"} and hops[(2, 4)] == {"tor2": "h4"}


@pytest.mark.parametrize(
    "line,message",
    [
        (f"nexthop 1 15 {QUEUE}LS0->US1(0)", "left tor0 both to agg0 and to agg1"),
        (f"nexthop 1 15 {QUEUE}LS0=>US1(0)", "unexpected egress queue name"),
        ("Flow Roce_0_15 396 finished at 88.16832 total bytes 900000", "carries no flow id"),
        ("startflow Roce_0_15_1 at soon", "bad time 'soon'"),
    ],
)
def test_parse_output_errors_name_the_line(line, message):
    with pytest.raises(htsim.HtsimOutputError, match=message) as info:
        htsim.parse_output(CANNED[:4] + [line])
    assert "line 5" in str(info.value)


def test_routes_csv_chains_hops_into_pinned_paths(tmp_path):
    _, _, hops = htsim.parse_output(CANNED)
    cm = tmp_path / "two.cm"
    cm.write_text(
        "Nodes 16\nConnections 3\n0->15 id 1 start 0 size 900000\n4->5 id 2 start 0 size 9000\n1->2 id 3 start 0 size 9000\n"
    )
    flows = load_cm(cm)
    text = htsim.routes_csv(hops, flows, hosts_per_tor=2)
    assert text.splitlines() == [
        "id,kind,path",
        "1,data,h0 tor0 agg0 core0 agg6 tor7 h15",
        "1,ack,h15 tor7 agg6 core2 agg0 tor0 h0",  # its own ECMP path, not the reverse
        "2,data,h4 tor2 h5",
        "2,ack,h5 tor2 h4",
    ]  # flow 3 was never sent: no row, it stays on ECMP
    routes_path = tmp_path / "routes.csv"
    routes_path.write_text(text)
    topology = fattree(4, 100.0, 1.0)
    pinned = load_routes(routes_path, topology, flows)  # every hop is a link of our k=4 fat-tree
    data_path = [topology.node_names[topology.link_dst[p]] for p in pinned.data_ports[0] if p >= 0]
    assert data_path == ["tor0", "agg0", "core0", "agg6", "tor7", "h15"]
    del hops[(1, 15)]["core0"]
    with pytest.raises(htsim.HtsimOutputError, match="flow 1 data: htsim printed no next hop from core0"):
        htsim.routes_csv(hops, flows, hosts_per_tor=2)


@pytest.mark.parametrize("mode", ["roce", "hpcc"])
def test_our_config_is_htsims_network(tmp_path, mode):
    network = htsim.HtsimNetwork(queue_packets=100, pfc_low_packets=50, pfc_high_packets=70)
    c = load_config(htsim.our_config(network, mode, tmp_path / "x.cm"))
    assert (c.topology.k, c.link.rate_gbps, c.link.delay_us) == (4, 100.0, 1.0)
    assert (c.packet.payload_bytes, c.packet.header_bytes, c.packet.ack_bytes) == (9000, 64, 64)
    assert (c.switch.pfc_xoff_bytes, c.switch.pfc_xon_bytes) == (630_000, 450_000)  # 70 and 50 packets of -mtu
    assert c.switch.buffer_bytes == 900_000 and c.switch.overflow == "report"  # -q 100, lossless: only reported
    assert c.packet.ack_class == "data" and c.switch.pfc_release == "sent"  # ACKs with data; completedService
    assert str(c.cc) == {"roce": "none", "hpcc": "hpcc"}[mode]
    w_ai_bytes = c.hpcc.rate_ai_mbps * 1e6 * c.hpcc.base_rtt_us * 1e-6 / 8
    assert (c.hpcc.base_rtt_us, c.hpcc.eta, c.hpcc.max_stage, w_ai_bytes) == (12.0, 0.95, 5, 9000.0)
    flags = network.flags()
    assert flags[flags.index("-q") + 1] == "100" and flags[flags.index("-pfc_thresholds") + 1 :][:2] == ["50", "70"]


def test_scenarios_are_valid_connection_matrices(tmp_path):
    for scenario in quick_suite(16) + elephant_suite(16):
        flows = load_cm(scenario.write(tmp_path / f"{scenario.name}.cm"))
        assert len(flows) == len(scenario.flows) and flows.n_hosts == 16
        assert np.all(flows.size_bytes % MTU_BYTES == 0)  # htsim sends whole packets only
        assert np.all((flows.start_ps == 0) | (flows.trigger >= 0))  # htsim starts untriggered flows at 0
    assert quick_suite(16) == quick_suite(16)  # seeded: every run draws the same


def test_ring_steps_wait_for_the_previous_ranks_step(tmp_path):
    ring = [3, 9, 12]
    flows = load_cm(ring_allreduce("r", 16, ring, 27 * MTU_BYTES).write(tmp_path / "r.cm"))
    n, steps = 3, 4
    assert len(flows) == n * steps and np.all(flows.size_bytes == 9 * MTU_BYTES)
    for step in range(steps):
        for rank in range(n):
            f = step * n + rank
            assert (flows.src[f], flows.dst[f]) == (ring[rank], ring[(rank + 1) % n])
            if step == 0:
                assert flows.trigger[f] < 0
            else:  # the flow that fires its trigger is rank - 1's previous step
                (firing,) = np.flatnonzero(flows.send_done_trigger == flows.trigger[f])
                assert firing == (step - 1) * n + (rank - 1) % n
    both = combine("two", [ring_allreduce("a", 16, [0, 1], 2 * MTU_BYTES), ring_allreduce("b", 16, [2, 3], 2 * MTU_BYTES)])
    assert len(load_cm(both.write(tmp_path / "two.cm")).triggers) == 4  # 2 per ring, ids kept apart


def test_uncongested_roce_matches_htsim_to_the_picosecond(tmp_path):
    """Flows that share no link: htsim, ours (on htsim's routes) and the closed form agree."""
    try:
        build = htsim.build_htsim()
    except htsim.PeerUnavailable as reason:
        pytest.skip(f"htsim not available: {reason}")
    network = htsim.HtsimNetwork()
    scenario = uncongested(network.n_hosts, 20 * MTU_BYTES)
    cm_path = scenario.write(tmp_path / "uncongested.cm")
    run = htsim.run_htsim(build, "roce", cm_path, network, tmp_path)
    experiment = htsim.pinned_experiment(run, network, "roce", cm_path, tmp_path)
    (result,) = simulate([experiment])
    flows = htsim.compare(result.flows, run)
    np.testing.assert_array_equal(flows["ours_start_ps"], flows["htsim_start_ps"])
    np.testing.assert_array_equal(flows["ours_fct_ps"], flows["htsim_fct_ps"])
    assert np.all(flows["fct_error"] == 0.0)
    expected = []
    for f in scenario.flows:
        hops = 2 if f.src // 2 == f.dst // 2 else 6  # same ToR, or across the core
        wire = wire_sizes(f.size_bytes, payload=MTU_BYTES)
        expected.append(store_and_forward_ps(wire, [100 * 10**9] * hops, [10**6] * hops)[1])
    np.testing.assert_array_equal(flows["htsim_fct_ps"], expected)


def test_hpcc_incast_matches_htsim_flow_by_flow(tmp_path):
    """HPCC configured like htsim, 8 senders of 1 MB into one host (incast8x1MB-s0, htsim's
    routes): every FCT within 0.01 % of htsim_hpcc's, and htsim's output moves by more than
    that when its links are 10 ppm slower (so the agreement is not one of insensitivity)."""
    try:
        build = htsim.build_htsim()
    except htsim.PeerUnavailable as reason:
        pytest.skip(f"htsim not available: {reason}")
    network = htsim.HtsimNetwork()
    scenario = next(s for s in quick_suite(network.n_hosts) if s.name == "incast8x1MB-s0")
    cm_path = scenario.write(tmp_path / "incast.cm")
    run = htsim.run_htsim(build, "hpcc", cm_path, network, tmp_path)
    experiment = htsim.pinned_experiment(run, network, "hpcc", cm_path, tmp_path)
    (result,) = simulate([experiment])
    flows = htsim.compare(result.flows, run)
    assert len(flows["fct_error"]) == 8 and np.all(np.abs(flows["fct_error"]) < 1e-4), flows["fct_error"]
    slower = tmp_path / "slower"
    slower.mkdir()
    other = htsim.run_htsim(build, "hpcc", cm_path, htsim.HtsimNetwork(rate_gbps=99.999), slower)
    moved = [abs(other.finish_ps[i] - run.finish_ps[i]) / (run.finish_ps[i] - run.start_ps[i]) for i in run.finish_ps]
    assert max(moved) > 1e-3


def test_trace_parsing_names_ports_and_packets():
    """htsim's departure lines become hops in our names: data by its first byte, an ACK by
    the bytes it acknowledges; other lines are skipped."""
    lines = [
        "dep nic SRC6->LS3(0) 2 19 9001 1450240\n",
        "..|dep sw US2->LS_3(0) 4 19 1 8350720\n",
        "dep nic SRC7->LS3(0) 2 20 18000 3000000\n",
        "Flow Roce_6_7_2 396 finished at 12.5 total bytes 18000\n",
    ]
    assert trace.htsim_hops(lines, "roce") == {
        ("h6->tor3", 2, False, 1): 1450240,
        ("agg2->tor3", 4, False, 0): 8350720,
        ("h7->tor3", 2, True, 1): 3000000,
    }
    assert trace.divergences({("a->b", 1, False, 0): 5, ("a->b", 1, False, 1): 9}, {("a->b", 1, False, 0): 5, ("a->b", 1, False, 1): 7}) == [
        (7, ("a->b", 1, False, 1), 9, 7)
    ]


@pytest.mark.slow  # builds a second patched htsim (about a minute): CI skips it
@pytest.mark.parametrize("name", ["perm1MB-s0", "incast8x1MB-s0"])
def test_roce_traces_cross_the_same_hops(tmp_path, name):
    """htsim and we move the same packets over the same ports, and most of them at the
    same picosecond (where not, two packets that met at a port at the same instant were
    served in the other order: the README's "Simultaneous events")."""
    try:
        build = trace.build_trace()
    except htsim.PeerUnavailable as reason:
        pytest.skip(f"htsim not available: {reason}")
    network = htsim.HtsimNetwork()
    scenario = next(s for s in quick_suite(network.n_hosts) if s.name == name)
    cm_path = scenario.write(tmp_path / f"{name}.cm")
    run = htsim.run_htsim(build, "roce", cm_path, network, tmp_path)
    with open(tmp_path / f"{name}_htsim_roce.out") as lines:
        theirs = trace.htsim_hops(lines, "roce", network.mtu_bytes)
    ours = trace.our_hops(htsim.pinned_experiment(run, network, "roce", cm_path, tmp_path))
    assert theirs.keys() == ours.keys() and len(theirs) > 0
    assert len(trace.divergences(theirs, ours)) < len(theirs) // 2


def test_unbuildable_htsim_says_why(tmp_path, monkeypatch):
    with pytest.raises(htsim.PeerUnavailable, match=f"no htsim build script at {tmp_path}"):
        htsim.build_htsim(peers_dir=tmp_path)
    (tmp_path / "build-htsim").write_text("#!/bin/sh\n")
    monkeypatch.setattr(htsim.shutil, "which", lambda tool: None if tool == "g++" else "/usr/bin/" + tool)
    with pytest.raises(htsim.PeerUnavailable, match="g\\+\\+ not found"):
        htsim.build_htsim(peers_dir=tmp_path)
