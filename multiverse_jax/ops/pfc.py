"""PFC as the upstream port sees it: when a paused port may start a data packet
(``systems/pfc.py`` takes the decisions)."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.units import NEVER


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
