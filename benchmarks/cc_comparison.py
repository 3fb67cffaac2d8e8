"""Congestion control x load balancing on a k-ary fat-tree: FCTs, queues, and cost per step.

Two workloads on a k-ary fat-tree (100 Gb/s, 1 µs links), each flow ``--flow-bytes``:

* incast: hosts 1..``--senders`` (default 8) each send to host 0, all at time 0;
* permutation: every host sends to another, a derangement drawn with ``--seed``.

Each runs under every congestion control (none, dcqcn, dctcp, hpcc, timely; the library's
default parameters) and every load balancer (ecmp, spray, flowlet): 2 x 5 x 3 = 30
experiments, simulated as ONE batch by ``simulate`` with time series sampled every
``--sample-us``. Reported per experiment: status, FCT mean and p99, job time (last
finish), largest egress queue, PFC pauses, ECN-marked packets, CNPs.

Cost per step: for each CC, the batch of just its experiments (workload x LB) is padded
to the Static of the full batch (so every CC's batch has the same shapes and one
compiled program serves them all; checked with ``engine.advance._cache_size()``), compiled
and run once untimed (warm-up), then timed with ``engine.run``, the CCs' runs interleaved
(one of each per round, until each has ``--min-time``) so that a change of machine load
hits every CC alike. Cost per step = median wall seconds / windows stepped (the sum of
the experiments' ``n_windows``); also wall per simulated µs and per packet-hop (every CC
moves the same packets over paths of the same lengths here: lossless, no retransmission,
shortest paths, so this one compares their work on equal traffic, however busy their
windows are). All are printed relative to ``none``; ``best vs none`` compares the per-step
cost of each CC's fastest run with none's fastest.
The timed runs must step exactly the windows of the 30-experiment batch (checked).

Exit status 1 if any experiment failed (the tables and files are still written).

Plots (``<out stem>_*.png`` next to ``--out``): the incast under ECMP, one row per CC,
with each flow's sending rate and the queue of the port into host 0 (the bottleneck);
and per workload the FCT CDF of every CC under ECMP.

    python benchmarks/cc_comparison.py --quick
    python benchmarks/cc_comparison.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from machine import COMPILE_CLOCK, machine_info
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.conf.schema import CcKind, LbKind, SimConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.components.experiment import ERROR_POOL_FULL
from multiverse_jax.config import derangement
from multiverse_jax.simulate import error_message, simulate
from multiverse_jax.topology import ecmp_table, fattree
from multiverse_jax.workload.flows import make_flows

RATE_GBPS = 100.0
DELAY_US = 1.0
CCS = tuple(kind.value for kind in CcKind)  # none, dcqcn, dctcp, hpcc, timely
LBS = tuple(kind.value for kind in LbKind)  # ecmp, spray, flowlet
WORKLOADS = ("incast", "permutation")
KB = 1000.0  # queues in KB (10^3 bytes), as the library's plots
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "cc_comparison.json"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, default=4, help="fat-tree size (default 4: 16 hosts)")
    p.add_argument("--flow-bytes", type=int, default=500_000, help="bytes per flow (default 500000)")
    p.add_argument("--senders", type=int, default=8, help="incast senders, hosts 1..N -> host 0 (default 8)")
    p.add_argument("--seed", type=int, default=0, help="derangement of the permutation and Experiment.seed (default 0)")
    p.add_argument("--sample-us", type=float, default=5.0, help="time-series sample interval in µs (default 5)")
    p.add_argument("--slots-per-host", type=int, default=256, help="packet slots per host (default 256; doubled on pool-full)")
    p.add_argument("--max-slots-per-host", type=int, default=4096, help="give up raising slots past this")
    p.add_argument("--steps-per-call", type=int, default=64, help="windows per compiled call (default 64)")
    p.add_argument(
        "--batching",
        choices=engine.BATCHING_MODES,
        default="auto",
        help="how a batch runs: vmap (lockstep), map (loop inside the program), auto (map on CPU, vmap otherwise)",
    )
    p.add_argument("--min-time", type=float, default=3.0, help="repeat the timed per-CC runs while each CC's total is below this (s, default 3)")
    p.add_argument("--max-repeats", type=int, default=20, help="most timed runs of each CC (default 20)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT}); plots go next to it")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--quick", action="store_true", help="smoke run: 100 KB flows")
    args = p.parse_args(argv)
    if args.quick:
        args.flow_bytes = 100_000
    if args.k < 2 or args.k % 2:
        p.error(f"--k must be an even integer >= 2, got {args.k}")
    n_hosts = args.k**3 // 4
    if not 1 <= args.senders < n_hosts:
        p.error(f"--senders must be in 1..{n_hosts - 1} for k={args.k} ({n_hosts} hosts), got {args.senders}")
    if args.flow_bytes < 1 or args.slots_per_host < 1 or args.steps_per_call < 1 or args.max_repeats < 1:
        p.error("--flow-bytes, --slots-per-host, --steps-per-call and --max-repeats must be >= 1")
    if not args.sample_us > 0:
        p.error(f"--sample-us must be > 0 (the plots need time series), got {args.sample_us}")
    return args


# --------------------------------------------------------------------------- experiments


def make_experiments(args) -> tuple[list[Experiment], list[dict]]:
    """The 30 experiments (workload x CC x LB, in that nesting) and a label dict for each."""
    topo = fattree(args.k, RATE_GBPS, DELAY_US)
    table = ecmp_table(topo)  # one network for all: route once
    n = topo.n_hosts
    flows = {
        "incast": make_flows(np.arange(1, args.senders + 1), 0, args.flow_bytes, 0),
        "permutation": make_flows(np.arange(n), derangement(n, args.seed), args.flow_bytes, 0),
    }
    experiments, labels = [], []
    for workload in WORKLOADS:
        for cc in CCS:
            for lb in LBS:
                experiments.append(
                    Experiment(
                        topology=topo,
                        flows=flows[workload],
                        cc=cc,
                        lb=lb,
                        sim=SimConfig(sample_interval_us=args.sample_us, seed=args.seed),
                        ecmp=table,
                    )
                )
                labels.append({"workload": workload, "cc": cc, "lb": lb})
    return experiments, labels


def bottleneck_port(topo) -> int:
    """The egress port into host 0: the link from host 0's ToR to host 0."""
    tor = int(topo.link_dst[topo.host_port()[0]])
    hits = np.flatnonzero((topo.link_src == tor) & (topo.link_dst == 0))
    assert hits.size == 1, f"expected one link tor->h0, found {hits.size}"
    return int(hits[0])


