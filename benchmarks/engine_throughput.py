"""Engine throughput: batched experiments vs. one at a time, on k-ary fat-trees.

For each fat-tree size k (100 Gb/s, 1 µs links) and each batch size E, E experiments of
permutation traffic (every host sends ``--flow-bytes`` to a distinct other host, a random
derangement; experiment e uses seed e for the derangement and for ``SimConfig(seed=e)``)
are built into one batch and run with ``engine.run``. Measured per (k, E):

* compile: wall time of the first ``engine.advance`` call (trace + lower + XLA compile +
  execute) minus the second, identical call (the first call of the timed run, which starts
  from the same initial state with the same ``steps_per_call``);
* batched run: ``engine.run`` from the initial state, after compilation (median of
  repeats when one run is shorter than ``--min-time``);
* simulated packet-hops per wall second, simulated µs per wall second per experiment,
  windows stepped;
* peak memory: ``ru_maxrss`` of this process (monotone over the whole process) and, where
  the device reports it (GPU), ``peak_bytes_in_use``;
* one-at-a-time baseline: the same experiments run as batches of E=1, every one padded to
  the Static of the E batch (one compiled E=1 program per k, reused); at most
  ``--baseline-max`` are run and the per-experiment time is scaled up to E;
* passes per window and lockstep waste (``--round-samples`` windows spread over the run):
  the passes every window runs before its rounds (``passes``: the FIFO pass and the NIC pass,
  where the batch has them: ``--fifo-pass``, ``--nic-pass``, which need every port to have one
  class queue, ``--ack-class data``, htsim's configuration), then the transmit rounds a
  window of each running experiment needs alone
  (``step_profile.transmit_rounds``), and under ``vmap`` the rounds its lanes run (the
  most of the running experiments of each lane group, ``engine.lockstep_lanes`` of them
  in batch order, as lanes start); waste = 1 - own / lockstep;
* htsim beside us (``--htsim-points``, needs ``../shared/peers``): ``htsim_roce`` on one
  permutation of the same flow size on the same k, with htsim's network (9000 B packets,
  PFC; ``peers/htsim.py``), its packet-hops per second on one core (the hops of our run of
  the same input), and ours on that input alone, for the per-core comparison.

Nothing here is backend-specific: the same command runs on CPU or GPU.

    python benchmarks/engine_throughput.py --quick
    python benchmarks/engine_throughput.py                 # k=4,8 x E=1,16,64,256
    python benchmarks/engine_throughput.py --experiments-k 8=1,16,64
    python benchmarks/engine_throughput.py --ks 8 --experiments 16 --batching vmap --ack-class data --fifo-pass always --nic-pass always
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from machine import machine_info
from step_profile import rounds_in_lockstep, rounds_of_each
from vs_htsim import run_ours
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.conf.schema import PacketConfig, SimConfig
from multiverse_jax.config import experiment_from_config
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import permutation
from multiverse_jax.experiment import Experiment
from multiverse_jax.components.experiment import ERROR_POOL_FULL
from multiverse_jax.ops import fifo_pass
from multiverse_jax.simulate import error_message, results
from multiverse_jax.systems.transmit import nic_pass_applies
from multiverse_jax.topology import ecmp_table, fattree
from multiverse_jax.workload.flows import make_flows

RATE_GBPS = 100.0
DELAY_US = 1.0
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "engine_throughput.json"


class PoolFull(Exception):
    """Some experiment ran out of packet slots: rerun this k with more slots per host."""


def int_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of positive integers, got {text!r}")
    return values


def k_override(text: str) -> tuple[int, list[int]]:
    k, _, values = text.partition("=")
    return int(k), int_list(values)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ks", type=int_list, default=[4, 8], help="fat-tree sizes (default 4,8)")
    p.add_argument("--experiments", type=int_list, default=[1, 16, 64, 256], help="batch sizes E (default 1,16,64,256)")
    p.add_argument(
        "--experiments-k",
        type=k_override,
        action="append",
        default=[],
        metavar="K=E1,E2,..",
        help="batch sizes for one k, overriding --experiments (repeatable), e.g. 8=1,16,64",
    )
    p.add_argument("--flow-bytes", type=int, default=262144, help="bytes per flow (default 262144)")
    p.add_argument("--slots-per-host", type=int, default=128, help="packet slots per host (default 128; doubled on pool-full)")
    p.add_argument("--max-slots-per-host", type=int, default=4096, help="give up raising slots past this")
    p.add_argument("--steps-per-call", type=int, default=64, help="windows per compiled call (default 64)")
    p.add_argument(
        "--batching",
        choices=engine.BATCHING_MODES,
        default="auto",
        help="how a batch runs: vmap (lockstep), map (loop inside the program), auto (map on CPU, vmap otherwise)",
    )
    p.add_argument("--baseline-max", type=int, default=8, help="most experiments run one at a time per k (default 8)")
    p.add_argument("--min-time", type=float, default=2.0, help="repeat a timed run while the total is below this (s)")
    p.add_argument("--max-repeats", type=int, default=20, help="most timed repeats of one run")
    p.add_argument(
        "--max-projected-s",
        type=float,
        default=0.0,
        help="skip a (k, E) whose projected time (linear in E from the previous E of the same k) exceeds this; 0: never",
    )
    p.add_argument("--ack-class", default="control", choices=("control", "data"), help="packet.ack_class (default control, ours; data: htsim's, one class queue a port)")
    p.add_argument("--fifo-pass", default="auto", choices=("auto", "always", "never"), help="sim.fifo_pass (auto: an accelerator's; needs --ack-class data)")
    p.add_argument("--nic-pass", default="auto", choices=("auto", "always", "never"), help="sim.nic_pass (auto: an accelerator's; with the FIFO pass)")
    p.add_argument("--round-samples", type=int, default=4, help="windows sampled for passes per window and lockstep waste (0: off)")
    p.add_argument("--htsim-points", type=int, default=1, help="htsim_roce runs per k beside us (0: off; skipped without ../shared/peers)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    p.add_argument("--quick", action="store_true", help="smoke run: ks=4, experiments=1,4, flow-bytes 65536")
    args = p.parse_args(argv)
    if args.quick:
        args.ks, args.experiments, args.flow_bytes = [4], [1, 4], 65536
        args.experiments_k = []
    if args.flow_bytes < 1 or args.slots_per_host < 1 or args.steps_per_call < 1 or args.baseline_max < 1:
        p.error("--flow-bytes, --slots-per-host, --steps-per-call and --baseline-max must be >= 1")
    args.per_k = {k: sorted(set(args.experiments)) for k in args.ks}
    for k, values in args.experiments_k:
        if k not in args.per_k:
            p.error(f"--experiments-k names k={k}, which is not in --ks")
        args.per_k[k] = sorted(set(values))
    return args


# --------------------------------------------------------------------------- workload


def derangement(n: int, seed: int) -> np.ndarray:
    """A uniformly random permutation of range(n) without fixed points (rejection sampling)."""
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            return perm


def make_experiments(k: int, n: int, flow_bytes: int, ack_class: str = "control", fifo_pass: str = "auto", nic_pass: str = "auto") -> list[Experiment]:
    topo = fattree(k, RATE_GBPS, DELAY_US)
    table = ecmp_table(topo)  # shared: every experiment of one k has the same network
    hosts = np.arange(topo.n_hosts)
    packet = PacketConfig(ack_class=ack_class)
    return [
        Experiment(
            topology=topo, flows=make_flows(hosts, derangement(topo.n_hosts, e), flow_bytes, 0), packet=packet, ecmp=table,
            sim=SimConfig(seed=e, sample_interval_us=0, fifo_pass=fifo_pass, nic_pass=nic_pass),
        )
        for e in range(n)
    ]


# --------------------------------------------------------------------------- measuring


def peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS).
    scale = 1.0 if sys.platform == "darwin" else 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def device_peak_bytes() -> int | None:
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - some backends raise instead of returning None
        return None
    if not stats:
        return None
    value = stats.get("peak_bytes_in_use")
    return int(value) if value is not None else None


class CompileClock:
    """Sums JAX's own compile-phase durations (trace, lower to MLIR, backend compile)."""

    EVENTS = {
        "/jax/core/compile/jaxpr_trace_duration": "trace_s",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
        "/jax/core/compile/backend_compile_duration": "backend_compile_s",
    }

    def __init__(self):
        self.totals = dict.fromkeys(self.EVENTS.values(), 0.0)
        self.seen = False
        try:
            from jax import monitoring

            monitoring.register_event_duration_secs_listener(self._listen)
            self.available = True
        except Exception:  # noqa: BLE001 - older JAX: fall back to the first-minus-second estimate
            self.available = False

    def _listen(self, name, duration, **_):
        key = self.EVENTS.get(name)
        if key is not None:
            self.totals[key] += duration
            self.seen = True

    def reset(self):
        self.totals = dict.fromkeys(self.EVENTS.values(), 0.0)
        self.seen = False


