"""What ``multiverse-jax-report`` adds for a search (a sweep with ``SWEEP_DIR/search.json``,
written by ``hydra/sweeper=optuna``): the optimisation history and the Pareto front.

* ``optimization_history.png``: per objective, each trial's value against its trial number
  (the job number: Optuna numbers trials in the order it asks for them), the best so far as
  a step line, and the failed trials (invalid, oom, failed, or NaN objective) as crosses on
  the axis;
* ``pareto_front.png`` (two objectives or more; the first two are drawn): every ok trial,
  the non-dominated ones highlighted and joined.

The rows are the results table's: one per distinct design point (a point Optuna asks for
again is the same row).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from multiverse_jax.report.figure import new_figure, save
from multiverse_jax.sweep.search import best_so_far, pareto_front

HISTORY_FILE = "optimization_history.png"
PARETO_FILE = "pareto_front.png"


def _value(row: dict, name: str) -> float:
    value = row.get(name)
    return float(value) if isinstance(value, (int, float)) and row.get("status") == "ok" else math.nan


def trial_rows(table: pa.Table) -> list[dict]:
    """The table's rows in trial order (job number)."""
    return table.sort_by("job_num").to_pylist()


def front_rows(table: pa.Table, search: dict) -> list[dict]:
    """The ok rows on the Pareto front of the search's objectives, in trial order."""
    objectives = search["objectives"]
    rows = [r for r in trial_rows(table) if all(math.isfinite(_value(r, name)) for name in objectives)]
    points = [[_value(r, name) for name in objectives] for r in rows]
    return [rows[i] for i in pareto_front(points, search["directions"])]


def plot_history(table: pa.Table, search: dict, path) -> Path:
    rows = trial_rows(table)
    objectives, directions = search["objectives"], search["directions"]
    fig = new_figure(7, 2.8 * len(objectives), dpi=110)
    trial = np.array([r["job_num"] for r in rows], float)
    for k, (name, direction) in enumerate(zip(objectives, directions)):
        ax = fig.add_subplot(len(objectives), 1, k + 1)
        values = np.array([_value(r, name) for r in rows])
        ok = np.isfinite(values)
        ax.scatter(trial[ok], values[ok], s=16, alpha=0.7, label="trial")
        ax.step(trial, best_so_far(values, direction), where="post", color="crimson", lw=1.4, label=f"best so far ({direction})")
        if (~ok).any():
            low = np.nanmin(values) if ok.any() else 0.0
            ax.scatter(trial[~ok], np.full((~ok).sum(), low), marker="x", color="grey", label="failed trial")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    ax.set_xlabel("trial (job number)")
    fig.suptitle(f"search: {len(rows)} distinct points, sampler {search.get('sampler', '?')}")
    return save(fig, path)


def plot_front(table: pa.Table, search: dict, path) -> Path:
    x_name, y_name = search["objectives"][:2]
    rows = [r for r in trial_rows(table) if math.isfinite(_value(r, x_name)) and math.isfinite(_value(r, y_name))]
    front = sorted(front_rows(table, search), key=lambda r: _value(r, x_name))
    fig = new_figure(7, 5, dpi=110)
    ax = fig.add_subplot()
    ax.scatter([_value(r, x_name) for r in rows], [_value(r, y_name) for r in rows], s=16, alpha=0.5, label="trial")
    fx, fy = [_value(r, x_name) for r in front], [_value(r, y_name) for r in front]
    ax.plot(fx, fy, color="crimson", lw=1.2)
    ax.scatter(fx, fy, s=70, facecolors="none", edgecolors="crimson", lw=1.5, label=f"Pareto front ({len(front)})")
    directions = search["directions"]
    ax.set_xlabel(f"{x_name} ({directions[0]})")
    ax.set_ylabel(f"{y_name} ({directions[1]})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return save(fig, path)


def write_search_plots(table: pa.Table, search: dict, out_dir: Path) -> dict[str, Path]:
    files = {"optimization_history": plot_history(table, search, out_dir / HISTORY_FILE)}
    if len(search["objectives"]) >= 2:
        files["pareto_front"] = plot_front(table, search, out_dir / PARETO_FILE)
    return files
