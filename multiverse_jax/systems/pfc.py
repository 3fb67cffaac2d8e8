"""PFC (802.1Qbb-style, one lossless data class): per-ingress pause and resume.

A switch counts, per ingress link, the data bytes it holds that arrived over that link.
At the end of every window it compares that count with the link's XOFF / XON thresholds
(hysteresis: above XOFF -> pause, below XON -> resume, else unchanged) and sends the
decision upstream; the frame takes the link delay to arrive, and from then on the
upstream port starts no data packet while paused (control packets are never paused).
Deciding at window ends makes a pause up to one window (the smallest link delay) later
than a per-packet check would; XOFF headroom must cover that window plus the round trip,
which the defaults do. No packet is ever dropped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.units import NEVER
from multiverse_jax.systems.common import count_by


def release_ps(params: Params, state: State, earliest_ps):
    """(P,) the first time >= earliest_ps[p] at which port p may start a data packet.

    ``earliest_ps`` must not precede the window start: the history reaches back to the
    decision in effect then (``Static.pfc_history`` covers the longest link delay).
    """
    links = state.links
    effective_ps = links.pfc_decided_ps + params.links.link_delay_ps[:, None]  # (P, L), chronological
    # Slots never written (decided < 0, all "resume") come first, so the decisions in
    # effect by then form a prefix of the history; the last of them holds.
    in_effect = (links.pfc_decided_ps < 0) | (effective_ps <= earliest_ps[:, None])
    n_in_effect = jnp.sum(in_effect, axis=1)
    latest = jnp.take_along_axis(links.pfc_paused, jnp.maximum(n_in_effect - 1, 0)[:, None], axis=1)[:, 0]
    paused = (n_in_effect > 0) & latest
    # Decisions not yet in effect arrive later, in order: the first resume among them.
    resume_ps = jnp.min(jnp.where(~in_effect & ~links.pfc_paused, effective_ps, NEVER), axis=1)
    return jnp.where(paused, resume_ps, earliest_ps)


def pfc(params: Params, state: State, window_end_ps) -> State:
    with jax.named_scope("pfc"):
        pkts, links = state.packets, state.links
        n_ports = params.links.link_delay_ps.shape[0]
        held = pkts.pkt_valid & ~pkts.pkt_in_flight & ~pkts.pkt_is_ack & (pkts.pkt_ingress >= 0)
        ingress_bytes = count_by(held, pkts.pkt_ingress, n_ports, pkts.pkt_bytes.astype(jnp.int64))
        before = links.pfc_paused[:, -1]
        after = jnp.where(
            ingress_bytes > params.links.link_pfc_xoff_bytes,
            True,
            jnp.where(ingress_bytes < params.links.link_pfc_xon_bytes, False, before),
        )
        after = after & params.links.link_into_switch
        decided = jnp.broadcast_to(window_end_ps, (n_ports, 1)).astype(jnp.int64)
        links = links.replace(
            pfc_decided_ps=jnp.concatenate([links.pfc_decided_ps[:, 1:], decided], axis=1),
            pfc_paused=jnp.concatenate([links.pfc_paused[:, 1:], after[:, None]], axis=1),
            pfc_pause_count=links.pfc_pause_count + (after & ~before),
        )
        return state.replace(links=links)
