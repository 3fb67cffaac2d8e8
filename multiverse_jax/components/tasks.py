"""Tasks: the per-GPU task DAG of a training iteration (``workload/tasks.py`` builds it).

A delay task takes a fixed time; a flow task is one flow and finishes when its receiver
has the last byte. Experiments without a task graph carry one invalid dummy task.
"""

from __future__ import annotations

import chex
from flax import struct
import numpy as np

from multiverse_jax.components.padding import pad
from multiverse_jax.components.static import Static
from multiverse_jax.experiment import Experiment
from multiverse_jax.units import NEVER
from multiverse_jax.workload.tasks import TASK_FLOW, TaskGraph


@struct.dataclass
class TaskParams:
    task_valid: chex.Array  # (T,) bool False for padding
    task_is_flow: chex.Array  # (T,) bool a flow task (else a delay task)
    task_duration_ps: chex.Array  # (T,) int64 delay tasks: how long they take
    task_flow: chex.Array  # (T,) int32 flow tasks: their flow (-1 otherwise)
    task_deps: chex.Array  # (T, D) int32 tasks it waits for (-1 padded)
    task_gpu: chex.Array  # (T,) int32 the host it runs on
    task_is_compute: chex.Array  # (T,) bool a compute task (may be slowed by overlapping communication)
    task_is_comm: chex.Array  # (T,) bool a communication task that takes time (flow, analytical collective)
    compute_slowdown: chex.Array  # () float64 factor on a compute task that starts while its GPU communicates


@struct.dataclass
class TaskState:
    task_start_ps: chex.Array  # (T,) int64 when it started (NEVER until known)
    task_finish_ps: chex.Array  # (T,) int64 when it finished (NEVER until known)


def task_params(exp: Experiment, s: Static) -> TaskParams:
    """The experiment's task graph padded to T tasks (none at all: every task is padding)."""
    graph, n = exp.tasks, s.n_tasks
    if graph is None:
        graph = TaskGraph.empty()
    is_flow = graph.kind == TASK_FLOW
    flow_of_task = np.full(len(graph), -1, np.int32)
    flow_of_task[graph.flow_tasks] = np.arange(graph.flow_tasks.size, dtype=np.int32)
    is_compute = graph.category == "compute"
    return TaskParams(
        task_valid=pad(np.ones(len(graph), bool), (n,), False),
        task_is_flow=pad(is_flow, (n,), False),
        task_duration_ps=pad(graph.duration_ps.astype(np.int64), (n,), 0),
        task_flow=pad(flow_of_task, (n,), -1),
        task_deps=pad(graph.deps.astype(np.int32), (n, s.task_deps), -1),
        task_gpu=pad(graph.gpu.astype(np.int32), (n,), 0),
        task_is_compute=pad(is_compute, (n,), False),
        task_is_comm=pad(~is_compute & (is_flow | (graph.duration_ps > 0)), (n,), False),
        compute_slowdown=np.float64(exp.workload.compute_slowdown),
    )


def initial_task_state(s: Static) -> TaskState:
    return TaskState(task_start_ps=np.full(s.n_tasks, NEVER, np.int64), task_finish_ps=np.full(s.n_tasks, NEVER, np.int64))
