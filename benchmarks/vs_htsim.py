"""Side by side with htsim: the same connection matrix, network and routes in both, per flow.

For every scenario (``multiverse_jax/peers/scenarios.py``, seeded: every run draws the
same traffic) and mode (``roce``: no congestion control, PFC; ``hpcc``: HPCC with htsim's
constants), on a k=4 fat-tree of 100 Gb/s, 1 µs links with 9000 B packets:

1. htsim (the route-printing build of ``multiverse_jax/peers/htsim.py``) runs the ``.cm``;
2. the next hops it printed become pinned routes (data and ACK paths) for this simulator,
   which runs the same ``.cm`` on the same network (``htsim.our_config``) alone, with
   ``simulate`` (one experiment per run, so that its wall time is its own);
3. per flow, FCT = finish (sender has the last ACK) - start, in both; the error is
   (ours - htsim) / htsim.

Printed and written (JSON, with the machine header; a plot of the CDF of the per-flow
FCT error per scenario, one panel per mode): flows, flows finished by each, per-flow FCT
error |median| / p99 / max (%), job-time and mean-FCT errors (%), htsim against itself
with its links 10 ppm slower (``htsim_self``: per-flow |median| and max, job, %: how far the
scenario's per-flow FCTs are determined at all), htsim's wall seconds, ours (the
``simulate`` call, less JAX's compile time, which is its own column) and ours / htsim.
With ``--sim-modes`` (default ``packet hybrid flow``) the same pinned experiment also runs
in our hybrid and flow modes (``sim.mode``), each with its own columns: per-flow FCT error
against htsim (|median| and max, %), job-time error and wall seconds.

``--quick``: the small scenarios only (a few minutes on 2 cores); default: those and the
elephants (a 1 GiB ring all-reduce over 16 hosts, two concurrent 256 MiB rings over 8
hosts each, a permutation of 200 MB flows). Without a compiler or ``../shared/peers`` it
says why and exits 0 without comparing.

    python benchmarks/vs_htsim.py --quick
    python benchmarks/vs_htsim.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from machine import COMPILE_CLOCK, machine_info
from multiverse_jax.conf.schema import STEPS_PER_CALL
from multiverse_jax.components.experiment import ERROR_POOL_FULL
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import elephant_suite, quick_suite
from multiverse_jax.report.figure import new_figure, save
from multiverse_jax.simulate import error_message, simulate

MODES = tuple(htsim.BINARIES)  # roce, hpcc
SIM_MODES = ("packet", "hybrid", "flow")  # our sim.mode values
RESULTS = Path(__file__).resolve().parent / "results"
SELF_PPM = 10  # htsim against itself with its links this much slower (Ethernet allows +-100 ppm)
POOL_FULL = error_message(ERROR_POOL_FULL)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small scenarios only (no elephants)")
    p.add_argument("--scenarios", nargs="*", help="run only these scenarios (by name)")
    p.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES, help="htsim binaries to compare with")
    p.add_argument(
        "--sim-modes", nargs="*", default=list(SIM_MODES), choices=SIM_MODES,
        help="our granularities to run (packet always runs: it is the row; hybrid and flow add columns)",
    )
    p.add_argument("--queue-packets", type=int, default=100, help="htsim -q, in 9000 B packets (default 100)")
    p.add_argument(
        "--pfc", type=int, nargs=2, default=(50, 70), metavar=("LOW", "HIGH"),
        help="htsim -pfc_thresholds, packets: our switch.pfc_xon_bytes and pfc_xoff_bytes / 9000 (default 50 70)",
    )  # fmt: skip
    p.add_argument("--slots-per-host", type=int, default=256, help="our packet slots per host (doubled on pool-full)")
    p.add_argument("--build-dir", help="where build-htsim builds (default: its own, under ~/.cache)")
    p.add_argument("--peers-dir", help="the peers folder (default: ../shared/peers beside the repository)")
    p.add_argument("--keep", help="keep the .cm, routes and htsim output in this folder (default: a temporary one)")
    p.add_argument("--out", default=str(RESULTS / "vs_htsim.json"), help="results JSON (the plot goes beside it)")
    args = p.parse_args(argv)
    low, high = args.pfc
    if not 0 < low < high or args.queue_packets < 1 or args.slots_per_host < 1:
        p.error("need 0 < --pfc LOW < HIGH, --queue-packets >= 1 and --slots-per-host >= 1")
    return args


def run_batch(experiments, slots: int, max_slots: int = 1 << 14, batching: str = "auto", devices: int = 1, steps_per_call: int = STEPS_PER_CALL):
    """``simulate`` of the experiments as one batch (sharded over ``devices`` local
    devices, ``steps_per_call`` windows a compiled call), doubling the packet slots while
    a host's pool runs out. Returns (results, wall s less compile, compile s, slots)."""
    while True:
        COMPILE_CLOCK.take()
        began = time.perf_counter()
        results = simulate(experiments, slots_per_host=slots, batching=batching, devices=devices, steps_per_call=steps_per_call)
        wall = time.perf_counter() - began
        compile_s = COMPILE_CLOCK.take() or 0.0
        if not any(POOL_FULL in r.summary["error"] for r in results) or slots * 2 > max_slots:
            return results, wall - compile_s, compile_s, slots
        slots *= 2