COMPILE_CLOCK = CompileClock()


def compiled_programs() -> int | None:
    size = getattr(engine.advance, "_cache_size", None)
    return int(size()) if callable(size) else None


def check_finished(batch, state, label: str) -> dict:
    """Every experiment done with a zero error word; PoolFull / SystemExit otherwise."""
    out = results(batch, state)
    errors = np.asarray(jax.device_get(state.error))
    failed = [(e, r) for e, r in enumerate(out) if not r.ok or r.summary["flows_finished"] != r.summary["n_flows"]]
    if failed:
        lines = [f"  experiment {e}: error word {int(errors[e])} ({r.summary['error'] or 'not done'})" for e, r in failed[:10]]
        print(f"\n!!! {label}: {len(failed)} of {len(out)} experiments FAILED", file=sys.stderr)
        print("\n".join(lines), file=sys.stderr)
        if all(int(errors[e]) & ERROR_POOL_FULL for e, _ in failed):
            raise PoolFull(error_message(ERROR_POOL_FULL))
        raise SystemExit(f"{label}: experiments failed: " + "; ".join(sorted({r.summary['error'] or 'not done' for _, r in failed})))
    return {
        "n_flows": int(sum(r.summary["n_flows"] for r in out)),
        "job_time_us_mean": float(np.mean([r.summary["job_time_us"] for r in out])),
        "fct_mean_us_mean": float(np.mean([r.summary["fct_mean_us"] for r in out])),
    }


