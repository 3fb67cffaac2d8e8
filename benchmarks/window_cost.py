"""What a window costs on this backend: a fixed part, a part per transmit round, and what
one XLA kernel costs by itself.

Two measurements, each printed as a table and written to JSON:

1. **Kernel launch.** Chains of ``--chain`` scatters (one kernel each, as XLA compiles
   them: nothing fuses two scatters) on arrays of 8 elements, a port's array (768, the
   k=8 fat-tree's ports) and a pool prefix's (32,768), in a ``fori_loop``, so that only
   the kernels are timed: the time per kernel on 8 elements is what the runtime costs
   per kernel, whatever the kernel does; the larger arrays' time per element is the work.
2. **Windows.** One point of ``sweep_vs_htsim.py``'s sweep (``kernel_profile.sweep_point``:
   k-ary fat-tree permutation, RoCE with PFC, htsim's configuration) is run to each of
   ``--at`` windows, then ``--windows`` windows are timed one per call (best of
   ``--repeats`` from the same state) and their transmit rounds counted
   (``step_profile.transmit_rounds``). A least-squares line ms = fixed + per_round x rounds
   splits a window's time into what every window pays (the systems outside the rounds,
   the window's start, its first round) and what each further round adds. The same
   windows are also timed as one call: what a call costs beyond its windows (the live
   prefix copied out and back, the host's dispatch), paid once per call of the sweep's
   64 windows but once per window here, is (sum of the one-window calls - the one call)
   / (windows - 1), and it is taken out of each window's time. One window's time on a
   shared machine varies by ±30 %, so a stretch's own line moves from run to run; the
   ``pooled`` line, one cost per round for every stretch whose rounds vary and a fixed
   part of each stretch's own (the pool's live prefix differs along a run), is the one to
   read. Where the rounds hardly vary (the run's light end: one round a window) a stretch
   has no line.

3. **Ports per round.** Over the same windows, how many ports start a packet in each
   round (its ``Front``'s ``sends``), how many of them are NICs' ports and how many NICs
   create a new data packet in it (a NIC creates at most one a round: where every port
   has started its last packet but the NICs, the NICs' creations set the rounds), and
   whether a port that starts nothing in a round ever starts one later in its window (its
   queues, its NIC's offers and PFC's pauses do not change while it waits: it should not).

``--run-ports K`` and ``--long-runs`` measure the same with K ports running packets
behind their first in a round (``runs.run_ports``, K; on the sweep's point 8 since stop 56, 96 before) and with the long
single-class runs on (``Static.long_runs``, off by default on a CPU): which ports run
changes no result (``tests/test_runs.py``), only the rounds and their cost.

So it says how much a change can win before it is built: fewer rounds win at most
per_round x (rounds - 1) a window; a smaller fixed part wins everywhere; rounds that run
only on the ports still sending would cost what those ports cost.

    python benchmarks/window_cost.py --at 300,450,700,1200 --windows 30
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from kernel_profile import sweep_point  # benchmarks/, run as a script
from multiverse_jax import engine
from multiverse_jax.ops import runs
from step_profile import MOST_ROUNDS, transmit_rounds


def kernel_launch(n_elements: int, chain: int, iterations: int = 2000) -> float:
    """µs per kernel of a chain of ``chain`` scatter-adds on ``n_elements`` int64 entries
    (a permutation's indices, as the engine's scatters), ``iterations`` times in one
    compiled loop, less the loop with a chain of one."""

    def loop(length):
        index = (jnp.arange(n_elements) * 7919) % n_elements

        def body(i, x):
            for j in range(length):
                x = x.at[index].add(j)
            return x

        return jax.jit(lambda x: jax.lax.fori_loop(0, iterations, body, x))

    x = jnp.arange(n_elements, dtype=jnp.int64)
    seconds = {}
    for length in (1, chain):
        program = loop(length)
        jax.block_until_ready(program(x))
        timed = []
        for _ in range(3):
            began = time.perf_counter()
            jax.block_until_ready(program(x))
            timed.append(time.perf_counter() - began)
        seconds[length] = min(timed)
    return (seconds[chain] - seconds[1]) / iterations / (chain - 1) * 1e6


def best_call_ms(program, params, state, n_steps: int, repeats: int):
    """The state after ``program(params, state, n_steps)`` and its best time of ``repeats``, ms."""
    best = np.inf
    for _ in range(repeats):
        began = time.perf_counter()
        after = jax.block_until_ready(program(params, state, n_steps))
        best = min(best, time.perf_counter() - began)
    return after, best * 1e3


def window_times(params, state, n_windows: int, repeats: int):
    """(n_windows,) ms of each window, less a call's own cost, and (n_windows,) its
    packet-hops; the state after them; the call's own cost, ms."""
    program = engine.lower_advance(params, state, 1).compile()  # n_steps is traced: one program for any count
    _, stretch_ms = best_call_ms(program, params, state, n_windows, repeats)
    ms, hops = [], []
    for _ in range(n_windows):
        after, best = best_call_ms(program, params, state, 1, repeats)
        ms.append(best)
        hops.append(int(np.sum(after.n_packet_hops) - np.sum(state.n_packet_hops)))
        state = after
    per_call_ms = (sum(ms) - stretch_ms) / (n_windows - 1)
    return np.array(ms) - per_call_ms, np.array(hops), state, per_call_ms


