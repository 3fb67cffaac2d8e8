"""Task graphs on the host: what training-iteration workloads (generators, importers)
produce and the engine's ``schedule`` system runs.

A task runs on one GPU (a network host, after placement) and is one of:

* ``TASK_DELAY``: takes a fixed time -- GPU compute, or an intra-server collective priced
  by the analytical model, or a zero-length join;
* ``TASK_FLOW``: sends ``size_bytes`` from its GPU to ``peer`` over the network (one flow);
  it finishes when the receiver has the last byte, so tasks on the receiving side depend
  on it directly (a "recv" is the same task seen from the other end).

A task starts when every task it depends on has finished (its explicit ``deps``, plus the
previous task of the same GPU stream when it has one: a stream runs its tasks in issue
order, like a CUDA / NCCL stream; compute and communication streams are separate, so they
overlap). Start and finish times are exact: a flow task's flow starts at its task's start.

``TaskGraphBuilder`` is the API importers and generators use; ``build()`` validates (every
dependency exists, no cycles) and returns an immutable ``TaskGraph``.
"""

from __future__ import annotations

import dataclasses
import graphlib
from collections.abc import Iterable

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.workload.flows import FlowSet, make_flows

TASK_DELAY, TASK_FLOW = 0, 1
STREAM_COMPUTE, STREAM_COMM = 0, 1  # stream ids used by the generators (any small int is a stream)
NO_STREAM = -1  # ordered only by explicit dependencies
MAX_FANIN = 16  # a task waiting on more tasks waits on zero-length joins of at most this many


@dataclasses.dataclass(frozen=True)
class TaskGraph:
    """T tasks on ``n_gpus`` GPUs. Arrays (T,) unless noted."""

    kind: np.ndarray  # int8 TASK_DELAY | TASK_FLOW
    gpu: np.ndarray  # int32 the GPU that runs it (the sender, for a flow task)
    peer: np.ndarray  # int32 flow task: the receiving GPU (-1 otherwise)
    size_bytes: np.ndarray  # int64 flow task: bytes to send (0 otherwise)
    duration_ps: np.ndarray  # int64 delay task: how long it takes (0 for flow tasks)
    stream: np.ndarray  # int8 stream on its GPU (NO_STREAM: explicit dependencies only)
    prio: np.ndarray  # int32 flow task: priority class of its flow (0 highest)
    deps: np.ndarray  # (T, D) int32 tasks it waits for (explicit + stream predecessor), -1 padded
    category: np.ndarray  # (T,) object short label: "compute", "tp", "dp", "pp", "ep", ... (for reports)
    name: np.ndarray  # (T,) object task name (from the input, for reports and errors)
    line: np.ndarray  # (T,) int32 input line (0 when built in Python)
    n_gpus: int
    source: str = "<python>"

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @classmethod
    def empty(cls) -> "TaskGraph":
        """No tasks (an experiment whose flows start by time or trigger)."""
        none = np.zeros(0, np.int64)
        return cls(
            kind=none.astype(np.int8), gpu=none.astype(np.int32), peer=none.astype(np.int32), size_bytes=none,
            duration_ps=none, stream=none.astype(np.int8), prio=none.astype(np.int32),
            deps=np.zeros((0, 1), np.int32), category=none.astype(object), name=none.astype(object),
            line=none.astype(np.int32), n_gpus=0,
        )

    @property
    def flow_tasks(self) -> np.ndarray:
        """Indices of the flow tasks, in order: flow i of ``flow_set()`` is task ``flow_tasks[i]``."""
        return np.flatnonzero(self.kind == TASK_FLOW)

    def flow_set(self, gpu_to_host: np.ndarray | None = None) -> FlowSet:
        """The flows of the flow tasks (start times are set by their tasks at run time); empty
        for a compute-only graph."""
        tasks = self.flow_tasks
        place = np.arange(self.n_gpus) if gpu_to_host is None else np.asarray(gpu_to_host)
        return dataclasses.replace(
            make_flows(place[self.gpu[tasks]], place[self.peer[tasks]], self.size_bytes[tasks], 0, flow_id=tasks, prio=self.prio[tasks]),
            source=self.source,
            line=self.line[tasks],
        )


@dataclasses.dataclass
class _Task:
    kind: int
    gpu: int
    peer: int
    size_bytes: int
    duration_ps: int
    stream: int
    prio: int
    deps: list[int]
    category: str
    name: str
    line: int


