"""A/B of one change, in one process: the engine's window time with the current code
against the same program with some functions taken from another version of their module.

On a shared 2-core machine, the same run measured twice in separate processes differs by
up to 20 %, more than most single changes gain. Here both programs are compiled in one
process and timed alternately, over the same windows of one htsim-sweep point
(``kernel_profile.sweep_point``: k-ary fat-tree permutation, RoCE with PFC,
``switch.pipeline=serial``; ``--mode hpcc``: htsim's HPCC configuration, whose ACKs run
congestion control's event loop), so the drift of the machine hits both alike. Both must give
the same state, bit for bit (checked), so only changes that keep results can be timed.

    git show HEAD~1:multiverse_jax/ops/queues.py > /tmp/queues_before.py
    python benchmarks/ab_window.py multiverse_jax.ops.queues /tmp/queues_before.py arrived_by

The functions are replaced in the named module's namespace, so the callers must reach
them through it (``queues.arrived_by``), not through their own ``from ... import``
(then name the caller's module: ``multiverse_jax.ops.nic`` for its ``prefix_sum``). A
system is replaced through ``multiverse_jax.engine``'s ``SYSTEMS``: a file that defines
``SYSTEMS = tuple((n, other_pfc if n == "pfc" else f) for n, f in engine.SYSTEMS)``.

``--one-core`` runs the process on one core (XLA's CPU client then makes one thread and
partitions no kernel). It measures a change's total work, which is what a sweep on every
core (``sweep_vs_htsim.py --devices 2``: a device per core) gains; it is also steadier:
at stop 53 the min and median of 10 calls fell 1-3.5 % apart on one core, 2-10 % on two. It can miss what a single program gains on 2 cores,
where XLA runs independent kernels side by side.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import time
from pathlib import Path

import jax
import numpy as np

from kernel_profile import point_arguments, sweep_point  # benchmarks/, run as a script
from multiverse_jax import engine
from multiverse_jax.peers import htsim


def load_file(path: str):
    """The module in the file at ``path`` (another version of a package module)."""
    spec = importlib.util.spec_from_file_location("ab_window_other", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_one_core() -> None:
    """Pin the process to one of its cores, before JAX starts its CPU client (whose threads
    and kernel partitions follow the cores it sees then)."""
    from jax._src import xla_bridge  # backends_are_initialized: not in JAX's public API

    if xla_bridge.backends_are_initialized():
        raise RuntimeError("--one-core: JAX's backend started before the process was pinned")
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def compile_with(module, functions: dict, params, state, n_windows: int):
    """``advance``'s program over ``n_windows``, traced with ``functions`` (name -> function)
    in ``module``'s namespace; the module's own functions are put back after."""
    own = {name: getattr(module, name) for name in functions}
    try:
        for name, function in functions.items():
            setattr(module, name, function)
        jax.clear_caches()  # trace again: the cached program holds the other functions
        return engine.lower_advance(params, state, n_windows).compile()
    finally:
        for name, function in own.items():
            setattr(module, name, function)


def timed_call_arguments(parser, repeats: int) -> None:
    """The options of a timing by alternating calls (this script's, ``system_removal.py``'s):
    ``--windows`` a call, ``--repeats`` calls of each program (default ``repeats``), ``--one-core``."""
    parser.add_argument("--windows", type=int, default=30, help="windows per timed call")
    parser.add_argument("--repeats", type=int, default=repeats, help="timed calls of each program, alternating")
    parser.add_argument("--one-core", action="store_true", help="run on one core (ab_window.py's docstring)")


def time_alternating(programs: dict, params, state, n_windows: int, repeats: int):
    """Each compiled program of ``programs`` (label -> program) run ``repeats`` times over
    ``n_windows`` windows from ``state``, the programs in turn: ms a window of each call,
    wall and the process's CPU time (steadier on a shared machine), label -> list each."""
    ms = {label: [] for label in programs}
    cpu_ms = {label: [] for label in programs}
    for _ in range(repeats):
        for label, program in programs.items():
            began, began_cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(program(params, state, n_windows))
            ms[label].append((time.perf_counter() - began) / n_windows * 1e3)
            cpu_ms[label].append((time.process_time() - began_cpu) / n_windows * 1e3)
    return ms, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module", help="the module whose functions are replaced, e.g. multiverse_jax.ops.queues")
    parser.add_argument("other_file", help="a file with the other version of that module")
    parser.add_argument("functions", help="comma-separated names taken from the other file")
    point_arguments(parser)
    parser.add_argument("--ack-class", default="data", choices=("data", "control"), help="packet.ack_class (data: htsim's)")
    parser.add_argument("--mode", default="roce", choices=tuple(htsim.CC_OF_MODE), help="htsim's mode: roce (no congestion control) or hpcc")
    parser.add_argument("--warm-windows", type=int, default=200)
    timed_call_arguments(parser, repeats=10)
    parser.add_argument("--out", default="benchmarks/results/ab_window.json")
    args = parser.parse_args()
    if args.one_core:
        on_one_core()

    module, other = importlib.import_module(args.module), load_file(args.other_file)
    names = args.functions.split(",")
    batch = sweep_point(args.k, args.flow_bytes, args.slots_per_host, args.ack_class, args.mode, args.fifo_pass, args.nic_pass)
    warm = jax.block_until_ready(engine.advance(batch.params, batch.state, args.warm_windows))
    programs = {
        "current": compile_with(module, {name: getattr(module, name) for name in names}, batch.params, warm, args.windows),
        "other": compile_with(module, {name: getattr(other, name) for name in names}, batch.params, warm, args.windows),
    }
    ends = {label: program(batch.params, warm, args.windows) for label, program in programs.items()}
    for current, theirs in zip(jax.tree.leaves(ends["current"]), jax.tree.leaves(ends["other"])):
        np.testing.assert_array_equal(np.asarray(current), np.asarray(theirs))  # same results, bit for bit
    ms, cpu_ms = time_alternating(programs, batch.params, warm, args.windows, args.repeats)
    print(f"{'program':10s} {'min ms/window':>14s} {'median':>8s} {'CPU min':>8s} {'median':>8s}")
    for label, times in ms.items():
        print(f"{label:10s} {min(times):14.2f} {np.median(times):8.2f} {min(cpu_ms[label]):8.2f} {np.median(cpu_ms[label]):8.2f}")
    ratio_min = min(ms["other"]) / min(ms["current"])
    ratio_median = float(np.median(ms["other"]) / np.median(ms["current"]))
    print(f"other / current: {ratio_min:.3f} (min), {ratio_median:.3f} (median); above 1: the current code is faster")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "args": vars(args), "jax": jax.__version__, "backend": jax.default_backend(), "ms_per_window": ms, "cpu_ms_per_window": cpu_ms,
        "other_over_current_min": ratio_min, "other_over_current_median": ratio_median,
    }, indent=2))  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
