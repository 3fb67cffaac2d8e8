"""Issue 14, item 1 in lockstep: the transmit rounds a window of the htsim sweep's points
needs after the passes, each point alone and as a lockstep batch of all of them would run
them (the most of the batch's running points), with no pass, the FIFO pass, and the FIFO
and NIC passes.

The sweep's 8 points (``sweep_vs_htsim.py``: k=8 permutations of 4 MB flows, seeds 0-7,
htsim's configuration) run as one batch in ``map`` for ``--stride`` windows at a time; at
each stop, every running point's next window is counted with ``step_profile.transmit_rounds``
(the systems before transmit applied, then ``window_start`` with the batch's passes, then
the rounds over every port until none sends). ``rounds_in_lockstep`` gives the mean rounds
a window of a point alone, the mean of the batch's most (what one ``vmap`` batch of the 8
runs: an accelerator's whole batch in lockstep) and the waste 1 - own / lockstep. The
passes themselves are one step each, whatever the point, so "passes a window" adds them.

    python benchmarks/results/stop66/lockstep_rounds.py --stride 100
    python benchmarks/results/stop66/lockstep_rounds.py --variants "FIFO and NIC passes" --waiting 32 --out OUT.json

``--waiting`` and ``--rows`` set the NIC pass's ``WAITING`` and ``ROWS`` (``ops/nic_pass.py``),
``--searched`` the FIFO pass's ``SEARCHED`` (``ops/fifo_pass.py``): constants read when the
program is traced, set for this process: how many residual rounds a larger pass leaves.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

import multiverse_jax  # noqa: F401,E402  (64-bit integers)
from multiverse_jax import engine  # noqa: E402
from multiverse_jax.batch import build_batch  # noqa: E402
from multiverse_jax.config import experiment_from_config  # noqa: E402
from multiverse_jax.peers import htsim  # noqa: E402
from multiverse_jax.ops import fifo_pass, nic_pass  # noqa: E402
from multiverse_jax.peers.scenarios import permutation  # noqa: E402
from machine import machine_info  # noqa: E402
from step_profile import rounds_in_lockstep, rounds_of_each  # noqa: E402

VARIANTS = {"no pass": ("never", "never"), "FIFO pass": ("always", "never"), "FIFO and NIC passes": ("always", "always")}


def sweep_batch(points: int, fifo: str, nic: str, slots_per_host: int):
    net = htsim.HtsimNetwork(k=8)
    folder = Path(tempfile.mkdtemp())
    configs = [htsim.our_config(net, "roce", permutation(seed, net.n_hosts, 4_000_000).write(folder / f"p{seed}.cm")) for seed in range(points)]
    for cfg in configs:
        cfg.setdefault("sim", {}).update(fifo_pass=fifo, nic_pass=nic)
    return build_batch([experiment_from_config(cfg) for cfg in configs], slots_per_host=slots_per_host)


def count(points: int, fifo: str, nic: str, stride: int, slots_per_host: int) -> dict:
    """``fifo``, ``nic``: ``sim.fifo_pass``, ``sim.nic_pass``."""
    batch = sweep_batch(points, fifo, nic, slots_per_host)
    params, state = jax.device_get(batch.params), batch.state
    rounds, running = [], []
    while True:
        state = engine.advance(batch.params, state, stride, "map")
        host = jax.device_get(state)
        alive = ~host.done & (host.error == 0)
        if not alive.any():
            break
        running.append(alive)
        rounds.append(rounds_of_each(params, host, alive))
    rounds, running = np.array(rounds), np.array(running)
    own, lockstep, waste = rounds_in_lockstep(rounds, running, points)
    return {
        "samples": int(running.shape[0]), "rounds_own_mean": own, "rounds_lockstep_mean": lockstep, "lockstep_waste": waste,
        "rounds_own_max": int(rounds[running].max()), "rounds_lockstep_max": int(rounds.max(axis=1).max()),
        "rounds": rounds.tolist(), "running": running.tolist(), "errors": host.error.tolist(),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=8)
    parser.add_argument("--stride", type=int, default=100, help="windows between counted windows")
    parser.add_argument("--slots-per-host", type=int, default=512)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="which of: " + ", ".join(VARIANTS))
    parser.add_argument("--waiting", type=int, default=nic_pass.WAITING, help="the NIC pass's WAITING")
    parser.add_argument("--rows", type=int, default=nic_pass.ROWS, help="the NIC pass's ROWS")
    parser.add_argument("--searched", type=int, default=fifo_pass.SEARCHED, help="the FIFO pass's SEARCHED")
    parser.add_argument("--out", default=str(Path(__file__).with_name("lockstep_rounds.json")))
    args = parser.parse_args()
    nic_pass.WAITING, nic_pass.ROWS, fifo_pass.SEARCHED = args.waiting, args.rows, args.searched
    out = {"args": vars(args), "machine": machine_info(), "variants": {}}
    print(f"{'variant':22s} {'windows':>7s} {'rounds own':>10s} {'lockstep':>8s} {'waste':>6s} {'max own':>7s} {'max lockstep':>12s} {'passes':>6s}")
    for name in args.variants.split(","):
        fifo, nic = VARIANTS[name]
        row = count(args.points, fifo, nic, args.stride, args.slots_per_host)
        passes = (fifo == "always") + (nic == "always")
        out["variants"][name] = dict(row, passes=passes)
        print(
            f"{name:22s} {row['samples']:7d} {row['rounds_own_mean']:10.2f} {row['rounds_lockstep_mean']:8.2f} "
            f"{row['lockstep_waste']:6.0%} {row['rounds_own_max']:7d} {row['rounds_lockstep_max']:12d} {passes:6d}",
            flush=True,
        )
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