def timed_runs(params, state0, steps_per_call: int, batching: str, min_time: float, max_repeats: int) -> tuple[object, list[float], list[dict]]:
    """``engine.run`` from ``state0`` until ``min_time`` has been spent (at least once)."""
    walls, timings = [], []
    state = None
    while True:
        start = time.perf_counter()
        state, t = engine.run(params, state0, steps_per_call=steps_per_call, batching=batching)
        state = jax.block_until_ready(state)
        walls.append(time.perf_counter() - start)
        timings.append(t)
        if sum(walls) >= min_time or len(walls) >= max_repeats:
            return state, walls, timings


def measure_batch(k: int, experiments: list[Experiment], args, slots: int, static=None) -> tuple[dict, object]:
    """Compile and time one batch; returns the row of numbers (and the batch's Static)."""
    E = len(experiments)
    label = f"k={k} E={E}"
    t0 = time.perf_counter()
    batch = build_batch(experiments, slots_per_host=slots, static=static)
    build_s = time.perf_counter() - t0

    programs_before = compiled_programs()
    COMPILE_CLOCK.reset()
    t0 = time.perf_counter()
    jax.block_until_ready(engine.advance(batch.params, batch.state, args.steps_per_call, args.batching))
    first_call_s = time.perf_counter() - t0
    programs_after = compiled_programs()
    phases = dict(COMPILE_CLOCK.totals) if COMPILE_CLOCK.seen else None

    # Warm-up run (untimed). Its first call repeats the call above exactly (same inputs,
    # now compiled), so the difference of the two is the compile time.
    t0 = time.perf_counter()
    _, warmup = engine.run(batch.params, batch.state, steps_per_call=args.steps_per_call, batching=args.batching)
    warmup_s = time.perf_counter() - t0
    second_call_s = warmup["first_call_s"]
    state, walls, timings = timed_runs(batch.params, batch.state, args.steps_per_call, args.batching, args.min_time, args.max_repeats)
    checks = check_finished(batch, state, label)
    passes = passes_per_window(batch, args, int(np.mean(np.asarray(state.n_windows))))

    host = jax.device_get({"time_ps": state.time_ps, "n_windows": state.n_windows, "n_packet_hops": state.n_packet_hops})
    wall = statistics.median(walls)
    hops = int(np.sum(host["n_packet_hops"]))
    sim_us = np.asarray(host["time_ps"], np.float64) / 1e6
    n_calls = timings[0]["n_calls"]
    row = {
        "k": k,
        "E": E,
        "slots_per_host": slots,
        "static": dataclasses.asdict(batch.static),
        "build_s": build_s,
        "first_call_s": first_call_s,
        "second_call_s": second_call_s,
        # JAX's own trace + lower + backend-compile durations of the first call where it
        # reports them; else the first call minus the identical compiled call.
        "compile_s": sum(phases.values()) if phases else max(first_call_s - second_call_s, 0.0),
        "compile_s_source": "jax.monitoring" if phases else "first_call_minus_second",
        "compile_phases_s": phases,
        "compile_s_by_difference": first_call_s - second_call_s,
        "warmup_run_s": warmup_s,
        "programs_compiled": None if programs_before is None else programs_after - programs_before,
        "wall_s": wall,
        "wall_s_repeats": walls,
        "n_calls": n_calls,
        "windows_stepped": int(np.max(host["n_windows"])),  # by the batch: it stops when its slowest experiment is done
        "n_windows_total": int(np.sum(host["n_windows"])),  # windows the experiments needed
        "n_windows_mean": float(np.mean(host["n_windows"])),
        "packet_hops": hops,
        "packet_hops_per_s": hops / wall,
        "sim_us_mean": float(sim_us.mean()),
        "sim_us_per_wall_s_per_experiment": float(sim_us.mean()) / wall,
        "sim_us_per_wall_s_total": float(sim_us.sum()) / wall,
        "peak_rss_mib": peak_rss_mib(),
        "device_peak_bytes": device_peak_bytes(),
        "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "window_passes": int(fifo_pass.applies(batch.static)) + int(nic_pass_applies(batch.static)),
        **passes,
        **checks,
    }
    return row, batch.static


