"""A sweep of fat-tree permutations, ours batched against htsim one point at a time, measured in one run.

The traffic users sweep: N permutations (seeds 0..N-1, ``peers.scenarios.permutation``)
of ``--flow-bytes`` flows on a k-ary fat-tree as ``benchmarks/vs_htsim.py`` configures
both simulators (100 Gb/s, 1 µs hops, 9000 B MTU, RoCE without congestion control,
PFC; ``peers.htsim.HtsimNetwork``). htsim (``htsim_roce``, single-threaded C++, built
from ``../shared/peers``) runs ``--htsim-points`` of the points one after another; we run
all N as one batched program, in both batching modes. Packet-hops are counted by our
engine (every data packet and ACK leaving a port); htsim carries the same packets over
the same number of links (an ACK per data packet, same MTU), so its rate is our count for
its points over its wall time. Our wall time excludes compilation (reported apart).

``--devices 1,2`` runs each mode once per device count: the batch's experiments sharded
over that many local devices (``sim.devices``). On a CPU, XLA makes one device of all its
cores unless told otherwise, so the script splits the host into as many CPU devices as the
largest count asks for (``engine.split_cpu_into_devices``, before JAX starts; a count in
``XLA_FLAGS`` stands): one experiment runs on ~1.7 of 2 cores by itself, two devices each
running half the points use both.

    python benchmarks/sweep_vs_htsim.py                      # k=8, 8 points of 4 MB flows (10 minutes on 2 cores)
    python benchmarks/sweep_vs_htsim.py --k 4 --points 8 --flow-bytes 1000000
    python benchmarks/sweep_vs_htsim.py --modes map --devices 1,2 --htsim-points 2
    python benchmarks/sweep_vs_htsim.py --modes vmap --live-prefix columns,per_host --htsim-points 0
    python benchmarks/sweep_vs_htsim.py --modes map --devices 2 --rounds 5   # ours and htsim alternating, 5 times
    python benchmarks/sweep_vs_htsim.py --modes map --devices 2 --rounds 5 --fifo-pass never,always   # sim.fifo_pass both ways
    python benchmarks/sweep_vs_htsim.py --modes vmap --points 32 --fifo-pass never,always --nic-pass never,always --htsim-points 0
        # no pass, the FIFO pass alone, and both (the NIC pass runs with the FIFO pass only: that pair is left out)

``--rounds R`` runs every variant and then htsim R times, alternating, in one process: on a
shared machine whose speed drifts from minute to minute (both simulators' rates moved by
up to a third between runs at stops 49-55), each of our runs is divided by htsim's rate
in the same round, and the table ends with each variant's median ratio. Only the first
round compiles (its compile time reported apart, as always).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from multiverse_jax.conf.schema import STEPS_PER_CALL
from multiverse_jax import engine
from multiverse_jax.config import experiment_from_config
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import permutation
from machine import machine_info
from vs_htsim import run_batch

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, default=8, help="fat-tree arity (default 8: 128 hosts)")
    p.add_argument("--points", type=int, default=8, help="design points of the sweep (default 8; 32 takes over 20 minutes here)")
    p.add_argument("--flow-bytes", type=int, default=4_000_000, help="bytes per flow (default 4 MB)")
    p.add_argument("--htsim-points", type=int, default=4, help="points htsim runs, one after another (default 4)")
    p.add_argument("--slots-per-host", type=int, default=512, help="packet slots per host (default 512; doubled on pool-full)")
    p.add_argument("--modes", default="map,vmap", help="our batching modes (default map,vmap)")
    p.add_argument("--devices", default="1", help="device counts each mode runs on, e.g. 1,2 (default 1; see above)")
    p.add_argument("--live-prefix", default="auto", help="sim.live_prefix values each mode runs with, e.g. columns,per_host (default auto)")
    p.add_argument(
        "--steps-per-call", default=str(STEPS_PER_CALL),
        help=f"sim.steps_per_call values each mode runs with, e.g. 64,256 (default {STEPS_PER_CALL}, the config's)",
    )
    p.add_argument("--fifo-pass", default="auto", help="sim.fifo_pass values each mode runs with, e.g. auto,always (default auto: off on a CPU)")
    p.add_argument("--nic-pass", default="auto", help="sim.nic_pass values each mode runs with, e.g. never,always (default auto: off on a CPU)")
    p.add_argument("--rounds", type=int, default=1, help="rounds of every variant then htsim, alternating (default 1; the first compiles)")
    p.add_argument("--out", type=Path, default=RESULTS / "sweep_vs_htsim.json")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    device_counts = [int(n) for n in args.devices.split(",")]
    engine.split_cpu_into_devices(max(device_counts))  # before anything starts JAX
    network = htsim.HtsimNetwork(k=args.k)
    folder = Path(tempfile.mkdtemp(prefix="sweep_vs_htsim_"))
    cm_paths = [
        Path(permutation(seed, network.n_hosts, args.flow_bytes).write(folder / f"perm-s{seed}.cm")) for seed in range(args.points)
    ]
    configs = [htsim.our_config(network, "roce", cm) for cm in cm_paths]
    variants = list(itertools.product(
        args.modes.split(","), device_counts, args.live_prefix.split(","), [int(n) for n in args.steps_per_call.split(",")],
        args.fifo_pass.split(","), args.nic_pass.split(","),
    ))  # fmt: skip
    variants = [v for v in variants if not (v[-2] == "never" and v[-1] == "always")]  # the NIC pass needs the FIFO pass
    rows = []
    first_fcts = []  # every variant of every round must give the same flows' FCTs, bit for bit
    build = None
    for round_ in range(args.rounds):
        for variant in variants:
            row, hops = run_ours(args, configs, *variant, first_fcts)
            rows.append(dict(row, round=round_))
            write(args, rows)  # as it goes: a run cut short (a device's time limit) keeps its rows
        if args.htsim_points < 1:  # not even built (a device without the peer's toolchain)
            continue
        try:
            build = build or htsim.build_htsim()
            rows.append(dict(run_htsim(args, build, cm_paths, network, folder, hops), round=round_))
        except htsim.PeerUnavailable as why:
            print(f"htsim not run: {why}", file=sys.stderr)
    print_table(args, network, rows)
    write(args, rows)
    print(f"wrote {args.out}")
    return 0


def run_ours(args, configs, mode: str, n_devices: int, live_prefix: str, steps_per_call: int, fifo_pass: str, nic_pass: str, first_fcts: list):
    """One run of our batch in one variant: (its row, (N,) its points' packet-hops). The
    first variant's FCTs go into ``first_fcts``; every later run is checked against them."""
    for config in configs:
        config["sim"]["live_prefix"] = live_prefix
        config["sim"]["fifo_pass"] = fifo_pass
        config["sim"]["nic_pass"] = nic_pass
    experiments = [experiment_from_config(config) for config in configs]
    results, wall_s, compile_s, slots = run_batch(experiments, args.slots_per_host, 1 << 13, mode, n_devices, steps_per_call)
    hops = np.array([r.summary["n_packet_hops"] for r in results], dtype=np.int64)
    bad = [i for i, r in enumerate(results) if r.summary["status"] != "ok"]
    label = f"{mode}" + (f", {n_devices} devices" if n_devices > 1 else "") + (f", live prefix {live_prefix}" if live_prefix != "auto" else "")
    label += f", {steps_per_call} windows a call" if steps_per_call != STEPS_PER_CALL else ""
    label += f", FIFO pass {fifo_pass}" if fifo_pass != "auto" else ""
    label += f", NIC pass {nic_pass}" if nic_pass != "auto" else ""
    if bad:
        print(f"{label}: points {bad} did not finish: {results[bad[0]].summary['error']}", file=sys.stderr)
    fcts = [r.flows["fct_ps"] for r in results]
    if not first_fcts:  # the first run: the reference
        first_fcts.extend(fcts)
    same = all(np.array_equal(a, b) for a, b in zip(fcts, first_fcts, strict=True))
    if not same:
        print(f"{label}: FCTs differ from the first variant's", file=sys.stderr)
    print(f"{label}: {args.points} points in {wall_s:.1f} s (+{compile_s:.1f} s compiling), {hops.sum() / wall_s:,.0f} packet-hops/s", flush=True)
    row = {
        "simulator": f"multiverse-jax sim.batching={mode}" + (f" sim.devices={n_devices}" if n_devices > 1 else "")
        + (f" sim.live_prefix={live_prefix}" if live_prefix != "auto" else "")
        + (f" sim.steps_per_call={steps_per_call}" if steps_per_call != STEPS_PER_CALL else "")
        + (f" sim.fifo_pass={fifo_pass}" if fifo_pass != "auto" else "")
        + (f" sim.nic_pass={nic_pass}" if nic_pass != "auto" else ""),
        "points": args.points, "wall_s": wall_s, "compile_s": compile_s, "packet_hops": int(hops.sum()),
        "rate": hops.sum() / wall_s, "slots_per_host": slots, "cores": os.cpu_count(), "devices": n_devices,
        "live_prefix": live_prefix, "steps_per_call": steps_per_call, "fifo_pass": fifo_pass, "nic_pass": nic_pass, "same_fcts_as_first": same,
    }  # fmt: skip
    return row, hops


def run_htsim(args, build, cm_paths, network, folder, hops) -> dict:
    """htsim's run of the first ``--htsim-points`` points, one after another: its row (its
    rate is our packet-hops count for those points over its wall time)."""
    n = min(args.htsim_points, args.points)  # at least 1: main skips htsim at 0
    walls = [htsim.run_htsim(build, "roce", cm_paths[i], network, folder, patched=False).wall_s for i in range(n)]
    print(f"htsim: {n} points in {sum(walls):.1f} s, {hops[:n].sum() / sum(walls):,.0f} packet-hops/s", flush=True)
    return {
        "simulator": "htsim_roce (one point at a time)", "points": n, "wall_s": sum(walls), "compile_s": 0.0,
        "packet_hops": int(hops[:n].sum()), "rate": hops[:n].sum() / sum(walls), "slots_per_host": None, "cores": 1,
    }  # fmt: skip


def print_table(args, network, rows: list[dict]) -> None:
    """Every row with its rate against htsim's in the same round; with several rounds, each
    variant's median, least and greatest of those ratios."""
    htsim_rate = {r["round"]: r["rate"] for r in rows if r["simulator"].startswith("htsim")}
    print(f"k={args.k} ({network.n_hosts} hosts), {args.points} permutations of {args.flow_bytes:,} B flows")
    print(f"{'simulator':72s} {'round':>5s} {'points':>6s} {'wall s':>8s} {'compile s':>9s} {'packet-hops':>13s} {'M hops/s':>9s} {'vs htsim':>8s}")
    for r in rows:
        base = htsim_rate.get(r["round"])
        r["vs_htsim"] = r["rate"] / base if base else None
        ratio = f"{r['vs_htsim']:.2f}x" if base else "-"
        print(
            f"{r['simulator']:72s} {r['round']:5d} {r['points']:6d} {r['wall_s']:8.2f} {r['compile_s']:9.2f} "
            f"{r['packet_hops']:13,d} {r['rate'] / 1e6:9.3f} {ratio:>8s}"
        )
    if args.rounds > 1 and htsim_rate:
        for name in dict.fromkeys(r["simulator"] for r in rows if not r["simulator"].startswith("htsim")):
            ratios = [r["vs_htsim"] for r in rows if r["simulator"] == name and r["vs_htsim"] is not None]
            print(f"{name}: vs htsim in the same round, median {np.median(ratios):.2f}x (least {min(ratios):.2f}x, greatest {max(ratios):.2f}x) over {len(ratios)} rounds")


def write(args, rows: list[dict]) -> None:
    """The JSON of the rows so far (``--out``)."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "machine": machine_info(), "rows": rows}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
