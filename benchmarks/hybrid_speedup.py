"""Hybrid and flow modes against packet mode: speed-up and error, case by case.

Cases (``--cases``, default all but ``aicb``, whose packet run takes ~10 minutes here):

* ``elephants``: four flows of 50, 100, 150, 200 MB on a k=4 fat-tree at 100 Gb/s, 1 µs
  links; flows 0 and 1 share host 4's downlink (``cc`` from ``--cc``, default none);
* ``ring8``: a triggered ring all-reduce of 1 GB over 8 hosts (2 (n - 1) steps of 125 MB);
* ``ring16``: a ring all-reduce of 1 GiB over 16 hosts;
* ``incast``: 8 hosts each send 4 MB to host 0;
* ``llm``: the small LLM iteration of ``tests/test_golden.py`` (TP=2, PP=2, DP=4, k=4);
* ``aicb``: the shared aicb GPT-13B file on 16 GPUs, 8 per server, 200 Gb/s NICs.

Each case runs in each mode (``--modes``, default packet, hybrid, flow), one experiment at
a time, after a warm-up run of the same shapes at 1/100 of the sizes (so the wall time
excludes compilation; ``warmup_s`` reports it). Reported against packet mode, the ground truth: wall seconds,
windows executed (flow mode: events), speed-up in wall time and in windows, mean and p99
per-flow FCT error, job (or iteration) time error, and the hybrid accounting (share of
flow time at flow level, steady phases). A table on stdout, JSON at ``--out``, and a plot
of speed-up against error next to it.

    PYTHONPATH=. python benchmarks/hybrid_speedup.py --quick
    PYTHONPATH=. python benchmarks/hybrid_speedup.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from machine import machine_info
from multiverse_jax.conf.schema import SimConfig
from multiverse_jax.config import experiment_from_config
from multiverse_jax.experiment import Experiment
from multiverse_jax.peers.scenarios import ring_allreduce
from multiverse_jax.simulate import simulate
from multiverse_jax.topology.fattree import fattree
from multiverse_jax.workload.flows import make_flows

MB, GB, GIB = 10**6, 10**9, 1 << 30
AICB = Path(__file__).resolve().parents[2] / "shared/workloads/aicb/G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"
TINY_MODEL = {"layers": 4, "hidden": 512, "heads": 8, "seq_len": 256, "vocab": 1000}


def elephants(mode: str, scale: float, cc: str) -> Experiment:
    sizes = (np.array([50, 100, 150, 200]) * MB * scale).astype(np.int64)
    flows = make_flows([0, 1, 2, 3], [4, 4, 8, 12], sizes)
    return Experiment(fattree(4, 100.0, 1.0), flows, cc=cc, sim=SimConfig(mode=mode, sample_interval_us=0))


def ring(mode: str, total_bytes: int, n: int, cc: str) -> Experiment:
    scenario = ring_allreduce(f"ring{n}", 16, list(range(0, 16, 16 // n))[:n], total_bytes)
    path = scenario.write(Path(tempfile.mkdtemp()) / f"ring{n}.cm")
    return experiment_from_config(
        {"workload": {"kind": "cm", "path": path}, "cc": cc, "sim": {"mode": mode, "sample_interval_us": 0}}
    )


def incast(mode: str, scale: float, cc: str) -> Experiment:
    flows = make_flows(list(range(1, 9)), [0] * 8, [int(4 * MB * scale)] * 8)
    return Experiment(fattree(4, 100.0, 1.0), flows, cc=cc, sim=SimConfig(mode=mode, sample_interval_us=0))


def llm(mode: str, scale: float, cc: str) -> Experiment:
    workload = {"kind": "llm", "model": TINY_MODEL, "tp": 2, "pp": 2, "dp": 4}
    return experiment_from_config({"workload": workload, "cc": cc, "sim": {"mode": mode, "sample_interval_us": 0}})


def aicb(mode: str, scale: float, cc: str) -> Experiment:
    workload = {"kind": "simai", "path": str(AICB), "gpus": 16, "gpus_per_server": 8}
    return experiment_from_config(
        {"workload": workload, "link": {"rate_gbps": 200.0}, "cc": cc, "sim": {"mode": mode, "sample_interval_us": 0}}
    )


CASES = {
    "elephants": lambda mode, scale, cc: elephants(mode, scale, cc),
    "ring8": lambda mode, scale, cc: ring(mode, int(GB * scale), 8, cc),
    "ring16": lambda mode, scale, cc: ring(mode, int(GIB * scale), 16, cc),
    "incast": incast,
    "llm": llm,
    "aicb": aicb,
}


def run_one(make, mode: str, scale: float, cc: str, slots: int, sample_us: float | None = None) -> dict:
    """Warm up (compile) on the case at 1/100 of its sizes (the same shapes: one program),
    then time the case."""

    def build(s):
        experiment = make(mode, s, cc)
        if sample_us is None:
            return experiment
        return dataclasses.replace(experiment, hybrid=dataclasses.replace(experiment.hybrid, sample_interval_us=sample_us))

    start = time.perf_counter()
    simulate([build(scale / 100)], slots_per_host=slots, steps_per_call=256)
    compile_s = time.perf_counter() - start
    experiment = build(scale)
    start = time.perf_counter()
    result = simulate([experiment], slots_per_host=slots, steps_per_call=256)[0]
    wall_s = time.perf_counter() - start
    s = result.summary
    job_us = s.get("iteration_time_us") or s["job_time_us"]
    return {
        "mode": mode,
        "status": s["status"],
        "error": s["error"],
        "wall_s": wall_s,
        "warmup_s": compile_s,  # compilation and the 1/100-size run
        "windows": s["n_windows"],
        "job_us": job_us,
        "fct_ps": result.flows["fct_ps"].tolist(),
        "flow_level_share": s["flow_level_share"],
        "steady_entries": s["steady_entries"],
        "packet_hops": s["n_packet_hops"],
        "packet_hops_skipped": s["packet_hops_skipped"],
    }


def compare(row: dict, packet: dict) -> dict:
    """Speed-up and error of ``row`` against the packet run of the same case."""
    fct, truth = np.asarray(row["fct_ps"], float), np.asarray(packet["fct_ps"], float)
    ok = (fct > 0) & (truth > 0)
    error = np.abs(fct[ok] / truth[ok] - 1) * 100
    return {
        "speedup_wall": packet["wall_s"] / max(row["wall_s"], 1e-9),
        "speedup_windows": packet["windows"] / max(row["windows"], 1),
        "fct_err_mean_pct": float(error.mean()) if error.size else float("nan"),
        "fct_err_p99_pct": float(np.percentile(error, 99)) if error.size else float("nan"),
        "job_err_pct": (row["job_us"] / packet["job_us"] - 1) * 100,
    }


def table(rows: list[dict]) -> str:
    head = f"{'case':10} {'mode':7} {'wall s':>8} {'windows':>9} {'x wall':>7} {'x win':>7} {'fct err mean/p99 %':>19} {'job err %':>9} {'flow lvl':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        err = f"{r.get('fct_err_mean_pct', 0):.3f}/{r.get('fct_err_p99_pct', 0):.3f}"
        lines.append(
            f"{r['case']:10} {r['mode']:7} {r['wall_s']:8.2f} {r['windows']:9d} {r.get('speedup_wall', 1):7.1f} "
            f"{r.get('speedup_windows', 1):7.1f} {err:>19} {r.get('job_err_pct', 0):9.3f} {r['flow_level_share']:8.2f}"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, marker in (("hybrid", "o"), ("flow", "s")):
        pts = [r for r in rows if r["mode"] == mode and "speedup_wall" in r]
        ax.scatter([abs(r["job_err_pct"]) for r in pts], [r["speedup_wall"] for r in pts], marker=marker, label=mode)
        for r in pts:
            ax.annotate(r["case"], (abs(r["job_err_pct"]), r["speedup_wall"]), fontsize="x-small")
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_yscale("log")
    ax.set_xlabel("|job time error| vs packet mode (%)")
    ax.set_ylabel("wall-time speed-up over packet mode")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="elephants,ring8,ring16,incast,llm")
    parser.add_argument("--modes", default="packet,hybrid,flow")
    parser.add_argument("--cc", default="none")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every flow size (cases by bytes)")
    parser.add_argument("--quick", action="store_true", help="elephants, ring8 and incast at 1/20 of their sizes")
    parser.add_argument("--slots", type=int, default=512, help="sim.packets_per_host")
    parser.add_argument("--sample-us", type=float, default=None, help="hybrid.sample_interval_us (default: the schema's)")
    parser.add_argument("--out", default="benchmarks/results/hybrid_speedup.json")
    args = parser.parse_args(argv)
    cases, scale = args.cases.split(","), args.scale
    if args.quick:
        cases, scale = ["elephants", "ring8", "incast"], 0.05
    rows = []
    for case in cases:
        packet = None
        for mode in args.modes.split(","):
            row = {"case": case, **run_one(CASES[case], mode, scale, args.cc, args.slots, args.sample_us)}
            if mode == "packet":
                packet = row
            elif packet is not None:
                row.update(compare(row, packet))
            rows.append(row)
            print(f"{case} {mode}: {row['wall_s']:.2f} s, {row['windows']} windows, {row['status']}", file=sys.stderr, flush=True)
    print(table(rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    slim = [{k: v for k, v in r.items() if k != "fct_ps"} for r in rows]
    out.write_text(json.dumps({"machine": machine_info(), "args": vars(args), "rows": slim}, indent=2))
    if any("speedup_wall" in r for r in rows):  # a comparison to plot
        plot(rows, out.with_suffix(".png"))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
