"""What progress reporting costs: wall time per window of one run, progress off and on.

The 16-GPU training iteration of the tests (a tiny transformer, TP=2, PP=2, DP=4 on a k=4
fat-tree; 2,768 tasks) is simulated by ``simulate`` as ``multiverse-jax`` runs it, in
each mode (``multiverse_jax/progress.py``):

* ``off``: no progress (``on_progress`` None);
* ``lines``: log lines every ``--interval-s`` (default 10, the command's default), as off a
  terminal;
* ``every-call``: a line after every compiled call (interval 1e-9 s): the most a run can
  report off a terminal;
* ``bar``: the terminal bar (the console forced to be a terminal), its state read every
  ``BAR_REFRESH_S``.

Lines and the bar are written to an in-memory console (its rendering is timed; the text
is discarded). Time per window = the engine loop's wall time (``batch_wall_s``: the
compiled calls and the host's work between them, so the reports' reads) / the windows
stepped. One warm-up run compiles; then the modes run in turn, ``--repeats`` rounds; the
median per mode and its ratio to ``off`` are printed and written to ``--out``.

    python benchmarks/progress_overhead.py                 # 5 rounds
    python benchmarks/progress_overhead.py --repeats 3 --steps-per-call 16
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
from pathlib import Path

from rich.console import Console

from machine import machine_info
from multiverse_jax.config import experiment_from_config
from multiverse_jax.progress import Progress, SimulationProgress
from multiverse_jax.simulate import simulate

TINY_MODEL = {"layers": 4, "hidden": 512, "heads": 8, "seq_len": 256, "vocab": 1000}
WORKLOAD = {"kind": "llm", "model": TINY_MODEL, "tp": 2, "pp": 2, "dp": 4}
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "progress_overhead.json"


def run_once(experiment, mode: str, interval_s: float, steps_per_call: int) -> dict:
    """One run in ``mode``: its wall time per window (µs) and the progress lines written."""
    console = Console(file=io.StringIO(), width=200, force_terminal=mode == "bar")
    interval = {"off": 0.0, "every-call": 1e-9}.get(mode, interval_s)
    n_tasks = len(experiment.tasks)
    progress = Progress("simulating", total=n_tasks, unit="tasks", interval_s=interval, console=console)
    with SimulationProgress(progress, [n_tasks]) as tasks_progress:
        on_progress = None if mode == "off" else tasks_progress.on_state
        result = simulate([experiment], steps_per_call=steps_per_call, on_progress=on_progress)[0]
    if not result.ok:
        raise SystemExit(f"{mode}: the run failed: {result.summary['error']}")
    s = result.summary
    lines = console.file.getvalue().count("\n") if mode != "bar" else 0
    return {"us_per_window": s["batch_wall_s"] / s["n_windows"] * 1e6, "windows": s["n_windows"], "lines": lines,
            "n_calls": s["batch_n_calls"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="rounds of every mode")
    parser.add_argument("--interval-s", type=float, default=10.0, help="the lines mode's interval")
    parser.add_argument("--steps-per-call", type=int, default=64, help="windows per compiled call (sim.steps_per_call)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()

    experiment = experiment_from_config({"workload": WORKLOAD})
    modes = ("off", "lines", "every-call", "bar")
    run_once(experiment, "off", args.interval_s, args.steps_per_call)  # compiles
    runs = {mode: [] for mode in modes}
    for _ in range(args.repeats):
        for mode in modes:
            runs[mode].append(run_once(experiment, mode, args.interval_s, args.steps_per_call))
    base = statistics.median(r["us_per_window"] for r in runs["off"])
    rows = []
    for mode in modes:
        times = [r["us_per_window"] for r in runs[mode]]
        median = statistics.median(times)
        rows.append({"mode": mode, "us_per_window_median": median, "us_per_window_min": min(times),
                     "us_per_window_max": max(times), "ratio_to_off": median / base,
                     "lines_per_run": runs[mode][0]["lines"]})
    first = runs["off"][0]
    print(f"{first['windows']} windows in {first['n_calls']} calls of {args.steps_per_call}; {args.repeats} rounds")
    print(f"{'mode':12s} {'µs/window':>10s} {'min':>8s} {'max':>8s} {'vs off':>7s} {'lines':>6s}")
    for r in rows:
        print(f"{r['mode']:12s} {r['us_per_window_median']:10.1f} {r['us_per_window_min']:8.1f} "
              f"{r['us_per_window_max']:8.1f} {r['ratio_to_off']:7.3f} {r['lines_per_run']:6d}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {**machine_info(), "args": vars(args), "windows": first["windows"], "n_calls": first["n_calls"],
              "rows": rows, "runs": runs}
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