def run_ours(experiment, slots: int, max_slots: int = 1 << 14):
    """``run_batch`` of one experiment: (result, wall s less compile, compile s, slots)."""
    results, wall_s, compile_s, slots = run_batch([experiment], slots, max_slots)
    return results[0], wall_s, compile_s, slots


def percent_stats(errors: np.ndarray) -> dict:
    """|error| median, p99 and max in % over the flows both finished (None if none did)."""
    magnitude = np.abs(errors[~np.isnan(errors)]) * 100
    if magnitude.size == 0:
        return {"fct_err_median_pct": None, "fct_err_p99_pct": None, "fct_err_max_pct": None}
    return {
        "fct_err_median_pct": float(np.median(magnitude)),
        "fct_err_p99_pct": float(np.percentile(magnitude, 99)),
        "fct_err_max_pct": float(magnitude.max()),
    }


def mean_fct_error_pct(flows: dict) -> float | None:
    """(mean ours - mean htsim) / mean htsim of the FCTs of the flows both finished, in %."""
    ours, theirs = np.asarray(flows["ours_fct_ps"], float), np.asarray(flows["htsim_fct_ps"], float)
    both = ~np.isnan(ours) & ~np.isnan(theirs)
    return float((ours[both].mean() - theirs[both].mean()) / theirs[both].mean() * 100) if both.any() else None


def htsim_self(build, mode: str, cm_path, network, folder: Path, run: htsim.HtsimRun) -> dict:
    """htsim against itself: the same run with every link ``SELF_PPM`` slower (htsim's
    serialisation, in whole ps per byte, is unchanged at 100 Gb/s; what moves are the rates
    its senders derive from the link rate: HPCC's initial window and pacing, RoCE's pacing).
    Its per-flow FCT differences (|median|, max, %) and job-time difference say how far a
    scenario's per-flow results are determined at all: an error below them is noise."""
    slower = dataclasses.replace(network, rate_gbps=network.rate_gbps * (1 - SELF_PPM * 1e-6))
    other_dir = folder / "htsim_self"
    other_dir.mkdir(exist_ok=True)
    other = htsim.run_htsim(build, mode, cm_path, slower, other_dir)
    ids = sorted(run.finish_ps.keys() & other.finish_ps.keys())
    fct = np.array([run.finish_ps[i] - run.start_ps[i] for i in ids], float)
    other_fct = np.array([other.finish_ps[i] - other.start_ps[i] for i in ids], float)
    stats = percent_stats((other_fct - fct) / fct) if ids else percent_stats(np.array([]))
    job = max(run.finish_ps.values(), default=0)
    return {
        "self_fct_err_median_pct": stats["fct_err_median_pct"],
        "self_fct_err_max_pct": stats["fct_err_max_pct"],
        "self_job_err_pct": (max(other.finish_ps.values(), default=0) - job) / job * 100 if job else None,
    }


