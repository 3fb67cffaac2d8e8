"""Nodes (hosts and switches) and their routing tables; NICs (one per host)."""

from __future__ import annotations

import chex
from flax import struct
import numpy as np

from multiverse_jax.components.padding import pad
from multiverse_jax.components.static import Static
from multiverse_jax.experiment import Experiment


@struct.dataclass
class NodeParams:
    node_is_host: chex.Array  # (N,) bool hosts (node h < real host count) vs switches and padding
    route_next_port: chex.Array  # (N, H, W) int32 ECMP egress ports of node v towards host h (-1 pad)
    route_n_next: chex.Array  # (N, H) int32 number of valid entries in route_next_port[v, h]


@struct.dataclass
class NicParams:
    nic_port: chex.Array  # (H,) int32 egress port (directed link) of each host's NIC (0 for padding)


def node_params(exp: Experiment, s: Static) -> NodeParams:
    """Which nodes are hosts, and the experiment's ECMP table padded to (N, H, W)."""
    topo, routing = exp.topology, exp.routing
    return NodeParams(
        node_is_host=pad(np.arange(topo.n_nodes) < topo.n_hosts, (s.n_nodes,), False),
        route_next_port=pad(routing.next_port, (s.n_nodes, s.n_hosts, s.route_width), -1),
        route_n_next=pad(routing.n_next, (s.n_nodes, s.n_hosts), 0),
    )


def nic_params(exp: Experiment, s: Static) -> NicParams:
    return NicParams(nic_port=pad(exp.topology.host_port(), (s.n_hosts,), 0))
