"""Sweep throughput: design points per minute through the batched launcher vs one at a time.

The design point: a k=4 fat-tree (16 hosts, 100 Gb/s, 1 µs links), a permutation of 16
flows of ``--flow-bytes`` each, no time series, no plots (``output=minimal``); points
differ by ``sim.seed`` (a different permutation and ECMP hashes), so every point has the
same shapes and the whole sweep is one group. For N points (``--sizes``), four ways:

* ``batched``: ``multiverse-jax -m sim.seed=range(0,N)`` with the batched launcher (the
  default): one process, every point composed and validated, ONE batched simulation,
  N job directories and ``results.parquet``;
* ``basic``: the same command with ``hydra/launcher=basic``: Hydra's own launcher runs
  the points one after another in the same process, each a single-point simulation
  (the compiled program is reused after the first point) writing its job directory;
* ``process``: one ``multiverse-jax sim.seed=i`` process per point (what a shell loop
  or a cluster job array does): each pays Python start-up, JAX import and compilation;
* ``loop``: a Python loop of ``simulate([experiment])`` over the points in one process
  (compiled once): the simulator alone, no Hydra, no files;
* ``api``: ``simulate_many(experiments)`` in one process (the launcher's grouping and
  batching without Hydra and without files): what batching alone gives.

Every way runs in a fresh process, so each pays Python start-up, imports and compilation
once per measurement.

Wall time includes everything each way does (process start-up, compilation, outputs).
``basic`` is measured up to ``--max-serial`` points and ``process`` up to
``--max-process``; beyond that the table extrapolates (a fixed cost plus a cost per
point, from the two largest measured sizes; proportionally from one) and marks the
value with ``~`` (and ``"extrapolated": true`` in the JSON).
Ratios: the Hydra ways against ``batched`` at the same N (what a sweep user chooses
between), and ``loop`` against ``api`` (batching alone, no files).

    python benchmarks/sweep_throughput.py --quick
    python benchmarks/sweep_throughput.py             # 10, 100, 1000 points
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

POINT = ["output=minimal", "sim.sample_interval_us=0"]


def _command() -> list[str]:
    return [sys.executable, "-m", "multiverse_jax.cli"]


def _run(args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def sweep(n: int, launcher: str, flow_bytes: int, work: Path) -> float:
    out = work / f"{launcher}_{n}"
    shutil.rmtree(out, ignore_errors=True)
    args = [*_command(), "-m", f"sim.seed=range(0,{n})", f"workload.flow_bytes={flow_bytes}", *POINT]
    args += [f"hydra.sweep.dir={out}", "hydra.launcher.progress=false"] if launcher == "batched" else [
        f"hydra.sweep.dir={out}", "hydra/launcher=basic"]
    wall = _run(args, work)
    if launcher == "batched":  # the batched sweep really produced every point
        import pyarrow.parquet as pq

        status = pq.read_table(out / "results.parquet").column("status").to_pylist()
        assert len(status) == n and set(status) == {"ok"}, status
    assert sum(1 for p in out.iterdir() if (p / "summary.json").is_file()) == n
    return wall


def processes(n: int, flow_bytes: int, work: Path) -> float:
    start = time.perf_counter()
    for seed in range(n):
        _run([*_command(), f"sim.seed={seed}", f"workload.flow_bytes={flow_bytes}", *POINT,
              f"hydra.run.dir={work / 'process' / str(seed)}"], work)
    return time.perf_counter() - start


def python_way(way: str, n: int, flow_bytes: int, work: Path) -> float:
    """``loop`` or ``api`` in a fresh process (``--worker``), timed from outside."""
    return _run([sys.executable, str(Path(__file__).resolve()), "--worker", way, "--sizes", str(n),
                 "--flow-bytes", str(flow_bytes)], work)


def worker(way: str, n: int, flow_bytes: int) -> None:
    from multiverse_jax.config import experiment_from_config
    from multiverse_jax.simulate import simulate
    from multiverse_jax.sweep.groups import simulate_many

    def experiment(seed):
        return experiment_from_config({"workload": {"flow_bytes": flow_bytes}, "sim": {"seed": seed, "sample_interval_us": 0}})

    if way == "loop":
        results = [simulate([experiment(seed)])[0] for seed in range(n)]
    else:
        results = simulate_many([experiment(seed) for seed in range(n)])
    assert all(r.ok for r in results)


def extrapolate(points: list[tuple[int, float]], n: int) -> float:
    """Wall time at ``n`` points from measured (points, wall) pairs: the line through the
    two largest (fixed cost + cost per point), or proportional from a single one."""
    if len(points) == 1:
        m, wall = points[0]
        return wall * n / m
    (n1, w1), (n2, w2) = points[-2:]
    per_point = (w2 - w1) / (n2 - n1)
    return w2 + per_point * (n - n2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="numbers of points (comma-separated)")
    parser.add_argument("--flow-bytes", type=int, default=20_000)
    parser.add_argument("--max-serial", type=int, default=100, help="largest N measured for Hydra's basic launcher")
    parser.add_argument("--max-process", type=int, default=10, help="largest N measured for one process per point")
    parser.add_argument("--quick", action="store_true", help="sizes 4,8; serial ways up to 8, processes up to 2")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sweep_throughput.json"))
    parser.add_argument("--worker", choices=("loop", "api"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, int(args.sizes), args.flow_bytes)
        return 0
    if args.quick:
        args.sizes, args.max_serial, args.max_process = "4,8", 8, 2
    sizes = [int(s) for s in args.sizes.split(",")]
    console = Console()
    info = machine_info()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        measured: dict[str, list[tuple[int, float]]] = {}  # way -> [(N, wall)] measured
        for n in sizes:
            row = {"points": n}
            for way, cap in (("batched", None), ("api", None), ("basic", args.max_serial),
                             ("loop", None), ("process", args.max_process)):
                if cap is None or n <= cap or way not in measured:
                    if way in ("batched", "basic"):
                        wall = sweep(n, way, args.flow_bytes, work)
                    elif way in ("loop", "api"):
                        wall = python_way(way, n, args.flow_bytes, work)
                    else:
                        wall = processes(n, args.flow_bytes, work)
                    measured.setdefault(way, []).append((n, wall))
                    row[way] = {"wall_s": wall, "extrapolated": False}
                else:
                    row[way] = {"wall_s": extrapolate(measured[way], n), "extrapolated": True}
                row[way]["points_per_min"] = 60 * n / row[way]["wall_s"]
                console.print(f"{n} points, {way}: {row[way]['wall_s']:.1f} s"
                              + (" (extrapolated)" if row[way]["extrapolated"] else ""), highlight=False)
            for way in ("api", "basic", "loop", "process"):
                row[way]["vs_batched"] = row[way]["wall_s"] / row["batched"]["wall_s"]
            rows.append(row)

    table = Table(title=f"sweep throughput ({info['backend']}, {info['cpu_count']} CPUs): points per minute")
    table.add_column("points", justify="right")
    for way in ("batched", "basic", "process", "api", "loop"):
        table.add_column(way, justify="right")
    for way in ("basic", "process"):
        table.add_column(f"{way} / batched wall", justify="right")
    table.add_column("loop / api wall", justify="right")
    for row in rows:
        def cell(way):
            mark = "~" if row[way]["extrapolated"] else ""
            return f"{mark}{row[way]['points_per_min']:,.0f}"

        def ratio(way):
            mark = "~" if row[way]["extrapolated"] else ""
            return f"{mark}{row[way]['vs_batched']:.1f}x"

        mark = "~" if row["loop"]["extrapolated"] else ""
        table.add_row(str(row["points"]), *(cell(w) for w in ("batched", "basic", "process", "api", "loop")),
                      *(ratio(w) for w in ("basic", "process")),
                      f"{mark}{row['loop']['wall_s'] / row['api']['wall_s']:.1f}x")
    console.print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": info, "flow_bytes": args.flow_bytes, "rows": rows}, indent=2) + "\n")
    console.print(f"wrote {out}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
