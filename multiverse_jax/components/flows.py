"""Flows: a message of ``size`` bytes from one host to another, cut into packets."""

from __future__ import annotations

import chex
from flax import struct
import jax.numpy as jnp
import numpy as np

from multiverse_jax.components.padding import pad
from multiverse_jax.components.static import Static
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops.hashing import mix32
from multiverse_jax.units import NEVER
from multiverse_jax.workload.routes import PinnedRoutes


ADMIT_ENTRIES = 16  # Static.admit_entries when a sender polls: a window holds fewer polls of a flow
#   (a 1 us window, T = 12 us and 9 KB packets: a window below 16 x 12 / 1 x 9 KB = 1.7 MB)


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
    flow_data_path: chex.Array  # (F, Hp) int32 egress ports from the source NIC to the destination, -1 padded:
    #   ``ops.paths.flow_paths``, filled in by ``batch.build_batch`` for the flow-level step (all -1 otherwise)
    flow_ack_path: chex.Array  # (F, Hp) int32 the same for the flow's ACKs, back to the source
    flow_data_tail_ps: chex.Array  # (F,) int64 flow level: last byte off the sender's NIC -> receiver has it
    #   (``ops.paths.data_tail_ps``; filled in with the paths, 0 otherwise)
    flow_ack_path_ps: chex.Array  # (F,) int64 flow level: an ACK's time back (``ops.paths.ack_path_ps``)
    trigger_activator: chex.Array  # (T, A) int32 flows whose completion activates trigger t (-1 pad)
    trigger_activator_is_recv: chex.Array  # (T, A) bool activation at receiver's last byte (else last ACK)


@struct.dataclass
class FlowState:
    flow_begin_ps: chex.Array  # (F,) int64 when the flow started (NEVER until its trigger fires)
    flow_sent_packets: chex.Array  # (F,) int32 packets handed to the NIC
    flow_next_send_ps: chex.Array  # (F,) int64 earliest time congestion control lets it send again (a polling
    #   sender, hpcc.pacing=ticks: its next poll, ``ops/polls.py``)
    flow_admitted_packets: chex.Array  # (F,) int32 polling sender: packets handed to its NIC's queue (>= sent)
    flow_last_poll_ps: chex.Array  # (F,) int64 polling sender: its last poll that counted (0: none yet, as htsim)
    flow_admit_ps: chex.Array  # (F, A) int64 polling sender: when packet i was handed over, at column i mod A
    flow_rx_packets: chex.Array  # (F,) int32 data packets delivered to the receiver
    flow_rx_bytes: chex.Array  # (F,) int64 payload bytes delivered to the receiver
    flow_acked_packets: chex.Array  # (F,) int32 ACKs back at the sender
    flow_rx_finish_ps: chex.Array  # (F,) int64 receiver has the last byte (NEVER until then)
    flow_finish_ps: chex.Array  # (F,) int64 sender has the last ACK (NEVER until then)
    flow_last_send_ps: chex.Array  # (F,) int64 start of the flow's latest packet (-1: none yet)
    flow_last_rx_ps: chex.Array  # (F,) int64 arrival of its latest data packet at the receiver (-1: none yet)
    flow_flowlet: chex.Array  # (F,) uint32 flowlets the flow has started (LB_FLOWLET)
    flow_unsent_bytes: chex.Array  # (F,) float64 flow mode: wire bytes (payload + headers) the source has
    #   yet to send at its fluid rate (``systems/fluid.py``); unused by the packet step


def flow_hash(seed: int, n_flows: int) -> np.ndarray:
    """(F,) uint32 seeded per-flow ECMP hash: the switches' hash of (seed, flow index)."""
    flows = np.arange(n_flows, dtype=np.uint32)
    seed_hash = mix32(jnp.uint32((seed + 0x9E3779B9) & 0xFFFFFFFF))  # never 0, even for seed 0
    return np.asarray(mix32(seed_hash ^ jnp.asarray(flows)))


