"""What the NIC and the clock ask congestion control: the window gate, the pacing of a
flow's next packet, DCQCN's per-send byte counter and the next DCQCN timer.

``systems/cc.py`` updates rates, windows and the gate once per window; these read them.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.cc import dcqcn
from multiverse_jax.components.cc import CcState, whole_packet_allowance
from multiverse_jax.components.experiment import CC_DCQCN, CC_DCTCP, CC_HPCC, CC_NONE, Params, State
from multiverse_jax.units import NEVER
from multiverse_jax.ops.packets import PS_BITS_PER_BYTE

POLL_GAP_SLACK_PS = 1e-6  # poll_gap_ps: far above the float error of a ~10^6 ps gap, far below 1 ps
NO_LIMIT = jnp.inf  # the allowance of a flow without a window


def window_based(params: Params):
    return (params.cc_kind == CC_DCTCP) | (params.cc_kind == CC_HPCC)


def allowance_bytes(params: Params, cc: CcState, acked_packets):
    """(F,) bytes a flow may have sent: acknowledged bytes + window (inf without a window)."""
    acked = acked_packets.astype(jnp.float64) * params.payload_bytes
    allow = acked + cc.flow_window_bytes
    whole = (params.cc_kind == CC_HPCC) & params.cc.hpcc_gate_whole_packet
    allow = jnp.where(whole, whole_packet_allowance(allow, params.payload_bytes.astype(jnp.float64), jnp), allow)
    return jnp.where(window_based(params), allow, NO_LIMIT)


def gate_ps(params: Params, state: State):
    """(F,) earliest time the window lets each flow send its next packet (NEVER: not in this window)."""
    return open_gate_ps(params, state.cc.flow_gate_allow_bytes, state.cc.flow_gate_ps, state.flows.flow_sent_packets)


def open_gate_ps(params: Params, allow_bytes, gate_ps_, sent_packets):
    """``gate_ps`` of flows whose gate entries are ``allow_bytes`` and ``gate_ps_`` (..., G)
    once they have sent ``sent_packets`` (...): the first entry that still allows more."""
    sent_bytes = sent_packets.astype(jnp.float64) * params.payload_bytes
    return jnp.min(jnp.where(allow_bytes > sent_bytes[..., None], gate_ps_, NEVER), axis=-1)


def polls(params: Params):
    """() whether the experiment's sender polls (hpcc.pacing=ticks: htsim's HPCCSrc::doNextEvent,
    ``ops/polls.py``): it hands packets to its NIC's queue, which sends them as handed over."""
    return (params.cc_kind == CC_HPCC) & params.cc.hpcc_pacing_ticks


def pacing_gap_ps(rate_bps, wire_bytes):
    """Gap between packet starts at ``rate_bps``: wire * 8 / rate, in ps, rounded up."""
    return jnp.ceil(wire_bytes * (PS_BITS_PER_BYTE / jnp.maximum(rate_bps, 1.0))).astype(jnp.int64)


def poll_gap_ps(rate_bps, wire_bytes):
    """htsim's _packet_spacing at ``rate_bps``: (simtime_picosec)(wire * 8 * 10^12 / rate), rounded
    down; a whole gap a few ulps short (XLA's rounding of the rate differs from C++'s) stays whole."""
    return jnp.floor(wire_bytes * float(PS_BITS_PER_BYTE) / jnp.maximum(rate_bps, 1.0) + POLL_GAP_SLACK_PS).astype(jnp.int64)


def next_send_ps(params: Params, cc: CcState, flow, start_ps, serialization_ps, wire_bytes):
    """When a flow that started a packet at ``start_ps`` may start the next (arrays over flows).

    CC_NONE: back to back at line rate. Otherwise paced at the flow's rate (never faster
    than the line). (A polling sender's next poll is set by its polls: ``ops/polls.py``.)
    """
    paced = pacing_gap_ps(cc.flow_rate_bps[flow], wire_bytes)
    gap = jnp.where(params.cc_kind == CC_NONE, serialization_ps, jnp.maximum(serialization_ps, paced))
    return start_ps + gap


def on_send(params: Params, cc: CcState, sent, wire_bytes, start_ps) -> CcState:
    """Per-flow bookkeeping of sent packets (DCQCN's byte counter). Arrays (F,)."""
    counted = dcqcn.on_send(params.cc, cc.dcqcn, sent, wire_bytes, start_ps)
    is_dcqcn = params.cc_kind == CC_DCQCN
    return cc.replace(
        dcqcn=cc.dcqcn.replace(
            flow_bytes_counted=jnp.where(is_dcqcn, counted.flow_bytes_counted, cc.dcqcn.flow_bytes_counted),
            flow_byte_event_ps=jnp.where(is_dcqcn, counted.flow_byte_event_ps, cc.dcqcn.flow_byte_event_ps),
        )
    )


def timers_active(params: Params, state: State):
    """(F,) flows whose timers run: DCQCN flows that started and have not finished."""
    flows = state.flows
    return (
        (params.cc_kind == CC_DCQCN)
        & params.flows.flow_valid
        & (flows.flow_begin_ps != NEVER)
        & (flows.flow_finish_ps == NEVER)
    )


def next_timer_ps(params: Params, state: State):
    """() the next timer event of the experiment (NEVER if none): an event for the clock."""
    t, _ = dcqcn.next_timer(state.cc.dcqcn)
    return jnp.min(jnp.where(timers_active(params, state), t, NEVER))


def line_rate_bps(params: Params):
    """(F,) float64 the rate of each flow's sender NIC."""
    return params.links.link_rate_bps[params.nics.nic_port[params.flows.flow_src]].astype(jnp.float64)