def passes_per_window(batch, args, n_windows: int) -> dict:
    """Transmit rounds per window at ``--round-samples`` windows spread over the run: each
    running experiment's own (one at a time, from a host copy: one compiled E=1 program),
    and under vmap the most of each lane group of running experiments (the rounds its lanes
    run in lockstep); lockstep waste = 1 - own / lockstep."""
    if args.round_samples < 1:
        return {}
    E = batch.state.done.shape[0]
    lanes = engine.lockstep_lanes(batch.static, E) if engine.resolve_batching(args.batching) == "vmap" else 1
    stride = max(1, n_windows // (args.round_samples + 1))
    params, state = jax.device_get(batch.params), batch.state
    rounds, running = [], []
    for _ in range(args.round_samples):
        state = engine.advance(batch.params, state, stride, args.batching)
        host = jax.device_get(state)
        running.append(~host.done & (host.error == 0))
        rounds.append(rounds_of_each(params, host, running[-1]))
    running = np.array(running)
    if not running.any():
        return {}
    own, lockstep, waste = rounds_in_lockstep(np.array(rounds), running, lanes)
    return {"rounds_per_window_own": own, "rounds_per_window_lockstep": lockstep, "lockstep_waste": waste}


def htsim_beside(k: int, args) -> dict | None:
    """``htsim_roce`` on a permutation of ``--flow-bytes`` flows on the k-ary fat-tree with
    htsim's network, and ours on the same input alone (``map``): packet-hops per second of
    each (the hops of our run), or None with the reason printed where htsim is unavailable."""
    network = htsim.HtsimNetwork(k=k)
    folder = Path(tempfile.mkdtemp(prefix="engine_throughput_htsim_"))
    try:
        build = htsim.build_htsim()
    except htsim.PeerUnavailable as why:
        print(f"k={k}: htsim not run: {why}", file=sys.stderr)
        return None
    points = []
    for seed in range(args.htsim_points):
        cm = permutation(seed, network.n_hosts, args.flow_bytes).write(folder / f"perm-s{seed}.cm")
        theirs = htsim.run_htsim(build, "roce", cm, network, folder, patched=False).wall_s
        result, ours, _, _ = run_ours(experiment_from_config(htsim.our_config(network, "roce", cm)), 256)
        points.append((result.summary["n_packet_hops"], theirs, ours))
    hops, theirs, ours = (float(np.sum(column)) for column in zip(*points))
    return {"k": k, "points": len(points), "packet_hops": hops, "htsim_wall_s": theirs, "ours_alone_wall_s": ours,
            "htsim_packet_hops_per_s": hops / theirs, "ours_alone_packet_hops_per_s": hops / ours}  # fmt: skip


def measure_baseline(k: int, experiments: list[Experiment], static, args, slots: int) -> list[float]:
    """Wall time of each experiment run alone (E=1), all padded to ``static``: one compile."""
    walls = []
    programs_before = compiled_programs()
    for e, exp in enumerate(experiments):
        batch = build_batch([exp], slots_per_host=slots, static=static)
        if e == 0:  # compile (or reuse the E=1 program of the batched rows) and warm up
            jax.block_until_ready(engine.advance(batch.params, batch.state, args.steps_per_call, args.batching))
            engine.run(batch.params, batch.state, steps_per_call=args.steps_per_call, batching=args.batching)
        state, runs, _ = timed_runs(
            batch.params, batch.state, args.steps_per_call, args.batching, args.min_time / len(experiments), args.max_repeats
        )
        check_finished(batch, state, f"k={k} one-at-a-time experiment {e}")
        walls.append(statistics.median(runs))
    programs_after = compiled_programs()
    if programs_before is not None and programs_after - programs_before > 1:
        raise SystemExit(f"k={k}: the one-at-a-time baseline compiled {programs_after - programs_before} programs, expected <= 1")
    return walls


def run_k(k: int, args, slots: int, emit) -> list[dict]:
    sizes = args.per_k[k]
    experiments = make_experiments(k, max(sizes), args.flow_bytes, args.ack_class, args.fifo_pass, args.nic_pass)
    rows = []
    static = None
    baseline = None
    previous = None
    for E in sizes:
        if previous is not None and args.max_projected_s > 0:
            per_call = previous["wall_s"] / previous["n_calls"] * E / previous["E"]
            projected = per_call * (2 * previous["n_calls"] + 1) + previous["compile_s"]  # first call, warm-up, timed run
            if projected > args.max_projected_s:
                print(f"k={k} E={E}: skipped, projected {projected:.0f} s > --max-projected-s {args.max_projected_s:.0f}")
                rows.append({"k": k, "E": E, "skipped": True, "projected_s": projected})
                emit(rows[-1])
                continue
        print(f"k={k} E={E}: building, compiling, running ...", flush=True)
        row, static = measure_batch(k, experiments[:E], args, slots, static=static)
        if baseline is None:
            n_base = min(args.baseline_max, max(sizes))
            print(f"k={k}: one-at-a-time baseline over {n_base} experiments ...", flush=True)
            baseline = measure_baseline(k, experiments[:n_base], static, args, slots)
        measured = baseline[: min(E, len(baseline))]
        per_experiment = float(np.mean(measured))
        one_at_a_time_s = per_experiment * E if len(measured) < E else float(np.sum(measured))
        row.update(
            {
                "one_at_a_time_measured": len(measured),
                "one_at_a_time_extrapolated": len(measured) < E,
                "one_at_a_time_per_experiment_s": per_experiment,
                "one_at_a_time_wall_s": one_at_a_time_s,
                "batched_speedup": one_at_a_time_s / row["wall_s"],
                "peak_rss_mib": peak_rss_mib(),
                "device_peak_bytes": device_peak_bytes(),
            }
        )
        rows.append(row)
        previous = row
        emit(row)
        print_table([row], header=False)
    return rows


# --------------------------------------------------------------------------- output

COLUMNS = [
    ("k", "k", "{}"),
    ("E", "E", "{}"),
    ("compile s", "compile_s", "{:.2f}"),
    ("wall s", "wall_s", "{:.3f}"),
    ("packet-hops/s", "packet_hops_per_s", "{:,.0f}"),
    ("sim µs/s/exp", "sim_us_per_wall_s_per_experiment", "{:.2f}"),
    ("batch/1-at-a-time", "batched_speedup", "{:.2f}x"),
    ("peak RSS MiB", "peak_rss_mib", "{:,.0f}"),
    ("passes", "window_passes", "{}"),
    ("rounds own", "rounds_per_window_own", "{:.2f}"),
    ("lockstep", "rounds_per_window_lockstep", "{:.2f}"),
    ("waste", "lockstep_waste", "{:.0%}"),
]


def format_row(row: dict) -> list[str]:
    if row.get("skipped"):
        return [str(row["k"]), str(row["E"])] + ["skipped"] + [""] * (len(COLUMNS) - 3)
    cells = [fmt.format(row[key]) if key in row else "-" for _, key, fmt in COLUMNS]
    if row.get("one_at_a_time_extrapolated"):
        cells[6] += "*"
    return cells


WIDTHS = [3, 4, 10, 9, 15, 13, 18, 13, 6, 10, 8, 6]


def print_table(rows: list[dict], *, header: bool = True) -> None:
    if header:
        print("  ".join(name.rjust(w) for (name, _, _), w in zip(COLUMNS, WIDTHS)))
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(format_row(row), WIDTHS)), flush=True)


