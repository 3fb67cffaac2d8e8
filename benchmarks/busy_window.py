"""Cost of a busy window, per experiment, by batching mode and pool size.

Builds a batch of k-ary fat-tree permutations (1 MB flows, one seed per experiment), runs
it ``--warm-windows`` windows so queues and PFC are busy, then times ``engine.advance``
over ``--windows`` more windows (best of ``--repeats``), for each batching mode and each
``--slots-per-host`` (the same traffic: a larger pool holds more empty slots). Prints a
table and writes JSON: ms per experiment-window, ``vmap`` against ``map``, and what
doubling the pool costs.

    python benchmarks/busy_window.py --k 8 --experiments 4 --slots-per-host 256 512
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import numpy as np

import multiverse_jax
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from step_profile import permutations  # the same busy traffic (benchmarks/ is on the path of a script run)


def ms_per_experiment_window(experiments, slots: int, batching: str, args) -> float:
    batch = build_batch(experiments, slots_per_host=slots)
    state = engine.advance(batch.params, batch.state, args.warm_windows, batching=batching)
    if np.any(np.asarray(state.error)):
        raise SystemExit(f"error words {np.asarray(state.error)} at {slots} slots/host: raise --slots-per-host")
    jax.block_until_ready(engine.advance(batch.params, state, args.windows, batching=batching))  # compile
    best = float("inf")
    for _ in range(args.repeats):
        start = time.perf_counter()
        jax.block_until_ready(engine.advance(batch.params, state, args.windows, batching=batching))
        best = min(best, time.perf_counter() - start)
    return best / args.windows / len(experiments) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--experiments", type=int, default=4)
    parser.add_argument("--flow-bytes", type=int, default=1_000_000)
    parser.add_argument("--slots-per-host", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--modes", nargs="+", default=["map", "vmap"], choices=["map", "vmap"])
    parser.add_argument("--warm-windows", type=int, default=40)
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/busy_window.json")
    args = parser.parse_args()

    experiments = permutations(args.k, args.experiments, args.flow_bytes)
    rows = [
        {"slots_per_host": slots, "batching": mode, "ms_per_experiment_window": ms_per_experiment_window(experiments, slots, mode, args)}
        for slots in args.slots_per_host
        for mode in args.modes
    ]
    ms = {(r["slots_per_host"], r["batching"]): r["ms_per_experiment_window"] for r in rows}
    print(f"k={args.k} E={args.experiments}, {args.flow_bytes:,} B permutations, {args.windows} windows after {args.warm_windows}")
    print(f"{'slots/host':>10s} {'batching':>8s} {'ms/exp-window':>14s} {'speed vs map':>13s} {'time vs smallest pool':>22s}")
    smallest = min(args.slots_per_host)
    for r in rows:
        slots, mode, value = r["slots_per_host"], r["batching"], r["ms_per_experiment_window"]
        r["speed_vs_map"] = ms[(slots, "map")] / value if (slots, "map") in ms else None
        r["time_vs_smallest_pool"] = value / ms[(smallest, mode)]
        vs_map = f"{r['speed_vs_map']:12.2f}x" if r["speed_vs_map"] else f"{'-':>13s}"
        print(f"{slots:>10d} {mode:>8s} {value:14.2f} {vs_map} {r['time_vs_smallest_pool']:21.2f}x")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"jax": jax.__version__, "backend": jax.default_backend(), "machine": platform.machine(), "multiverse_jax": multiverse_jax.__version__}
    out.write_text(json.dumps({"args": vars(args), **meta, "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
