"""Seeded traffic for side-by-side runs with htsim, written as connection matrices (``.cm``).

Each generator returns a ``Scenario`` (its flows, in ``.cm`` order: flow i gets id i + 1);
``Scenario.cm_text()`` is the ``.cm`` both simulators read (``../shared/formats/htsim-cm.md``).
Two quirks of the htsim snapshot shape them:

* htsim sends a flow as ceil(size / MTU) whole packets, so every size here is a whole
  number of MTU-sized packets (``whole_packets``) and both simulators move the same bytes;
* htsim starts every untriggered flow at 0 whatever its ``start``, so untriggered flows
  start at 0, and a dependency is a trigger: ``send_done_trigger`` (the sender has the
  last ACK), since ``recv_done_trigger`` never fires in htsim.

Every trigger is ``oneshot`` with one waiting flow.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from multiverse_jax.config import derangement

MTU_BYTES = 9000  # htsim's default -mtu (its payload per packet)
GIB = 1 << 30
MIB = 1 << 20


def size_label(size_bytes: int) -> str:
    """``size_bytes`` in the largest unit that divides it: 8 MiB, 200 MB, 100 KB."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (10**9, "GB"), (10**6, "MB"), (10**3, "KB")):
        if size_bytes % unit == 0:
            return f"{size_bytes // unit}{name}"
    return f"{size_bytes}B"


def whole_packets(size_bytes: float, mtu_bytes: int = MTU_BYTES) -> int:
    """``size_bytes`` rounded up to whole packets of ``mtu_bytes`` (htsim sends no partial packet)."""
    return max(1, math.ceil(size_bytes / mtu_bytes)) * mtu_bytes


@dataclasses.dataclass(frozen=True)
class CmFlow:
    """One flow line: it starts at 0, or when ``trigger`` fires; when it completes at the
    sender it activates ``send_done_trigger``."""

    src: int
    dst: int
    size_bytes: int
    trigger: int | None = None
    send_done_trigger: int | None = None


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    n_hosts: int
    flows: tuple[CmFlow, ...]  # flow i has .cm id i + 1

    def cm_text(self) -> str:
        lines = []
        for i, f in enumerate(self.flows):
            when = f"trigger {f.trigger}" if f.trigger is not None else "start 0"
            done = f" send_done_trigger {f.send_done_trigger}" if f.send_done_trigger is not None else ""
            lines.append(f"{f.src}->{f.dst} id {i + 1} {when} size {f.size_bytes}{done}")
        triggers = sorted({f.trigger for f in self.flows if f.trigger is not None})
        header = [f"Nodes {self.n_hosts}", f"Connections {len(self.flows)}"]
        if triggers:
            header.append(f"Triggers {len(triggers)}")
        return "\n".join(header + lines + [f"trigger id {t} oneshot" for t in triggers]) + "\n"

    def write(self, path) -> str:
        with open(path, "w") as out:
            out.write(self.cm_text())
        return str(path)


def combine(name: str, parts: Sequence[Scenario]) -> Scenario:
    """The flows of ``parts`` in one scenario (trigger ids renumbered so they stay apart)."""
    flows, offset = [], 0
    for part in parts:
        shift = {None: None} | {t: t + offset for f in part.flows for t in (f.trigger, f.send_done_trigger) if t}
        for f in part.flows:
            flows.append(dataclasses.replace(f, trigger=shift[f.trigger], send_done_trigger=shift[f.send_done_trigger]))
        offset = max([t for t in shift.values() if t is not None], default=offset)
    return Scenario(name, max(p.n_hosts for p in parts), tuple(flows))


def incast(seed: int, n_hosts: int, senders: int, size_bytes: int) -> Scenario:
    """``senders`` random hosts each send ``size_bytes`` to one random receiver."""
    rng = np.random.default_rng(seed)
    receiver = int(rng.integers(n_hosts))
    others = np.array([h for h in range(n_hosts) if h != receiver])
    chosen = sorted(int(h) for h in rng.choice(others, senders, replace=False))
    flows = tuple(CmFlow(h, receiver, whole_packets(size_bytes)) for h in chosen)
    return Scenario(f"incast{senders}x{size_label(size_bytes)}-s{seed}", n_hosts, flows)