def job_error_pct(result, run: htsim.HtsimRun) -> float | None:
    """(ours - htsim) / htsim of the job time (last finish), when both finished every flow."""
    if result.summary["flows_finished"] != result.summary["n_flows"] or len(run.finish_ps) != result.summary["n_flows"]:
        return None
    theirs = max(run.finish_ps.values())
    return (result.summary["job_time_ps"] - theirs) / theirs * 100


def coarser_columns(experiment, sim_mode: str, run: htsim.HtsimRun, slots: int) -> tuple[dict, dict]:
    """The pinned ``experiment`` in our ``sim_mode`` (hybrid or flow): its columns of the row,
    prefixed with the mode, and its per-flow comparison with htsim."""
    coarser = dataclasses.replace(experiment, sim=dataclasses.replace(experiment.sim, mode=sim_mode))
    result, wall_s, _, _ = run_ours(coarser, slots)
    flows = htsim.compare(result.flows, run)
    stats = percent_stats(flows["fct_error"])
    columns = {
        f"{sim_mode}_fct_err_median_pct": stats["fct_err_median_pct"],
        f"{sim_mode}_fct_err_max_pct": stats["fct_err_max_pct"],
        f"{sim_mode}_job_err_pct": job_error_pct(result, run),
        f"{sim_mode}_s": wall_s,
        f"{sim_mode}_status": result.summary["status"],
        f"{sim_mode}_windows": result.summary["n_windows"],
    }
    return columns, {key: value.tolist() for key, value in flows.items()}


def compare_one(scenario, mode: str, build, network, folder: Path, slots: int, sim_modes=("packet",)) -> tuple[dict, dict]:
    """One scenario in one mode in both simulators: its table row and its per-flow columns
    (with hybrid and flow columns for those of ``sim_modes``)."""
    cm_path = scenario.write(folder / f"{scenario.name}.cm")
    run = htsim.run_htsim(build, mode, cm_path, network, folder)
    experiment = htsim.pinned_experiment(run, network, mode, cm_path, folder)
    result, ours_s, compile_s, slots = run_ours(experiment, slots)
    flows = htsim.compare(result.flows, run)
    row = {
        "scenario": scenario.name,
        "mode": mode,
        "flows": len(scenario.flows),
        "ours_finished": result.summary["flows_finished"],
        "htsim_finished": len(run.finish_ps),
        "ours_status": result.summary["status"],
        "ours_error": result.summary["error"],
        **percent_stats(flows["fct_error"]),
        "job_err_pct": job_error_pct(result, run),
        "mean_fct_err_pct": mean_fct_error_pct(flows),
        **htsim_self(build, mode, cm_path, network, folder, run),
        "htsim_job_us": max(run.finish_ps.values(), default=0) / 1e6,
        "ours_job_us": result.summary["job_time_us"],
        "htsim_s": run.wall_s,
        "ours_s": ours_s,
        "ours_compile_s": compile_s,
        "ours_over_htsim": ours_s / run.wall_s if run.wall_s > 0 else None,
        "slots_per_host": slots,
        "packet_hops": result.summary["n_packet_hops"],
        "windows": result.summary["n_windows"],
    }
    per_flow = {key: value.tolist() for key, value in flows.items()}
    for sim_mode in (m for m in sim_modes if m != "packet"):
        columns, coarse_flows = coarser_columns(experiment, sim_mode, run, slots)
        row.update(columns)
        per_flow[f"{sim_mode}_fct_error"] = coarse_flows["fct_error"]
    return row, per_flow


