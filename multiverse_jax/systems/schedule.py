"""Schedule: tasks whose dependencies have finished start; delay tasks finish after their
duration, flow tasks when their flow's receiver has the last byte; a flow task's flow
starts when its task starts.

Times are exact and may lie in the future: a chain of delay tasks resolves in one pass
(a loop until nothing changes), and a flow that starts later waits at its NIC like any
flow with a later start. A task starts at the latest finish of its dependencies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import NEVER, Params, State


def schedule(params: Params, state: State) -> State:
    with jax.named_scope("schedule"):
        tp, ts, flows = params.tasks, state.tasks, state.flows
        has_dep = tp.task_deps >= 0
        flow_rx_finish = flows.flow_rx_finish_ps[jnp.maximum(tp.task_flow, 0)]

        def resolve(carry):
            start, finish, _ = carry
            dep_finish = jnp.where(has_dep, finish[jnp.maximum(tp.task_deps, 0)], 0)
            ready_ps = jnp.max(dep_finish, axis=1)  # NEVER while a dependency is unfinished
            new_start = jnp.where(tp.task_valid & (start == NEVER), ready_ps, start)
            own_finish = jnp.where(tp.task_is_flow, flow_rx_finish, new_start + tp.task_duration_ps)
            new_finish = jnp.where((finish == NEVER) & (new_start != NEVER), own_finish, finish)
            changed = jnp.any(new_start != start) | jnp.any(new_finish != finish)
            return new_start, new_finish, changed

        start, finish, _ = jax.lax.while_loop(
            lambda carry: carry[2], resolve, (ts.task_start_ps, ts.task_finish_ps, jnp.bool_(True))
        )
        fp = params.flows
        task_start = start[jnp.maximum(fp.flow_task, 0)]
        begin = jnp.where(fp.flow_task >= 0, task_start, flows.flow_begin_ps)
        all_done = jnp.all(~tp.task_valid | (finish != NEVER))
        return state.replace(
            tasks=ts.replace(task_start_ps=start, task_finish_ps=finish),
            flows=flows.replace(flow_begin_ps=begin),
            done=state.done & all_done,
        )


def last_finish_ps(params: Params, state: State):
    """() the latest known task finish (0 without tasks)."""
    finish = state.tasks.task_finish_ps
    return jnp.max(jnp.where(params.tasks.task_valid & (finish != NEVER), finish, 0))
