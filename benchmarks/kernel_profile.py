"""Where a window's time goes, kernel by kernel: XLA's own trace of the engine's loop.

Runs one point of ``sweep_vs_htsim.py``'s sweep (k-ary fat-tree permutation, RoCE with
PFC, ``switch.pipeline=serial``, as ``peers.htsim.our_config`` sets it) for
``--warm-windows``, then traces ``engine.advance`` over ``--windows`` more with
``jax.profiler`` and sums the kernels XLA ran, by the system they come from (each runs
in a ``jax.named_scope`` of its name) and, inside the transmit rounds, by the phase of
``serve_round`` (scopes added here, around the phase functions). It also counts the
rounds of each window and the packets each port sent in it: a round per packet that
the busiest port sends, but for the runs (``ops/runs.py``: phase ``follow``).

Two more tables split the same kernels by where they run (once a window, or in the
transmit rounds) and by the entries each writes (``SIZE_CLASSES``: the pool's passes, the
per-port and per-queue arrays, the rest), and list the ``--top`` kernels by time, each
with its output's entries and the system and phase it comes from: a window's time is
spread over ~2,000 kernels, and these say which kind dominates.

Times under the profiler are inflated by its own cost per kernel (each kernel is
recorded), so read the shares and the kernel counts, not the absolute times; the first
line gives the window's time without the profiler.

    python benchmarks/kernel_profile.py --k 8 --windows 20
"""

from __future__ import annotations

import argparse
import collections
import functools
import gzip
import json
import re
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.config import experiment_from_config
from multiverse_jax.ops import nic, queues, runs
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import permutation
from multiverse_jax.systems import transmit
from step_profile import transmit_rounds  # benchmarks/, run as a script

PHASES = {  # the functions a transmit round calls, by module
    transmit: ("class_heads", "start_times", "depart", "queue_at_end", "account", "leave", "nic_emit", "drain", "drain_nics", "nic_rounds"),
    queues: ("arrived_bytes", "at_head"),
    nic: ("offer", "emit"),
    runs: ("follow",),
}
CONTAINERS = re.compile(r"^(while|cond|call|ThunkExecutor|\$|PjitFunction|end:|ThreadpoolListener)")


def scope_phases() -> None:
    """Wrap each phase function in a named scope ``phase:<name>`` (traced code only: the
    compiled program computes the same)."""
    for module, names in PHASES.items():
        for name in names:
            function = getattr(module, name)

            @functools.wraps(function)
            def scoped(*args, _function=function, _name=name, **kwargs):
                with jax.named_scope(f"phase:{_name}"):
                    return _function(*args, **kwargs)

            setattr(module, name, scoped)


def sweep_point(
    k: int, flow_bytes: int, slots_per_host: int, ack_class: str = "data", mode: str = "roce", fifo_pass: str = "auto",
    nic_pass: str = "auto",
):
    """The htsim sweep's point (htsim's configuration: ACKs queue with data), or with
    ``ack_class="control"`` this project's default of ACKs in a control class of their own;
    ``mode``: htsim's ``roce`` (no congestion control, PFC) or ``hpcc``; ``fifo_pass``,
    ``nic_pass``: ``sim.fifo_pass``, ``sim.nic_pass``."""
    net = htsim.HtsimNetwork(k=k)
    folder = Path(tempfile.mkdtemp())
    cfg = htsim.our_config(net, mode, permutation(0, net.n_hosts, flow_bytes).write(folder / "p.cm"))
    cfg["packet"]["ack_class"] = ack_class
    cfg.setdefault("sim", {}).update(fifo_pass=fifo_pass, nic_pass=nic_pass)
    return build_batch([experiment_from_config(cfg)], slots_per_host=slots_per_host)


def point_arguments(parser) -> None:
    """The sweep point's options (``sweep_point``'s k, flow size and slots a host), shared by
    the scripts that run it."""
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--flow-bytes", type=int, default=4_000_000)
    parser.add_argument("--slots-per-host", type=int, default=512)
    parser.add_argument("--fifo-pass", default="auto", choices=("auto", "always", "never"), help="sim.fifo_pass (auto: off on a CPU)")
    parser.add_argument("--nic-pass", default="auto", choices=("auto", "always", "never"), help="sim.nic_pass (auto: off on a CPU)")


