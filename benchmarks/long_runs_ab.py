"""Long single-class runs on and off, in one process: the A/B a GPU session should run.

The batch is ``sweep_vs_htsim.py``'s traffic: ``--points`` permutations of ``--flow-bytes``
flows on a k-ary fat-tree (htsim's RoCE configuration), warmed up ``--warm`` windows in
``--batching`` mode with the long runs off (then JAX's caches are dropped, so that both
programs below compile from scratch). Then ``--windows`` windows are timed in ``--batching`` mode, compiled twice, with
``Static.long_runs`` off (``runs.follow`` never takes way 1, a CPU's default) and on (way 1
where at most ``LONG_PORTS`` ports have packets behind their first, each in one class
queue: an accelerator's default),
the two programs alternating ``--repeats`` times. The final states must be equal.
Prints a table and appends the rows to ``--out`` (JSON).

    python benchmarks/long_runs_ab.py                              # k=8, 8 points, vmap
    python benchmarks/long_runs_ab.py --points 64 --batching vmap  # the GPU's batch
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.config import experiment_from_config
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import permutation


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--points", type=int, default=8)
    p.add_argument("--flow-bytes", type=int, default=4_000_000)
    p.add_argument("--slots-per-host", type=int, default=512)
    p.add_argument("--warm", type=int, default=150, help="windows before the timed ones")
    p.add_argument("--windows", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batching", default="vmap", choices=("map", "vmap"))
    p.add_argument("--out", type=Path, default=Path("long_runs_ab.json"))
    args = p.parse_args(argv)

    net, folder = htsim.HtsimNetwork(k=args.k), Path(tempfile.mkdtemp())
    configs = [htsim.our_config(net, "roce", permutation(s, net.n_hosts, args.flow_bytes).write(folder / f"p{s}.cm")) for s in range(args.points)]
    batch = build_batch([experiment_from_config(c) for c in configs], slots_per_host=args.slots_per_host)
    variants = {name: batch.params.replace(static=dataclasses.replace(batch.params.static, long_runs=on)) for name, on in (("off", False), ("on", True))}
    state = jax.block_until_ready(engine.advance(variants["off"], batch.state, args.warm, args.batching))
    jax.clear_caches()
    programs, compile_s = {}, {}
    for name, variant in variants.items():
        start = time.perf_counter()
        programs[name] = engine.lower_advance(variant, state, args.windows, args.batching).compile()
        compile_s[name] = time.perf_counter() - start
    wall, final = {name: [] for name in programs}, {}
    for _ in range(args.repeats):
        for name, program in programs.items():
            start = time.perf_counter()
            final[name] = jax.block_until_ready(program(variants[name], state, args.windows))
            wall[name].append(time.perf_counter() - start)
    equal = all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(final["off"]), jax.tree.leaves(final["on"])))
    hops = int(np.sum(final["on"].n_packet_hops - state.n_packet_hops))
    rows = []
    for name in programs:
        per_window_ms = np.array(wall[name]) / args.windows / args.points * 1e3
        rows.append({
            "long_runs": name, "backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
            "batching": args.batching, "k": args.k, "points": args.points, "windows": args.windows,
            "compile_s": compile_s[name], "ms_per_experiment_window_min": float(per_window_ms.min()),
            "ms_per_experiment_window_median": float(np.median(per_window_ms)), "packet_hops": hops,
            "packet_hops_per_s": hops / min(wall[name]), "final_states_equal": equal,
        })
        print(f"long runs {name:>3s}: compile {compile_s[name]:6.1f} s, {rows[-1]['ms_per_experiment_window_min']:.3f} / "
              f"{rows[-1]['ms_per_experiment_window_median']:.3f} ms an experiment-window (min / median), "
              f"{rows[-1]['packet_hops_per_s'] / 1e6:.3f} M packet-hops/s; final states equal: {equal}")
    previous = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps(previous + rows, indent=2) + "\n")
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
