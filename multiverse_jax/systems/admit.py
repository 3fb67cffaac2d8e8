"""Admit: the polls of the senders that began during the window (hpcc.pacing=ticks).

``systems/cc.py`` runs every poll of the window in time order with the ACKs, for the
flows that had begun by then; a flow that ``complete`` or ``schedule`` starts during the
window polls from its start (htsim's ``startflow``), and those polls run here, before
the NICs transmit. Such a flow has no ACK in this window, so its rate and window are
those it started with (``ops/polls.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops import polls


def admit(params: Params, state: State, window_end_ps) -> State:
    acked = state.flows.flow_acked_packets

    def due(p: polls.Polls):
        at_ps = polls.due_ps(params, state, p)
        return at_ps, at_ps < window_end_ps

    def one_poll(p: polls.Polls) -> polls.Polls:
        at_ps, is_due = due(p)
        return polls.poll_and_skip(params, state.cc, acked, p, at_ps, is_due, jnp.full_like(at_ps, window_end_ps))

    p = jax.lax.while_loop(lambda p: jnp.any(due(p)[1]), one_poll, polls.of_state(state))
    return polls.into_state(state, p)
