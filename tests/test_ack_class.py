"""``packet.ack_class``: ACKs as a strict-priority control class (ns-3's HPCC code) or in
their flow's data FIFO, paused by PFC with it (htsim)."""

import numpy as np
import pytest

from conftest import chain, run_small, store_and_forward_ps, wire_sizes
from multiverse_jax.conf.schema import PacketConfig, SimConfig, SwitchConfig
from multiverse_jax.config import experiment_from_config
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.topology import fattree
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload.flows import make_flows

PS = 1_000_000  # ps per µs
CONTROL, DATA = PacketConfig(ack_class="control"), PacketConfig(ack_class="data")
# Three hosts on one switch: h1 and h2 both send to h0 (a 2:1 queue at the switch port to
# h0), while h0 sends one short flow to h1, whose ACKs cross that congested port.
STAR = from_cables("star3", ["h0", "h1", "h2", "s0"], 3, [(0, 3, 100, 1), (1, 3, 100, 1), (2, 3, 100, 1)])
CROSSING = make_flows([1, 2, 0], [0, 0, 1], [400_000, 400_000, 20_000], [0, 0, 0])


@pytest.mark.parametrize("size", [4096, 100_000])
def test_idle_path_closed_form_either_way(size):
    """With no other traffic, an ACK never waits for a data packet: both classes give the
    store-and-forward closed form to the picosecond."""
    topo = chain([100, 40, 100], [1.0, 2.0, 1.0])
    flows = make_flows([0], [1], [size], [0])
    control, data = run_small([Experiment(topo, flows, packet=CONTROL), Experiment(topo, flows, packet=DATA)])
    rx, ack = store_and_forward_ps(wire_sizes(size), [100 * 10**9, 40 * 10**9, 100 * 10**9], [PS, 2 * PS, PS])
    for result in (control, data):
        assert result.ok
        assert result.flows["rx_finish_ps"][0] == rx and result.flows["finish_ps"][0] == ack


def test_data_class_acks_wait_behind_the_queue():
    """h0's flow to h1 is acknowledged over the congested port s0->h0. As control packets
    its ACKs overtake the queue of h1's and h2's data; in the data FIFO they wait behind
    it, so the flow's sender finishes later, by about the queueing delay (the receiver
    side is unchanged: its data path is idle)."""
    control, data = run_small([Experiment(STAR, CROSSING, packet=CONTROL), Experiment(STAR, CROSSING, packet=DATA)])
    assert control.ok and data.ok
    np.testing.assert_array_equal(control.flows["rx_bytes"], data.flows["rx_bytes"])
    short = 2
    assert data.flows["rx_finish_ps"][short] == control.flows["rx_finish_ps"][short]
    # The ACK of the short flow's last packet reaches s0->h0 while the 2:1 queue holds tens
    # of KB: in the FIFO it waits at least (queue / line rate) more than as a control packet.
    wait_ps = data.flows["finish_ps"][short] - control.flows["finish_ps"][short]
    queue_ps = 20_000 * 8 * 10**12 // (100 * 10**9)  # 20 KB at 100 Gb/s: 1.6 µs
    assert wait_ps > queue_ps, (wait_ps, control.port_max_queue_bytes.max())
    # The long flows' ACKs go to h1 and h2 over idle ports, either way.
    assert data.summary["max_queue_bytes"] >= 20_000


def test_pfc_holds_data_class_acks():
    """h1 and h2 send to h3 with a small XOFF, so s0 pauses h1's and h2's NICs; h1 also
    acknowledges a short flow from h0, over its paused NIC and then the idle port to h0.
    As control packets the ACKs leave anyway and the short flow finishes as if alone (but
    for non-preemption); in the data class they wait for each resume, so it finishes later."""
    star4 = from_cables("star4", ["h0", "h1", "h2", "h3", "s0"], 4, [(h, 4, 100, 1) for h in range(4)])
    flows = make_flows([1, 2, 0], [3, 3, 1], [400_000, 400_000, 20_000], [0, 0, 20 * PS])  # mid-incast
    alone = run_small([Experiment(star4, make_flows([0], [1], [20_000], [20 * PS]))])[0]
    switch = SwitchConfig(pfc_xoff_bytes=30_000, pfc_xon_bytes=15_000)
    control, data = run_small([Experiment(star4, flows, switch=switch, packet=p) for p in (CONTROL, DATA)])
    assert control.ok and data.ok
    assert control.summary["pfc_pauses"] > 0 and data.summary["pfc_pauses"] > 0
    # The short flow's data path is idle but for the 64 B ACKs of h1's flow that share s0->h1.
    one_packet_ps = (4096 + 64) * 8 * 10**12 // (100 * 10**9)
    assert data.flows["rx_finish_ps"][2] == control.flows["rx_finish_ps"][2]
    assert 0 <= control.flows["rx_finish_ps"][2] - alone.flows["rx_finish_ps"][0] <= one_packet_ps
    # A control ACK waits at most for the data packet h1's NIC is sending (non-preemptive).
    assert 0 <= control.flows["finish_ps"][2] - alone.flows["finish_ps"][0] <= 2 * one_packet_ps
    assert data.flows["finish_ps"][2] - alone.flows["finish_ps"][0] > 10 * one_packet_ps  # held for pauses


@pytest.mark.parametrize("batching", ["vmap", "map"])
def test_mixed_ack_classes_batch_equals_alone(batching):
    """One batch mixes both ACK classes (a per-experiment value): each equals its run alone,
    bit for bit, at the same shapes."""
    k4 = fattree(4, 100.0, 1.0)
    rng = np.random.default_rng(3)
    exps = []
    for e, packet in enumerate([CONTROL, DATA, CONTROL]):  # four with the star's: SMALL's batch of four
        src = rng.integers(0, 16, 10)
        dst = (src + 1 + rng.integers(0, 15, 10)) % 16
        flows = make_flows(src, dst, rng.integers(5_000, 150_000, 10), 0)
        exps.append(Experiment(k4, flows, packet=packet, switch=SwitchConfig(pfc_xoff_bytes=60_000, pfc_xon_bytes=30_000), sim=SimConfig(seed=e)))
    exps.append(Experiment(STAR, CROSSING, packet=DATA))
    together = run_small(exps, batching=batching)
    for exp, batched in zip(exps, together):
        alone = run_small([exp], batching=batching, batch_size=len(exps))[0]
        assert batched.ok and alone.ok
        for column in ("start_ps", "finish_ps", "rx_finish_ps", "rx_bytes"):
            np.testing.assert_array_equal(batched.flows[column], alone.flows[column])
        assert batched.summary["n_packet_hops"] == alone.summary["n_packet_hops"]
        assert batched.summary["pfc_pauses"] == alone.summary["pfc_pauses"]


def test_config_key():
    assert experiment_from_config({}).packet.ack_class == "control"
    assert experiment_from_config({"packet": {"ack_class": "data"}}).packet.ack_class == "data"
    with pytest.raises(InputError, match=r"packet\.ack_class must be one of control, data, got 'priority'"):
        experiment_from_config({"packet": {"ack_class": "priority"}})