def _cell(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


COLUMNS = (
    ("scenario", "scenario", 16), ("mode", "mode", 5), ("flows", "flows", 6), ("finished o/h", None, 13),
    ("fct err med %", "fct_err_median_pct", 13), ("p99 %", "fct_err_p99_pct", 8), ("max %", "fct_err_max_pct", 8),
    ("job err %", "job_err_pct", 9), ("mean fct %", "mean_fct_err_pct", 10),
    ("self med %", "self_fct_err_median_pct", 10), ("max %", "self_fct_err_max_pct", 8), ("job %", "self_job_err_pct", 7),
    ("htsim s", "htsim_s", 8), ("ours s", "ours_s", 8),
    ("compile s", "ours_compile_s", 9), ("ours/htsim", "ours_over_htsim", 10),
    ("hybrid med %", "hybrid_fct_err_median_pct", 12), ("max %", "hybrid_fct_err_max_pct", 8),
    ("hybrid s", "hybrid_s", 8), ("flow med %", "flow_fct_err_median_pct", 10), ("max %", "flow_fct_err_max_pct", 8),
    ("flow s", "flow_s", 7),
)  # fmt: skip


def print_row(row: dict | None) -> None:
    """One table line (the header when ``row`` is None)."""
    cells = []
    for title, key, width in COLUMNS:
        if row is None:
            text = title
        elif key is None:
            text = f"{row['ours_finished']}/{row['htsim_finished']}"
        else:
            text = _cell(row.get(key), 3 if key.endswith("_s") else 2)
        cells.append(text.rjust(width) if row is not None and key not in ("scenario", "mode") else text.ljust(width))
    print(" ".join(cells), flush=True)


def plot(rows: list[dict], flows: dict, path: Path) -> None:
    """CDF of the per-flow FCT error (%) of every scenario, one panel per mode."""
    modes = sorted({row["mode"] for row in rows}, key=MODES.index)
    fig = new_figure(6.0 * len(modes), 4.2)
    for i, mode in enumerate(modes):
        ax = fig.add_subplot(1, len(modes), i + 1)
        for row in (r for r in rows if r["mode"] == mode):
            errors = np.array(flows[f"{row['scenario']}/{mode}"]["fct_error"], float) * 100
            errors = np.sort(errors[~np.isnan(errors)])
            if errors.size:
                ax.step(errors, np.arange(1, errors.size + 1) / errors.size, where="post", label=row["scenario"])
        ax.axvline(0.0, color="grey", linewidth=0.8)
        ax.set_xlabel("per-flow FCT error vs htsim, (ours - htsim) / htsim (%)")
        ax.set_ylabel("fraction of flows")
        ax.set_title(f"{mode}: ours vs htsim, pinned to htsim's routes")
        ax.legend(fontsize=7)
    save(fig, path)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        build = htsim.build_htsim(args.build_dir, args.peers_dir)
    except htsim.PeerUnavailable as reason:
        print(f"vs_htsim: nothing compared: {reason}", file=sys.stderr)
        return 0
    network = htsim.HtsimNetwork(queue_packets=args.queue_packets, pfc_low_packets=args.pfc[0], pfc_high_packets=args.pfc[1])
    scenarios = quick_suite(network.n_hosts) + ([] if args.quick else elephant_suite(network.n_hosts))
    if args.scenarios:
        scenarios = [s for s in scenarios if s.name in args.scenarios]
    began = time.perf_counter()
    rows, flows = [], {}
    with tempfile.TemporaryDirectory(prefix="vs_htsim-") as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        print_row(None)
        for scenario in scenarios:
            for mode in args.modes:
                row, columns = compare_one(scenario, mode, build, network, folder, args.slots_per_host, args.sim_modes)
                rows.append(row)
                flows[f"{scenario.name}/{mode}"] = columns
                print_row(row)
                jax.clear_caches()  # each scenario has its own shapes: its programs are not needed again
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine_info(),
        "network": {**dataclasses.asdict(network), "our_config": htsim.our_config(network, "roce", "<scenario>.cm")},
        "htsim_build": str(build.routes_dir),
        "total_wall_s": time.perf_counter() - began,
        "rows": rows,
        "flows": flows,
    }
    out.write_text(json.dumps(report, indent=1))
    plot(rows, flows, out.with_name(out.stem + "_fct_error.png"))
    print(f"wrote {out} and {out.with_name(out.stem + '_fct_error.png')} ({report['total_wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
