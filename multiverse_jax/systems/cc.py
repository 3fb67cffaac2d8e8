"""Congestion control: ACKs and timers update each flow's rate and window, in time order.

``cc_kind`` is a per-experiment value: the rules of the experiment's algorithm are
chosen with ``lax.switch`` (a select under vmap), so one batch mixes algorithms.

Once per window, before the ACKs are counted (``ack.py``), each flow's events of the
window -- ACKs reaching it, (DCQCN) timers and (hpcc.pacing=ticks) the polls of its
sender, ``ops/polls.py`` -- are applied one at a time in time order (a loop whose
iteration count is the most events any flow has in the window).
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

from typing import NamedTuple

import jax
import jax.numpy as jnp

from multiverse_jax.cc import dcqcn, dctcp, hpcc, timely
from multiverse_jax.cc.events import AckEvent
from multiverse_jax.components.cc import GATE_ENTRIES, CcState
from multiverse_jax.components.experiment import CC_NONE, Params, State
from multiverse_jax.ops import polls as polls_
from multiverse_jax.ops.cc import (
    NO_LIMIT, allowance_bytes, line_rate_bps, pacing_gap_ps, polls, timers_active, window_based,
)  # fmt: skip
from multiverse_jax.ops.packets import arriving_acks
from multiverse_jax.ops.segments import fifo_head
from multiverse_jax.units import NEVER

def _ack_event(params: Params, state: State, slot, acked_packets, sent_packets, line_rate):
    pkts = state.packets
    int_port = pkts.pkt_int_port[slot]
    return AckEvent(
        time_ps=pkts.pkt_time_ps[slot],
        ece=pkts.pkt_ecn[slot],
        cnp=pkts.pkt_cnp[slot],
        acked_packets=acked_packets,
        sent_packets=sent_packets,
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


def _retime(params: Params, flows, old_rate, new_rate, event_ps, wire_bytes):
    """Move each flow's next send time for a rate change at ``event_ps`` (ns-3 ChangeRate):
    by the difference of the gaps, never before the event; a send already due stays. A
    polling sender's next poll does not move (``ops/polls.py``)."""
    change = pacing_gap_ps(new_rate, wire_bytes) - pacing_gap_ps(old_rate, wire_bytes)
    moved = flows.flow_next_send_ps + change
    change = (new_rate != old_rate) & (flows.flow_next_send_ps > event_ps) & (flows.flow_last_send_ps >= 0) & ~polls(params)
    return jnp.where(change, jnp.maximum(moved, event_ps), flows.flow_next_send_ps)


class _Events(NamedTuple):
    """The loop's carry: what the window's events have changed so far."""

    pending: jnp.ndarray  # (S,) bool ACKs of this window not yet applied
    ack_ps: jnp.ndarray  # (F,) int64 each flow's next pending ACK (NEVER: none)
    ack_slot: jnp.ndarray  # (F,) int32 its pool slot
    cc: CcState
    acked: jnp.ndarray  # (F,) int32 ACKs applied (from the window start's count)
    n_acks: jnp.ndarray  # (F,) int32 ACKs of this window applied
    polls: polls_.Polls  # next send times and, for a polling sender, its polls