# --------------------------------------------------------------------------- measuring


def compiled_programs() -> int | None:
    size = getattr(engine.advance, "_cache_size", None)
    return int(size()) if callable(size) else None


def run_all(experiments, args):
    """Simulate the whole list as one batch, doubling packet slots while a host's pool runs out.

    Returns (results, static, slots, seconds, compile seconds)."""
    slots = args.slots_per_host
    while True:
        static = build_batch(experiments, slots_per_host=slots, n_samples=args.steps_per_call).static
        COMPILE_CLOCK.take()
        t0 = time.perf_counter()
        out = simulate(
            experiments, slots_per_host=slots, steps_per_call=args.steps_per_call, batching=args.batching, static=static
        )
        wall = time.perf_counter() - t0
        compile_s = COMPILE_CLOCK.take()
        pool_full = error_message(ERROR_POOL_FULL)
        if not any(pool_full in r.summary["error"] for r in out):
            return out, static, slots, wall, compile_s
        if slots * 2 > args.max_slots_per_host:
            raise SystemExit(f"{pool_full} (already at {slots} slots per host)")
        print(f"!!! POOL FULL with {slots} slots per host; retrying with {slots * 2}", flush=True)
        slots *= 2


def experiment_row(label: dict, result, bottleneck: int) -> dict:
    s = result.summary
    f = result.flows
    return {
        **label,
        "status": s["status"],
        "error": s["error"],
        "n_flows": s["n_flows"],
        "flows_finished": s["flows_finished"],
        "fct_mean_us": s["fct_mean_us"],
        "fct_p50_us": s["fct_p50_us"],
        "fct_p99_us": s["fct_p99_us"],
        "job_time_us": s["job_time_us"],
        "simulated_time_us": s["simulated_time_us"],
        "max_queue_kb": s["max_queue_bytes"] / KB,
        "bottleneck_max_queue_kb": float(result.port_max_queue_bytes[bottleneck]) / KB,
        "pfc_pauses": s["pfc_pauses"],
        "ecn_marked_packets": int(np.sum(f["ecn_marked_packets"])),
        "cnps": int(np.sum(f["cnps"])),
        "bytes_on_wire": s["bytes_on_wire"],
        "n_windows": s["n_windows"],
        "n_packet_hops": s["n_packet_hops"],
        "fct_us": [None if np.isnan(v) else float(v) for v in f["fct_us"]],
    }


