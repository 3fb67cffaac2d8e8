"""Searching a design space with Optuna: trials as batched programs, objectives from the
results table.

Two ways in, one set of helpers:

* ``multiverse-jax -m hydra/sweeper=optuna ...`` -- Hydra's Optuna sweeper asks for
  ``n_jobs`` trials at a time; ``ObjectiveLauncher`` wraps the batched launcher so that the
  trials of one ask run as one sweep (grouped by shape, one compiled program per group)
  and each trial's return value is its objective value(s), or a failure with its reason;
* ``experiments/topology_search.py --search`` -- Optuna's ask/tell in a script, each ask
  evaluated through ``simulate_many``.

The objectives are metric columns of the results table (``sweep/results.py``: ``METRICS``,
cost columns included); lower is not assumed -- each has its Optuna direction.
``pareto_front`` and ``best_so_far`` are what the report draws.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from multiverse_jax.errors import InputError
from multiverse_jax.sweep.results import METRICS, metrics_of

SEARCH_FILE = "search.json"  # SWEEP_DIR/search.json: {"objectives": [...], "directions": [...], ...}


class TrialFailed(Exception):
    """A trial told to Optuna as failed: the point is invalid, oom, failed, or its objective is NaN."""


def objective_names(objective: Any, n_directions: int) -> list[str]:
    """``hydra.sweeper.objective`` (a name or a list of names) checked against the metrics
    and the number of directions."""
    names = [objective] if isinstance(objective, str) else [str(name) for name in (objective or [])]
    unknown = [name for name in names if name not in METRICS]
    if unknown or not names:
        raise InputError(
            f"hydra.sweeper.objective: {', '.join(unknown) or 'nothing'} is not a metric of the results table; "
            f"valid: {', '.join(METRICS)}"
        )
    if len(names) != n_directions:
        raise InputError(
            f"hydra.sweeper.objective names {len(names)} metric(s) ({', '.join(names)}) but hydra.sweeper.direction "
            f"has {n_directions}: give one direction (minimize or maximize) per objective"
        )
    return names


def objective_values(summary: dict, objectives: Sequence[str]) -> list[float]:
    """The objective values of a point the launcher returned, or ``TrialFailed`` saying why not.

    ``summary`` is the launcher's return value: the run's summary, or for a point resumed
    from the table ``{"status", "error", "resumed", "metrics"}``.
    """
    status = summary.get("status")
    if status != "ok":
        raise TrialFailed(f"{status}: {summary.get('error') or 'no reason given'}")
    metrics = summary["metrics"] if summary.get("resumed") else metrics_of(summary)
    values = [float(metrics.get(name, math.nan)) for name in objectives]
    missing = [name for name, value in zip(objectives, values) if not math.isfinite(value)]
    if missing:
        raise TrialFailed(f"objective {', '.join(missing)} does not apply to this point (NaN)")
    return values


class ObjectiveLauncher:
    """The batched launcher seen by Hydra's Optuna sweeper: each point's summary becomes its
    objective value (one float, or a list for several objectives); a point without one is
    a FAILED job whose exception says why, which the sweeper tells Optuna as a failed trial."""

    def __init__(self, launcher, objective: Any, directions: Sequence[str], config) -> None:
        from hydra_plugins.multiverse_jax_launcher.batched_launcher import BatchedLauncher

        if not isinstance(launcher, BatchedLauncher):
            raise InputError(
                f"hydra/sweeper=optuna runs its trials through the batched launcher; hydra/launcher selects "
                f"{type(launcher).__name__}: leave hydra/launcher at batched (its default)"
            )
        self.launcher = launcher
        self.directions = [str(d).lower() for d in directions]
        self.objectives = objective_names(objective, len(self.directions))
        self.sweep_dir = Path(str(config.hydra.sweep.dir))

    def pad_batches_to(self, n_jobs: int) -> None:
        """One compiled program per shape for the whole search: every ask's batch padded to
        ``n_jobs`` points (an ask whose points are partly invalid or already in the table
        would otherwise be a smaller batch, and a new compilation)."""
        if self.launcher.options.get("min_batch_size") is None:
            self.launcher.options["min_batch_size"] = int(n_jobs)

    def launch(self, job_overrides, initial_job_idx: int):
        from hydra.core.utils import JobStatus

        returns = self.launcher.launch(job_overrides, initial_job_idx)
        for ret in returns:
            try:
                values = objective_values(ret.return_value, self.objectives)
                ret.return_value = values[0] if len(values) == 1 else values
            except TrialFailed as exc:
                ret.status, ret.return_value = JobStatus.FAILED, exc
        return returns

    def write_search_file(self, impl) -> Path:
        """``SWEEP_DIR/search.json``: what the report needs to draw the search."""
        sampler = impl.sampler
        sampler_name = getattr(getattr(sampler, "func", None), "__name__", None) or type(sampler).__name__
        info = {
            "objectives": self.objectives,
            "directions": self.directions,
            "sampler": sampler_name,
            "n_trials": int(impl.n_trials),
            "n_jobs": int(impl.n_jobs),
        }
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        path = self.sweep_dir / SEARCH_FILE
        path.write_text(json.dumps(info, indent=2) + "\n")
        return path


def read_search_file(sweep_dir) -> dict | None:
    """``SWEEP_DIR/search.json`` if the sweep was a search, else None."""
    path = Path(sweep_dir) / SEARCH_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _signs(directions: Sequence[str]) -> list[float]:
    """+1 for minimize, -1 for maximize: multiplied in, every objective is minimised."""
    return [1.0 if d == "minimize" else -1.0 for d in directions]


def pareto_front(points: Sequence[Sequence[float]], directions: Sequence[str]) -> list[int]:
    """Indices of the points no other point dominates (as good in every objective and
    better in one); equal points are all on the front. O(n^2), for the hundreds of
    points of a search."""
    signs = _signs(directions)
    values = [[s * v for s, v in zip(signs, p)] for p in points]

    def dominates(a, b) -> bool:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    return [i for i, p in enumerate(values) if not any(dominates(q, p) for q in values)]


def best_so_far(values: Sequence[float], direction: str) -> list[float]:
    """The best value among the first i+1 trials, for each i (NaN: a failed trial, skipped)."""
    best, out = math.nan, []
    for v in values:
        if math.isfinite(v) and (math.isnan(best) or (v < best if direction == "minimize" else v > best)):
            best = v
        out.append(best)
    return out


def batched_ask_tell(study, space: dict[str, list], n_trials: int, batch: int, evaluate, on_ask=None) -> int:
    """Optuna's ask/tell, ``batch`` trials at a time, each ask evaluated at once.

    ``space``: parameter name -> its choices (categorical). ``evaluate(params)`` gets the
    ask's parameter dicts and returns, per trial, its objective values (a list, one per
    direction of ``study``) or None for a failed trial (invalid, failed, NaN); it is where
    the trials become one ``simulate_many`` call, many trials per compiled program.
    ``on_ask(index, params, values)`` after each ask. Returns the number of asks.
    """
    import optuna

    asks = 0
    for start in range(0, n_trials, batch):
        trials = [study.ask() for _ in range(min(batch, n_trials - start))]
        params = [{name: trial.suggest_categorical(name, choices) for name, choices in space.items()} for trial in trials]
        values = evaluate(params)
        for trial, value in zip(trials, values):
            if value is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, list(value))
        if on_ask is not None:
            on_ask(asks, params, values)
        asks += 1
    return asks