def congestion_control(params: Params, state: State, window_end_ps) -> State:
    if not params.static.congestion_control:
        # No experiment of the batch runs a congestion control: the rate stays at line rate,
        # the gate as the initial state opened it (no limit), no timer nor poll is due, and
        # this system would write its state back as it is (a pass over the pool to find no ACK).
        return state
    pkts, flows = state.packets, state.flows
    n_flows, n_slots = params.static.n_flows, params.static.n_slots
    window_start_ps = window_end_ps - params.window_ps
    acks_here = arriving_acks(params, pkts, window_end_ps) & (params.cc_kind != CC_NONE)
    line_rate = line_rate_bps(params)
    full_wire = (params.payload_bytes + params.header_bytes).astype(jnp.float64)
    timers_on = timers_active(params, state)
    polling = polls(params)

    cc = _gate_at_window_start(params, state)

    def next_acks(pending):  # (F,) each flow's earliest pending ACK: a pass over the pool
        t_ack, slot = fifo_head(pending, pkts.pkt_time_ps, pkts.pkt_flow, n_flows, window_start_ps)
        return t_ack, jnp.minimum(slot, n_slots - 1)

    def next_events(ev: _Events):
        t_timer, which = dcqcn.next_timer(ev.cc.dcqcn)
        t_timer = jnp.where(timers_on, t_timer, NEVER)
        t_poll = polls_.due_ps(params, state, ev.polls)
        return ev.ack_ps, ev.ack_slot, t_timer, which, t_poll

    def any_event(ev: _Events):
        t_ack, _, t_timer, _, t_poll = next_events(ev)
        return jnp.any(jnp.minimum(jnp.minimum(t_ack, t_timer), t_poll) < window_end_ps)

    def one_event(ev: _Events) -> _Events:
        t_ack, slot, t_timer, which, t_poll = next_events(ev)
        t_event = jnp.minimum(jnp.minimum(t_ack, t_timer), t_poll)
        active = t_event < window_end_ps
        # An ACK first at a tie (with a timer: by rule; with a poll: it was scheduled earlier).
        is_ack = active & (t_ack == t_event)
        is_timer = active & ~is_ack & (t_timer == t_event)
        is_poll = active & ~is_ack & ~is_timer
        acked = ev.acked + is_ack
        cc, p = ev.cc, ev.polls
        sent = jnp.where(polling, p.admitted, flows.flow_sent_packets)  # snd_nxt as the ACK arrives
        # (A round of polls and timers only skips the ACK rules and the pass over the pool.)
        after_ack = jax.lax.cond(
            jnp.any(is_ack), lambda: _on_ack(params, cc, _ack_event(params, state, slot, acked, sent, line_rate)), lambda: cc
        )
        after_timer = dcqcn.on_timer(params.cc, cc, t_timer, which, line_rate)
        new = jax.tree.map(
            lambda a, t, old: jnp.where(_lead(is_ack, old), a, jnp.where(_lead(is_timer, old), t, old)),
            after_ack,
            after_timer,
            cc,
        )
        next_send = _retime(params, flows.replace(flow_next_send_ps=p.next_poll_ps), cc.flow_rate_bps, new.flow_rate_bps, t_event, full_wire)
        p = p._replace(next_poll_ps=next_send)
        # A polling sender's poll; then the polls its closed window makes in vain before its next ACK.
        p = polls_.poll_and_skip(params, new, acked, p, t_poll, is_poll, jnp.minimum(t_ack, window_end_ps))
        n_acks = ev.n_acks + is_ack
        new = _gate_after_ack(params, new, acked, n_acks, is_ack, t_ack)
        pending = ev.pending.at[jnp.where(is_ack, slot, n_slots)].set(False, mode="drop")
        t_next, slot_next = jax.lax.cond(jnp.any(is_ack), next_acks, lambda _: (t_ack, slot), pending)
        return _Events(pending, t_next, slot_next, new, acked, n_acks, p)

    init = _Events(
        acks_here, *next_acks(acks_here), cc, flows.flow_acked_packets, jnp.zeros(n_flows, jnp.int32), polls_.of_state(state)
    )
    ev = jax.lax.while_loop(any_event, one_event, init)
    return polls_.into_state(state.replace(cc=_gate_bound_by_later_cuts(ev.cc)), ev.polls)


def _gate_at_window_start(params: Params, state: State) -> CcState:
    """The window gate's first entry (F, GATE_ENTRIES): the allowance at the window start,
    from time 0; the other entries open (no limit, never)."""
    entry = jnp.arange(GATE_ENTRIES)
    allow0 = allowance_bytes(params, state.cc, state.flows.flow_acked_packets)
    return state.cc.replace(
        flow_gate_allow_bytes=jnp.where(entry == 0, allow0[:, None], NO_LIMIT),
        flow_gate_ps=jnp.where(entry == 0, jnp.int64(0), NEVER) + jnp.zeros((params.static.n_flows, 1), jnp.int64),
    )


def _gate_after_ack(params: Params, cc: CcState, acked, n_acks, is_ack, t_ack) -> CcState:
    """Window gate: from an ACK on (``is_ack`` (F,), at ``t_ack``), a window-based flow may
    have sent ``acked`` packets + its window; recorded in entry ``n_acks`` (the last entry
    takes the rest)."""
    at = jnp.minimum(n_acks, GATE_ENTRIES - 1)[:, None] == jnp.arange(GATE_ENTRIES)
    record = (is_ack & window_based(params))[:, None] & at
    allow_now = allowance_bytes(params, cc, acked)[:, None]
    return cc.replace(
        flow_gate_allow_bytes=jnp.where(record, allow_now, cc.flow_gate_allow_bytes),
        flow_gate_ps=jnp.where(record, t_ack[:, None], cc.flow_gate_ps),
    )


def _gate_bound_by_later_cuts(cc: CcState) -> CcState:
    """A later cut of the gate binds its earlier entries too: never send more than a later
    state allows (a reverse running minimum over the entries)."""
    gate = cc.flow_gate_allow_bytes
    return cc.replace(flow_gate_allow_bytes=jnp.flip(jax.lax.cummin(jnp.flip(gate, -1), axis=gate.ndim - 1), -1))


def _lead(mask, like):
    """``mask`` (F,) broadcast against an (F, ...) array."""
    return mask.reshape(mask.shape + (1,) * (like.ndim - 1))