SENDING = ("ports", "nic_ports", "nic_creations")  # what ``rounds_and_ports`` counts in each round


def rounds_and_ports(params, state, n_windows: int):
    """Over ``n_windows`` windows of the batch's first experiment: (n_windows,) its
    transmit rounds; for each of ``SENDING``, (rounds,) its mean in each round (over the
    windows that run it): the ports that start a packet, the NICs' among them, the NICs
    that create one; and whether a port ever started one after a round it started none
    (``step_profile.transmit_rounds``)."""
    rounds, per_round, came_back = [], [[] for _ in range(MOST_ROUNDS)], False
    for _ in range(n_windows):
        n, _, counts, back = (x[0] for x in jax.device_get(transmit_rounds(params, state)))
        rounds.append(int(n))
        for r in range(min(int(n), MOST_ROUNDS)):
            per_round[r].append(counts[r])
        came_back |= bool(back)
        state = engine.advance(params, state, 1)
    means = np.array([np.mean(rows, axis=0) for rows in per_round if rows]).reshape(-1, len(SENDING))
    return rounds, {name: means[:, i].tolist() for i, name in enumerate(SENDING)}, came_back


def fitted_line(stretches):
    """ms = fixed_s + per_round x rounds over ``stretches`` (each its own fixed part, one
    cost per round for all): the fixed parts, the cost per round and each stretch's share
    of the rounds after the first; None where the rounds hardly vary (a standard deviation
    under half a round: no line to fit)."""
    if not stretches or max(np.std(s["rounds"]) for s in stretches) < 0.5:
        return None
    ms, rounds = (np.concatenate([s[key] for s in stretches]).astype(float) for key in ("ms", "rounds"))
    columns = [np.concatenate([np.full(len(s["ms"]), float(i == j)) for j, s in enumerate(stretches)]) for i in range(len(stretches))]
    *fixed, per_round = np.linalg.lstsq(np.vstack(columns + [rounds]).T, ms, rcond=None)[0]
    shares = [per_round * (np.mean(s["rounds"]) - 1) / np.mean(s["ms"]) for s in stretches]
    return {"at": [s["at"] for s in stretches], "fixed_ms": [float(f) for f in fixed], "per_round_ms": float(per_round),
            "rounds_after_first_share": [float(x) for x in shares]}  # fmt: skip


def measure_stretch(params, state, at: int, n_windows: int, repeats: int):
    """The stretch of ``n_windows`` windows from ``state`` (at window ``at``): its windows'
    times, rounds, packet-hops and ports per round, its own line; and the state after it."""
    rounds, sending, came_back = rounds_and_ports(params, state, n_windows)
    ms, hops, after, per_call_ms = window_times(params, state, n_windows, repeats)
    stretch = {
        "at": at, "ms": ms.tolist(), "rounds": rounds, "packet_hops": hops.tolist(), "call_ms": per_call_ms,
        "ports_sending_per_round": sending, "a_port_started_after_an_idle_round": came_back,
    }  # fmt: skip
    return stretch | {"line": fitted_line([stretch])}, after


