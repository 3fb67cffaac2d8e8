"""Completion: completed flows activate their triggers, which start waiting flows; the
experiment is done when every flow has its last ACK.

Trigger semantics (htsim): flow f waiting on trigger t starts at the
``flow_trigger_rank[f]``-th earliest activation of t (oneshot: the first; barrier: the
count-th; multishot: one more per waiting flow, in input order). Activations are the
completion times of t's activating flows, so the start time is exact, even when it falls
inside the current window.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.units import NEVER


def complete(params: Params, state: State, window_end_ps) -> State:
    """Start the flows whose trigger fired (``window_end_ps`` unused: activations carry their own times)."""
    fp, flows = params.flows, state.flows
    activator = jnp.maximum(fp.trigger_activator, 0)
    activated_ps = jnp.where(
        fp.trigger_activator_is_recv, flows.flow_rx_finish_ps[activator], flows.flow_finish_ps[activator]
    )
    activated_ps = jnp.sort(jnp.where(fp.trigger_activator >= 0, activated_ps, NEVER), axis=-1)  # (T, A)
    trigger = jnp.maximum(fp.flow_trigger, 0)
    rank = jnp.clip(fp.flow_trigger_rank - 1, 0, params.static.n_activators - 1)
    fired_ps = activated_ps[trigger, rank]
    begin = jnp.where(fp.flow_trigger >= 0, jnp.minimum(flows.flow_begin_ps, fired_ps), flows.flow_begin_ps)
    done = jnp.all(~fp.flow_valid | (flows.flow_finish_ps != NEVER))
    return state.replace(flows=flows.replace(flow_begin_ps=begin), done=done)