def flow_start_ps(exp: Experiment) -> np.ndarray:
    """(n,) int64 each flow's start time; NEVER for a flow that waits on a trigger or a task."""
    flows, graph = exp.flows, exp.tasks
    flow_task = graph.flow_tasks if graph is not None else np.full(len(flows), -1)
    triggered = (flows.trigger >= 0) | (flow_task >= 0)
    return np.where(triggered, NEVER, flows.start_ps).astype(np.int64)


def flow_params(exp: Experiment, s: Static) -> FlowParams:
    """The experiment's flows and triggers padded to F flows and (T, A) triggers (padded
    flows never start, so they count as finished)."""
    flows, n = exp.flows, s.n_flows
    routes = exp.routes if exp.routes is not None else PinnedRoutes.none(len(flows))
    flow_task = exp.tasks.flow_tasks if exp.tasks is not None else np.full(len(flows), -1)
    activator, activator_is_recv, rank = exp.triggers
    return FlowParams(
        flow_valid=pad(np.ones(len(flows), bool), (n,), False),
        flow_src=pad(flows.src.astype(np.int32), (n,), 0),
        flow_dst=pad(flows.dst.astype(np.int32), (n,), 0),
        flow_size_bytes=pad(flows.size_bytes.astype(np.int64), (n,), 0),
        flow_n_packets=pad((-(-flows.size_bytes // exp.packet.payload_bytes)).astype(np.int32), (n,), 0),
        flow_start_ps=pad(flow_start_ps(exp), (n,), NEVER),
        flow_hash=pad(flow_hash(exp.sim.seed, len(flows)), (n,), 0),
        flow_priority=pad(flows.prio.astype(np.int32), (n,), 0),
        flow_trigger=pad(flows.trigger.astype(np.int32), (n,), -1),
        flow_task=pad(flow_task.astype(np.int32), (n,), -1),
        flow_trigger_rank=pad(rank.astype(np.int32), (n,), 0),
        flow_pinned_data=pad(routes.data_ports.astype(np.int32), (n, s.pinned_len), -1),
        flow_pinned_ack=pad(routes.ack_ports.astype(np.int32), (n, s.pinned_len), -1),
        flow_data_path=np.full((n, s.path_len), -1, np.int32),
        flow_ack_path=np.full((n, s.path_len), -1, np.int32),
        flow_data_tail_ps=np.zeros(n, np.int64),
        flow_ack_path_ps=np.zeros(n, np.int64),
        trigger_activator=pad(activator.astype(np.int32), (s.n_triggers, s.n_activators), -1),
        trigger_activator_is_recv=pad(activator_is_recv.astype(bool), (s.n_triggers, s.n_activators), False),
    )


def initial_flow_state(exp: Experiment, s: Static) -> FlowState:
    """Nothing sent yet; flows that start by time have begun at their start time."""
    n = s.n_flows
    return FlowState(
        flow_begin_ps=pad(flow_start_ps(exp), (n,), NEVER),
        flow_sent_packets=np.zeros(n, np.int32),
        flow_next_send_ps=np.zeros(n, np.int64),
        flow_admitted_packets=np.zeros(n, np.int32),
        flow_last_poll_ps=np.zeros(n, np.int64),
        flow_admit_ps=np.zeros((n, s.admit_entries), np.int64),
        flow_rx_packets=np.zeros(n, np.int32),
        flow_rx_bytes=np.zeros(n, np.int64),
        flow_acked_packets=np.zeros(n, np.int32),
        flow_rx_finish_ps=np.full(n, NEVER, np.int64),
        flow_finish_ps=np.full(n, NEVER, np.int64),
        flow_last_send_ps=np.full(n, -1, np.int64),
        flow_last_rx_ps=np.full(n, -1, np.int64),
        flow_flowlet=np.zeros(n, np.uint32),
        flow_unsent_bytes=pad(wire_bytes(exp).astype(np.float64), (n,), 0.0),
    )


def wire_bytes(exp: Experiment) -> np.ndarray:
    """(n,) int64 bytes each flow puts on the wire: its payload and one header per packet."""
    size, payload = exp.flows.size_bytes.astype(np.int64), exp.packet.payload_bytes
    return size + (-(-size // payload)) * exp.packet.header_bytes
