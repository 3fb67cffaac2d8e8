"""A sender that polls (hpcc.pacing=ticks: htsim's ``HPCCSrc::doNextEvent``): once per
pacing gap it hands a packet to its NIC's queue if the window lets it, and the NIC sends
what it was handed, in order, when its port is free.

htsim's poll at time t, with the rate and window that the ACKs up to t have set (an ACK
at t first: it was scheduled earlier):

* if the flow has not polled yet, or t - last poll >= the gap at the current rate, the
  poll counts: the flow hands its next packet to the NIC if cwnd >= in flight + MSS (in
  flight counts the packets handed over, sent or not), and t becomes the last poll;
* the next poll is the last poll + the gap at the current rate (a rate change at an ACK
  does not move a poll already scheduled; a slower rate makes it not count, and the poll
  after it is one new gap after the last one that counted);
* a flow that has handed over all its packets stops polling.

So the window is checked when a packet is handed over, not when the NIC starts it: a
packet waiting in the NIC queue goes out even if the window shrank meanwhile, and counts
as in flight from its poll on (htsim's ``_highest_sent``, which also sets HPCC's
lastUpdateSeq). Polls run in ``systems/cc.py``, in time order with the ACKs; the polls of
flows that began during the window run after ``complete`` and ``schedule``
(``systems/admit.py``). A flow whose window is closed polls in vain until its next ACK:
those polls are skipped over at once (``skip_blocked``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from multiverse_jax.components.cc import CcState
from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops.cc import allowance_bytes, poll_gap_ps, polls
from multiverse_jax.units import NEVER


class Polls(NamedTuple):
    """The fields of ``FlowState`` that polls change: arrays over flows F."""

    admitted: jnp.ndarray  # (F,) int32 flow_admitted_packets
    last_poll_ps: jnp.ndarray  # (F,) int64 flow_last_poll_ps
    next_poll_ps: jnp.ndarray  # (F,) int64 flow_next_send_ps
    admit_ps: jnp.ndarray  # (F, A) int64 flow_admit_ps


def of_state(state: State) -> Polls:
    flows = state.flows
    return Polls(flows.flow_admitted_packets, flows.flow_last_poll_ps, flows.flow_next_send_ps, flows.flow_admit_ps)


def into_state(state: State, p: Polls) -> State:
    return state.replace(
        flows=state.flows.replace(
            flow_admitted_packets=p.admitted,
            flow_last_poll_ps=p.last_poll_ps,
            flow_next_send_ps=p.next_poll_ps,
            flow_admit_ps=p.admit_ps,
        )
    )


def due_ps(params: Params, state: State, p: Polls):
    """(F,) each flow's next poll (NEVER: it does not poll, has not begun, or has handed
    over every packet). A flow's first poll is at its start (htsim's ``startflow``)."""
    fp = params.flows
    begin = state.flows.flow_begin_ps
    polling = polls(params) & fp.flow_valid & (begin != NEVER) & (p.admitted < fp.flow_n_packets)
    return jnp.where(polling, jnp.maximum(begin, p.next_poll_ps), NEVER)


def _gap_ps(params: Params, cc: CcState):
    """(F,) htsim's _packet_spacing at each flow's current rate (at least 1 ps)."""
    full_wire = (params.payload_bytes + params.header_bytes).astype(jnp.float64)
    return jnp.maximum(poll_gap_ps(cc.flow_rate_bps, full_wire), 1)


def _window_open(params: Params, cc: CcState, acked_packets, admitted):
    """(F,) the window lets each flow hand one more packet over (htsim: cwnd >= flight + MSS)."""
    return allowance_bytes(params, cc, acked_packets) > admitted.astype(jnp.float64) * params.payload_bytes


def poll(params: Params, cc: CcState, acked_packets, p: Polls, at_ps, due) -> Polls:
    """The polls of the flows ``due`` (F,) at ``at_ps`` (F,), with the rates and windows of
    ``cc`` and ``acked_packets`` (F,) acknowledged."""
    gap = _gap_ps(params, cc)
    counts = due & ((p.last_poll_ps == 0) | (at_ps - p.last_poll_ps >= gap))  # htsim: _time_last_sent == 0 is "never"
    hands = counts & _window_open(params, cc, acked_packets, p.admitted)
    column = p.admitted % p.admit_ps.shape[1]
    hit = hands[:, None] & (jnp.arange(p.admit_ps.shape[1]) == column[:, None])
    last = jnp.where(counts, at_ps, p.last_poll_ps)
    return Polls(
        admitted=p.admitted + hands,
        last_poll_ps=last,
        next_poll_ps=jnp.where(due, last + gap, p.next_poll_ps),
        admit_ps=jnp.where(hit, at_ps[:, None], p.admit_ps),
    )


def skip_blocked(params: Params, cc: CcState, acked_packets, p: Polls, until_ps, mask) -> Polls:
    """The polls of the flows ``mask`` (F,) before ``until_ps`` (F,) (their next ACK, or the
    window end) while their window stays closed: none hands a packet over and each counts
    (the rate, so the gap, is that of the last poll), so the last is the one before
    ``until_ps`` and the next one gap after it."""
    gap = _gap_ps(params, cc)
    closed = ~_window_open(params, cc, acked_packets, p.admitted)
    behind = mask & closed & (p.next_poll_ps < until_ps) & (p.next_poll_ps != NEVER)
    n_polls = (jnp.where(behind, until_ps - p.next_poll_ps, 0) + gap - 1) // gap
    return p._replace(
        last_poll_ps=jnp.where(behind, p.next_poll_ps + (n_polls - 1) * gap, p.last_poll_ps),
        next_poll_ps=jnp.where(behind, p.next_poll_ps + n_polls * gap, p.next_poll_ps),
    )


def poll_and_skip(params: Params, cc: CcState, acked_packets, p: Polls, at_ps, due, until_ps) -> Polls:
    """``poll``, then ``skip_blocked`` up to ``until_ps`` (F,) for the flows that polled."""
    p = poll(params, cc, acked_packets, p, at_ps, due)
    return skip_blocked(params, cc, acked_packets, p, until_ps, due)


def open_due_ps(params: Params, state: State):
    """() the earliest next poll of a flow whose window is open (NEVER if none): an event
    for the clock. A flow whose window is closed waits for an ACK, itself an event."""
    p = of_state(state)
    open_ = _window_open(params, state.cc, state.flows.flow_acked_packets, p.admitted)
    return jnp.min(jnp.where(open_, due_ps(params, state, p), NEVER))


def head_ps(state: State):
    """(F,) when the NIC queue's next packet of each flow (its ``flow_sent_packets``-th) was
    handed over; NEVER if it has not been. Only times within the current window matter (an
    earlier one only says "waiting since before the window"), and fewer than A polls fit in
    a window, so a reused entry is reported as 0."""
    flows = state.flows
    entries = flows.flow_admit_ps.shape[1]
    sent, admitted = flows.flow_sent_packets, flows.flow_admitted_packets
    at = jnp.take_along_axis(flows.flow_admit_ps, (sent % entries)[:, None], axis=1)[:, 0]
    at = jnp.where(admitted - sent > entries, 0, at)
    return jnp.where(sent < admitted, at, NEVER)
