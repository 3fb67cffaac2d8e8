"""Cost of one window, system by system, and the lockstep cost of transmit rounds.

Runs a k-ary fat-tree permutation batch for a while (so queues and PFC are busy), then
times each system of the step, in the engine's order (``engine.SYSTEMS``: ``forward``,
``receive``, ``cc``, ``ack``, ``complete``, ``schedule``, ``transmit`` (the serve rounds),
``pfc``, ``sample``, ``clock``) and the whole step, each jitted on its own, vmapped over the
batch and in a ``lax.map`` over it (the two batching modes). Then it counts, over the next windows, the transmit rounds each
experiment needs and the rounds the batch runs (the largest of the batch, as a vmapped
while-loop runs in lockstep). Prints a table and writes JSON.

    python benchmarks/step_profile.py --k 4 --experiments 16
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import multiverse_jax
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.conf.schema import SimConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.config import derangement
from multiverse_jax.systems.transmit import serve_round, window_start
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows


def _with_window(system):
    return lambda p, s: system(p, s, s.time_ps + p.window_ps)


SYSTEMS = {name: _with_window(system) for name, system in engine.SYSTEMS} | {"whole step": engine.step}


MOST_ROUNDS = 64  # rounds ``transmit_rounds`` counts the sending ports of (a window of the htsim sweep runs at most 12)


@jax.jit
@jax.vmap
def transmit_rounds(params, state):
    """Rounds transmit needs for this window of one experiment (the systems before it
    applied first); (P,) the packets each port sends in them (a round starts a run of
    several at some ports, ``ops/runs.py``); (MOST_ROUNDS, 3) in each round the ports that
    start a packet (its ``Front``'s ``sends``), of them the NICs' ports, and the NICs that
    create a new data packet (``creates``: a NIC creates at most one a round); and whether
    some port started one after a round in which it started none (its queues, its NIC's
    offers and PFC's pauses do not change while it waits: it should not)."""
    end = state.time_ps + params.window_ps
    state = engine.systems_before("transmit", params, state, end)
    serving, order, free, upcoming = window_start(params, state, end)  # as systems/transmit.transmit starts

    class_queues = params.static.class_queues  # a port's class queues (``Static.n_queues``)
    is_nic = params.ports.port_host >= 0  # (P,) the port is a host's NIC

    def body(carry):
        serving, _, rounds, sends, per_round, idle_before, came_back = carry
        sending = serving.front.sends
        counts = jnp.stack([jnp.sum(sending), jnp.sum(sending & is_nic), jnp.sum(serving.front.creates)]).astype(jnp.int32)
        per_round = per_round.at[rounds].set(counts, mode="drop")
        came_back = came_back | jnp.any(sending & idle_before)
        new = serve_round(params, serving, end, order, free, upcoming)
        # A port sends the packets it took from its queues (a run: several) and those its NIC created.
        taken = (new.head - serving.head).reshape(-1, class_queues).sum(axis=1, dtype=jnp.int32)
        created = jnp.zeros_like(sends).at[params.nics.nic_port].add(new.used - serving.used)
        return new, jnp.any(new.front.sends), rounds + 1, sends + taken + created, per_round, idle_before | ~sending, came_back

    n_ports = params.static.n_ports
    init = (
        serving, jnp.any(serving.front.sends), 0, jnp.zeros(n_ports, jnp.int32), jnp.zeros((MOST_ROUNDS, 3), jnp.int32),
        jnp.zeros(n_ports, bool), jnp.bool_(False),
    )  # fmt: skip
    rounds, sends, per_round, _, came_back = jax.lax.while_loop(lambda c: c[1], body, init)[2:]
    return rounds, sends, per_round, came_back


def one_experiment(tree, e: int):
    """Experiment ``e`` of a batch's ``tree`` (params or state, host copies) as a batch of one."""
    return jax.tree.map(lambda x: x[e : e + 1], tree)


def rounds_of_each(params, state, running) -> list[int]:
    """The transmit rounds the next window of each experiment of a batch needs alone
    (``transmit_rounds`` of it as a batch of one: one compiled E=1 program), from host copies
    ``params`` and ``state``; 0 where ``running`` (E,) bool is False (done or failed: no window)."""
    return [int(transmit_rounds(one_experiment(params, e), one_experiment(state, e))[0][0]) if running[e] else 0 for e in range(running.shape[0])]


def rounds_in_lockstep(rounds: np.ndarray, running: np.ndarray, lanes: int) -> tuple[float, float, float]:
    """From (windows, E) transmit rounds and running flags: the mean rounds per window of
    a running experiment alone, the mean of each lockstep group (the most of ``lanes``
    consecutive experiments, where one runs; 1: no lockstep), and the waste 1 - own / lockstep
    (0 where no lockstep group ran a round: with the passes, windows may need none)."""
    own = float(rounds[running].mean())
    groups = [r[g : g + lanes].max() for r, on in zip(rounds, running) for g in range(0, r.size, lanes) if on[g : g + lanes].any()]
    lockstep = float(np.mean(groups))
    return own, lockstep, 1.0 - own / lockstep if lockstep else 0.0


def permutations(k: int, n_experiments: int, flow_bytes: int) -> list[Experiment]:
    """Busy traffic: on a k-ary fat-tree, experiment e is a permutation of ``flow_bytes``
    flows drawn with seed e (no time series)."""
    topology = fattree(k, 100.0, 1.0)
    n = topology.n_hosts
    return [
        Experiment(topology, make_flows(np.arange(n), derangement(n, e), flow_bytes, 0), sim=SimConfig(seed=e, sample_interval_us=0))
        for e in range(n_experiments)
    ]


def time_call(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--experiments", type=int, default=16)
    parser.add_argument("--flow-bytes", type=int, default=1_000_000)
    parser.add_argument("--slots-per-host", type=int, default=256)
    parser.add_argument("--warm-windows", type=int, default=40, help="windows run before timing")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--round-windows", type=int, default=100, help="windows over which rounds are counted")
    parser.add_argument("--out", default="benchmarks/results/step_profile.json")
    args = parser.parse_args()

    experiments = permutations(args.k, args.experiments, args.flow_bytes)
    batch = build_batch(experiments, slots_per_host=args.slots_per_host)
    state = engine.advance(batch.params, batch.state, args.warm_windows)
    if np.any(np.asarray(state.error)):
        raise SystemExit(f"error words {np.asarray(state.error)}: raise --slots-per-host")
    queued = int(np.asarray(state.packets.pkt_valid & ~state.packets.pkt_in_flight).sum())
    in_flight = int(np.asarray(state.packets.pkt_valid & state.packets.pkt_in_flight).sum())

    rows = []
    for name, system in SYSTEMS.items():
        vmapped = jax.jit(jax.vmap(system))
        mapped = jax.jit(lambda p, s, system=system: jax.lax.map(lambda one: system(*one), (p, s)))
        rows.append(
            {
                "system": name,
                "ms_per_window": time_call(vmapped, batch.params, state, repeats=args.repeats) * 1e3,
                "map_ms_per_window": time_call(mapped, batch.params, state, repeats=args.repeats) * 1e3,
            }
        )
    total = rows[-1]["ms_per_window"]
    print(f"k={args.k} E={args.experiments} slots/host={args.slots_per_host}: {queued} packets queued, {in_flight} in flight")
    print("ms per window of the batch, each system jitted on its own: vmap (share of the step), map, vmap/map")
    print(f"{'system':12s} {'vmap ms':>9s} {'share':>7s} {'map ms':>9s} {'vmap/map':>9s}")
    for row in rows:
        vmap_ms, map_ms = row["ms_per_window"], row["map_ms_per_window"]
        print(f"{row['system']:12s} {vmap_ms:9.3f} {vmap_ms / total:7.1%} {map_ms:9.3f} {vmap_ms / map_ms:9.2f}")
    rounds, busy = [], state
    for _ in range(args.round_windows):
        rounds.append(np.asarray(transmit_rounds(batch.params, busy)[0]))
        busy = engine.advance(batch.params, busy, 1)
    rounds = np.stack(rounds)  # (windows, E): the whole batch in lockstep, as an accelerator runs it
    own, lockstep, waste = rounds_in_lockstep(rounds, np.ones_like(rounds, bool), rounds.shape[1])
    print(
        f"transmit rounds per window: {own:.2f} per experiment on its own, {lockstep:.2f} for the batch "
        f"(lockstep: {lockstep / own:.2f}x; {waste:.0%} of the batch's rounds are waste for the experiment that waits)"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "jax": jax.__version__,
                "backend": jax.default_backend(),
                "device": str(jax.devices()[0].device_kind),
                "machine": platform.machine(),
                "multiverse_jax": multiverse_jax.__version__,
                "queued_packets": queued,
                "in_flight_packets": in_flight,
                "rows": rows,
                "rounds_per_window_own": own,
                "rounds_per_window_batch": lockstep,
                "lockstep_waste": waste,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
