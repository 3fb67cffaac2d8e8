"""LLM training iteration: GPT-3 13B on 128 GPUs, k=8 fat-tree and rail-optimised fabric.

For each topology and each TP/PP/DP split (tp * pp * dp = ``--gpus``) one training
iteration (``workload.kind=llm``: Megatron-style 1F1B pipeline, TP collectives, DP
gradient buckets, optimizer step) is built through the config layer
(``config.experiment_from_config`` with a plain dict) and simulated on its own (E=1).
GPUs are placed server by server (``--gpus-per-server``, default 8): collectives inside
one server (NVLink) are priced analytically, only inter-server traffic becomes packets.

Topologies (100 Gb/s, 1 µs links, the config defaults):

* ``fattree``: k-ary fat-tree, ``--k`` (default 8: 128 hosts, full bisection);
* ``rail``: rail-optimised 2-tier fabric, ``--gpus / --gpus-per-server`` servers (16),
  ``--rail-servers-per-leaf`` (default 8: 2 leaves per rail, 16 leaves of 8 hosts) and
  ``--rail-spines`` (default 8: 8 uplinks per leaf, 1:1 like the fat-tree).

Per point: status (``ok``; ``oom``: the point does not fit in GPU memory, nothing is
simulated; ``invalid``: the split cannot run the model; ``timeout``: the run loop passed
``--max-minutes`` of wall time and was stopped; ``failed``: an engine error), the
iteration time and its split (mean over GPUs: compute, exposed communication, bubble;
``report/timeline.py``), the ideal 1F1B bubble for comparison, task / flow / packet-hop
counts, compile time (trace + lower + XLA compile of the step program, ahead of time, so
it is not part of the run), run wall time, and simulated time / wall time.

The compiled step program is called ``--steps-per-call`` windows at a time until the
iteration is done; between calls the host checks errors and the wall budget. A host that
runs out of packet slots doubles ``--slots-per-host`` and redoes the point (recompiled).
A timed-out point reports how far it got (simulated time, share of tasks finished, share
of network bytes delivered) and two extrapolations of the whole run's wall time: wall time
/ share of bytes delivered (rough), and a lower bound, the busiest NIC's bytes at line rate
in windows (the clock steps one window per link delay while packets are in flight) times
the run's wall time per window.

    python benchmarks/llm_iteration.py --quick
    python benchmarks/llm_iteration.py --dry-run              # graph sizes and memory only
    python benchmarks/llm_iteration.py --max-minutes 2        # GPT-3 13B, each point cut at 2 min
    python benchmarks/llm_iteration.py --mode hybrid --topologies fattree --splits 8,1,16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import jax
import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from machine import machine_info
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.components.experiment import ERROR_POOL_FULL
from multiverse_jax.units import NEVER
from multiverse_jax.config import experiment_from_config, resolve_config
from multiverse_jax.errors import InputError
from multiverse_jax.simulate import error_message, results
from multiverse_jax.workload import llm
from multiverse_jax.workload.collectives import CommConfig
from multiverse_jax.workload.gpus import get_gpu
from multiverse_jax.workload.placement import place, placement

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "llm_iteration.json"
DEFAULT_SPLITS = "8,1,16;8,2,8;4,4,8;8,4,4"
# --quick (a smoke run of a few minutes on 2 CPU cores): a small GPT -- hidden 512, 8 heads, 4
# layers, GPT-3's sequence length, an 8k vocabulary; ~18M parameters, under 1 % of the network
# bytes of GPT-3 13B per iteration -- on the same 128 GPUs, splits and topologies.
QUICK_MODEL = {"layers": 4, "hidden": 512, "heads": 8, "seq_len": 2048, "vocab": 8192}
QUICK_MICROBATCHES = 4
MB = 2**20


def split_list(text: str) -> list[tuple[int, int, int]]:
    splits = []
    for part in text.split(";"):
        if not part.strip():
            continue
        try:
            tp, pp, dp = (int(v) for v in part.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected 'tp,pp,dp;tp,pp,dp;...', got {part!r} in {text!r}") from None
        if min(tp, pp, dp) < 1:
            raise argparse.ArgumentTypeError(f"tp, pp and dp must be >= 1, got {part!r}")
        splits.append((tp, pp, dp))
    if not splits:
        raise argparse.ArgumentTypeError(f"no split in {text!r}")
    return splits


def topology_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in ("fattree", "rail")]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"topologies are fattree and/or rail, got {text!r}")
    return names


def model_arg(text: str):
    """A named model (``llm.MODELS``) or a JSON dict {layers, hidden, heads, seq_len, vocab, ...}."""
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"--model: bad JSON: {exc}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError("--model: a JSON object is expected")
        return value
    return text


def chunk_arg(text: str):
    if text == "stage":
        return "stage"
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--layers-per-chunk must be >= 1 or 'stage', got {text!r}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=model_arg, default="gpt3-13b",
                   help="named model (gpt3-13b, ...) or JSON {layers, hidden, heads, seq_len, vocab} (default gpt3-13b)")
    p.add_argument("--splits", type=split_list, default=split_list(DEFAULT_SPLITS),
                   help=f"'tp,pp,dp;...' (default {DEFAULT_SPLITS!r})")
    p.add_argument("--topologies", type=topology_list, default=["fattree", "rail"], help="fattree,rail (default both)")
    p.add_argument("--gpus", type=int, default=128, help="GPUs of the job: tp * pp * dp of every split (default 128)")
    p.add_argument("--gpus-per-server", type=int, default=8, help="GPUs per server, NVLink inside (default 8)")
    p.add_argument("--k", type=int, default=8, help="fat-tree arity (default 8: 128 hosts)")
    p.add_argument("--rail-servers-per-leaf", type=int, default=8, help="rail: servers per leaf of a rail (default 8)")
    p.add_argument("--rail-spines", type=int, default=8, help="rail: spine switches (default 8)")
    p.add_argument("--microbatches", type=int, default=8, help="micro-batches per iteration per pipeline (default 8)")
    p.add_argument("--micro-batch-size", type=int, default=1, help="sequences per micro-batch (default 1)")
    p.add_argument("--global-batch", type=int, default=None,
                   help="sequences per iteration, the same for every split: micro-batches = this / (dp * micro-batch-size), "
                        "overriding --microbatches (default: --microbatches per pipeline, so the batch is dp x that)")
    p.add_argument("--gpu", default="A100-80GB", help="GPU type (default A100-80GB)")
    p.add_argument("--layers-per-chunk", type=chunk_arg, default=1,
                   help="layers per compute task (default 1, the generator's); an integer, or 'stage' (all layers of a "
                        "pipeline stage: the smallest graph, but DP gradient buckets then only become ready when the "
                        "whole stage's backward ends, so less DP traffic overlaps compute)")
    p.add_argument("--dp-bucket-mb", type=float, default=None,
                   help="DP gradient bucket in MiB (default: the generator's 25 MiB); bigger buckets mean fewer, larger DP flows")
    p.add_argument("--payload-bytes", type=int, default=None,
                   help="packet payload (default: the config's packet.payload_bytes, 4096); bigger packets simulate faster")
    p.add_argument("--slots-per-host", type=int, default=None,
                   help="packet slots per host (default: the config's sim.packets_per_host, 256; doubled on pool-full)")
    p.add_argument("--max-slots-per-host", type=int, default=4096, help="give up raising slots past this")
    p.add_argument("--steps-per-call", type=int, default=64, help="windows per compiled call (default 64)")
    p.add_argument("--batching", choices=engine.BATCHING_MODES, default="auto", help="engine batching (E=1 here; default auto)")
    p.add_argument("--mode", choices=["packet", "hybrid", "flow"], default="packet",
                   help="sim.mode: packet (default), hybrid (steady flows jump at flow level) or flow (max-min, no packets)")
    p.add_argument("--max-minutes", type=float, default=10.0,
                   help="wall budget of one point's run (compile excluded); past it the point stops as 'timeout' (default 10)")
    p.add_argument("--max-sim-ms", type=float, default=10_000.0,
                   help="sim.max_time_us in ms: an iteration running past it fails (default 10000)")
    p.add_argument("--dry-run", action="store_true", help="build the task graphs and print their sizes; simulate nothing")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke run: model {json.dumps(QUICK_MODEL)}, {QUICK_MICROBATCHES} micro-batches")
    args = p.parse_args(argv)
    if args.quick:
        args.model, args.microbatches = dict(QUICK_MODEL), QUICK_MICROBATCHES
    for key in ("gpus", "gpus_per_server", "microbatches", "micro_batch_size", "steps_per_call", "rail_servers_per_leaf", "rail_spines"):
        if getattr(args, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be >= 1")
    if args.gpus % args.gpus_per_server:
        p.error(f"--gpus-per-server ({args.gpus_per_server}) must divide --gpus ({args.gpus})")
    if args.global_batch is not None:
        uneven = [s for s in args.splits if args.global_batch % (s[2] * args.micro_batch_size)]
        if args.global_batch < 1 or uneven:
            p.error("--global-batch must be a positive multiple of dp x --micro-batch-size for every split")
    bad = [s for s in args.splits if s[0] * s[1] * s[2] != args.gpus]
    if bad:
        p.error(f"every split needs tp * pp * dp = --gpus ({args.gpus}); not: {', '.join(','.join(map(str, s)) for s in bad)}")
    if "fattree" in args.topologies and args.k**3 // 4 < args.gpus:
        p.error(f"a k={args.k} fat-tree has {args.k**3 // 4} hosts, fewer than --gpus ({args.gpus})")
    if args.payload_bytes is not None and args.payload_bytes < 1:
        p.error("--payload-bytes must be >= 1")
    if args.dp_bucket_mb is not None and not args.dp_bucket_mb > 0:
        p.error("--dp-bucket-mb must be > 0")
    if not args.max_minutes > 0 or not args.max_sim_ms > 0:
        p.error("--max-minutes and --max-sim-ms must be > 0")
    defaults = resolve_config({})
    args.default_payload_bytes = defaults["packet"]["payload_bytes"]
    if args.slots_per_host is None:
        args.slots_per_host = defaults["sim"]["packets_per_host"]
    return args


# --------------------------------------------------------------------------- experiments


def model_spec(args) -> llm.ModelSpec:
    if isinstance(args.model, dict):
        return llm.ModelSpec(name="custom", **args.model)
    return llm.get_model(args.model)


def topology_config(kind: str, args) -> dict:
    if kind == "fattree":
        return {"kind": "fattree", "k": args.k}
    return {
        "kind": "rail",
        "servers": args.gpus // args.gpus_per_server,
        "gpus_per_server": args.gpus_per_server,
        "servers_per_leaf": args.rail_servers_per_leaf,
        "spines": args.rail_spines,
    }


def layers_per_chunk(args, model: llm.ModelSpec, pp: int) -> int:
    if args.layers_per_chunk == "stage":
        return max(model.layers // pp, 1)  # a bad pp is reported by the generator (invalid)
    return args.layers_per_chunk


def microbatches(args, dp: int) -> int:
    if args.global_batch is None:
        return args.microbatches
    return args.global_batch // (dp * args.micro_batch_size)


def point_config(kind: str, split, args, model: llm.ModelSpec) -> dict:
    tp, pp, dp = split
    cfg = {
        "topology": topology_config(kind, args),
        "workload": {
            "kind": "llm",
            "model": args.model,
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "microbatches": microbatches(args, dp),
            "micro_batch_size": args.micro_batch_size,
            "gpus_per_server": args.gpus_per_server,
            "layers_per_chunk": layers_per_chunk(args, model, pp),
            "gpu": args.gpu,
            "placement": "packed",
        },
        "sim": {"sample_interval_us": 0, "max_time_us": args.max_sim_ms * 1000.0, "mode": args.mode},
    }
    if args.payload_bytes is not None:
        cfg["packet"] = {"payload_bytes": args.payload_bytes}
    return cfg


def parallel_of(cfg: dict, dp_bucket_bytes: int | None = None) -> llm.ParallelConfig:
    w = cfg["workload"]
    extra = {} if dp_bucket_bytes is None else {"dp_bucket_bytes": dp_bucket_bytes}
    return llm.ParallelConfig(
        tp=w["tp"], pp=w["pp"], dp=w["dp"], microbatches=w["microbatches"], micro_batch_size=w["micro_batch_size"],
        gpu=w["gpu"], layers_per_chunk=w["layers_per_chunk"], **extra,
    )


def with_dp_buckets(experiment, cfg: dict, model: llm.ModelSpec, bucket_bytes: int):
    """The experiment with its iteration regenerated at another DP bucket size (the config has
    no key for it): the same generator call, comm config and packed placement as the config
    layer makes, only ``ParallelConfig.dp_bucket_bytes`` differs."""
    w = cfg["workload"]
    parallel = parallel_of(cfg, bucket_bytes)
    comm = CommConfig(gpus_per_server=w["gpus_per_server"], intra=str(w["gpu"]).split("-")[0])
    graph = llm.generate(model, parallel, n_gpus=parallel.n_gpus, comm_cfg=comm)
    n_hosts = experiment.topology.n_hosts
    hosts = placement("packed", parallel.n_gpus, n_hosts, gpus_per_server=w["gpus_per_server"])
    tasks = place(graph, hosts, n_hosts)
    return dataclasses.replace(experiment, tasks=tasks, flows=tasks.flow_set())


def analytical(model: llm.ModelSpec, parallel: llm.ParallelConfig) -> dict:
    """What the iteration should show without any network: mean compute per GPU (layers at
    the GPU's FLOP rate, plus the memory-bound optimizer step) and the ideal 1F1B bubble,
    (pp - 1) micro-batch slots of forward + backward of one stage."""
    gpu = get_gpu(parallel.gpu)
    rate = gpu.peak_tflops_bf16 * gpu.efficiency * 1e12  # FLOP/s
    sequences = parallel.dp * parallel.microbatches * parallel.micro_batch_size
    layer_s = llm.training_flops(model, sequences) / parallel.n_gpus / rate
    per_gpu_params = llm.parameter_count(model) / (parallel.tp * parallel.pp)
    optimizer_s = llm.ADAM_HBM_BYTES * per_gpu_params / (gpu.hbm_tbps * 1e12)
    per_microbatch_s = layer_s / parallel.microbatches
    return {
        "compute_ideal_us": (layer_s + optimizer_s) * 1e6,
        "layer_compute_ideal_us": layer_s * 1e6,
        "optimizer_ideal_us": optimizer_s * 1e6,
        "bubble_1f1b_ideal_us": (parallel.pp - 1) * per_microbatch_s * 1e6,
        "parameters": llm.parameter_count(model),
    }


# --------------------------------------------------------------------------- running


def peak_rss_mib() -> float:
    scale = 1.0 if sys.platform == "darwin" else 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def progress_of(batch, state) -> dict:
    """How far a (possibly unfinished) experiment got."""
    exp = batch.experiments[0]
    host = jax.device_get(
        {
            "time_ps": state.time_ps[0],
            "n_windows": state.n_windows[0],
            "hops": state.n_packet_hops[0],
            "rx": state.flows.flow_rx_bytes[0, : len(exp.flows)],
            "task_finish": state.tasks.task_finish_ps[0, : len(exp.tasks)],
        }
    )
    total_bytes = int(np.sum(exp.flows.size_bytes))
    delivered = int(np.sum(host["rx"]))
    return {
        "simulated_time_us": float(host["time_ps"]) / 1e6,
        "n_windows": int(host["n_windows"]),
        "n_packet_hops": int(host["hops"]),
        "tasks_done_fraction": float(np.mean(host["task_finish"] != NEVER)) if len(exp.tasks) else 1.0,
        "bytes_delivered_fraction": delivered / total_bytes if total_bytes else 1.0,
    }


def simulate_point(experiment, args, slots: int, label: str, busiest_nic_us: float) -> dict:
    """Compile (ahead of time) and run one experiment, within the wall budget."""
    t0 = time.perf_counter()
    batch = build_batch([experiment], slots_per_host=slots)
    build_s = time.perf_counter() - t0
    n_steps, batching = args.steps_per_call, engine.resolve_batching(args.batching)
    t0 = time.perf_counter()
    lowered = engine.lower_advance(batch.params, batch.state, n_steps, batching)
    lower_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    print(f"  {label}: compiled in {lower_s + compile_s:.1f} s (trace + lower {lower_s:.1f} s); running ...", flush=True)

    budget_s = args.max_minutes * 60.0
    state = batch.state
    n_calls = 0
    last_report = start = time.perf_counter()
    timed_out = False
    while True:
        state = compiled(batch.params, state, n_steps)
        done, error = jax.device_get((state.done[0], state.error[0]))
        n_calls += 1
        now = time.perf_counter()
        if bool(done) or int(error) != 0:
            break
        if now - start > budget_s:
            timed_out = True
            break
        if now - last_report > 60.0:
            p = progress_of(batch, state)
            print(
                f"  {label}: {now - start:.0f} s wall, {p['simulated_time_us'] / 1e3:.2f} ms simulated, "
                f"{p['tasks_done_fraction']:.0%} of tasks, {p['bytes_delivered_fraction']:.0%} of network bytes",
                flush=True,
            )
            last_report = now
    wall_s = time.perf_counter() - start
    row = {
        "slots_per_host": slots,
        "static": dataclasses.asdict(batch.static),
        "build_batch_s": build_s,
        "lower_s": lower_s,
        "backend_compile_s": compile_s,
        "compile_s": lower_s + compile_s,
        "wall_s": wall_s,
        "n_calls": n_calls,
        "error_word": int(error),
        "peak_rss_mib": peak_rss_mib(),
    }
    if timed_out:
        row["status"] = "timeout"
        row.update(progress_of(batch, state))
        frac = row["bytes_delivered_fraction"]
        row["projected_wall_s"] = wall_s / frac if frac >= 0.01 else None
        # The clock steps every window (one link delay) while a packet is in flight, so the
        # busiest NIC's line-rate time is a lower bound on the windows of the whole iteration;
        # at this run's cost per window that is a lower bound on its wall time.
        window_us = float(np.asarray(batch.params.window_ps).reshape(-1)[0]) / 1e6
        per_window = wall_s / max(row["n_windows"], 1)
        row["windows_lower_bound"] = max(busiest_nic_us / window_us, row["n_windows"])
        row["projected_wall_lower_s"] = row["windows_lower_bound"] * per_window
    else:
        result = results(batch, state)[0]
        s = result.summary
        row["status"] = s["status"]
        row["error"] = s["error"]
        for key in ("iteration_time_us", "compute_us", "exposed_comm_us", "bubble_us", "simulated_time_us",
                    "n_windows", "n_packet_hops", "n_flows", "flows_finished", "max_queue_bytes", "pfc_pauses",
                    "bytes_on_wire"):
            row[key] = s.get(key)
        if s["status"] != "ok":
            row.update(progress_of(batch, state))
    sim_s = row["simulated_time_us"] / 1e6
    row["sim_over_wall"] = sim_s / wall_s if wall_s > 0 else None
    row["sim_us_per_wall_s"] = row["simulated_time_us"] / wall_s if wall_s > 0 else None
    row["wall_us_per_window"] = wall_s / row["n_windows"] * 1e6 if row["n_windows"] else None
    return row


def run_point(kind: str, split, args, model: llm.ModelSpec) -> dict:
    tp, pp, dp = split
    label = f"{kind} tp={tp} pp={pp} dp={dp}"
    cfg = point_config(kind, split, args, model)
    row = {
        "topology": kind,
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "split": f"{tp},{pp},{dp}",
        "microbatches": cfg["workload"]["microbatches"],
        "global_batch": dp * cfg["workload"]["microbatches"] * args.micro_batch_size,
        "layers_per_chunk": cfg["workload"]["layers_per_chunk"],
        "config": cfg,
    }
    t0 = time.perf_counter()
    try:
        experiment = experiment_from_config(cfg)
        if args.dp_bucket_mb is not None:
            experiment = with_dp_buckets(experiment, cfg, model, round(args.dp_bucket_mb * MB))
    except llm.OutOfMemory as exc:
        row.update(status="oom", error=str(exc), memory_bytes=exc.usage)
        return row
    except InputError as exc:
        row.update(status="invalid", error=str(exc))
        return row
    row["graph_build_s"] = time.perf_counter() - t0
    parallel = parallel_of(cfg)
    sizes = np.asarray(experiment.flows.size_bytes, np.int64)
    payload = experiment.packet.payload_bytes
    per_host = np.bincount(np.asarray(experiment.flows.src), weights=sizes, minlength=experiment.topology.n_hosts)
    rate_bytes_per_us = float(np.max(experiment.topology.link_rate_bps)) / 8e6  # the config's links are all alike
    row.update(
        {
            "topology_name": experiment.topology.name,
            "n_tasks": len(experiment.tasks),
            "n_flows": len(experiment.flows),
            "network_bytes": int(sizes.sum()),
            "data_packets": int(np.sum(-(-sizes // payload))),
            "payload_bytes": payload,
            "max_host_send_bytes": int(per_host.max()),
            # the busiest NIC alone keeps the network busy this long: a lower bound on the windows to step
            "busiest_nic_us": float(per_host.max()) / rate_bytes_per_us,
            "memory_bytes": llm.memory_model(model, parallel),
            **analytical(model, parallel),
        }
    )
    if args.dry_run:
        row["status"] = "dry-run"
        return row
    slots = args.slots_per_host
    while True:
        out = simulate_point(experiment, args, slots, label, row["busiest_nic_us"])
        if not out["error_word"] & ERROR_POOL_FULL:
            break
        if slots * 2 > args.max_slots_per_host:
            out["error"] = f"{error_message(ERROR_POOL_FULL)} (already at {slots} slots per host)"
            break
        print(f"  {label}: !!! POOL FULL with {slots} slots per host; retrying with {slots * 2}", flush=True)
        row.setdefault("pool_full_retries", []).append({"slots_per_host": slots, "compile_s": out["compile_s"], "wall_s": out["wall_s"]})
        slots *= 2
    row.update(out)
    return row


# --------------------------------------------------------------------------- output


def fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return spec.format(value)


def ms(key):
    return lambda r: None if r.get(key) is None else r[key] / 1e3


COLUMNS = [
    # header, value, format, width (format "s": left-aligned text)
    ("topology", lambda r: r["topology"], "s", 8),
    ("tp,pp,dp", lambda r: r["split"], "s", 8),
    ("mb", lambda r: r["microbatches"], "{:d}", 3),
    ("status", lambda r: r["status"], "s", 7),
    ("iter ms", lambda r: ms("iteration_time_us")(r) if r["status"] == "ok" else None, "{:.2f}", 8),
    ("compute", lambda r: ms("compute_us")(r) if r["status"] == "ok" else None, "{:.2f}", 8),
    ("exp. comm", lambda r: ms("exposed_comm_us")(r) if r["status"] == "ok" else None, "{:.2f}", 9),
    ("bubble", lambda r: ms("bubble_us")(r) if r["status"] == "ok" else None, "{:.2f}", 8),
    ("1F1B ideal", ms("bubble_1f1b_ideal_us"), "{:.2f}", 10),
    ("tasks", lambda r: r.get("n_tasks"), "{:,d}", 7),
    ("flows", lambda r: r.get("n_flows"), "{:,d}", 7),
    ("net GB", lambda r: None if r.get("network_bytes") is None else r["network_bytes"] / 1e9, "{:.2f}", 7),
    ("pkt-hops", lambda r: r.get("n_packet_hops"), "{:,d}", 11),
    ("compile s", lambda r: r.get("compile_s"), "{:.1f}", 9),
    ("wall s", lambda r: r.get("wall_s"), "{:.1f}", 7),
    ("sim/wall", lambda r: r.get("sim_over_wall"), "{:.2e}", 8),
]


def print_header() -> None:
    print("  ".join(h.ljust(w) if f == "s" else h.rjust(w) for h, _, f, w in COLUMNS), flush=True)


def print_row(row: dict) -> None:
    cells = []
    for _, get, spec, width in COLUMNS:
        value = get(row)
        cells.append(str(value).ljust(width) if spec == "s" else fmt(value, spec).rjust(width))
    print("  ".join(cells), flush=True)


def row_notes(row: dict) -> list[str]:
    """Remarks on one row: why it has no numbers, or what looks off."""
    where = f"{row['topology']} {row['split']}"
    status = row["status"]
    if status == "oom":
        u = row["memory_bytes"]
        return [f"{where}: oom: {u['total'] / 1e9:.1f} GB per GPU on stage {u['stage']} > {u['capacity'] / 1e9:.0f} GB "
                f"(weights {u['weights'] / 1e9:.1f}, gradients {u['gradients'] / 1e9:.1f}, optimizer "
                f"{u['optimizer'] / 1e9:.1f}, activations {u['activations'] / 1e9:.1f} GB); not simulated"]
    if status == "invalid":
        return [f"{where}: invalid: {row['error']}"]
    if status == "dry-run":
        u = row["memory_bytes"]
        return [f"{where}: {u['total'] / 1e9:.1f} GB per GPU; analytical compute {row['compute_ideal_us'] / 1e3:.1f} ms per GPU; "
                f"the busiest NIC sends {row['max_host_send_bytes'] / 1e9:.2f} GB ({row['busiest_nic_us'] / 1e3:.1f} ms at line rate)"]
    if status == "timeout":
        proj, low = row.get("projected_wall_s"), row["projected_wall_lower_s"]
        est = (f"; whole iteration: ~{proj / 60:.0f} min by share of bytes delivered" if proj
               else "; too few bytes delivered to extrapolate by share")
        est += (f", >= {low / 60:.0f} min by windows (busiest NIC {row['busiest_nic_us'] / 1e3:.0f} ms at line rate "
                f"= {row['windows_lower_bound']:,.0f} windows at {row['wall_us_per_window'] / 1e3:.1f} ms each)")
        return [f"{where}: timeout after {row['wall_s']:.0f} s: reached {row['simulated_time_us'] / 1e3:.2f} ms simulated, "
                f"{row['tasks_done_fraction']:.1%} of tasks finished, {row['bytes_delivered_fraction']:.1%} of network "
                f"bytes delivered{est}"]
    if status != "ok":
        return [f"{where}: {status}: {row.get('error') or 'not done'}"]
    notes = []
    ideal = row["compute_ideal_us"]
    if abs(row["compute_us"] - ideal) > 0.02 * ideal:
        notes.append(f"{where}: compute {row['compute_us'] / 1e3:.2f} ms differs from the analytical "
                     f"{ideal / 1e3:.2f} ms by more than 2 %")
    return notes


def metadata(args, model: llm.ModelSpec) -> dict:
    return {
        **machine_info(),
        "model": dataclasses.asdict(model),
        "model_parameters": llm.parameter_count(model),
        "gpus": args.gpus,
        "gpus_per_server": args.gpus_per_server,
        "gpu": args.gpu,
        "microbatches": args.microbatches,
        "micro_batch_size": args.micro_batch_size,
        "layers_per_chunk": args.layers_per_chunk,
        "dp_bucket_mib": args.dp_bucket_mb if args.dp_bucket_mb is not None else llm.ParallelConfig().dp_bucket_bytes / MB,
        "payload_bytes": args.payload_bytes if args.payload_bytes is not None else args.default_payload_bytes,
        "payload_bytes_changed": args.payload_bytes is not None and args.payload_bytes != args.default_payload_bytes,
        "slots_per_host_requested": args.slots_per_host,
        "steps_per_call": args.steps_per_call,
        "batching": engine.resolve_batching(args.batching),
        "max_minutes_per_point": args.max_minutes,
        "max_sim_ms": args.max_sim_ms,
        "splits": [list(s) for s in args.splits],
        "topologies": {t: topology_config(t, args) for t in args.topologies},
        "link": "config defaults: 100 Gb/s, 1 µs (one lookahead window = 1 µs)",
        "quick": args.quick,
        "dry_run": args.dry_run,
        "argv": sys.argv[1:],
        "notes": [
            "one experiment at a time (E=1), built by config.experiment_from_config from a plain dict (rows' 'config')",
            "intra-server collectives (gpus_per_server GPUs per server) are analytical; only inter-server flows are packets",
            "compile_s = engine.lower_advance(...) (trace + lower) + .compile() (XLA), ahead of time; wall_s = the "
            "run loop of the compiled program (steps_per_call windows per call), compile excluded",
            "iteration_time_us / compute_us / exposed_comm_us / bubble_us: simulate.results summary (report/timeline.py): "
            "means over GPUs, compute + exposed comm + bubble = iteration time",
            "compute_ideal_us: training FLOPs / GPUs / (peak x efficiency) + Adam step (28 B/param / HBM bandwidth); "
            "bubble_1f1b_ideal_us: (pp - 1) x one stage's forward + backward of one micro-batch",
            "sim_over_wall = simulated seconds / wall seconds of the run loop",
            "timeout rows: progress when stopped; projected_wall_s = wall_s / bytes_delivered_fraction (rough: "
            "the cost per byte varies over the iteration); projected_wall_lower_s = windows_lower_bound x the run's "
            "wall per window, windows_lower_bound = the busiest NIC's bytes at line rate / the window (a window is "
            "stepped for every link delay while packets are in flight)",
        ],
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        model = model_spec(args)
    except (InputError, TypeError) as exc:
        raise SystemExit(f"--model: {exc}") from None
    doc = {"metadata": metadata(args, model), "rows": []}
    payload = doc["metadata"]["payload_bytes"]
    print(
        f"jax {jax.__version__} | backend {jax.default_backend()} ({jax.devices()[0].device_kind}) | "
        f"{os.cpu_count()} CPUs | model {model.name} ({llm.parameter_count(model) / 1e9:.2f}B params: "
        f"{model.layers} layers, hidden {model.hidden}) | {args.gpus} GPUs, {args.gpus_per_server} per server | "
        + (f"{args.microbatches} micro-batches per pipeline" if args.global_batch is None else f"global batch {args.global_batch}")
        + f" | layers/chunk {args.layers_per_chunk} | payload {payload} B"
        + (f" (CHANGED from the default {args.default_payload_bytes} B)" if doc["metadata"]["payload_bytes_changed"] else "")
        + (f" | DP buckets {args.dp_bucket_mb:g} MiB" if args.dp_bucket_mb is not None else "")
        + f" | budget {args.max_minutes:g} min per point",
        flush=True,
    )
    start = time.perf_counter()
    print_header()
    for kind in args.topologies:
        for split in args.splits:
            row = run_point(kind, split, args, model)
            doc["rows"].append(row)
            args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")  # after every point
            print_row(row)
            for note in row_notes(row):
                print(f"  note: {note}", flush=True)
    doc["metadata"]["total_wall_s"] = time.perf_counter() - start
    doc["metadata"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")

    print()
    print_header()
    for row in doc["rows"]:
        print_row(row)
    notes = [n for row in doc["rows"] for n in row_notes(row)]
    if notes:
        print("\n".join(["notes:"] + [f"  {n}" for n in notes]))
    print(
        "ms columns: iteration time, then its mean per-GPU split (compute + exposed comm + bubble = iteration); "
        "1F1B ideal: the bubble of a perfect 1F1B pipeline; sim/wall: simulated s per wall s (compile excluded)"
    )
    if doc["metadata"]["payload_bytes_changed"]:
        print(f"packet payload changed to {payload} B (default {args.default_payload_bytes} B)")
    print(f"total {doc['metadata']['total_wall_s']:.0f} s; results: {args.out}")
    failed = [r for r in doc["rows"] if r["status"] in ("failed", "invalid")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
