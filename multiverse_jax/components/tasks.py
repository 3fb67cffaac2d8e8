"""Tasks: the per-GPU task DAG of a training iteration (``workload/tasks.py`` builds it).

A delay task takes a fixed time; a flow task is one flow and finishes when its receiver
has the last byte. Experiments without a task graph carry one invalid dummy task.
"""

from __future__ import annotations

import chex
from flax import struct


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
