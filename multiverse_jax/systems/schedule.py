"""Schedule: tasks whose dependencies have finished start; delay tasks finish after their
duration, flow tasks when their flow's receiver has the last byte; a flow task's flow
starts when its task starts.

Times are exact and may lie in the future: a chain of delay tasks resolves in one pass
(a loop until nothing changes), and a flow that starts later waits at its NIC like any
flow with a later start. A task starts at the latest finish of its dependencies.

Compute slowed by communication (``workload.compute_slowdown``, Multiverse §4.1): a
compute task that starts while a communication task of its GPU is in flight takes
``compute_slowdown`` times its duration. "In flight" is judged from what is known when the
compute task's start is decided (a communication task whose own start is decided later
does not count): an approximation, like the fixed factor itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.units import NEVER


def schedule(params: Params, state: State, window_end_ps) -> State:
    """Resolve task starts and finishes (``window_end_ps`` unused: task times are exact, not windowed)."""
    tp, ts, flows = params.tasks, state.tasks, state.flows
    has_dep = tp.task_deps >= 0
    flow_rx_finish = flows.flow_rx_finish_ps[jnp.maximum(tp.task_flow, 0)]

    def resolve(carry):
        start, finish, _ = carry
        dep_finish = jnp.where(has_dep, finish[jnp.maximum(tp.task_deps, 0)], 0)
        ready_ps = jnp.max(dep_finish, axis=1)  # NEVER while a dependency is unfinished
        new_start = jnp.where(tp.task_valid & (start == NEVER), ready_ps, start)
        slowed = jax.lax.cond(
            tp.compute_slowdown != 1.0,
            lambda: communicating(tp, start, finish, new_start),
            lambda: jnp.zeros_like(tp.task_valid),
        )
        duration = jnp.where(
            slowed & tp.task_is_compute,
            jnp.ceil(tp.task_duration_ps * tp.compute_slowdown).astype(jnp.int64),
            tp.task_duration_ps,
        )
        own_finish = jnp.where(tp.task_is_flow, flow_rx_finish, new_start + duration)
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


TIME_BITS = 40  # ns since the start: 2^40 ns ~ 18 minutes of simulated time


def communicating(tp, start, finish, at_ps):
    """(T,) whether task i's GPU has a communication task in flight at ``at_ps[i]``
    (started at or before it, not finished by then; unknown finish = still running).

    Per GPU, (communication tasks started by t) - (finished by t), both counted with a
    binary search in keys gpu * 2^40 + time in ns.
    """
    scale = jnp.int64(1) << TIME_BITS
    gpu = tp.task_gpu.astype(jnp.int64) * scale
    top = scale - 1

    def ns(ps):
        return jnp.minimum(jnp.where(ps == NEVER, top, ps // 1000), top)

    started = tp.task_is_comm & (start != NEVER)
    finished = started & (finish != NEVER)
    start_keys = jnp.sort(jnp.where(started, gpu + ns(start), NEVER))
    finish_keys = jnp.sort(jnp.where(finished, gpu + ns(finish), NEVER))
    query = gpu + ns(at_ps)
    n_started = jnp.searchsorted(start_keys, query, side="right") - jnp.searchsorted(start_keys, gpu, side="left")
    n_finished = jnp.searchsorted(finish_keys, query, side="right") - jnp.searchsorted(finish_keys, gpu, side="left")
    return (at_ps != NEVER) & (n_started > n_finished)