def op_names(compiled_text: str) -> dict[str, str]:
    """Instruction name -> its op_name metadata (the named scopes it was traced in)."""
    names = {}
    for line in compiled_text.splitlines():
        match = re.match(r'\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name="([^"]*)"', line)
        if match:
            names[match.group(1)] = match.group(2)
    return names


# Classes of a kernel by the entries of its output: at least the first's (the pool's
# passes: the sweep point's live prefix holds 8,192-32,768 places), at least the second's
# (per-port and per-queue arrays: 768 ports, 1,536 class queues, (Q, 8) probes at k=8),
# the rest (per-host and per-flow arrays, scalars; a reduction over the pool writes few).
SIZE_CLASSES = ((8192, "pool (>= 8,192)"), (700, "ports, queues (700-8,191)"), (0, "small (< 700)"))


def output_entries(compiled_text: str) -> dict[str, int]:
    """Instruction name -> the entries of its output (a tuple's: 0)."""
    entries = {}
    for line in compiled_text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = \w+\[([\d,]*)\]", line)
        if match:
            entries[match.group(1)] = int(np.prod([int(d) for d in match.group(2).split(",") if d]))
    return entries


def size_class(n_entries: int) -> str:
    return next(label for least, label in SIZE_CLASSES if n_entries >= least)


def group_of(op_name: str, systems: list[str]) -> tuple[str, str]:
    """(system, transmit phase or '') of an instruction's op_name (a scope traced under
    vmap is named ``vmap(<scope>)``)."""
    parts = [re.sub(r"^vmap\((.*)\)$", r"\1", part) for part in op_name.split("/")]
    system = next((p for p in reversed(parts) if p in systems), "(engine loop, copies)")
    phase = "/".join(p.removeprefix("phase:") for p in parts if p.startswith("phase:"))
    in_round = system == "transmit" and "while/body" in re.split(r"transmit\)?/", op_name, maxsplit=1)[-1]
    return system, (phase or "serve_round itself") if in_round else (phase and f"once: {phase}")


def rounds_and_sends(params, state, n_windows: int):
    """Per window: transmit rounds, and the most packets one port sent
    (``step_profile.transmit_rounds``)."""
    rounds, most = [], []
    for _ in range(n_windows):
        n, per_port, *_ = transmit_rounds(params, state)
        rounds.append(int(n[0]))
        most.append(int(np.asarray(per_port).max()))
        state = engine.advance(params, state, 1)
    return rounds, most


def share_table(table, total_us: float, n_windows: int) -> dict:
    """A table's rows, largest first: key -> its share of ``total_us``, kernels per window and
    µs per kernel. ``table``: (key -> µs, key -> kernels), summed over ``n_windows``."""
    us, calls = table
    return {
        key: {"share": t / total_us, "kernels_per_window": calls[key] / n_windows, "us_per_kernel": t / calls[key]}
        for key, t in us.most_common()
    }  # fmt: skip


def print_table(title: str, rows: dict) -> None:
    print(f"\n{title:42s} {'share':>7s} {'kernels/window':>15s} {'us/kernel':>10s}")
    for key, row in rows.items():
        label = ", ".join(key) if isinstance(key, tuple) else key
        print(f"{label:42s} {row['share']:7.1%} {row['kernels_per_window']:15.0f} {row['us_per_kernel']:10.1f}")


