"""Training-iteration results of a task experiment: the per-task table, the iteration
time and its split into compute, exposed communication and bubbles, and a Gantt chart.

Per GPU, over the iteration [0, T] (T = the last task's finish):
  compute        = time covered by its compute tasks (category "compute");
  exposed comm   = time covered by its communication tasks (everything else that takes
                   time: flows it sends, analytical collectives) but by no compute task;
  bubble         = T - compute - exposed comm (the GPU waits on others).
The summary reports the mean over GPUs of each (and they add up to T).
"""

from __future__ import annotations

import numpy as np

from multiverse_jax.report.figure import new_figure, save
from multiverse_jax.units import NOT_YET_PS, ps_or_not_yet, us_from_ps
from multiverse_jax.workload.tasks import TASK_FLOW, TaskGraph


def task_columns(graph: TaskGraph, start_ps: np.ndarray, finish_ps: np.ndarray) -> dict[str, np.ndarray]:
    """One row per task: times in float64 µs (NaN if it never ran) and exact int64 ps
    (``start_ps``, ``finish_ps``; ``NOT_YET_PS`` = -1 if it never ran)."""
    return {
        "task": np.arange(len(graph)),
        "name": graph.name.astype(str),
        "category": graph.category.astype(str),
        "kind": np.where(graph.kind == TASK_FLOW, "flow", "delay"),
        "gpu": graph.gpu,
        "peer": graph.peer,
        "stream": graph.stream.astype(np.int32),
        "size_bytes": graph.size_bytes,
        "start_us": us_from_ps(start_ps),
        "finish_us": us_from_ps(finish_ps),
        "start_ps": ps_or_not_yet(start_ps),
        "finish_ps": ps_or_not_yet(finish_ps),
    }


def _covered(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Union of intervals, as sorted disjoint intervals."""
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _length(intervals) -> float:
    return float(sum(b - a for a, b in intervals))


def _minus(intervals, removed) -> float:
    """Length of ``intervals`` not covered by ``removed`` (both disjoint and sorted)."""
    total = 0.0
    for a, b in intervals:
        covered = 0.0
        for c, d in removed:
            if d <= a or c >= b:
                continue
            covered += min(b, d) - max(a, c)
        total += (b - a) - covered
    return total


def iteration_split(columns: dict[str, np.ndarray], n_gpus: int) -> dict[str, float]:
    """Iteration time (µs, and exact ps) and the mean per-GPU compute / exposed comm / bubble, in µs."""
    finish = columns["finish_us"]
    if finish.size == 0 or np.all(np.isnan(finish)):
        return {"iteration_time_us": float("nan"), "iteration_time_ps": NOT_YET_PS}
    iteration = float(np.nanmax(finish))
    compute_us, comm_us = np.zeros(n_gpus), np.zeros(n_gpus)
    is_compute = columns["category"] == "compute"
    for g in range(n_gpus):
        mine = (columns["gpu"] == g) & ~np.isnan(columns["start_us"]) & ~np.isnan(finish)
        comp = _covered(list(zip(columns["start_us"][mine & is_compute], finish[mine & is_compute])))
        comm = _covered(list(zip(columns["start_us"][mine & ~is_compute], finish[mine & ~is_compute])))
        compute_us[g] = _length(comp)
        comm_us[g] = _minus(comm, comp)
    used = np.unique(columns["gpu"])
    compute, exposed = compute_us[used].mean(), comm_us[used].mean()
    return {
        "iteration_time_us": iteration,
        "iteration_time_ps": int(columns["finish_ps"].max()),
        "compute_us": float(compute),
        "exposed_comm_us": float(exposed),
        "bubble_us": float(iteration - compute - exposed),
    }


def plot_gantt(columns: dict[str, np.ndarray], path, title: str = "", max_gpus: int = 32) -> None:
    """Gantt chart: one row per (GPU, stream) of the first ``max_gpus`` GPUs, bars coloured by category."""
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    # Rows only for streams that hold time (zero-length joins and stream markers do not).
    ran = ~np.isnan(columns["start_us"]) & ~np.isnan(columns["finish_us"]) & (columns["finish_us"] > columns["start_us"])
    gpus = np.unique(columns["gpu"][ran])[:max_gpus]
    categories = sorted(set(columns["category"][ran]))
    palette = colormaps["tab10"]
    colours = {c: palette(i % 10) for i, c in enumerate(categories)}
    rows = [(g, s) for g in gpus for s in np.unique(columns["stream"][ran & (columns["gpu"] == g)])]
    fig = new_figure(12, max(2.5, 0.28 * len(rows) + 1.2), dpi=110)
    ax = fig.add_subplot()
    for y, (g, s) in enumerate(rows):
        sel = ran & (columns["gpu"] == g) & (columns["stream"] == s)
        for c in categories:
            pick = sel & (columns["category"] == c)
            if np.any(pick):
                start = columns["start_us"][pick]
                width = np.maximum(columns["finish_us"][pick] - start, 1e-3)
                ax.broken_barh(list(zip(start, width)), (y - 0.4, 0.8), facecolors=colours[c])
    stream_name = {0: "compute", -1: "network"}  # -1: flows and hops of collectives (explicit dependencies only)
    ax.set_yticks(range(len(rows)), [f"gpu{g} {stream_name.get(int(s), f'stream {s}')}" for g, s in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("time (µs)")
    ax.set_title(title or "task timeline")
    handles = [Rectangle((0, 0), 1, 1, color=colours[c]) for c in categories]
    if handles:
        ax.legend(handles, categories, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    save(fig, path)