def print_tables(launch: dict, stretches: list, pooled) -> None:
    print(f"{'elements':>9s} {'µs/kernel':>10s} {'ns/element':>11s}")
    for n, us in launch.items():
        print(f"{n:9d} {us:10.3f} {us * 1e3 / n:11.3f}")
    print(f"\n{'window':>7s} {'ms':>6s} {'rounds':>7s} {'hops':>6s} {'call ms':>8s} {'fixed ms':>9s} {'ms/round':>9s} {'rounds 2+':>10s}")
    for s in stretches:
        line = f"{s['at']:7d} {np.mean(s['ms']):6.2f} {np.mean(s['rounds']):7.2f} {np.mean(s['packet_hops']):6.0f} {s['call_ms']:8.2f}"
        if s["line"] is not None:  # its own line, and the share of a window its rounds after the first take
            own = s["line"]
            line += f" {own['fixed_ms'][0]:9.2f} {own['per_round_ms']:9.3f} {own['rounds_after_first_share'][0]:10.1%}"
        print(line)
    if pooled is not None:
        for at, fixed, share in zip(pooled["at"], pooled["fixed_ms"], pooled["rounds_after_first_share"]):
            print(f"{'pooled':>7s} {at:<6d} {'':14s} {'':8s} {fixed:9.2f} {pooled['per_round_ms']:9.3f} {share:10.1%}")
    print(f"\n{'window':>7s}  {'':13s} by round (mean over the windows that run it)")
    for s in stretches:
        back = "  (a port started after an idle round!)" if s["a_port_started_after_an_idle_round"] else ""
        for name, label in zip(SENDING, ("ports sending", "NIC ports", "NIC creations")):
            at = f"{s['at']:7d}" if name == SENDING[0] else " " * 7
            print(f"{at}  {label:13s} " + " ".join(f"{n:5.1f}" for n in s["ports_sending_per_round"][name]) + (back if name == SENDING[0] else ""))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--flow-bytes", type=int, default=4_000_000)
    p.add_argument("--slots-per-host", type=int, default=512)
    p.add_argument("--at", default="300,450,700,1200", help="windows to run before each timed stretch")
    p.add_argument("--windows", type=int, default=30, help="windows timed at each")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per window (the best counts)")
    p.add_argument("--chain", type=int, default=64, help="kernels in the launch test's chain")
    p.add_argument("--run-ports", type=int, default=0, help="ports that may run packets behind their first in a round (0: runs.run_ports)")
    p.add_argument("--long-runs", action="store_true", help="long single-class runs on (Static.long_runs)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/window_cost.json"))
    args = p.parse_args(argv)

    launch = {n: kernel_launch(n, args.chain) for n in (8, 768, 32768)}
    batch = sweep_point(args.k, args.flow_bytes, args.slots_per_host)
    params, state = batch.params, batch.state
    if args.run_ports:  # read when the programs are traced, below
        runs.run_ports = lambda static: min(static.n_ports, args.run_ports)
    if args.long_runs:
        params = params.replace(static=dataclasses.replace(params.static, long_runs=True))
    stretches, done = [], 0
    for at in sorted(int(a) for a in args.at.split(",")):
        state = jax.block_until_ready(engine.advance(params, state, at - done))
        stretch, state = measure_stretch(params, state, at, args.windows, args.repeats)
        stretches.append(stretch)
        done = at + args.windows
    pooled = fitted_line([s for s in stretches if s["line"] is not None])
    print_tables(launch, stretches, pooled)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "args": {k: str(v) for k, v in vars(args).items()}, "jax": jax.__version__, "backend": jax.default_backend(),
        "kernel_launch_us": {str(n): us for n, us in launch.items()}, "stretches": stretches, "pooled": pooled,
    }, indent=2) + "\n")  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
