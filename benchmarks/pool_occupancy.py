"""Where a whole run's windows go: cost per window against the packets it moves and holds.

Runs one point of ``sweep_vs_htsim.py``'s sweep (k-ary fat-tree permutation of
``--flow-bytes`` flows, RoCE with PFC, as ``peers.htsim.our_config`` sets it) from its
first window to its last, ``--chunk`` windows per compiled call (``sim.batching=map``,
one device), and reports, per stretch of ``--bin`` windows:

* ``ms/window`` (wall time of the calls) and ``hops/window`` (packet-hops simulated);
* ``live``: the packets in the pool (valid slots) at the stretch's end;
* ``queued``: of them, those waiting in an egress queue (``packets.queued``), not on a
  wire: every pass over the pool reads them, though a window moves only ``hops/window``;
* ``columns``: one past the highest column any host holds a packet in (``pool.columns_in_use``):
  a window runs on the pool's first columns only while this, plus what a window may
  create, fits them (``ops/pool.py``), so every window pays for ``columns`` x hosts slots;
* ``host_sum``: the slots a layout giving each host only its own columns in use would
  hold (the sum over hosts of each one's highest column in use, plus one).

Issue 14 asks that a window's cost follow the packets that move. Where ``columns`` stays
high while ``live`` falls (a few hosts hold hundreds of packets each, in PFC-held queues,
and every other host's columns are paid for as well), it does not.

With several ``--slots-per-host``, each pool size is compiled, then whole runs of each
alternate ``--repeats`` times in one process, and the best wall times are compared:
issue 14 asks that doubling the pool with the same traffic cost at most 15 % more.

    python benchmarks/pool_occupancy.py --k 8 --slots-per-host 512 1024 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from kernel_profile import sweep_point  # benchmarks/, run as a script
from multiverse_jax import engine
from multiverse_jax.ops import pool
from multiverse_jax.ops.packets import queued


@jax.jit
def occupancy(params, state):
    """Per experiment: live packets, queued packets, columns in use, and the sum over hosts of each host's columns in use."""

    def one(p, s):
        per_host = pool.host_columns_in_use(p, s.packets)  # (H,)
        live, waiting = (jnp.sum(mask, dtype=jnp.int32) for mask in (s.packets.pkt_valid, queued(s.packets)))
        return live, waiting, pool.columns_in_use(p, s.packets), jnp.sum(per_host)

    return jax.vmap(one)(params, state)


def whole_run(program, params, state, chunk: int):
    """One run from ``state`` to its end: per call (first window, windows, packet-hops,
    wall s, and after it live and queued packets, columns in use, host sum)."""
    chunks = []
    while not bool(np.all(np.asarray(state.done))):
        windows, hops = int(state.n_windows[0]), int(state.n_packet_hops[0])
        began = time.perf_counter()
        state = jax.block_until_ready(program(params, state, chunk))
        wall_s = time.perf_counter() - began
        live, waiting, columns, host_sum = (int(x[0]) for x in occupancy(params, state))  # outside the timed call
        chunks.append((windows, int(state.n_windows[0]) - windows, int(state.n_packet_hops[0]) - hops, wall_s, live, waiting, columns, host_sum))
    return chunks


def binned(chunks, size: int) -> list[dict]:
    """The calls of a run in rows of ``size`` windows (occupancy at each row's end)."""
    bins = {}
    for first, windows, hops, wall_s, live, waiting, columns, host_sum in chunks:
        row = bins.setdefault(first // size, {"first_window": first // size * size, "windows": 0, "hops": 0, "wall_s": 0.0})
        row["windows"] += windows
        row["hops"] += hops
        row["wall_s"] += wall_s
        row.update(live=live, queued=waiting, columns=columns, host_sum=host_sum)
    return list(bins.values())


def run(args) -> list[dict]:
    """Every pool size compiled, then whole runs of each in turn, ``--repeats`` times (one
    process: the ratio between sizes is read from one run, not two)."""
    sizes = {}
    for slots_per_host in args.slots_per_host:
        batch = sweep_point(args.k, args.flow_bytes, slots_per_host)
        began = time.perf_counter()
        program = engine.lower_advance(batch.params, batch.state, args.chunk, "map").compile()
        sizes[slots_per_host] = (batch, program, time.perf_counter() - began)
    runs = {slots_per_host: [] for slots_per_host in sizes}
    for _ in range(args.repeats):
        for slots_per_host, (batch, program, _) in sizes.items():
            runs[slots_per_host].append(whole_run(program, batch.params, batch.state, args.chunk))
    out = []
    for slots_per_host, (batch, _, compile_s) in sizes.items():
        walls = [sum(c[3] for c in chunks) for chunks in runs[slots_per_host]]
        best = runs[slots_per_host][int(np.argmin(walls))]
        static = batch.params.static
        out.append({
            "k": args.k, "flow_bytes": args.flow_bytes, "slots_per_host": slots_per_host, "n_slots": static.n_slots,
            "prefix_columns": [static.prefix_columns, *static.prefix_inner_columns],
            "compile_s": compile_s, "windows": sum(c[1] for c in best), "packet_hops": sum(c[2] for c in best),
            "wall_s": walls, "packet_hops_per_s": sum(c[2] for c in best) / min(walls), "bins": binned(best, args.bin),
        })  # fmt: skip
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--flow-bytes", type=int, default=4_000_000)
    p.add_argument("--slots-per-host", type=int, nargs="+", default=[512], help="pool sizes, each compiled, run in turn")
    p.add_argument("--repeats", type=int, default=1, help="whole runs of each size, alternating")
    p.add_argument("--chunk", type=int, default=8, help="windows per compiled call")
    p.add_argument("--bin", type=int, default=100, help="windows per row of the table")
    p.add_argument("--out", default="benchmarks/results/pool_occupancy.json")
    args = p.parse_args(argv)
    out = run(args)
    for size in out:
        print(
            f"k={size['k']}, {size['slots_per_host']} slots/host ({size['n_slots']} slots; prefixes of "
            f"{', '.join(map(str, size['prefix_columns']))} columns): "
            f"{size['windows']} windows, "
            f"{size['packet_hops']:,} packet-hops, wall s {', '.join(f'{w:.2f}' for w in size['wall_s'])} "
            f"({size['packet_hops_per_s'] / 1e6:.3f} M/s at the best), compile {size['compile_s']:.1f} s"
        )
        print(f"{'windows':>9} {'ms/window':>10} {'hops/window':>12} {'live':>7} {'queued':>7} {'columns':>8} {'host_sum':>9}")
        for row in size["bins"]:
            print(
                f"{row['first_window']:>8}+ {row['wall_s'] / row['windows'] * 1e3:>10.3f} {row['hops'] / row['windows']:>12.1f} "
                f"{row['live']:>7} {row['queued']:>7} {row['columns']:>8} {row['host_sum']:>9}"
            )
    if len(out) > 1:
        base = min(out[0]["wall_s"])
        print("whole run, best wall against the first size: " + ", ".join(f"{s['slots_per_host']}: {min(s['wall_s']) / base:.2f}x" for s in out))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