class TaskGraphBuilder:
    """Collects tasks; ids are consecutive ints in creation order."""

    def __init__(self, n_gpus: int, *, source: str = "<python>"):
        if n_gpus < 1:
            raise InputError(f"a workload needs at least one GPU, got {n_gpus}", source=source)
        self.n_gpus = n_gpus
        self.source = source
        self._tasks: list[_Task] = []
        self._last_in_stream: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def _check_gpu(self, gpu: int, what: str, line: int) -> None:
        if not 0 <= gpu < self.n_gpus:
            raise InputError(
                f"{what}: GPU {gpu} does not exist (valid: 0..{self.n_gpus - 1})", source=self.source, line=line or None
            )

    def _add(self, task: _Task) -> int:
        self._check_gpu(task.gpu, f"task {task.name!r}", task.line)
        deps = [int(d) for d in task.deps]
        if task.stream != NO_STREAM:
            previous = self._last_in_stream.get((task.gpu, task.stream))
            if previous is not None and previous not in deps:
                deps.append(previous)
        # Wide fan-in (an optimizer step after every gradient bucket) goes through a tree of
        # zero-length joins, so the engine's dependency table stays narrow.
        while len(deps) > MAX_FANIN:
            deps = [
                self._append(
                    _Task(TASK_DELAY, task.gpu, -1, 0, 0, NO_STREAM, 0, deps[i : i + MAX_FANIN], "join", f"{task.name}/join", task.line)
                )
                for i in range(0, len(deps), MAX_FANIN)
            ]
        task.deps = deps
        tid = self._append(task)
        if task.stream != NO_STREAM:
            self._last_in_stream[(task.gpu, task.stream)] = tid
        return tid

    def _append(self, task: _Task) -> int:
        self._tasks.append(task)
        return len(self._tasks) - 1

    def delay(
        self,
        gpu: int,
        duration_ps: int,
        deps: Iterable[int] = (),
        *,
        stream: int = STREAM_COMPUTE,
        category: str = "compute",
        name: str = "",
        line: int = 0,
    ) -> int:
        """A task that takes ``duration_ps`` on ``gpu`` (compute, an analytical collective, a join)."""
        if duration_ps < 0:
            raise InputError(f"task {name!r}: duration must be >= 0, got {duration_ps} ps", source=self.source, line=line or None)
        return self._add(_Task(TASK_DELAY, gpu, -1, 0, int(duration_ps), stream, 0, list(deps), category, name, line))

    def send(
        self,
        src_gpu: int,
        dst_gpu: int,
        size_bytes: int,
        deps: Iterable[int] = (),
        *,
        stream: int = STREAM_COMM,
        prio: int = 0,
        category: str = "comm",
        name: str = "",
        line: int = 0,
    ) -> int:
        """A flow of ``size_bytes`` from ``src_gpu`` to ``dst_gpu``; done when the receiver has it all."""
        self._check_gpu(dst_gpu, f"task {name!r}", line)
        if src_gpu == dst_gpu:
            raise InputError(f"task {name!r}: a send from GPU {src_gpu} to itself", source=self.source, line=line or None)
        if size_bytes <= 0:
            raise InputError(f"task {name!r}: size must be > 0 bytes, got {size_bytes}", source=self.source, line=line or None)
        return self._add(_Task(TASK_FLOW, src_gpu, dst_gpu, int(size_bytes), 0, stream, int(prio), list(deps), category, name, line))

    def build(self) -> TaskGraph:
        """Validate and freeze: dependencies must name existing tasks and form no cycle."""
        n = len(self._tasks)
        if n == 0:
            raise InputError("the workload has no tasks", source=self.source)
        width = max(1, max(len(t.deps) for t in self._tasks))
        deps = np.full((n, width), -1, np.int32)
        for i, t in enumerate(self._tasks):
            for j, d in enumerate(t.deps):
                if not 0 <= d < n:
                    raise InputError(
                        f"task {t.name or i!r} depends on task {d}, which does not exist (tasks: 0..{n - 1})",
                        source=self.source,
                        line=t.line or None,
                    )
                if d == i:
                    raise InputError(f"task {t.name or i!r} depends on itself", source=self.source, line=t.line or None)
                deps[i, j] = d
        _check_acyclic(deps, self._tasks, self.source)
        col = lambda f, dtype: np.array([getattr(t, f) for t in self._tasks], dtype)  # noqa: E731
        return TaskGraph(
            kind=col("kind", np.int8),
            gpu=col("gpu", np.int32),
            peer=col("peer", np.int32),
            size_bytes=col("size_bytes", np.int64),
            duration_ps=col("duration_ps", np.int64),
            stream=col("stream", np.int8),
            prio=col("prio", np.int32),
            deps=deps,
            category=col("category", object),
            name=col("name", object),
            line=col("line", np.int32),
            n_gpus=self.n_gpus,
            source=self.source,
        )


def _check_acyclic(deps: np.ndarray, tasks: list[_Task], source: str) -> None:
    """A cycle is an InputError listing the tasks on it.

    Tasks that depend only on earlier ones (what the builders make) cannot form a cycle;
    otherwise ``graphlib`` looks for one.
    """
    if (deps < np.arange(len(deps))[:, None]).all():  # padding (-1) too
        return
    sorter = graphlib.TopologicalSorter({i: row[row >= 0].tolist() for i, row in enumerate(deps)})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        names = " -> ".join(tasks[j].name or str(j) for j in cycle)
        raise InputError(
            f"the task dependencies have a cycle: {names} (each waits for the one before it)",
            source=source,
            line=tasks[cycle[0]].line or None,
        ) from None
