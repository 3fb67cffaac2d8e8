"""What each system costs inside the step: the window's time with one system left out.

One point of ``sweep_vs_htsim.py``'s sweep (``kernel_profile.sweep_point``) is run to
``--at`` windows; then the step is compiled once whole and once without each system of
``--drop`` (``engine.SYSTEMS`` less that one), and each program runs the same ``--windows``
windows from that state, ``--repeats`` times, alternating. A program without a system
gives other results (its state is not checked): the difference is that system's cost in
the step, including what the systems after it do differently without it (``forward``
left out queues nothing new, so transmit sends less). A profiler's kernel times can
mislead (``benchmarks/HISTORY.md``, stop 53); a removal measures what the system costs.

Each program is a whole compile of the engine: on the 2-core CPU about 2.5 minutes at
k=8 on one core, and a dozen in one process ran out of memory (stop 54), so name a few.

    python benchmarks/system_removal.py --drop receive,pfc,forward --one-core
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import numpy as np

from ab_window import compile_with, on_one_core, time_alternating, timed_call_arguments  # benchmarks/, run as a script
from kernel_profile import point_arguments, sweep_point
from multiverse_jax import engine


def compile_without(dropped: str | None, params, state, n_windows: int):
    """``advance``'s program over ``n_windows`` with the system ``dropped`` left out (None: whole)."""
    systems = tuple((name, system) for name, system in engine.SYSTEMS if name != dropped)
    return compile_with(engine, {"SYSTEMS": systems}, params, state, n_windows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drop", default="receive,pfc,forward", help="comma-separated systems of engine.SYSTEMS")
    point_arguments(parser)
    parser.add_argument("--at", type=int, default=450, help="windows run before the timed ones")
    timed_call_arguments(parser, repeats=6)
    parser.add_argument("--out", default="benchmarks/results/system_removal.json")
    args = parser.parse_args()
    if args.one_core:
        on_one_core()
    names = [name for name, _ in engine.SYSTEMS]
    dropped = args.drop.split(",")
    unknown = [name for name in dropped if name not in names]
    if unknown:
        parser.error(f"--drop: {unknown} are not systems of engine.SYSTEMS; valid: {names}")

    batch = sweep_point(args.k, args.flow_bytes, args.slots_per_host)
    warm = jax.block_until_ready(engine.advance(batch.params, batch.state, args.at))
    programs = {label: compile_without(label, batch.params, warm, args.windows) for label in [None] + dropped}
    ms, _ = time_alternating(programs, batch.params, warm, args.windows, args.repeats)
    whole = min(ms[None])
    print(f"{'step':18s} {'min ms/window':>14s} {'median':>8s} {'saves (min)':>12s}")
    for label, times in ms.items():
        name = "whole" if label is None else f"without {label}"
        print(f"{name:18s} {min(times):14.2f} {np.median(times):8.2f} {whole - min(times):12.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = {("whole" if label is None else label): times for label, times in ms.items()}
    out.write_text(json.dumps({"args": vars(args), "jax": jax.__version__, "backend": jax.default_backend(), "ms_per_window": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
