"""Congestion control: ACKs and timers update each flow's rate and window, in time order.

``cc_kind`` is a per-experiment value: the rules of the experiment's algorithm are
chosen with ``lax.switch`` (a select under vmap), so one batch mixes algorithms.

Once per window, before the ACKs are counted (``ack.py``), each flow's events of the
window -- ACKs reaching it, and (DCQCN) timers -- are applied one at a time in time
order (a loop whose iteration count is the most events any flow has in the window).
Their effects start at their own times, never earlier:

* rate: the pacing of the next packet moves by the difference of the old and new
  inter-packet gaps (as ns-3's ``ChangeRate``), but never before the event; a packet
  already due before the event keeps its time;
* window (DCTCP, HPCC): the flow may have sent ``acked + window`` bytes from the ACK's
  arrival on (``CcState.flow_gate_*``, read by ``ops.cc.gate_ps``). A cut is applied from the
  window's start if the window had more than ``GATE_ENTRIES - 1`` ACKs of that flow
  (conservative: less sending, up to one window early).

The NIC (``ops/nic.py``) asks ``ops.cc.gate_ps`` and ``ops.cc.next_send_ps`` when a flow may send.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.cc import dcqcn, dctcp, hpcc, timely
from multiverse_jax.cc.events import AckEvent
from multiverse_jax.components.cc import GATE_ENTRIES, CcState, whole_packet_allowance
from multiverse_jax.components.experiment import CC_DCTCP, CC_HPCC, CC_NONE, Params, State
from multiverse_jax.ops.cc import gap_ps, line_rate_bps, polls, timers_active
from multiverse_jax.ops.packets import arriving_acks
from multiverse_jax.ops.segments import fifo_head
from multiverse_jax.units import NEVER

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


def _ack_event(params: Params, state: State, slot, acked_packets, line_rate):
    pkts = state.packets
    int_port = pkts.pkt_int_port[slot]
    return AckEvent(
        time_ps=pkts.pkt_time_ps[slot],
        ece=pkts.pkt_ecn[slot],
        cnp=pkts.pkt_cnp[slot],
        acked_packets=acked_packets,
        sent_packets=state.flows.flow_sent_packets,
        data_sent_ps=pkts.pkt_sent_ps[slot],
        line_rate_bps=line_rate,
        mss_bytes=params.payload_bytes.astype(jnp.float64),
        int_port=int_port,
        int_ts_ps=pkts.pkt_int_ts_ps[slot],
        int_tx_bytes=pkts.pkt_int_tx_bytes[slot],
        int_qlen_bytes=pkts.pkt_int_qlen_bytes[slot],
        int_rate_bps=params.links.link_rate_bps[jnp.maximum(int_port, 0)].astype(jnp.float64),
    )


def _on_ack(params: Params, cc: CcState, ev: AckEvent) -> CcState:
    cp = params.cc
    rules = (
        lambda: cc,
        lambda: dcqcn.on_ack(cp, cc, ev),
        lambda: dctcp.on_ack(cp, cc, ev),
        lambda: hpcc.on_ack(cp, cc, ev),
        lambda: timely.on_ack(cp, cc, ev),
    )
    return jax.lax.switch(params.cc_kind, rules)


def _retime(params: Params, state: State, old_rate, new_rate, event_ps, wire_bytes):
    """Move each flow's next send time for a rate change at ``event_ps`` (ns-3 ChangeRate):
    by the difference of the gaps, never before the event; a send already due stays.
    hpcc.pacing=ticks (htsim's poll): only later, never earlier; a poll at the event itself
    comes after it (the ACK was scheduled first)."""
    flows = state.flows
    ticks = polls(params)
    change = gap_ps(params, new_rate, wire_bytes) - gap_ps(params, old_rate, wire_bytes)
    moved = flows.flow_next_send_ps + jnp.where(ticks, jnp.maximum(change, 0), change)
    pending = (flows.flow_next_send_ps > event_ps) | (ticks & (flows.flow_next_send_ps == event_ps))
    change = (new_rate != old_rate) & pending & (flows.flow_last_send_ps >= 0)
    return jnp.where(change, jnp.maximum(moved, event_ps), flows.flow_next_send_ps)


def _blocked_polls(params: Params, cc: CcState, acked_packets, sent_packets, next_poll_ps, event_ps, wire_bytes):
    """hpcc.pacing=ticks (htsim's HPCCSrc::doNextEvent): a flow the window blocks still polls,
    once per gap at the rate in effect (each poll restarts the gap), so (F,) its next poll after
    the polls before ``event_ps`` (an ACK of this flow): the poll grid, not the ACK, is when it
    sends once the ACK opens the window. Unchanged for flows that may send or do not poll."""
    allow = allowance_bytes(params, cc, acked_packets)
    blocked = ~(allow > sent_packets.astype(jnp.float64) * params.payload_bytes)
    gap = jnp.maximum(gap_ps(params, cc.flow_rate_bps, wire_bytes), 1)
    behind = polls(params) & blocked & (next_poll_ps < event_ps)
    n_polls = (jnp.where(behind, event_ps - next_poll_ps, 0) + gap - 1) // gap
    return jnp.where(behind, next_poll_ps + n_polls * gap, next_poll_ps)


def congestion_control(params: Params, state: State, window_end_ps) -> State:
    pkts, flows = state.packets, state.flows
    n_flows, n_slots = params.static.n_flows, params.static.n_slots
    window_start_ps = window_end_ps - params.window_ps
    acks_here = arriving_acks(params, pkts, window_end_ps) & (params.cc_kind != CC_NONE)
    line_rate = line_rate_bps(params)
    full_wire = (params.payload_bytes + params.header_bytes).astype(jnp.float64)
    timers_on = timers_active(params, state)

    # The window gate starts from the allowance at the window start.
    entry = jnp.arange(GATE_ENTRIES)
    allow0 = allowance_bytes(params, state.cc, flows.flow_acked_packets)
    cc = state.cc.replace(
        flow_gate_allow_bytes=jnp.where(entry == 0, allow0[:, None], NO_LIMIT),
        flow_gate_ps=jnp.where(entry == 0, jnp.int64(0), NEVER) + jnp.zeros((n_flows, 1), jnp.int64),
    )

    def next_events(carry):
        pending, cc, _, _, _ = carry
        t_ack, slot = fifo_head(pending, pkts.pkt_time_ps, pkts.pkt_flow, n_flows, window_start_ps)
        t_timer, which = dcqcn.next_timer(cc.dcqcn)
        t_timer = jnp.where(timers_on, t_timer, NEVER)
        return t_ack, jnp.minimum(slot, n_slots - 1), t_timer, which

    def any_event(carry):
        t_ack, _, t_timer, _ = next_events(carry)
        return jnp.any(jnp.minimum(t_ack, t_timer) < window_end_ps)

    def one_event(carry):
        pending, cc, acked, n_acks, next_send = carry
        t_ack, slot, t_timer, which = next_events(carry)
        t_event = jnp.minimum(t_ack, t_timer)
        active = t_event < window_end_ps
        is_ack = active & (t_ack <= t_timer)  # an ACK and a timer at the same time: ACK first
        is_timer = active & ~is_ack
        acked = acked + is_ack
        ev = _ack_event(params, state, slot, acked, line_rate)
        after_ack = _on_ack(params, cc, ev)
        after_timer = dcqcn.on_timer(params.cc, cc, t_timer, which, line_rate)
        new = jax.tree.map(
            lambda a, t, old: jnp.where(_lead(is_ack, old), a, jnp.where(_lead(is_timer, old), t, old)),
            after_ack,
            after_timer,
            cc,
        )
        next_send = jnp.where(
            is_ack,
            _blocked_polls(params, cc, acked - is_ack, state.flows.flow_sent_packets, next_send, t_ack, full_wire),
            next_send,
        )
        flows_now = state.flows.replace(flow_next_send_ps=next_send)
        next_send = _retime(params, state.replace(flows=flows_now), cc.flow_rate_bps, new.flow_rate_bps, t_event, full_wire)
        # Window gate: from this ACK on, the flow may have sent acked + window bytes.
        n_acks = n_acks + is_ack
        at = jnp.minimum(n_acks, GATE_ENTRIES - 1)[:, None] == entry
        record = (is_ack & window_based(params))[:, None] & at
        allow_now = allowance_bytes(params, new, acked)[:, None]
        new = new.replace(
            flow_gate_allow_bytes=jnp.where(record, allow_now, new.flow_gate_allow_bytes),
            flow_gate_ps=jnp.where(record, t_ack[:, None], new.flow_gate_ps),
        )
        pending = pending.at[jnp.where(is_ack, slot, n_slots)].set(False, mode="drop")
        return pending, new, acked, n_acks, next_send

    init = (acks_here, cc, flows.flow_acked_packets, jnp.zeros(n_flows, jnp.int32), flows.flow_next_send_ps)
    _, cc, _, _, next_send = jax.lax.while_loop(any_event, one_event, init)
    # A later cut binds earlier entries too (never send more than a later state allows).
    gate = cc.flow_gate_allow_bytes
    allow = jnp.flip(jax.lax.cummin(jnp.flip(gate, -1), axis=gate.ndim - 1), -1)
    cc = cc.replace(flow_gate_allow_bytes=allow)
    return state.replace(cc=cc, flows=flows.replace(flow_next_send_ps=next_send))


def _lead(mask, like):
    """``mask`` (F,) broadcast against an (F, ...) array."""
    return mask.reshape(mask.shape + (1,) * (like.ndim - 1))
