"""Trains (``systems/transmit.train``): in one transmit round a port starts the packets that
follow its round's departure from the same queue before anything else could start, as many
rounds would one at a time; and the serial pipeline's ranks are fixed as packets reach a
switch (``systems/forward.pipeline_ranks``), so that no rank depends on the rounds."""

import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.config import experiment_from_config
from multiverse_jax.conf.schema import SwitchConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import permutation
from multiverse_jax.systems import forward, transmit
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows


def _experiments():
    """htsim's RoCE (PFC, ACKs in the data FIFOs, serial switches: ACK trains behind PFC
    resumes, at switches and NICs) on a k=4 permutation, an incast with DCQCN, ECN and
    control-class ACKs, and traffic both ways in two priorities."""
    net = htsim.HtsimNetwork(k=4)
    cm = permutation(0, net.n_hosts, 1_000_000).write(Path(tempfile.mkdtemp()) / "p.cm")
    roce = experiment_from_config(htsim.our_config(net, "roce", cm))
    switch = SwitchConfig(buffer_bytes=2_000_000, pfc_xoff_bytes=600_000, pfc_xon_bytes=400_000)
    incast = Experiment(fattree(4, 100.0, 1.0), make_flows(np.arange(1, 9), 0, 400_000, 0), switch=switch)
    # Both ways through every port, in two priorities, ACKs in the control class: trains
    # that a higher class's arrival or a NIC's offer must cut.
    hosts = np.arange(16)
    src, dst = np.concatenate([hosts, hosts]), np.concatenate([(hosts + 5) % 16, (hosts + 11) % 16])
    starts = np.random.default_rng(3).integers(0, 20, 32) * 1_000_000
    mixed = Experiment(fattree(4, 100.0, 1.0), make_flows(src, dst, 200_000, starts, prio=np.arange(32) % 2), switch=switch)
    return [roce, incast, mixed]


def _transmit_with(train_length: int, params, state):
    """A window's transmit with trains of ``train_length`` packets (1: a packet per port and
    round), from the state the systems before it leave, for each experiment of a batch: the
    state after it and the rounds it ran. A new function each time, so traced anew."""
    previous, transmit.TRAIN = transmit.TRAIN, train_length
    try:

        def window(params, state):
            end = state.time_ps + params.window_ps
            for name, system in engine.SYSTEMS:
                if name == "transmit":
                    break
                state = system(params, state, end)
            serving, order, free, upcoming = transmit.window_start(params, state, end)

            def body(carry):
                serving, rounds = carry
                return transmit.serve_round(params, serving, end, order, free, upcoming), rounds + 1

            _, rounds = jax.lax.while_loop(lambda c: c[0].sent, body, (serving, 0))
            return transmit.transmit(params, state, end), rounds

        return jax.jit(jax.vmap(window)).lower(params, state).compile()
    finally:
        transmit.TRAIN = previous


def test_a_train_is_the_rounds_it_replaces_bit_for_bit():
    """Window after window of both runs (states from the engine), transmit with trains
    leaves every array of the state as one packet per round does, in fewer rounds."""
    batch = build_batch(_experiments(), slots_per_host=256)
    with_trains, one_by_one = (_transmit_with(n, batch.params, batch.state) for n in (8, 1))
    state, rounds = batch.state, np.zeros((2, 3), np.int64)
    for _ in range(120):
        got, got_rounds = with_trains(batch.params, state)
        want, want_rounds = one_by_one(batch.params, state)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_array_equal(a, b)
        rounds += np.stack([np.asarray(got_rounds), np.asarray(want_rounds)])
        state = engine.advance(batch.params, state, 3)
    assert np.all(np.asarray(state.error) == 0) and np.all(np.asarray(state.n_packet_hops) > 2000)
    # per experiment: trains, one by one (~1.7x fewer in the first two, where trains form;
    # few in the mixed one, whose trains other classes cut)
    assert np.all(rounds[0, :2] * 3 <= rounds[1, :2] * 2) and np.all(rounds[0] < rounds[1]), rounds


def test_pipeline_ranks_are_the_order_arrivals_leave_a_serial_switch():
    """``forward.pipeline_ranks`` against a NumPy reference, for arrivals at random instants
    (many shared), switches and tie-breaks: packets reaching one switch at one instant
    leave its pipeline in FIFO order, the k-th in round k; within a round, switches in the
    order of their first arrivals at that instant: rank k * (P + 1) + that place."""
    batch = build_batch(_experiments()[:1], slots_per_host=96)
    params, pkts = jax.tree.map(lambda x: x[0], (batch.params, batch.state.packets))
    n_slots, n_ports = params.static.n_slots, params.static.n_ports
    rng = np.random.default_rng(5)
    switch_links = np.nonzero(~np.asarray(params.nodes.node_is_host)[np.asarray(params.links.link_dst_node)])[0]
    switch_links = switch_links[switch_links < n_ports]
    time_ps = 10_000 + rng.integers(0, 6, n_slots) * 1000
    scheduled_ps = time_ps - rng.integers(0, 3, n_slots) * 100
    prior_ps = scheduled_ps - rng.integers(0, 2, n_slots) * 100
    rank = rng.integers(0, 4, n_slots).astype(np.int32)
    port = rng.choice(switch_links, n_slots).astype(np.int32)
    arrives = rng.random(n_slots) < 0.6
    pkts = pkts.replace(
        pkt_time_ps=jnp.asarray(time_ps), pkt_scheduled_ps=jnp.asarray(scheduled_ps), pkt_prior_ps=jnp.asarray(prior_ps),
        pkt_rank=jnp.asarray(rank), pkt_port=jnp.asarray(port),
    )  # fmt: skip
    slot = jnp.arange(n_slots, dtype=jnp.int32)
    got = np.asarray(jax.jit(forward.pipeline_ranks)(params, pkts, slot, jnp.asarray(arrives), jnp.int64(20_000)))

    node = np.asarray(params.links.link_dst_node)[port]
    fifo = sorted(np.nonzero(arrives)[0], key=lambda s: (time_ps[s], scheduled_ps[s], prior_ps[s], rank[s], s))
    place = {}  # slot -> its place among its instant's arrivals
    for s in fifo:
        place[s] = sum(1 for o in place if time_ps[o] == time_ps[s])
    for s in fifo:
        group = [o for o in fifo if time_ps[o] == time_ps[s] and node[o] == node[s]]  # in FIFO order
        expected = group.index(s) * (n_ports + 1) + place[group[0]]
        assert got[s] == expected, (s, got[s], expected)
    assert max(len([o for o in fifo if time_ps[o] == time_ps[s] and node[o] == node[s]]) for s in fifo) > 3