def top_kernels(by_kernel, names, entries, systems, n_windows: int, n_top: int) -> list[dict]:
    """The ``n_top`` kernels with the most time (``by_kernel``: name -> µs, name -> calls,
    over ``n_windows``), each per window, with its output's entries, system and phase."""
    us, calls = by_kernel
    rows = []
    for kernel, t in us.most_common(n_top):
        system, phase = group_of(names.get(kernel, ""), systems)
        rows.append({
            "kernel": kernel, "us_per_window": t / n_windows, "calls_per_window": calls[kernel] / n_windows,
            "entries": entries.get(kernel, 0), "system": system, "phase": phase,
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    point_arguments(parser)
    parser.add_argument("--warm-windows", type=int, default=200)
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--top", type=int, default=15, help="kernels listed by time")
    parser.add_argument("--out", default="benchmarks/results/kernel_profile.json")
    parser.add_argument("--hlo-out", help="also write the compiled program's text here (to read a kernel by its name)")
    args = parser.parse_args()

    scope_phases()
    batch = sweep_point(args.k, args.flow_bytes, args.slots_per_host, fifo_pass=args.fifo_pass, nic_pass=args.nic_pass)
    warm = engine.advance(batch.params, batch.state, args.warm_windows)
    n = args.windows
    program = engine.lower_advance(batch.params, warm, n).compile()

    def run(params, state):
        return program(params, state, n)

    jax.block_until_ready(run(batch.params, warm))
    seconds = []
    for _ in range(3):
        began = time.perf_counter()
        jax.block_until_ready(run(batch.params, warm))
        seconds.append(time.perf_counter() - began)
    ms_per_window = min(seconds) / n * 1e3  # best of 3
    compiled_text = program.as_text()  # tens of MB: read once
    names, entries = op_names(compiled_text), output_entries(compiled_text)
    if args.hlo_out:
        Path(args.hlo_out).write_text(compiled_text)

    trace_dir = Path(tempfile.mkdtemp())
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        jax.block_until_ready(run(batch.params, warm))
    events = json.load(gzip.open(next(trace_dir.rglob("*.trace.json.gz"))))
    events = events["traceEvents"] if isinstance(events, dict) else events
    systems = [name for name, _ in engine.SYSTEMS]
    # Each table: key -> µs, and its kernels' calls (over the n windows traced).
    by_system, by_phase, by_size, by_kernel = ((collections.Counter(), collections.Counter()) for _ in range(4))
    for event in events:
        if event.get("ph") != "X" or CONTAINERS.match(event["name"]):
            continue
        system, phase = group_of(names.get(event["name"], ""), systems)
        size = ("in a round" if phase and not phase.startswith("once: ") else "once a window", size_class(entries.get(event["name"], 0)))
        for (us, calls), key in ((by_system, system), (by_phase, phase), (by_size, size), (by_kernel, event["name"])):
            if key:
                us[key] += event.get("dur", 0)
                calls[key] += 1
    rounds, most = rounds_and_sends(batch.params, warm, n)

    total = sum(by_system[0].values())
    print(f"k={args.k}, {args.slots_per_host} slots/host: {ms_per_window:.2f} ms per window without the profiler (best of 3)")
    print(f"transmit rounds per window: mean {np.mean(rounds):.1f}, max {max(rounds)}; most packets one port sent: mean {np.mean(most):.1f}")
    systems_table = share_table(by_system, total, n)
    print_table("system", systems_table)
    phases_table = share_table(by_phase, sum(by_phase[0].values()), n)
    print_table("transmit round phase", phases_table)
    sizes_table = share_table(by_size, total, n)
    print_table("where, entries written", sizes_table)
    top = top_kernels(by_kernel, names, entries, systems, n, args.top)
    print(f"\n{'kernel':34s} {'us/window':>9s} {'calls':>6s} {'entries':>8s}  system, phase")
    for row in top:
        print(f"{row['kernel'][:34]:34s} {row['us_per_window']:9.1f} {row['calls_per_window']:6.1f} {row['entries']:8d}  {row['system']}, {row['phase']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "args": vars(args), "jax": jax.__version__, "backend": jax.default_backend(),
        "ms_per_window": ms_per_window, "rounds_per_window": rounds, "most_packets_one_port_sent": most,
        "systems": systems_table, "round_phases": phases_table,
        "by_size": [{"where": w, "entries": e, **row} for (w, e), row in sizes_table.items()], "top_kernels": top,
    }, indent=2))  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
