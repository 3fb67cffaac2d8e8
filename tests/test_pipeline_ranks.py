"""switch.pipeline=serial: the order in which packets leave a switch's pipeline is fixed as
they reach the switch (``systems/forward.pipeline_ranks``), every arrival of an instant
counted, not in each transmit round among the queue heads."""

import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from multiverse_jax.batch import build_batch
from multiverse_jax.config import experiment_from_config
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import permutation
from multiverse_jax.systems import forward


def _roce():
    """htsim's RoCE on a k=4 permutation (serial switches)."""
    net = htsim.HtsimNetwork(k=4)
    cm = permutation(0, net.n_hosts, 1_000_000).write(Path(tempfile.mkdtemp()) / "p.cm")
    return experiment_from_config(htsim.our_config(net, "roce", cm))


def test_pipeline_ranks_are_the_order_arrivals_leave_a_serial_switch():
    """``forward.pipeline_ranks`` against a NumPy reference, for arrivals at random instants
    (many shared), switches and tie-breaks: packets reaching one switch at one instant
    leave its pipeline in FIFO order, the k-th in round k; within a round, switches in the
    order of their first arrivals at that instant: rank k * (P + 1) + that place."""
    batch = build_batch([_roce()], slots_per_host=96)
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