def prepare_cc(cc: str, experiments, labels, static, slots: int, args) -> dict:
    """The batch of ``cc``'s experiments at the full batch's shapes: compiled (if needed) and warmed up."""
    mine = [i for i, lab in enumerate(labels) if lab["cc"] == cc]
    batch = build_batch([experiments[i] for i in mine], slots_per_host=slots, static=static, n_samples=args.steps_per_call)
    assert batch.static == static
    before = compiled_programs()
    COMPILE_CLOCK.take()
    t0 = time.perf_counter()
    jax.block_until_ready(engine.advance(batch.params, batch.state, args.steps_per_call, args.batching))
    first_call_s = time.perf_counter() - t0
    compile_s = COMPILE_CLOCK.take()
    t0 = time.perf_counter()
    _, warm = engine.run(batch.params, batch.state, steps_per_call=args.steps_per_call, batching=args.batching)
    warmup_s = time.perf_counter() - t0
    return {
        "cc": cc,
        "batch": batch,
        "indices": mine,
        "walls": [],
        "programs_before": before,
        "programs_after_warmup": compiled_programs(),
        "first_call_s": first_call_s,
        "compile_s": compile_s,
        "warmup_run_s": warmup_s,
        "warmup_first_call_s": warm["first_call_s"],
    }


def time_ccs(prepared: list[dict], args) -> None:
    """Timed ``engine.run`` of every CC's batch, interleaved (one run of each CC per round) so
    that a change of machine load hits every CC alike; until each CC has ``--min-time``."""
    while True:
        for p in prepared:
            t0 = time.perf_counter()
            state, timing = engine.run(p["batch"].params, p["batch"].state, steps_per_call=args.steps_per_call, batching=args.batching)
            p["state"] = jax.block_until_ready(state)
            p["walls"].append(time.perf_counter() - t0)
            p["n_calls"] = timing["n_calls"]
        if all(sum(p["walls"]) >= args.min_time for p in prepared) or len(prepared[0]["walls"]) >= args.max_repeats:
            return


