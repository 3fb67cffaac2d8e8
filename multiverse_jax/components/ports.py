"""Ports: the egress queues of switches and NICs (1 + C strict-priority classes: control first, then
data by flow priority).

A port's queue is not a separate buffer: the packets queued at port p are the pool
packets with ``pkt_port == p`` that are not in flight (see ``packets.py``).
"""

from __future__ import annotations

import chex
from flax import struct
import numpy as np

from multiverse_jax.components.padding import pad
from multiverse_jax.components.static import Static
from multiverse_jax.experiment import Experiment
from multiverse_jax.units import NEVER


@struct.dataclass
class PortParams:
    port_buffer_bytes: chex.Array  # (P,) int64 egress buffer; a queue past it is counted (or an error), never dropped
    port_host: chex.Array  # (P,) int32 host whose NIC this port is, or -1 for a switch port
    port_node: chex.Array  # (P,) int32 node (host or switch) the port belongs to, -1 for padding
    port_id: chex.Array  # (P,) int32 the port's own index, what the pool's ``pkt_port`` holds (a view of some of the
    #   ports, ``ops/port_view.py``, keeps each one's)


@struct.dataclass
class PortState:
    port_free_ps: chex.Array  # (P,) int64 when the port finishes its current transmission
    port_max_queue_bytes: chex.Array  # (P,) int64 largest queue seen (bytes, both classes)
    port_tx_bytes: chex.Array  # (P,) int64 wire bytes sent (for utilisation)
    port_last_arrival_ps: chex.Array  # (P,) int64 when the last packet sent reaches the far end (-1: none yet)
    port_rr_flow: chex.Array  # (P,) int32 at a NIC: where its round robin resumes (a flow index; see ops/nic.py)
    # Ties between simultaneous arrivals at a FIFO go, as in an event list, to the event
    # scheduled first; what remains tied (trains of equal packets in step) goes to the
    # older chain of events: a busy period takes the rank of the arrival that began it
    # (at a NIC, the flow's index), a train on the wire (packets that follow each other
    # while the previous is still on it) the rank of the busy period that began it.
    port_busy_rank: chex.Array  # (P,) int32 rank of the port's current (or last) busy period
    port_train_rank: chex.Array  # (P,) int32 rank of the current (or last) train on its link
    port_last_scheduled_ps: chex.Array  # (P,) int64 pkt_scheduled_ps of the last packet it sent (pkt_prior_ps)
    # Overflow of a lossless queue past port_buffer_bytes (switch.overflow), watched at the
    # instants the port's queue is sampled: each departure start and each window end.
    port_overflow_events: chex.Array  # (P,) int32 times the queue went from within the buffer to above it
    port_over_buffer_ps: chex.Array  # (P,) int64 time spent above the buffer, up to port_over_since_ps
    port_over_since_ps: chex.Array  # (P,) int64 while above the buffer: the last sample, up to which
    #   port_over_buffer_ps is counted; NEVER while the queue is within the buffer


UNLIMITED_BYTES = 1 << 62  # NIC egress queues hold only ACKs and are never the bottleneck


def port_params(exp: Experiment, s: Static) -> PortParams:
    """Switch ports get ``switch.buffer_bytes``; NIC ports (and padding) an unlimited buffer."""
    topo = exp.topology
    port_host = np.where(topo.link_src < topo.n_hosts, topo.link_src, -1).astype(np.int32)
    buffer_bytes = np.where(port_host >= 0, UNLIMITED_BYTES, exp.switch.buffer_bytes).astype(np.int64)
    return PortParams(
        port_buffer_bytes=pad(buffer_bytes, (s.n_ports,), UNLIMITED_BYTES),
        port_host=pad(port_host, (s.n_ports,), -1),
        port_node=pad(topo.link_src.astype(np.int32), (s.n_ports,), -1),
        port_id=np.arange(s.n_ports, dtype=np.int32),
    )


def initial_port_state(s: Static) -> PortState:
    """Idle ports: free from time 0, nothing sent, never above their buffer."""
    return PortState(
        port_free_ps=np.zeros(s.n_ports, np.int64),
        port_max_queue_bytes=np.zeros(s.n_ports, np.int64),
        port_tx_bytes=np.zeros(s.n_ports, np.int64),
        port_last_arrival_ps=np.full(s.n_ports, -1, np.int64),
        port_rr_flow=np.zeros(s.n_ports, np.int32),
        port_busy_rank=np.zeros(s.n_ports, np.int32),
        port_train_rank=np.zeros(s.n_ports, np.int32),
        port_last_scheduled_ps=np.zeros(s.n_ports, np.int64),
        port_overflow_events=np.zeros(s.n_ports, np.int32),
        port_over_buffer_ps=np.zeros(s.n_ports, np.int64),
        port_over_since_ps=np.full(s.n_ports, NEVER, np.int64),
    )
