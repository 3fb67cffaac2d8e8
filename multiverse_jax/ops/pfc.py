"""PFC as the upstream port sees it (when a paused port may start a data packet), and what
PFC counts per ingress (``systems/pfc.py`` takes the decisions; the clock must not jump
over a release)."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops.lockstep import when_any
from multiverse_jax.ops.packets import link_serialization_ps
from multiverse_jax.units import NEVER


def release_ps(params: Params, state: State, earliest_ps):
    """(P,) the first time >= earliest_ps[p] at which port p may start a data packet.

    ``earliest_ps`` must not precede the window start: the history reaches back to the
    decision in effect then (``Static.pfc_history`` covers the longest link delay).
    """
    return held_until_ps(params, state.links, earliest_ps, slice(None))[0]


SEEN_PAUSES = 2  # pauses a window's start looks ahead to, per port (``seen_from``)


def seen_from(params: Params, links, window_start_ps):
    """Every port's PFC pauses as seen from the window start, for ``release_seen``: the
    history does not change while ports transmit, so it is read once a window. A tuple of
    ``SEEN_PAUSES`` pairs ((P,) int64 held until, (P,) int64 next pause: ``held_until_ps``),
    the first seen from the window start, each next one from the pause before it. A port
    whose next pause starts inside the window (PFC holding it back) then still has exact
    releases until the pause after. ``links``: ``State.links``."""
    from_ps = jnp.full(params.static.n_ports, window_start_ps)
    seen = []
    for _ in range(SEEN_PAUSES):
        seen.append(held_until_ps(params, links, from_ps, slice(None)))
        from_ps = jnp.maximum(seen[-1][1], from_ps)  # NEVER: no pause to look from (its pair is never used)
    return tuple(seen)


def release_from_seen(seen, earliest_ps):
    """``release_bound`` of ``earliest_ps`` from the pauses ``seen`` (``seen_from``) at its
    ports: when a packet that could start then does, and whether that is exact."""
    return release_bound(*seen_at(seen, earliest_ps), earliest_ps)


def release_seen(params: Params, links, seen, earliest_ps):
    """``release_ps`` of ``earliest_ps`` (P,), at or after the window start, from what the
    ports' pauses were ``seen`` to be from there (``seen_from``). Exact by ``release_bound``
    before a port's pauses seen run out; the history is searched only when some port's
    earliest is at or after the last of them (a round past a second pause beginning)."""
    bound, exact = release_from_seen(seen, earliest_ps)

    def searched(consts, bound):
        params, links, earliest_ps, exact = consts
        return jnp.where(exact, bound, held_until_ps(params, links, earliest_ps, slice(None))[0])

    return when_any(~jnp.all(exact), searched, bound, (params, links, earliest_ps, exact))


def seen_at(seen, at_ps):
    """``held_until_ps`` from ``at_ps`` (P,), at or after the window start, out of the pauses
    ``seen`` from there (``seen_from``): the first pair whose next pause is after ``at_ps``
    (its hold, at least ``at_ps``); past them all, a next pause at ``at_ps`` itself, so that
    ``release_bound`` knows nothing exactly from there on."""
    held_ps, next_ps = at_ps, at_ps
    for held, next_pause in reversed(seen):
        here = at_ps < next_pause
        held_ps, next_ps = jnp.where(here, jnp.maximum(held, at_ps), held_ps), jnp.where(here, next_pause, next_ps)
    return held_ps, next_ps


def held_until_ps(params: Params, links, from_ps, ports):
    """The PFC pauses of ``ports`` (an index of K ports, or ``slice(None)``: all) as seen
    from ``from_ps`` (K,) on, for many later instants at once: (K,) until when a pause in
    effect at ``from_ps`` holds their data (its first resume; ``from_ps`` if none is in
    effect: that is ``release_ps``), and (K,) when the next pause after it takes effect
    (NEVER if none). Before that next pause, PFC releases a data packet ready at t at
    ``max(t, held until)`` (``release_bound``). ``links``: ``State.links``."""
    decided_ps, paused_history = links.pfc_decided_ps[ports], links.pfc_paused[ports]
    effective_ps = decided_ps + params.links.link_delay_ps[ports][:, None]  # (K, L), chronological
    # Slots never written (decided < 0, all "resume") come first, so the decisions in
    # effect by then form a prefix of the history; the last of them holds.
    in_effect = (decided_ps < 0) | (effective_ps <= from_ps[:, None])
    n_in_effect = jnp.sum(in_effect, axis=1)
    latest = jnp.take_along_axis(paused_history, jnp.maximum(n_in_effect - 1, 0)[:, None], axis=1)[:, 0]
    paused = (n_in_effect > 0) & latest
    # Decisions not yet in effect arrive later, in order: the first resume among them.
    resume_ps = jnp.min(jnp.where(~in_effect & ~paused_history, effective_ps, NEVER), axis=1)
    next_pause_ps = jnp.min(jnp.where(~in_effect & paused_history, effective_ps, NEVER), axis=1)
    return jnp.where(paused, resume_ps, from_ps), next_pause_ps


def release_bound(held_until_ps, next_pause_ps, earliest_ps):
    """``release_ps`` of ``earliest_ps`` (at or after the instant ``held_until_ps`` was
    seen from; arrays alike, or broadcasting), exact where (bool, alike) it is before the
    next pause (``held_until_ps``); elsewhere ``earliest_ps``, a lower bound (the release is
    at or after it, and after the next pause)."""
    exact = earliest_ps < next_pause_ps
    return jnp.where(exact, jnp.maximum(earliest_ps, held_until_ps), earliest_ps), exact


def counted_until_ps(params: Params, pkts):
    """(S,) bool packets that count for their switch's ingress, and (S,) int64 until when
    (meaningful for those in flight, which have left the switch): the start of their
    departure (``switch.pfc_release=dequeue``) or its end, last bit sent (``sent``)."""
    links = params.links
    counted = pkts.pkt_valid & (pkts.pkt_ingress >= 0) & (~pkts.pkt_is_ack | params.ack_in_data_class)
    ser_ps = link_serialization_ps(params, pkts.pkt_bytes, pkts.pkt_port)
    sent_ps = pkts.pkt_time_ps - links.link_delay_ps[pkts.pkt_port]  # the last bit leaves: arrival - delay
    return counted, jnp.where(params.pfc_count_until_sent, sent_ps, sent_ps - ser_ps)


def next_release_ps(params: Params, state: State, window_end_ps):
    """() the next instant a packet that has left stops counting for its ingress, after this
    window (NEVER if none): the clock must not jump over it (only ``pfc_release=sent``
    releases after the window of the departure)."""
    counted, until_ps = counted_until_ps(params, state.packets)
    pending = counted & state.packets.pkt_in_flight & (until_ps >= window_end_ps)
    return jnp.min(jnp.where(pending, until_ps, NEVER))
