"""Many design points as a few batched simulations: grouping by static shape, chunking.

A batch runs one compiled program whose array shapes (``Static``) are the largest of its
experiments. Points of very different sizes in one batch would pad the small ones to the
big ones' shapes and waste work; one batch per exact shape would compile once per shape.
So points are grouped by a *bucket* of their shapes: every size is rounded up to the
next value of the half-octave grid 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (at most 1.5x, on
average about 1.2x padding per size), and the points of one bucket run as one batch
padded to the largest exact shape among them (a bucket whose points all share one shape
is not padded at all, so its results equal single runs bit for bit).

A group larger than what fits in memory runs in chunks of equal size (the last chunk
padded with copies of its last point, whose results are dropped), so every chunk of a
group reuses the group's one compiled program.

``simulate_many`` is the Python API (scripts such as ``experiments/topology_search.py``);
the batched Hydra launcher (``sweep/launcher.py``) uses the same functions.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, Sequence

import jax
import numpy as np

from multiverse_jax.conf.schema import STEPS_PER_CALL
from multiverse_jax.batch import build_batch, needed_static
from multiverse_jax.experiment import Experiment
from multiverse_jax.components.static import Static

# Static fields that are entity counts (padded to buckets); the others (slots per host,
# PFC history, priority classes, time-series ring, the flow-level step) are kept exact:
# they are small, and a different value is a different kind of experiment rather than a
# different size (so sim.mode=flow points never share a batch with packet or hybrid ones).
BUCKETED_FIELDS = (
    "n_nodes", "n_hosts", "n_ports", "n_flows", "n_triggers", "n_activators", "route_width",
    "pinned_len", "int_hops", "n_tasks", "task_deps", "path_len",
)
# Static fields that compile a system in or out: a group never splits on them, its union
# compiles the system in where any member needs it (a sweep over cc=none,dcqcn is one
# program, its points without congestion control running the cc system to no effect).
JOINED_FIELDS = ("congestion_control",)
WORKING_SET_FACTOR = 4  # device memory of a running batch / size of its params + state (estimate)


def bucket(n: int) -> int:
    """``n`` rounded up to the half-octave grid 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, ..."""
    if n <= 2:
        return max(n, 1)
    power = 2 ** (math.ceil(math.log2(n)) - 1)  # n in (power, 2 power]
    return 3 * power // 2 if n <= 3 * power // 2 else 2 * power


def exact_static(experiment: Experiment, *, slots_per_host: int = 256, steps_per_call: int = STEPS_PER_CALL, **_) -> Static:
    """The shapes ``build_batch`` gives ``experiment`` alone (``simulate``'s defaults)."""
    return needed_static([experiment], slots_per_host=slots_per_host, n_samples=steps_per_call)


def bucket_of(static: Static) -> Static:
    """The key a point is grouped by: its counts bucketed, its ``JOINED_FIELDS`` ignored."""
    joined = {f: True for f in JOINED_FIELDS}
    return dataclasses.replace(static, **{f: bucket(getattr(static, f)) for f in BUCKETED_FIELDS}, **joined)


def union(statics: Sequence[Static]) -> Static:
    """The smallest shapes that hold every one of ``statics``."""
    return Static(**{f.name: max(getattr(s, f.name) for s in statics) for f in dataclasses.fields(Static)})


@dataclasses.dataclass(frozen=True)
class Group:
    """Points that run as one compiled program."""

    static: Static  # shapes of the batch (the union of the members' exact shapes)
    options: dict  # keyword arguments of ``simulate`` shared by the members
    members: tuple[int, ...]  # indices of the points, in input order


def make_groups(experiments: Sequence[Experiment], options: Sequence[dict]) -> list[Group]:
    """Group points by (bucket of their shapes, simulate options), in order of first appearance.

    Timed link events do not split groups: a point is keyed by its shapes without its
    events, and the group pads every member to the most epochs of any (so a sweep over
    timed failures and the healthy fabric is one program)."""
    buckets: dict = {}
    exact = []
    for i, (experiment, opts) in enumerate(zip(experiments, options)):
        exact.append(exact_static(experiment, **opts))
        keyed = exact[-1]
        if experiment.link_events:
            keyed = exact_static(dataclasses.replace(experiment, link_events=(), ecmp=experiment.routing), **opts)
        key = (bucket_of(keyed), tuple(sorted((k, str(v)) for k, v in opts.items())))
        buckets.setdefault(key, []).append(i)
    return [
        Group(static=union([exact[i] for i in members]), options=dict(options[members[0]]), members=tuple(members))
        for members in buckets.values()
    ]


def device_memory_bytes() -> int:
    """Memory of the default device: the accelerator's limit, or the machine's RAM on a CPU."""
    stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def batch_bytes_per_point(experiment: Experiment, static: Static, slots_per_host: int, steps_per_call: int) -> int:
    """Bytes of one point's params + state at ``static`` (built on the host, not the device)."""
    batch = build_batch([experiment], slots_per_host=slots_per_host, static=static, n_samples=steps_per_call)
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves((batch.params, batch.state)))