def permutation(seed: int, n_hosts: int, size_bytes: int) -> Scenario:
    """Every host sends ``size_bytes`` to another: a random derangement (``config.derangement``)."""
    dst = derangement(n_hosts, seed)
    flows = tuple(CmFlow(h, int(dst[h]), whole_packets(size_bytes)) for h in range(n_hosts))
    return Scenario(f"perm{size_label(size_bytes)}-s{seed}", n_hosts, flows)


def all_to_all(n_hosts: int, size_bytes: int) -> Scenario:
    """Every host sends ``size_bytes`` to every other host, all at once."""
    flows = tuple(CmFlow(a, b, whole_packets(size_bytes)) for a in range(n_hosts) for b in range(n_hosts) if a != b)
    return Scenario(f"all-to-all{size_label(size_bytes)}", n_hosts, flows)


def ring_allreduce(name: str, n_hosts: int, ring: Sequence[int], total_bytes: int) -> Scenario:
    """A ring all-reduce of ``total_bytes`` over the hosts ``ring`` (in ring order): 2(n-1)
    steps in which rank r sends a chunk of total/n bytes to rank r+1; step s > 0 of rank r
    starts when rank r-1's step s-1 has completed at its sender (the chunk rank r forwards)."""
    n = len(ring)
    chunk = whole_packets(total_bytes / n)
    flows = []
    for step in range(2 * (n - 1)):
        for rank in range(n):
            # trigger (step, rank) starts step `step` of `rank`; rank-1's previous step fires it
            waits = step * n + rank if step > 0 else None
            fires = (step + 1) * n + (rank + 1) % n if step < 2 * (n - 1) - 1 else None
            flows.append(CmFlow(ring[rank], ring[(rank + 1) % n], chunk, trigger=waits, send_done_trigger=fires))
    return Scenario(name, n_hosts, tuple(flows))


def random_ring(seed: int, n_hosts: int, ring_size: int, total_bytes: int) -> Scenario:
    """A ring all-reduce over ``ring_size`` random hosts in random order."""
    ring = [int(h) for h in np.random.default_rng(seed).permutation(n_hosts)[:ring_size]]
    return ring_allreduce(f"ring{ring_size}-{size_label(total_bytes)}-s{seed}", n_hosts, ring, total_bytes)


def uncongested(n_hosts: int, size_bytes: int) -> Scenario:
    """Flows that share no link in the same direction, whatever paths ECMP picks: host 0 to
    the last host (across the core), and in every pod but the first and the last, the first
    host of each ToR to the second. Each then finishes at its closed form in both simulators."""
    pods = round((4 * n_hosts) ** (1 / 3))  # a k-ary fat tree: k pods of k/2 ToRs of k/2 hosts
    tors_per_pod = hosts_per_tor = pods // 2
    flows = [CmFlow(0, n_hosts - 1, whole_packets(size_bytes))]
    for tor in range(tors_per_pod, (pods - 1) * tors_per_pod):
        first = tor * hosts_per_tor
        flows.append(CmFlow(first, first + 1, whole_packets(size_bytes * (1 + len(flows)))))
    return Scenario("uncongested", n_hosts, tuple(flows))


def quick_suite(n_hosts: int = 16) -> list[Scenario]:
    """Small scenarios (seconds each): the uncongested check, random incasts and
    permutations, an all-to-all and a triggered ring all-reduce."""
    return [
        uncongested(n_hosts, 100 * MTU_BYTES),
        incast(0, n_hosts, 8, 1_000_000),
        incast(1, n_hosts, 4, 2_000_000),
        permutation(0, n_hosts, 1_000_000),
        permutation(1, n_hosts, 1_000_000),
        all_to_all(n_hosts, 100_000),
        random_ring(0, n_hosts, 8, 8 * MIB),
    ]


def elephant_suite(n_hosts: int = 16) -> list[Scenario]:
    """The cases users care about: a 1 GiB ring all-reduce over 16 hosts, two concurrent
    256 MiB rings over 8 hosts each, a permutation of 200 MB flows."""
    half = n_hosts // 2
    return [
        ring_allreduce("ring16-1GiB", n_hosts, list(range(n_hosts)), GIB),
        combine(
            "2x-ring8-256MiB",
            [
                ring_allreduce("a", n_hosts, list(range(half)), 256 * MIB),
                ring_allreduce("b", n_hosts, list(range(half, n_hosts)), 256 * MIB),
            ],
        ),
        permutation(0, n_hosts, 200_000_000),
    ]
