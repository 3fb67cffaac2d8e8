"""Packets: a fixed pool of slots per experiment, owned by hosts.

Host h owns slots h, h + H, h + 2H, ... (H hosts, S slots each: slot c H + h is host h's
column c), and a host takes its lowest free column first. So while no host holds more
than c packets, every packet is in the pool's first c H slots, whatever its size: the
step runs on that prefix (``ops/pool.py``), and its cost follows the packets, not the
pool. A data packet takes a slot of its sender when the NIC
puts it on the wire; at the receiver the same slot becomes its ACK, which frees the slot
when it reaches the sender. So a host can have at most S unacknowledged packets in the
network; more is an error (``ERROR_POOL_FULL``), never a silent stall.

A packet is either queued at egress port ``pkt_port`` (available since ``pkt_time_ps``,
its arrival there) or in flight on link ``pkt_port`` (arriving at the far end, last bit
included, at ``pkt_time_ps``).
"""

from __future__ import annotations

import chex
from flax import struct
import numpy as np

from multiverse_jax.components.static import Static


@struct.dataclass
class PacketState:
    pkt_valid: chex.Array  # (S_total,) bool slot holds a packet
    pkt_is_ack: chex.Array  # (S_total,) bool control class (ACK) instead of data
    pkt_flow: chex.Array  # (S_total,) int32 flow the packet belongs to
    pkt_seq: chex.Array  # (S_total,) int32 packet index within its flow
    pkt_bytes: chex.Array  # (S_total,) int32 wire bytes (payload + header, or the ACK size)
    pkt_port: chex.Array  # (S_total,) int32 egress port where it is queued, or link it is on
    pkt_in_flight: chex.Array  # (S_total,) bool on the wire (True) or queued (False)
    pkt_time_ps: chex.Array  # (S_total,) int64 arrival at the far end (in flight) or at the port (queued)
    pkt_scheduled_ps: chex.Array  # (S_total,) int64 when its arrival at pkt_time_ps became known: the later of
    #   its last bit leaving the previous port and the previous packet's arrival over that link (a
    #   discrete-event simulator schedules a link's deliveries one after another); breaks ties in FIFOs
    pkt_rank: chex.Array  # (S_total,) int32 the event chain its arrival descends from (a flow index: see
    #   PortState.port_busy_rank); breaks the ties pkt_scheduled_ps leaves. Queued at a switch with
    #   switch.pipeline=serial: the order it left the switch's pipeline (forward.pipeline_ranks)
    pkt_prior_ps: chex.Array  # (S_total,) int64 when the event that scheduled its arrival was itself
    #   scheduled: its start on the wire (the port's end-of-service event is scheduled then) or, while
    #   the previous packet was still on the link, that one's pkt_scheduled_ps (its arrival scheduled
    #   this one); with switch.pipeline=serial, breaks the ties pkt_scheduled_ps leaves, before pkt_rank
    pkt_ingress: chex.Array  # (S_total,) int32 link it arrived over at its current switch (-1 at a host)
    pkt_ingress_ps: chex.Array  # (S_total,) int64 when it arrived over pkt_ingress (its last bit; PFC accounting)
    pkt_hop: chex.Array  # (S_total,) int32 index of pkt_port along the packet's path (0 = first link)
    pkt_path_salt: chex.Array  # (S_total,) uint32 mixed into the ECMP hash: 0 (per flow), the
    #   packet's own (spraying) or its flowlet's; its ACK keeps it
    pkt_ecn: chex.Array  # (S_total,) bool data: ECN congestion-experienced mark; its ACK echoes it
    pkt_cnp: chex.Array  # (S_total,) bool ACK: carries a DCQCN congestion notification
    pkt_sent_ps: chex.Array  # (S_total,) int64 when the data packet left its sender (for RTTs)
    # In-band telemetry (HPCC), one entry per switch hop of the data packet (hop i = the
    # i-th switch egress port it left by); its ACK echoes it. Hi = Static.int_hops.
    pkt_int_port: chex.Array  # (S_total, Hi) int32 egress port (-1: not recorded)
    pkt_int_ts_ps: chex.Array  # (S_total, Hi) int64 when the packet started leaving it
    pkt_int_tx_bytes: chex.Array  # (S_total, Hi) int64 bytes the port had sent, the packet included
    pkt_int_qlen_bytes: chex.Array  # (S_total, Hi) int64 bytes queued at the port as the packet left


def initial_packet_state(s: Static) -> PacketState:
    """An empty pool of H * S slots."""
    n_slots, hops = s.n_slots, (s.n_slots, s.int_hops)
    return PacketState(
        pkt_valid=np.zeros(n_slots, bool),
        pkt_is_ack=np.zeros(n_slots, bool),
        pkt_flow=np.zeros(n_slots, np.int32),
        pkt_seq=np.zeros(n_slots, np.int32),
        pkt_bytes=np.zeros(n_slots, np.int32),
        pkt_port=np.zeros(n_slots, np.int32),
        pkt_in_flight=np.zeros(n_slots, bool),
        pkt_time_ps=np.zeros(n_slots, np.int64),
        pkt_scheduled_ps=np.zeros(n_slots, np.int64),
        pkt_rank=np.zeros(n_slots, np.int32),
        pkt_prior_ps=np.zeros(n_slots, np.int64),
        pkt_ingress=np.full(n_slots, -1, np.int32),
        pkt_ingress_ps=np.zeros(n_slots, np.int64),
        pkt_hop=np.zeros(n_slots, np.int32),
        pkt_path_salt=np.zeros(n_slots, np.uint32),
        pkt_ecn=np.zeros(n_slots, bool),
        pkt_cnp=np.zeros(n_slots, bool),
        pkt_sent_ps=np.zeros(n_slots, np.int64),
        pkt_int_port=np.full(hops, -1, np.int32),
        pkt_int_ts_ps=np.zeros(hops, np.int64),
        pkt_int_tx_bytes=np.zeros(hops, np.int64),
        pkt_int_qlen_bytes=np.zeros(hops, np.int64),
    )


@struct.dataclass
class PoolLayout:
    """Which slots of its parent pool (the whole pool, or a per-host prefix of it) a
    smaller pool holds, where it is not the first c columns of every host (``ops/pool.py``'s
    per-host prefix): host h's first ``host_columns[h]`` columns, in the whole pool's slot
    order (so every tie-break by slot is the whole pool's), then padding that never holds
    a packet. N places."""

    parent_place: chex.Array  # (N,) int32 the parent pool's slot at each place (the parent's size: padding)
    place_host: chex.Array  # (N,) int32 the host whose slot each place is (H: padding)
    place_column: chex.Array  # (N,) int32 its column among that host's slots
    host_order: chex.Array  # (N,) int32 the places in (host, column) order, the padding last
    order_host: chex.Array  # (N,) int32 the host of each entry of host_order (H for the padding)
    host_columns: chex.Array  # (H,) int32 the columns each host has here (its first ones)
    host_start: chex.Array  # (H,) int32 where each host's places begin in host_order
