"""Flows: a message of ``size`` bytes from one host to another, cut into packets."""

from __future__ import annotations

import chex
from flax import struct


@struct.dataclass
class FlowParams:
    flow_valid: chex.Array  # (F,) bool False for padding
    flow_src: chex.Array  # (F,) int32 sending host
    flow_dst: chex.Array  # (F,) int32 receiving host
    flow_size_bytes: chex.Array  # (F,) int64 message size
    flow_n_packets: chex.Array  # (F,) int32 ceil(size / payload)
    flow_start_ps: chex.Array  # (F,) int64 start time; NEVER when the flow waits on a trigger
    flow_hash: chex.Array  # (F,) uint32 seeded per-flow ECMP hash
    flow_priority: chex.Array  # (F,) int32 data class: 0 (highest) .. C-1
    flow_trigger: chex.Array  # (F,) int32 trigger the flow waits on, or -1
    flow_task: chex.Array  # (F,) int32 task whose start starts the flow, or -1
    flow_trigger_rank: chex.Array  # (F,) int32 activations of that trigger needed to start
    flow_pinned_data: chex.Array  # (F, M) int32 pinned data path (ports, source first), -1 = ECMP
    flow_pinned_ack: chex.Array  # (F, M) int32 pinned ACK path, -1 = ECMP
    trigger_activator: chex.Array  # (T, A) int32 flows whose completion activates trigger t (-1 pad)
    trigger_activator_is_recv: chex.Array  # (T, A) bool activation at receiver's last byte (else last ACK)


@struct.dataclass
class FlowState:
    flow_begin_ps: chex.Array  # (F,) int64 when the flow started (NEVER until its trigger fires)
    flow_sent_packets: chex.Array  # (F,) int32 packets handed to the NIC
    flow_next_send_ps: chex.Array  # (F,) int64 earliest time congestion control lets it send again
    flow_rx_packets: chex.Array  # (F,) int32 data packets delivered to the receiver
    flow_rx_bytes: chex.Array  # (F,) int64 payload bytes delivered to the receiver
    flow_acked_packets: chex.Array  # (F,) int32 ACKs back at the sender
    flow_rx_finish_ps: chex.Array  # (F,) int64 receiver has the last byte (NEVER until then)
    flow_finish_ps: chex.Array  # (F,) int64 sender has the last ACK (NEVER until then)
    flow_last_send_ps: chex.Array  # (F,) int64 start of the flow's latest packet (-1: none yet)
    flow_flowlet: chex.Array  # (F,) uint32 flowlets the flow has started (LB_FLOWLET)
