"""Nodes (hosts and switches) and their routing tables; NICs (one per host)."""

from __future__ import annotations

import chex
from flax import struct


@struct.dataclass
class NodeParams:
    node_is_host: chex.Array  # (N,) bool hosts (node h < real host count) vs switches and padding
    route_next_port: chex.Array  # (N, H, W) int32 ECMP egress ports of node v towards host h (-1 pad)
    route_n_next: chex.Array  # (N, H) int32 number of valid entries in route_next_port[v, h]


@struct.dataclass
class NicParams:
    nic_port: chex.Array  # (H,) int32 egress port (directed link) of each host's NIC (0 for padding)
