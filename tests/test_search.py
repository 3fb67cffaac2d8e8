"""Searching a design space: Hydra's Optuna sweeper through the batched launcher.

The space (an 8-to-1 incast of 100 KB flows on the k=4 fat-tree): PFC XOFF and XON per
ingress and ECMP against packet spraying -- 36 points, four of them invalid (XON above
XOFF). The metrics differ between points (spraying reorders the senders' packets and
stretches the mean FCT; a lower XOFF keeps queues short), so each test computes the
answer with a full grid of the same points and checks the search against it. Every
program here has the same shapes and 12 experiments (a search pads each ask to
``n_jobs``; the grid is padded the same way): one compilation serves the file.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from conftest import run_cli
from multiverse_jax import engine
from multiverse_jax.errors import InputError
from multiverse_jax.report import sweep_report
from multiverse_jax.sweep import groups
from multiverse_jax.sweep.results import TABLE_FILE
from multiverse_jax.sweep.search import best_so_far, objective_names, pareto_front

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="needs the optional extra: pip install 'multiverse-jax[search]'")

BASE = [
    "workload=incast", "workload.flow_bytes=100000", "workload.senders=8", "sim.packets_per_host=64",
    "sim.sample_interval_us=0", "output=minimal",
]  # fmt: skip
SPACE = {
    "switch.pfc_xoff_bytes": [30000, 45000, 60000, 90000, 120000, 240000],
    "switch.pfc_xon_bytes": [10000, 20000, 50000],
    "lb": ["ecmp", "spray"],
}
N_JOBS = 12


def multirun(sweep_dir, *overrides) -> int:
    """``multiverse-jax -m OVERRIDES`` in this process (so compiled programs are shared): its exit code."""
    return run_cli("-m", *overrides, *BASE, f"hydra.sweep.dir={sweep_dir}")


def search(sweep_dir, *options) -> int:
    space = [f"{key}=choice({','.join(map(str, values))})" for key, values in SPACE.items()]
    return multirun(sweep_dir, "hydra/sweeper=optuna", f"hydra.sweeper.n_jobs={N_JOBS}", "hydra.sweeper.sampler.seed=0",
             *options, *space)


def rows(sweep_dir) -> list[dict]:
    return pq.read_table(sweep_dir / TABLE_FILE).to_pylist()


def design(row: dict) -> tuple:
    return tuple(row[key] for key in SPACE)


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> list[dict]:
    """Every point of the space, as one batched sweep."""
    sweep_dir = tmp_path_factory.mktemp("grid")
    assert 0 == multirun(sweep_dir, *(f"{key}={','.join(map(str, values))}" for key, values in SPACE.items()),
             f"hydra.launcher.min_batch_size={N_JOBS}", f"hydra.launcher.max_batch_size={N_JOBS}")
    out = rows(sweep_dir)
    assert len(out) == 36 and sum(r["status"] == "ok" for r in out) == 32  # XON 50000 > XOFF 30000, 45000: invalid
    return out


def test_a_search_finds_the_grid_optimum_as_batched_programs_and_resumes(grid, tmp_path):
    ok = [r for r in grid if r["status"] == "ok"]
    optimum = min(r["fct_mean_us"] for r in ok)
    assert max(r["fct_mean_us"] for r in ok) > 1.05 * optimum  # the choice matters

    sweep_dir = tmp_path / "search"
    compiled = engine.compiled_programs()
    assert search(sweep_dir, "hydra.sweeper.n_trials=24", "hydra.sweeper.objective=fct_mean_us") == 0
    # 24 trials in two asks of 12, each padded to 12 experiments whatever number of its
    # points is valid: the grid's program, no new one.
    assert engine.compiled_programs() == compiled
    found = rows(sweep_dir)  # one row per distinct point (Optuna may ask for a point again)
    assert all((sweep_dir / str(job) / "summary.json").is_file() for job in range(24))
    assert max(r["batch_size"] for r in found) <= N_JOBS
    assert any(r["status"] == "invalid" for r in found)  # told to Optuna as failed trials; the search went on
    best = min(r["fct_mean_us"] for r in found if r["status"] == "ok")
    assert best <= optimum * 1.01
    # Each trial's metrics are the grid's for the same point (the search ran real simulations).
    by_design = {design(r): r for r in ok}
    for r in found:
        if r["status"] == "ok":
            assert r["fct_mean_us"] == by_design[design(r)]["fct_mean_us"]
    result = OmegaConf.load(sweep_dir / "optimization_results.yaml")
    assert math.isclose(result.best_value, best)

    # Re-run: every trial Optuna asks for again (same seed, same answers) is in the table.
    simulated = []
    real_run_chunk = groups.run_chunk
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(groups, "run_chunk", lambda e, *a, **k: simulated.append(len(e)) or real_run_chunk(e, *a, **k))
        assert search(sweep_dir, "hydra.sweeper.n_trials=24", "hydra.sweeper.objective=fct_mean_us") == 0
    assert simulated == []
    assert math.isclose(OmegaConf.load(sweep_dir / "optimization_results.yaml").best_value, best)


def test_a_two_objective_search_finds_the_grid_pareto_front(grid, tmp_path, capsys):
    objectives = ["fct_mean_us", "max_queue_bytes"]
    ok = [r for r in grid if r["status"] == "ok"]
    grid_front = {tuple(ok[i][o] for o in objectives) for i in pareto_front([[r[o] for o in objectives] for r in ok],
                                                                            ["minimize", "minimize"])}
    assert 1 < len(grid_front) < len(ok)  # a real trade-off: queue against completion time

    sweep_dir = tmp_path / "search2"
    assert 0 == search(sweep_dir, "hydra.sweeper.n_trials=24", f"hydra.sweeper.objective=[{','.join(objectives)}]",
           "hydra.sweeper.direction=[minimize,minimize]", "hydra/sweeper/sampler=nsgaii",
           "hydra.sweeper.sampler.population_size=12")
    solutions = OmegaConf.load(sweep_dir / "optimization_results.yaml").solutions
    assert {tuple(s["values"]) for s in solutions} == grid_front

    assert sweep_report.main([str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert f"Pareto front of {' and '.join(objectives)}: " in out
    assert (sweep_dir / "report" / "optimization_history.png").is_file()
    assert (sweep_dir / "report" / "pareto_front.png").is_file()


def test_an_unknown_objective_names_the_key_and_the_valid_metrics():
    with pytest.raises(InputError, match=r"hydra.sweeper.objective: fct_p42_us .*valid: job_time_us"):
        objective_names("fct_p42_us", 1)
    with pytest.raises(InputError, match="one direction .* per objective"):
        objective_names(["job_time_us", "switch_ports"], 1)
    assert objective_names(["job_time_us", "switch_ports"], 2) == ["job_time_us", "switch_ports"]


def test_a_search_with_an_unknown_objective_stops_before_simulating(tmp_path):
    # (The message, objective_names' InputError above, goes to stderr as one line.)
    assert search(tmp_path / "bad", "hydra.sweeper.n_trials=2", "hydra.sweeper.objective=fct_p42_us") == 2  # bad input, as the CLI reports it
    assert not (tmp_path / "bad" / TABLE_FILE).exists()


def test_pareto_front_against_brute_force():
    rng = np.random.default_rng(3)
    points = rng.integers(0, 6, size=(40, 2)).astype(float).tolist()
    for directions in itertools.product(("minimize", "maximize"), repeat=2):
        signs = [1 if d == "minimize" else -1 for d in directions]
        expected = [
            i for i, p in enumerate(points)
            if not any(all(s * q[k] <= s * p[k] for k, s in enumerate(signs)) and q != p for q in points)
        ]  # fmt: skip
        assert pareto_front(points, directions) == expected


def test_best_so_far_skips_failed_trials():
    assert best_so_far([3.0, math.nan, 5.0, 1.0], "minimize")[1:] == [3.0, 3.0, 1.0]
    assert best_so_far([3.0, math.nan, 5.0, 1.0], "maximize")[2:] == [5.0, 5.0]


def test_batched_ask_tell_evaluates_whole_asks_and_finds_the_optimum():
    """A known function on a 6 x 6 grid (its minimum at x=4, y=1), one cell failing."""
    import optuna

    from multiverse_jax.sweep.search import batched_ask_tell

    space = {"x": list(range(6)), "y": list(range(6))}
    asks = []

    def evaluate(params):
        asks.append(len(params))
        return [None if (p["x"], p["y"]) == (0, 0) else [(p["x"] - 4) ** 2 + (p["y"] - 1) ** 2] for p in params]

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=8))
    assert batched_ask_tell(study, space, n_trials=40, batch=8, evaluate=evaluate) == 5
    assert asks == [8] * 5
    # The optimum or a neighbour of it (values run 0..41; batch TPE proposes 8 before it learns).
    assert study.best_value <= 1 and abs(study.best_params["x"] - 4) + abs(study.best_params["y"] - 1) <= 1
    states = {t.state for t in study.trials}
    assert len(study.trials) == 40 and states <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL}