def largest_batch(
    group: Group, experiments: Sequence[Experiment], *, max_batch_size: int | None, memory_fraction: float
) -> int:
    """The most points of ``group`` one batched call may hold: ``max_batch_size``, or as
    many as fit in ``memory_fraction`` of the device memory (``WORKING_SET_FACTOR`` x
    params + state per point)."""
    if max_batch_size is not None:
        return max(1, max_batch_size)
    per_point = batch_bytes_per_point(
        experiments[group.members[0]],
        group.static,
        group.options.get("slots_per_host", 256),
        group.options.get("steps_per_call", STEPS_PER_CALL),
    )
    return max(1, int(memory_fraction * device_memory_bytes() // (WORKING_SET_FACTOR * per_point)))


def chunk_size(
    group: Group, experiments: Sequence[Experiment], *, max_batch_size: int | None, memory_fraction: float
) -> int:
    """Points per batched call: all of the group, at most ``largest_batch``."""
    largest = largest_batch(group, experiments, max_batch_size=max_batch_size, memory_fraction=memory_fraction)
    return min(len(group.members), largest)


def chunks(members: Sequence[int], size: int) -> list[list[int]]:
    """``members`` in consecutive chunks of ``size``; the last one padded by repeating its
    last member (so every chunk has the same batch size and program)."""
    out = [list(members[i : i + size]) for i in range(0, len(members), size)]
    if len(out) > 1:
        out[-1] += [out[-1][-1]] * (size - len(out[-1]))
    return out


def run_chunk(
    experiments: Sequence[Experiment], static: Static, options: dict, on_progress=None, batch_size: int | None = None
) -> list:
    """Simulate one chunk; returns one Result or Exception per experiment.

    An exception for the batch as a whole (which validation should have prevented) is
    narrowed down by running each point alone, so one bad point cannot sink the others.
    """
    from multiverse_jax.simulate import simulate

    try:
        return simulate(list(experiments), static=static, on_progress=on_progress, batch_size=batch_size, **options)
    except Exception:  # noqa: BLE001 -- isolate the culprit below
        if len(experiments) == 1:
            raise
    out = []
    for experiment in experiments:
        try:
            out.append(simulate([experiment], static=static, **options)[0])
        except Exception as exc:  # noqa: BLE001 -- reported as this point's failure
            out.append(exc)
    return out


def simulate_many(
    experiments: Sequence[Experiment],
    options: dict | Sequence[dict] | None = None,
    *,
    max_batch_size: int | None = None,
    min_batch_size: int | None = None,
    memory_fraction: float = 0.5,
    ray_address: str | None = None,
    ray_options: dict | None = None,
    on_group_done: Callable[[Group, list[int], list], None] | None = None,
    on_progress: Callable[[object], None] | None = None,
) -> list:
    """Simulate any number of design points as a few batched programs.

    ``options``: keyword arguments of ``simulate`` (``slots_per_host``, ``steps_per_call``,
    ``batching``, ``devices``), one dict for all points or one per point. Returns one
    ``Result`` (or the ``Exception`` that point raised) per experiment, in input order.
    ``on_group_done(group, indices, results)`` is called as each chunk finishes (results
    of padding copies excluded); ``on_progress(state)`` after every compiled call (local
    runs only). ``ray_address``: run one Ray task per chunk on that cluster (see
    ``ray_backend.py``) instead of in this process.
    ``min_batch_size``: every chunk is padded to at least this many experiments (copies
    that start done and cost no steps; at most ``largest_batch``, even where the group
    has fewer points), so calls with different numbers of points reuse one compiled
    program: a search's asks, whatever number of their points is valid.
    """
    experiments = list(experiments)
    if options is None or isinstance(options, dict):
        options = [dict(options or {})] * len(experiments)
    groups = make_groups(experiments, options)
    out: list = [None] * len(experiments)

    def finished(group: Group, chunk: list[int], results) -> None:
        if isinstance(results, Exception):
            results = [results] * len(chunk)
        seen = set()
        indices, kept = [], []
        for i, result in zip(chunk, results):
            if i not in seen:  # drop the padding copies
                seen.add(i)
                indices.append(i)
                kept.append(result)
                out[i] = result
        if on_group_done is not None:
            on_group_done(group, indices, kept)

    work = []  # (group, chunk, batch size: the chunk padded to at least min_batch_size, at most the size that fits)
    for group in groups:
        limits = dict(max_batch_size=max_batch_size, memory_fraction=memory_fraction)
        size = chunk_size(group, experiments, **limits)
        padded = min(min_batch_size or 0, largest_batch(group, experiments, **limits))  # small groups too
        work += [(group, chunk, max(len(chunk), padded)) for chunk in chunks(group.members, size)]
    if ray_address is None:
        for group, chunk, batch_size in work:
            try:
                results = run_chunk([experiments[i] for i in chunk], group.static, group.options, on_progress, batch_size)
            except Exception as exc:  # noqa: BLE001 -- a one-point chunk that raised
                results = exc
            finished(group, chunk, results)
        return out

    from multiverse_jax.sweep.ray_backend import run_groups_on_ray

    jobs = [
        ([experiments[i] for i in chunk], dict(group.options, static=group.static, batch_size=batch_size))
        for group, chunk, batch_size in work
    ]
    run_groups_on_ray(
        jobs, ray_address, on_done=lambda j, results: finished(work[j][0], work[j][1], results), **(ray_options or {})
    )
    return out
