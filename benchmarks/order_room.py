"""How often a service order *with room* would have to be rebuilt: a design check, no engine change.

Today every window rebuilds its service order over every position of the pool (or its live
prefix): each queued packet's columns move to their new positions, though ~97 % of them wait
behind PFC on the htsim sweep's point (``benchmarks/HISTORY.md``, stop 62: ~20 % of a busy
window). An order with room would lay the queues out with spare places after each queue's last
packet, write a window's arrivals into their queue's room, and rebuild the whole order (today's
merge or sort, with the room shared out again) only when some queue's arrivals overflow its room.
Packets that leave only move the queue's pointer: the places before it are not reused until the
next rebuild.

This script runs the sweep's point (``kernel_profile.sweep_point``) window by window and records,
from inside ``queues.service_order`` (a ``jax.debug.callback``: a host sync each window, for
this measurement only), each queue's queued packets and new arrivals and the places the order
has (the pool's, or its live prefix's). It then replays the room policies over that trace:

* ``even``: the spare places (places less queued packets) shared equally among the queues;
* ``by_arrivals``: shared in proportion to each queue's arrivals in the rebuild's window, plus
  one (a queue that received nothing gets a share of one);
* ``mixed``: half even, half by arrivals.

A rebuild happens at a window where some queue's arrivals since the last rebuild exceed its
room, and whenever the places change (the engine moved to another prefix; a second replay
keeps the whole pool's places throughout, as an order independent of the prefix would). It
reports, per policy, the windows that rebuild, over all windows and over the busy ones (at
least ``--busy`` packets queued); and the same with each queue's places as a ring (the places
its departures free reused: it overflows only when it grows past them).

    python benchmarks/order_room.py --k 8 --windows 0   # the whole run
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from kernel_profile import point_arguments, sweep_point  # benchmarks/, run as a script
from multiverse_jax import engine
from multiverse_jax.ops import queues
from multiverse_jax.ops.packets import queued

POLICIES = ("even", "by_arrivals", "mixed")


def record_service_orders(trace: list) -> None:
    """Wrap ``queues.service_order`` (before the program is traced) so that each window appends
    (places, (Q,) queued packets, (Q,) new arrivals) to ``trace``: new as the order defines them,
    queued packets that arrived at or after the end of the window that kept the last order."""
    original = queues.service_order

    def recorded(params, pkts, window_end_ps, kept):
        is_queued = queued(pkts)
        new = is_queued & (pkts.pkt_time_ps >= kept.order_end_ps)
        queue_of_slot = queues.queue_of_class(params.static, pkts.pkt_port, queues.packet_class(params, pkts))
        queue = jnp.where(is_queued, queue_of_slot, params.static.n_queues)
        n_queues = params.static.n_queues
        counts = jnp.stack([
            jnp.zeros(n_queues + 1, jnp.int32).at[queue].add(1)[:n_queues],
            jnp.zeros(n_queues + 1, jnp.int32).at[jnp.where(new, queue, n_queues)].add(1)[:n_queues],
        ])  # fmt: skip
        places = pkts.pkt_valid.shape[0]
        jax.debug.callback(lambda c: trace.append((places, np.asarray(c))), counts)
        return original(params, pkts, window_end_ps, kept)

    queues.service_order = recorded


def rooms(policy: str, spare: int, arrivals: np.ndarray) -> np.ndarray:
    """(Q,) each queue's room after a rebuild: ``spare`` places shared by ``policy``."""
    n_queues = arrivals.shape[0]
    even = np.full(n_queues, spare // n_queues)
    weight = arrivals + 1
    by_arrivals = spare * weight // weight.sum()
    return {"even": even, "by_arrivals": by_arrivals, "mixed": even // 2 + by_arrivals // 2}[policy]


def replay(trace: list, policy: str, fixed_places: int = 0, ring: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(W,) bool the windows of ``trace`` that rebuild the order under ``policy``, and (W,) bool
    those of them where the places changed (the engine moved to another prefix). With
    ``fixed_places``, the order keeps that many places whatever the prefix (the whole pool's).
    With ``ring``, a queue's places form a ring (the places its departures free are reused):
    it overflows when its length passes its places, not when its arrivals pass its room."""
    rebuilds, moved = np.zeros(len(trace), bool), np.zeros(len(trace), bool)
    room, used, places_then, capacity = None, None, None, None
    for w, (places, (queued_count, new_count)) in enumerate(trace):
        places = fixed_places or places
        if room is not None and places == places_then:
            used = used + new_count
            if np.all(queued_count <= capacity) if ring else np.all(used <= room):
                continue  # every arrival fits its queue's places: only they are written
        rebuilds[w], moved[w] = True, room is not None and places != places_then
        room = rooms(policy, max(0, places - int(queued_count.sum())), new_count)
        used, places_then, capacity = np.zeros_like(room), places, queued_count + room
    return rebuilds, moved


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    point_arguments(p)
    p.add_argument("--windows", type=int, default=0, help="windows to run (0: to the end)")
    p.add_argument("--busy", type=int, default=5000, help="queued packets from which a window counts as busy")
    p.add_argument("--out", default="benchmarks/results/order_room.json")
    args = p.parse_args(argv)
    trace = []
    record_service_orders(trace)
    batch = sweep_point(args.k, args.flow_bytes, args.slots_per_host, fifo_pass=args.fifo_pass, nic_pass=args.nic_pass)
    state = batch.state
    while not bool(np.all(np.asarray(state.done))) and (not args.windows or len(trace) < args.windows):
        state = jax.block_until_ready(engine.advance(batch.params, state, 64, "map"))
    busy = np.array([c[0].sum() >= args.busy for _, c in trace])
    rows = []
    print(f"k={args.k}: {len(trace)} windows, {int(busy.sum())} busy (at least {args.busy} packets queued)")
    print(f"{'places':>8s} {'ring':>5s} {'policy':12s} {'rebuilds':>9s} {'of windows':>11s} {'prefix moved':>13s} {'busy rebuilds':>14s} {'of busy':>8s}")
    for fixed, ring in ((0, False), (batch.params.static.n_slots, False), (0, True), (batch.params.static.n_slots, True)):
        for policy in POLICIES:
            rebuilds, moved = replay(trace, policy, fixed, ring)
            row = {
                "places": fixed or "prefix's", "ring": ring, "policy": policy, "windows": len(trace), "rebuilds": int(rebuilds.sum()),
                "prefix_moved": int(moved.sum()), "busy_windows": int(busy.sum()), "busy_rebuilds": int((rebuilds & busy).sum()),
            }  # fmt: skip
            rows.append(row)
            print(
                f"{str(row['places']):>8s} {str(ring):>5s} {policy:12s} {row['rebuilds']:9d} {row['rebuilds'] / max(1, len(trace)):11.3f}"
                f" {row['prefix_moved']:13d} {row['busy_rebuilds']:14d} {row['busy_rebuilds'] / max(1, row['busy_windows']):8.3f}"
            )
    arrivals = np.array([c[1].sum() for _, c in trace])
    queued_total = np.array([c[0].sum() for _, c in trace])
    summary = {
        "args": vars(args), "rows": rows,
        "arrivals_per_window": {"mean": float(arrivals.mean()), "max": int(arrivals.max())},
        "queued_per_window": {"mean": float(queued_total.mean()), "max": int(queued_total.max())},
        "places": sorted({int(pl) for pl, _ in trace}),
    }  # fmt: skip
    print(f"arrivals a window: mean {arrivals.mean():.0f}, max {arrivals.max()}; queued: mean {queued_total.mean():.0f}, max {queued_total.max()}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
