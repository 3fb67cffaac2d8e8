"""What grows with the packet pool: one htsim-sweep point at two pool sizes, same traffic.

Issue 14 asks that doubling ``sim.packets_per_host`` with the same traffic cost at most
15 % more. This splits the difference, all in one process (the machine's drift between
processes is up to 20 %):

1. ``engine``: the whole engine over ``--windows`` windows from a warm state, the two
   pool sizes timed alternately; and the same with no live prefix (``ops/pool.py``:
   ``Static.prefix_columns`` 0, every window on the whole pool).
2. ``rounds``: the transmit rounds alone, from the window's start, their carry donated
   (so the call does not copy the pool out, which would grow with it), with and
   without the rounds' pool writes (``nic.emit``'s and ``transmit.leave``'s; the rounds
   never read the pool, so dropping them leaves every decision as it was).
3. ``passes``: each system applied ``PASSES`` times in one compiled loop to a busy state
   (its own output fed back; ``identity`` is the call's own cost, subtracted): the cost of
   its pool-sized passes per window, on the whole pool (what a window on the live
   prefix avoids). ``transmit`` here runs few rounds (its ports have
   already sent), so it is mostly the window's start.

    python benchmarks/pool_scaling.py --slots-per-host 512 1024
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
from multiverse_jax.ops import nic
from multiverse_jax.ops.lockstep import while_any
from multiverse_jax.systems import transmit

PASSES = 10  # a system's passes per compiled call (section 3)


def first(tree):
    """The first experiment of a batch (the unbatched tree)."""
    return jax.tree.map(lambda x: x[0], tree)


def timed_ms(call) -> float:
    began = time.perf_counter()
    jax.block_until_ready(call())
    return (time.perf_counter() - began) * 1e3


def rounds_only(params, serving, window_end_ps, order, free, upcoming):
    return while_any(
        lambda consts, s: jnp.any(s.front.sends), lambda consts, s: transmit.serve_round(consts[0], s, *consts[1:]), serving,
        (params, window_end_ps, order, free, upcoming),
    )  # fmt: skip


def without_pool_writes():
    """``nic.emit`` and ``transmit.leave`` that leave the pool as it was; the originals."""
    emit, leave = nic.emit, transmit.leave

    def emit_no_pool(params, state, *args):
        return emit(params, state, *args).replace(packets=state.packets)

    return (emit_no_pool, lambda params, pkts, *args: pkts), (emit, leave)


def window_starts(params, state, n_windows: int):
    """The rounds' inputs of ``n_windows`` consecutive windows: (window end, ``window_start``'s output)."""
    @jax.jit
    def start(params, state, end):
        return transmit.window_start(params, engine.systems_before("transmit", params, state, end), end)

    step, starts = jax.jit(engine.step), []
    for _ in range(n_windows):
        end = state.time_ps + params.window_ps
        starts.append((end, start(params, state, end)))
        state = step(params, state)
    return starts


def rounds_programs(params, starts):
    """The rounds compiled with their pool writes and without (carry donated)."""
    (emit_no_pool, leave_no_pool), (emit, leave) = without_pool_writes()
    programs = {}
    for label, (emit_fn, leave_fn) in {"rounds": (emit, leave), "rounds without pool writes": (emit_no_pool, leave_no_pool)}.items():
        nic.emit, transmit.leave = emit_fn, leave_fn
        try:
            jax.clear_caches()
            end, (serving, *rest) = starts[0]
            programs[label] = jax.jit(rounds_only, donate_argnums=(1,)).lower(params, serving, end, *rest).compile()
        finally:
            nic.emit, transmit.leave = emit, leave
    return programs


def prepared_rounds(program, params, starts):
    """A call of the rounds of every window in ``starts``, on fresh copies of their carries
    (the program consumes what it is given), made here, outside the timing."""
    copies = [jax.tree.map(jnp.copy, serving) for _, (serving, *_) in starts]
    jax.block_until_ready(copies)
    return lambda: [program(params, carry, end, *rest) for carry, (end, (_, *rest)) in zip(copies, starts)]


def passes_programs(params, state):
    """Each system ``PASSES`` times in one loop from the state it sees in a busy window."""
    end, seen = state.time_ps + params.window_ps, {}
    for name, system in engine.SYSTEMS:
        seen[name] = state
        state = jax.jit(system)(params, state, end)
    shift = jnp.int64(0)  # a traced zero: the loop's windows differ to XLA, so nothing is hoisted out of it

    def looped(system):
        def loop(params, state, end, shift):
            return jax.lax.fori_loop(0, PASSES, lambda i, s: system(params, s, end + i * shift), state)

        return jax.jit(loop)

    systems = [("identity", lambda p, s, e: s, seen["thaw"])] + [(n, f, seen[n]) for n, f in engine.SYSTEMS]
    return {name: (looped(system), (params, st, end, shift)) for name, system, st in systems}


def measure(slots: int, args):
    """At ``slots`` per host: sections 1 and 2 as (label -> (make a call, windows per call))
    and section 3 as (system -> (loop, its inputs))."""
    batch = sweep_point(args.k, args.flow_bytes, slots)
    warm = jax.block_until_ready(engine.advance(batch.params, batch.state, args.warm_windows))
    program = engine.lower_advance(batch.params, warm, args.windows).compile()
    params, state = first(batch.params), first(warm)
    starts = window_starts(params, state, args.round_windows)
    calls = {"engine": (lambda: lambda: program(batch.params, warm, args.windows), args.windows)}
    # The same engine with no live prefix: every window on the whole pool (ops/pool.py).
    whole = batch.params.replace(static=dataclasses.replace(batch.params.static, prefix_columns=0))
    whole_program = engine.lower_advance(whole, warm, args.windows).compile()
    calls["engine, whole pool every window"] = (lambda: lambda: whole_program(whole, warm, args.windows), args.windows)
    for label, rounds in rounds_programs(params, starts).items():
        calls[label] = (lambda rounds=rounds: prepared_rounds(rounds, params, starts), args.round_windows)
    return calls, passes_programs(params, state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots-per-host", type=int, nargs=2, default=[512, 1024])
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--flow-bytes", type=int, default=4_000_000)
    parser.add_argument("--warm-windows", type=int, default=300)
    parser.add_argument("--windows", type=int, default=30, help="windows per timed engine call")
    parser.add_argument("--round-windows", type=int, default=8, help="windows whose rounds are timed")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--out", default="benchmarks/results/pool_scaling.json")
    args = parser.parse_args()

    measured = {slots: measure(slots, args) for slots in args.slots_per_host}
    ms, passes = {}, {}
    for _ in range(args.repeats):  # both pool sizes alternating
        for slots, (calls, loops) in measured.items():
            for label, (make_call, windows) in calls.items():
                ms.setdefault((label, slots), []).append(timed_ms(make_call()) / windows)
            for name, (loop, inputs) in loops.items():
                passes.setdefault((name, slots), []).append(timed_ms(lambda: loop(*inputs)))
    small, large = args.slots_per_host
    print(f"ms per window (min / median of {args.repeats}); k={args.k}, {args.flow_bytes:,} B flows")
    print(f"{'part':28s} {f'{small} slots/host':>16s} {f'{large} slots/host':>16s}  ratio (min)")
    for label in measured[small][0]:
        a, b = ms[(label, small)], ms[(label, large)]
        print(f"{label:28s} {min(a):7.2f} / {np.median(a):6.2f} {min(b):7.2f} / {np.median(b):6.2f}  {min(b) / min(a):6.2f}")
    print(f"ms per pass of each system (min of {args.repeats}; {PASSES} passes a call, less the identity's call):")
    for name in measured[small][1]:
        a, b = (min(passes[(name, n)]) - (0 if name == "identity" else min(passes[("identity", n)])) for n in (small, large))
        per = 1 if name == "identity" else PASSES
        print(f"  {name:26s} {a / per:16.3f} {b / per:16.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "args": vars(args), "jax": jax.__version__, "backend": jax.default_backend(),
        "ms_per_window": {f"{label}@{slots}": times for (label, slots), times in ms.items()},
        "pass_ms_per_call": {f"{name}@{slots}": times for (name, slots), times in passes.items()}, "passes": PASSES,
    }, indent=2))  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