def cost_row(p: dict, labels) -> dict:
    state, walls, before = p["state"], p["walls"], p["programs_before"]
    host = jax.device_get({"n_windows": state.n_windows, "time_ps": state.time_ps, "hops": state.n_packet_hops})
    windows = np.asarray(host["n_windows"], np.int64)
    sim_us = float(np.sum(np.asarray(host["time_ps"], np.float64))) / 1e6
    wall = statistics.median(walls)
    after = compiled_programs()
    return {
        "cc": p["cc"],
        "E": len(p["indices"]),
        "experiments": [labels[i] for i in p["indices"]],
        "first_call_s": p["first_call_s"],
        "compile_s": p["compile_s"],
        "warmup_run_s": p["warmup_run_s"],
        "warmup_first_call_s": p["warmup_first_call_s"],
        # compiled programs added by this CC's first call and warm-up (1 for the first CC:
        # the E-sized program; 0 afterwards, as every CC's batch has the same shapes), and
        # by all timed runs (sampled after the last CC's rows: 0 expected)
        "programs_compiled_first_call": None if before is None else p["programs_after_warmup"] - before,
        "programs_compiled_timed": None if before is None else after - p["programs_after_warmup"],
        "wall_s": wall,
        "wall_s_min": min(walls),
        "wall_s_repeats": walls,
        "n_runs": len(walls),
        "n_calls": p["n_calls"],
        "windows_total": int(windows.sum()),
        "windows_per_experiment": windows.tolist(),
        "windows_stepped_by_batch": int(windows.max()),
        "packet_hops": int(np.sum(host["hops"])),
        "sim_us_total": sim_us,
        "wall_us_per_window": wall / windows.sum() * 1e6,
        "wall_us_per_window_min": min(walls) / windows.sum() * 1e6,
        "wall_us_per_sim_us": wall * 1e6 / sim_us,
        # packet-hops are the same for every CC here (lossless, same packets, equal-length paths), so
        # this compares the CCs' work on the same traffic, however busy their windows are
        "wall_ns_per_packet_hop": wall * 1e9 / max(int(np.sum(host["hops"])), 1),
        # under vmap (lockstep) the batch steps max(n_windows) windows, each over all E
        "wall_us_per_batch_step": wall / windows.max() * 1e6,
    }


# --------------------------------------------------------------------------- output


def fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return spec.format(value)


def print_table(columns, rows) -> None:
    """columns: (header, key, format, width); left-align str columns."""
    print("  ".join(h.rjust(w) if f != "s" else h.ljust(w) for h, _, f, w in columns))
    for row in rows:
        cells = []
        for _, key, spec, width in columns:
            cells.append(str(row[key]).ljust(width) if spec == "s" else fmt(row[key], spec).rjust(width))
        print("  ".join(cells), flush=True)


EXPERIMENT_COLUMNS = [
    ("workload", "workload", "s", 11),
    ("cc", "cc", "s", 6),
    ("lb", "lb", "s", 7),
    ("status", "status", "s", 6),
    ("FCT mean µs", "fct_mean_us", "{:.1f}", 11),
    ("FCT p99 µs", "fct_p99_us", "{:.1f}", 10),
    ("job µs", "job_time_us", "{:.1f}", 8),
    ("max queue KB", "max_queue_kb", "{:.1f}", 12),
    ("PFC pauses", "pfc_pauses", "{:d}", 10),
    ("ECN marks", "ecn_marked_packets", "{:d}", 9),
    ("CNPs", "cnps", "{:d}", 5),
]

COST_COLUMNS = [
    ("cc", "cc", "s", 6),
    ("E", "E", "{:d}", 2),
    ("windows", "windows_total", "{:,d}", 8),
    ("wall s", "wall_s", "{:.3f}", 7),
    ("µs/window", "wall_us_per_window", "{:.1f}", 9),
    ("vs none", "per_window_vs_none", "{:.2f}x", 7),
    ("best vs none", "per_window_min_vs_none", "{:.2f}x", 12),
    ("wall µs/sim µs", "wall_us_per_sim_us", "{:.1f}", 14),
    ("vs none", "per_sim_us_vs_none", "{:.2f}x", 7),
    ("ns/hop", "wall_ns_per_packet_hop", "{:,.0f}", 6),
    ("vs none", "per_hop_vs_none", "{:.2f}x", 7),
    ("runs", "n_runs", "{:d}", 4),
    ("compiles", "programs_compiled_first_call", "{:d}", 8),
]


