"""Ports: the egress queues of switches and NICs (1 + C strict-priority classes: control first, then
data by flow priority).

A port's queue is not a separate buffer: the packets queued at port p are the pool
packets with ``pkt_port == p`` that are not in flight (see ``packets.py``).
"""

from __future__ import annotations

import chex
from flax import struct


@struct.dataclass
class PortParams:
    port_buffer_bytes: chex.Array  # (P,) int64 egress buffer; exceeding it is an error, never a drop
    port_host: chex.Array  # (P,) int32 host whose NIC this port is, or -1 for a switch port


@struct.dataclass
class PortState:
    port_free_ps: chex.Array  # (P,) int64 when the port finishes its current transmission
    port_max_queue_bytes: chex.Array  # (P,) int64 largest queue seen (bytes, both classes)
    port_tx_bytes: chex.Array  # (P,) int64 wire bytes sent (for utilisation)
