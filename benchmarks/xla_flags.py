"""One engine_throughput row under the XLA flags of this process, for A/B runs of flags.

XLA reads ``XLA_FLAGS`` once, when the backend starts, so each setting is its own process:

    python benchmarks/xla_flags.py --label default --out ab.json
    XLA_FLAGS=--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL \\
        python benchmarks/xla_flags.py --label while-in-graphs --out ab.json

Each run appends one row to ``--out`` (the label, the flags, compile and wall seconds,
packet-hops per second, and the results' job time and mean FCT, which a flag must leave
as they are) and prints it. The batch is ``engine_throughput.py``'s: k-ary fat-tree
permutations of ``--flow-bytes`` flows, E = ``--experiments``, ``sim.batching`` as given.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import jax

import engine_throughput


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label", required=True, help="name of this setting in the output")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--experiments", type=int, default=64)
    p.add_argument("--flow-bytes", type=int, default=262144)
    p.add_argument("--batching", default="vmap", choices=("vmap", "map"))
    p.add_argument("--out", type=Path, required=True, help="JSON list to append the row to")
    args = p.parse_args(argv)
    bench = engine_throughput.parse_args([
        "--batching", args.batching, "--round-samples", "0", "--min-time", "1", "--max-repeats", "3",
        "--flow-bytes", str(args.flow_bytes),
    ])
    experiments = engine_throughput.make_experiments(args.k, args.experiments, args.flow_bytes)
    row, _ = engine_throughput.measure_batch(args.k, experiments, bench, bench.slots_per_host)
    keep = ("k", "E", "compile_s", "wall_s", "wall_s_repeats", "packet_hops", "packet_hops_per_s",
            "windows_stepped", "job_time_us_mean", "fct_mean_us_mean", "device_peak_bytes")
    out = {"label": args.label, "xla_flags": os.environ.get("XLA_FLAGS", ""), "backend": jax.default_backend(),
           "device": jax.devices()[0].device_kind, "batching": args.batching, **{key: row[key] for key in keep}}
    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps(rows + [out], indent=2) + "\n")
    print(f"{args.label:>20s}  compile {out['compile_s']:6.1f} s  wall {out['wall_s']:7.3f} s  "
          f"{out['packet_hops_per_s'] / 1e6:7.2f} M packet-hops/s  job {out['job_time_us_mean']:.6f} us  "
          f"fct {out['fct_mean_us_mean']:.6f} us  [{out['xla_flags']}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