def same_as_none(results, labels, e: int) -> bool:
    """Whether experiment ``e`` gave exactly the FCTs of its ``none`` counterpart."""
    twin = {**labels[e], "cc": "none"}
    base = results[next(i for i, lab in enumerate(labels) if lab == twin)]
    return bool(np.array_equal(results[e].flows["fct_us"], base.flows["fct_us"], equal_nan=True))


STYLES = {"none": ("black", "-", 2.2), "dcqcn": ("tab:orange", "-", 1.4), "dctcp": ("tab:green", "-", 1.4),
          "hpcc": ("tab:red", "-", 1.4), "timely": ("tab:purple", "--", 1.4)}


def plot_incast(results, labels, topo, bottleneck: int, path: Path, title: str) -> None:
    """Incast under ECMP: per CC a row of (each flow's sending rate, bottleneck queue)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 2.3 * len(CCS) + 0.6), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(CCS), 2, sharex=True, squeeze=False)
    rate_max, queue_max = 1.0, 1.0
    for row, cc in enumerate(CCS):
        e = next(i for i, lab in enumerate(labels) if lab == {"workload": "incast", "cc": cc, "lb": "ecmp"})
        r = results[e]
        ax_rate, ax_queue = axes[row]
        fs, ps = r.flow_series, r.port_series
        finish = dict(zip(r.flows["id"].tolist(), r.flows["finish_us"]))
        for fid in r.flows["id"]:
            mask = fs["flow_id"] == fid
            t, rate = fs["time_us"][mask], fs["rate_gbps"][mask].copy()
            o = np.argsort(t, kind="stable")
            t, rate = t[o], rate[o]
            rate[t > finish[int(fid)]] = np.nan  # stop the line when the flow is done
            ax_rate.plot(t, rate, lw=0.9, label=str(r.flows["src_name"][r.flows["id"] == fid][0]))
            rate_max = max(rate_max, float(np.nanmax(rate, initial=0.0)))
        # delivered throughput, mean over flows: what a window-based CC (DCTCP) actually sends
        times = np.unique(fs["time_us"])
        if times.size > 1:
            rx = np.stack([fs["rx_bytes"][fs["time_us"] == t].sum() for t in times]).astype(float)
            thr = np.diff(rx) * 8 / (np.diff(times) * 1e3) / len(r.flows["id"])  # Gb/s per flow
            ax_rate.step(times[1:], thr, where="pre", color="black", lw=1.4, ls="--", label="delivered (mean/flow)")
        mask = ps["port"] == bottleneck
        t, q = ps["time_us"][mask], ps["queue_bytes"][mask] / KB
        o = np.argsort(t, kind="stable")
        ax_queue.plot(t[o], q[o], color="tab:red", lw=1.2)
        queue_max = max(queue_max, float(q.max(initial=0.0)))
        s = r.summary
        note = " [window-based: rate stays at line rate]" if cc == "dctcp" else ""
        if cc != "none" and same_as_none(results, labels, e):
            note += " [same FCTs as none]"
        ax_rate.set_ylabel(f"{cc}\nrate (Gb/s)")
        ax_rate.set_title(f"{cc}: sending rate (CC state) per flow; job {s['job_time_us']:.0f} µs{note}", fontsize="small")
        ax_queue.set_ylabel("queue (KB)")
        ax_queue.set_title(
            f"{cc}: queue of port {topo.port_names()[bottleneck]}; peak {r.port_max_queue_bytes[bottleneck] / KB:.0f} KB",
            fontsize="small",
        )
        for ax in (ax_rate, ax_queue):
            ax.grid(True, alpha=0.3)
            ax.set_xlim(left=0)
    for ax_rate, ax_queue in axes:
        ax_rate.set_ylim(0, rate_max * 1.05)
        ax_queue.set_ylim(0, queue_max * 1.05)
    axes[0, 0].legend(fontsize="x-small", ncol=5, loc="center right")
    axes[-1, 0].set_xlabel("time (µs)")
    axes[-1, 1].set_xlabel("time (µs)")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(path)


def plot_fct_cdfs(results, labels, workload: str, path: Path, title: str) -> None:
    """Empirical FCT CDF of every CC under ECMP, one workload."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for cc in CCS:
        e = next(i for i, lab in enumerate(labels) if lab == {"workload": workload, "cc": cc, "lb": "ecmp"})
        fct = results[e].flows["fct_us"]
        done = np.sort(fct[~np.isnan(fct)])
        if done.size:
            frac = np.arange(1, done.size + 1) / fct.size
            color, ls, lw = STYLES[cc]
            label = f"{cc} (= none)" if cc != "none" and same_as_none(results, labels, e) else cc
            ax.step(np.concatenate([[0.0], done]), np.concatenate([[0.0], frac]), where="post", label=label,
                    color=color, ls=ls, lw=lw)
    ax.set_xlabel("flow completion time (µs)")
    ax.set_ylabel("fraction of flows")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    ax.legend(title="cc (ECMP)", fontsize="small")
    ax.set_title(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(path)


def metadata(args, slots: int, static) -> dict:
    return {
        **machine_info(),
        "topology": {"kind": "fattree", "k": args.k, "rate_gbps": RATE_GBPS, "delay_us": DELAY_US},
        "workloads": {
            "incast": f"hosts 1..{args.senders} -> host 0, all at 0",
            "permutation": f"every host -> config.derangement(n_hosts, {args.seed}), all at 0",
        },
        "flow_bytes": args.flow_bytes,
        "ccs": list(CCS),
        "lbs": list(LBS),
        "cc_parameters": "library defaults (cc/config.py)",
        "sample_interval_us": args.sample_us,
        "steps_per_call": args.steps_per_call,
        "slots_per_host": slots,
        "batching": engine.resolve_batching(args.batching),
        "static": dataclasses.asdict(static),
        "argv": sys.argv[1:],
        "notes": [
            "experiments: one simulate() call over all workload x cc x lb points (batch_wall_s includes compile; "
            "batch_compile_s from jax.monitoring)",
            "max_queue_kb: largest egress queue of any port; bottleneck_max_queue_kb: the ToR->h0 port",
            "ecn_marked_packets: sum over flows of the receivers' count of CE-marked data packets",
            "cost: per CC, engine.run on that CC's experiments padded to the full batch's Static (same shapes for all "
            "CCs, one compiled program); wall_s = median of timed runs after a compile call and an untimed warm-up run; "
            "the CCs' timed runs are interleaved (one of each per round) so load changes hit all alike",
            "wall_us_per_window = wall_s / sum of the experiments' n_windows (*_min: from the fastest run); "
            "wall_us_per_sim_us = wall_s / sum of simulated µs; wall_ns_per_packet_hop = wall_s / packet_hops; wall_us_per_batch_step = wall_s / max n_windows (vmap's lockstep steps)",
        ],
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    experiments, labels = make_experiments(args)
    topo = experiments[0].topology
    bottleneck = bottleneck_port(topo)
    print(
        f"jax {jax.__version__} | backend {jax.default_backend()} ({jax.devices()[0].device_kind}) | {os.cpu_count()} CPUs | "
        f"batching {engine.resolve_batching(args.batching)} | k={args.k} | {len(experiments)} experiments | "
        f"flow bytes {args.flow_bytes} | sample every {args.sample_us:g} µs",
        flush=True,
    )

    print("simulating every experiment as one batch ...", flush=True)
    results, static, slots, batch_wall, batch_compile = run_all(experiments, args)
    rows = [experiment_row(lab, r, bottleneck) for lab, r in zip(labels, results)]
    doc = {"metadata": metadata(args, slots, static), "experiments": rows, "cost": []}
    doc["metadata"].update({"batch_wall_s": batch_wall, "batch_compile_s": batch_compile})
    print(
        f"batch of {len(experiments)}: {batch_wall:.1f} s wall "
        f"(compile {fmt(batch_compile, '{:.1f}')} s), {slots} slots per host\n",
        flush=True,
    )
    print_table(EXPERIMENT_COLUMNS, rows)
    for e, r in enumerate(rows):
        r["same_fcts_as_none"] = same_as_none(results, labels, e)
    print(
        "ECN marks: CE-marked data packets at the receivers (switches mark under every CC); "
        "CNPs: ACKs the receivers flagged as congestion notifications (DCQCN only)"
    )
    for cc in CCS[1:]:
        same = [r for r in rows if r["cc"] == cc and r["same_fcts_as_none"]]
        if same:
            print(f"note: {cc} gave exactly the FCTs of none in {len(same)} of {len(LBS) * len(WORKLOADS)} points", flush=True)
    failed = [r for r in rows if r["status"] != "ok"]
    for r in failed:
        print(f"!!! {r['workload']}/{r['cc']}/{r['lb']} FAILED: {r['error'] or 'not done'}", flush=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")

    print("\ncost per step, each CC's experiments alone (same shapes) ...", flush=True)
    prepared = [prepare_cc(cc, experiments, labels, static, slots, args) for cc in CCS]
    time_ccs(prepared, args)
    cost = []
    for p in prepared:
        row = cost_row(p, labels)
        # the timed run must reproduce the batched run (same experiments, same shapes)
        row["matches_batch_run"] = row["windows_per_experiment"] == [rows[i]["n_windows"] for i in p["indices"]]
        cost.append(row)
    base = cost[0]
    for row in cost:
        row["per_window_vs_none"] = row["wall_us_per_window"] / base["wall_us_per_window"]
        row["per_window_min_vs_none"] = row["wall_us_per_window_min"] / base["wall_us_per_window_min"]
        row["per_sim_us_vs_none"] = row["wall_us_per_sim_us"] / base["wall_us_per_sim_us"]
        row["per_hop_vs_none"] = row["wall_ns_per_packet_hop"] / base["wall_ns_per_packet_hop"]
    doc["metadata"]["loadavg_after_timing"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    print_table(COST_COLUMNS, cost)
    recompiled = [r["cc"] for r in cost[1:] if r["programs_compiled_first_call"] or r["programs_compiled_timed"]]
    if recompiled:
        print(f"!!! recompiled for: {', '.join(recompiled)} (expected one program for every CC)", flush=True)
    mismatched = [r["cc"] for r in cost if not r["matches_batch_run"]]
    if mismatched:
        print(f"!!! windows differ from the 30-experiment batch for: {', '.join(mismatched)}", flush=True)
    doc["cost"] = cost

    if not args.no_plots:
        stem = args.out.with_suffix("")
        plots = {
            "incast_timeseries": Path(f"{stem}_incast_ecmp.png"),
            **{f"fct_cdf_{w}": Path(f"{stem}_fct_cdf_{w}.png") for w in WORKLOADS},
        }
        size = f"{args.flow_bytes / 1000:g} KB flows"
        plot_incast(
            results, labels, topo, bottleneck, plots["incast_timeseries"],
            f"k={args.k} fat-tree, {args.senders}-to-1 incast into h0, ECMP, {size}, sampled every {args.sample_us:g} µs",
        )
        for w in WORKLOADS:
            plot_fct_cdfs(results, labels, w, plots[f"fct_cdf_{w}"], f"k={args.k} fat-tree, {w}, ECMP, {size}: FCT CDF")
        doc["metadata"]["plots"] = {k: str(v) for k, v in plots.items()}
        print("\nplots: " + ", ".join(str(p) for p in plots.values()))

    doc["metadata"]["total_wall_s"] = time.perf_counter() - start
    doc["metadata"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"total {doc['metadata']['total_wall_s']:.0f} s; results: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