def metadata(args) -> dict:
    return {
        **machine_info(),
        "topology": {"kind": "fattree", "rate_gbps": RATE_GBPS, "delay_us": DELAY_US},
        "workload": "permutation (random derangement, seed e), all flows start at 0",
        "flow_bytes": args.flow_bytes,
        "ack_class": args.ack_class,
        "fifo_pass": args.fifo_pass,
        "nic_pass": args.nic_pass,
        "steps_per_call": args.steps_per_call,
        "slots_per_host_requested": args.slots_per_host,
        "baseline_max": args.baseline_max,
        "batching": engine.resolve_batching(args.batching),
        "min_time_s": args.min_time,
        "experiments_per_k": {str(k): v for k, v in args.per_k.items()},
        "argv": sys.argv[1:],
        "notes": [
            "compile_s = trace + lower + backend compile of the first engine.advance call, from jax.monitoring "
            "(compile_phases_s); compile_s_by_difference = that first call - the identical, compiled first call "
            "of the untimed warm-up engine.run (noisy when one call is long or the machine is shared)",
            "wall_s = median engine.run wall (host loop included) over wall_s_repeats",
            "peak_rss_mib is ru_maxrss of the whole process so far (monotone across rows)",
            "batched_speedup = one_at_a_time_wall_s / wall_s; extrapolated from one_at_a_time_measured experiments when fewer than E",
        ],
    }


