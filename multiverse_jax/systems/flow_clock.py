"""Flow clock: the bookkeeping of the flow-level step (``sim.mode=flow``). ``fluid`` has
already moved the clock to the next event; this counts the event, stops a finished
experiment's clock at its last event, and fails one that passed ``sim.max_time_us``."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import ERROR_TIME_LIMIT, Params, State
from multiverse_jax.units import NEVER


def flow_clock(params: Params, state: State, window_end_ps) -> State:
    """One window per event stepped (``window_end_ps`` unused)."""
    stepped = ~state.done & (state.error == 0)
    # A finished experiment ends at its last event: the last ACK of its last flow, or its last task.
    flow_finish = state.flows.flow_finish_ps
    task_finish = state.tasks.task_finish_ps
    last_flow = jnp.max(jnp.where(params.flows.flow_valid & (flow_finish != NEVER), flow_finish, 0))
    last_task = jnp.max(jnp.where(params.tasks.task_valid & (task_finish != NEVER), task_finish, 0))
    time_ps = jnp.where(state.done, jnp.maximum(state.time_ps, jnp.maximum(last_flow, last_task)), state.time_ps)
    over_time = ~state.done & (time_ps > params.max_time_ps)
    return state.replace(
        time_ps=time_ps,
        n_windows=state.n_windows + stepped.astype(jnp.int64),
        error=state.error | jnp.where(over_time, ERROR_TIME_LIMIT, 0),
    )
