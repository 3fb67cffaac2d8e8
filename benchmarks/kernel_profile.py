"""Where a window's time goes, kernel by kernel: XLA's own trace of the engine's loop.

Runs one point of ``sweep_vs_htsim.py``'s sweep (k-ary fat-tree permutation, RoCE with
PFC, ``switch.pipeline=serial``, as ``peers.htsim.our_config`` sets it) for
``--warm-windows``, then traces ``engine.advance`` over ``--windows`` more with
``jax.profiler`` and sums the kernels XLA ran, by the system they come from (each runs
in a ``jax.named_scope`` of its name) and, inside the transmit rounds, by the phase of
``serve_round`` (scopes added here, around the phase functions). It also counts the
rounds of each window and the packets each port sent in it: a round per packet that
the busiest port sends, but for the runs (``ops/runs.py``: phase ``follow``).

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
    transmit: ("class_heads", "start_times", "depart", "queue_at_end", "account", "leave", "nic_emit"),
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


def sweep_point(k: int, flow_bytes: int, slots_per_host: int, ack_class: str = "data", mode: str = "roce"):
    """The htsim sweep's point (htsim's configuration: ACKs queue with data), or with
    ``ack_class="control"`` this project's default of ACKs in a control class of their own;
    ``mode``: htsim's ``roce`` (no congestion control, PFC) or ``hpcc``."""
    net = htsim.HtsimNetwork(k=k)
    folder = Path(tempfile.mkdtemp())
    cfg = htsim.our_config(net, mode, permutation(0, net.n_hosts, flow_bytes).write(folder / "p.cm"))
    cfg["packet"]["ack_class"] = ack_class
    return build_batch([experiment_from_config(cfg)], slots_per_host=slots_per_host)


def op_names(compiled_text: str) -> dict[str, str]:
    """Instruction name -> its op_name metadata (the named scopes it was traced in)."""
    names = {}
    for line in compiled_text.splitlines():
        match = re.match(r'\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name="([^"]*)"', line)
        if match:
            names[match.group(1)] = match.group(2)
    return names


def group_of(op_name: str, systems: list[str]) -> tuple[str, str]:
    """(system, transmit phase or '') of an instruction's op_name (a scope traced under
    vmap is named ``vmap(<scope>)``)."""
    parts = [re.sub(r"^vmap\((.*)\)$", r"\1", part) for part in op_name.split("/")]
    system = next((p for p in reversed(parts) if p in systems), "(engine loop, copies)")
    phase = "/".join(p.removeprefix("phase:") for p in parts if p.startswith("phase:"))
    in_round = system == "transmit" and "while/body" in re.split(r"transmit\)?/", op_name, maxsplit=1)[-1]
    return system, (phase or "serve_round itself") if in_round else ""


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--flow-bytes", type=int, default=4_000_000)
    parser.add_argument("--slots-per-host", type=int, default=512)
    parser.add_argument("--warm-windows", type=int, default=200)
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results/kernel_profile.json")
    args = parser.parse_args()

    scope_phases()
    batch = sweep_point(args.k, args.flow_bytes, args.slots_per_host)
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
    names = op_names(program.as_text())

    trace_dir = Path(tempfile.mkdtemp())
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        jax.block_until_ready(run(batch.params, warm))
    events = json.load(gzip.open(next(trace_dir.rglob("*.trace.json.gz"))))
    events = events["traceEvents"] if isinstance(events, dict) else events
    systems = [name for name, _ in engine.SYSTEMS]
    by_system, by_phase = collections.Counter(), collections.Counter()
    counts = collections.Counter()
    for event in events:
        if event.get("ph") != "X" or CONTAINERS.match(event["name"]):
            continue
        system, phase = group_of(names.get(event["name"], ""), systems)
        by_system[system] += event.get("dur", 0)
        counts[system] += 1
        if phase:
            by_phase[phase] += event.get("dur", 0)
            counts["round:" + phase] += 1
    rounds, most = rounds_and_sends(batch.params, warm, n)

    total = sum(by_system.values())
    print(f"k={args.k}, {args.slots_per_host} slots/host: {ms_per_window:.2f} ms per window without the profiler (best of 3)")
    print(f"transmit rounds per window: mean {np.mean(rounds):.1f}, max {max(rounds)}; most packets one port sent: mean {np.mean(most):.1f}")
    print(f"{'system':28s} {'share':>7s} {'kernels/window':>15s}")
    for system, us in by_system.most_common():
        print(f"{system:28s} {us / total:7.1%} {counts[system] / n:15.0f}")
    round_total = sum(by_phase.values())
    print(f"\n{'transmit round phase':28s} {'share':>7s} {'kernels/window':>15s}")
    for phase, us in by_phase.most_common():
        print(f"{phase:28s} {us / round_total:7.1%} {counts['round:' + phase] / n:15.0f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "args": vars(args), "jax": jax.__version__, "backend": jax.default_backend(),
        "ms_per_window": ms_per_window, "rounds_per_window": rounds, "most_packets_one_port_sent": most,
        "systems": {s: {"share": us / total, "kernels_per_window": counts[s] / n} for s, us in by_system.items()},
        "round_phases": {p: {"share": us / round_total, "kernels_per_window": counts["round:" + p] / n} for p, us in by_phase.items()},
    }, indent=2))  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