def emit_htsim(beside: dict) -> None:
    """The htsim line of one k: its rate on one core and ours alone on the same input (the
    table's own traffic has other packet sizes: its rates are not this one's; batches of
    htsim's input side by side are ``sweep_vs_htsim.py``'s)."""
    ratio = beside["ours_alone_packet_hops_per_s"] / beside["htsim_packet_hops_per_s"]
    print(
        f"k={beside['k']} htsim_roce, one core, on {beside['points']} permutation(s) of {beside['packet_hops']:,.0f} packet-hops "
        f"(htsim's network): {beside['htsim_packet_hops_per_s']:,.0f} packet-hops/s; "
        f"ours on the same input alone: {beside['ours_alone_packet_hops_per_s']:,.0f} ({ratio:.2f}x)",
        flush=True,
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"metadata": metadata(args), "rows": []}
    meta = doc["metadata"]
    print(
        f"jax {meta['jax_version']} | backend {meta['backend']} ({meta['device_kind']}) | {meta['cpu_count']} CPUs | "
        f"flow bytes {args.flow_bytes} | steps/call {args.steps_per_call}",
        flush=True,
    )
    print_table([])

    def emit(row):
        doc["rows"].append(row)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")  # after every row: partial results survive

    start = time.perf_counter()
    for k in args.ks:
        slots = args.slots_per_host
        while True:
            rows_before = len(doc["rows"])
            try:
                run_k(k, args, slots, emit)
                break
            except PoolFull as err:
                del doc["rows"][rows_before:]
                if slots * 2 > args.max_slots_per_host:
                    raise SystemExit(f"k={k}: {err} (already at {slots} slots per host)") from None
                print(f"\n!!! k={k}: POOL FULL with {slots} slots per host: {err}\n!!! retrying k={k} with {slots * 2}\n", flush=True)
                slots *= 2
        if args.htsim_points > 0:
            beside = htsim_beside(k, args)
            if beside:
                doc.setdefault("htsim", []).append(beside)
                emit_htsim(beside)
    doc["metadata"]["total_wall_s"] = time.perf_counter() - start
    doc["metadata"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    args.out.write_text(json.dumps(doc, indent=2) + "\n")

    print()
    print_table(doc["rows"])
    print("* one-at-a-time time extrapolated from the measured experiments (see JSON)")
    for beside in doc.get("htsim", []):
        emit_htsim(beside)
    print(f"total {doc['metadata']['total_wall_s']:.0f} s; results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
