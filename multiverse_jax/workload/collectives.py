"""Collectives -> tasks, as NCCL runs them (API; implementation in progress).

``collective(builder, kind, gpus, size_bytes, deps, cfg)`` expands one collective over the
GPUs ``gpus`` into tasks of a ``TaskGraphBuilder`` and returns, per GPU, the id of a task
that finishes when that GPU's part of the collective is done.

Sizes follow NCCL's conventions: ``all_reduce`` -- the buffer each rank reduces;
``all_gather`` -- the gathered output (each rank contributes size/n); ``reduce_scatter``
-- each rank's input (each ends with size/n); ``all_to_all`` -- the bytes each rank sends
in total (size/n to every rank); ``broadcast`` -- the buffer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from multiverse_jax.workload.tasks import STREAM_COMM, TaskGraphBuilder

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


@dataclasses.dataclass(frozen=True)
class CommConfig:
    """How collectives are run."""

    channels: int = 1  # NCCL channels: parallel rings, each moving 1/channels of the data
    gpus_per_server: int = 1  # GPUs g*s .. g*s+s-1 share server g (NVLink); 1: one GPU per server
    hierarchical: bool = True  # multi-GPU servers: intra-server RS, inter-server ring per rail, intra AG
    intra: object | None = None  # the intra-server alpha-beta model (``intra_server.IntraServerModel``)


def collective(
    builder: TaskGraphBuilder,
    kind: str,
    gpus: Sequence[int],
    size_bytes: int,
    deps: Mapping[int, Sequence[int]] | Sequence[int],
    cfg: CommConfig = CommConfig(),
    *,
    category: str = "comm",
    name: str = "",
    line: int = 0,
    stream: int = STREAM_COMM,
) -> dict[int, int]:
    """Tasks of one collective; returns {gpu: task id that ends its part}."""
    raise NotImplementedError("collectives: being implemented")
