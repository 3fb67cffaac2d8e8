"""The host-side description of a network: nodes and directed links (NumPy, built once).

Node numbering: hosts first (node h < n_hosts is host h), then switches. Every node has
a name by its role, which outputs show instead of its index: the generated topologies
name hosts ``h{h}`` and switches by tier (``tor1``, ``agg2``, ``core0``; ``leaf0``,
``spine1``; ``rail2.leaf0``), a custom file its own names. Every physical cable becomes
two directed links, 2u (a -> b) and 2u + 1 (b -> a); a directed link is also the egress
port of its source node that feeds it, so "port p" and "link p" are the same index
throughout the simulator, named ``src->dst`` by its nodes (``tor1->agg2``).

A cable can be down (failed from the start: ``topology/failures.py``): its two directed
links stay in the arrays, so port numbers do not change, but ``link_up`` is False and
routing never uses them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.units import BPS_PER_GBPS, PS_PER_US


@dataclasses.dataclass(frozen=True)
class Topology:
    """A network: named nodes and directed links with per-link rate and delay."""

    name: str
    node_names: tuple[str, ...]  # (N,) readable names; hosts first
    n_hosts: int
    link_src: np.ndarray  # (L,) int32 source node of directed link l
    link_dst: np.ndarray  # (L,) int32 destination node of directed link l
    link_rate_bps: np.ndarray  # (L,) int64 line rate in bits per second
    link_delay_ps: np.ndarray  # (L,) int64 propagation delay in picoseconds
    link_up: np.ndarray  # (L,) bool the link carries traffic (False: its cable is down, never routed to)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_links(self) -> int:
        return int(self.link_src.shape[0])

    def node_index(self, name: str, *, source: str | None = None, line: int | None = None) -> int:
        """Index of the node called ``name``; an InputError naming it if there is none."""
        index = self._name_to_index.get(name)
        if index is None:
            raise InputError(
                f"unknown node {name!r} (topology {self.name!r} has hosts h0..h{self.n_hosts - 1} "
                f"and switches such as {self.node_names[self.n_hosts] if self.n_nodes > self.n_hosts else 'none'})",
                source=source,
                line=line,
            )
        return index

    @property
    def _name_to_index(self) -> dict[str, int]:
        cache = self.__dict__.get("_names")
        if cache is None:
            cache = {n: i for i, n in enumerate(self.node_names)}
            object.__setattr__(self, "_names", cache)
        return cache

    def port_names(self) -> np.ndarray:
        """(L,) str each egress port (directed link) by its nodes' names, ``src->dst``."""
        names = np.asarray(self.node_names, dtype=object)
        return names[self.link_src] + "->" + names[self.link_dst]

    def links_down(self) -> list[str]:
        """Each down cable once, as ``a-b`` by its nodes' names (the ``topology.links_down`` form)."""
        names = self.node_names
        down = np.flatnonzero(~self.link_up[0::2]) * 2  # a cable's first direction (2u)
        return [f"{names[self.link_src[p]]}-{names[self.link_dst[p]]}" for p in down]

    def host_port(self) -> np.ndarray:
        """(n_hosts,) int32: the NIC egress port (directed link) of each host."""
        ports = np.full(self.n_hosts, -1, np.int32)
        for link in range(self.n_links):
            src = int(self.link_src[link])
            if src < self.n_hosts:
                ports[src] = link
        return ports

    def link_between(self, a: int, b: int) -> int:
        """The directed link a -> b, or -1 if the two nodes are not adjacent."""
        hits = np.nonzero((self.link_src == a) & (self.link_dst == b))[0]
        return int(hits[0]) if hits.size else -1


def from_cables(
    name: str,
    node_names: list[str],
    n_hosts: int,
    cables: list[tuple[int, int, float, float]],
    *,
    source: str | None = None,
    cable_lines: list[int] | None = None,
) -> Topology:
    """Build a Topology from undirected cables ``(a, b, rate_gbps, delay_us)``.

    Checks what every builder needs: positive rates and delays, no self-loops, and exactly
    one link per host (its NIC). ``cable_lines`` (the file line of each cable) makes errors
    name the line.
    """
    link_src, link_dst, rate, delay = [], [], [], []
    degree = np.zeros(len(node_names), np.int64)
    for i, (a, b, rate_gbps, delay_us) in enumerate(cables):
        line = cable_lines[i] if cable_lines else None
        what = f"link {node_names[a]} -- {node_names[b]}"
        if a == b:
            raise InputError(f"{what}: a link must join two different nodes", source=source, line=line)
        if not rate_gbps > 0:
            raise InputError(f"{what}: rate_gbps must be > 0, got {rate_gbps}", source=source, line=line)
        if not delay_us > 0:
            raise InputError(f"{what}: delay_us must be > 0, got {delay_us}", source=source, line=line)
        rate_bps = int(round(rate_gbps * BPS_PER_GBPS))
        delay_ps = int(round(delay_us * PS_PER_US))
        for s, d in ((a, b), (b, a)):
            link_src.append(s)
            link_dst.append(d)
            rate.append(rate_bps)
            delay.append(delay_ps)
        degree[a] += 1
        degree[b] += 1
    for h in range(n_hosts):
        if degree[h] != 1:
            raise InputError(
                f"host {node_names[h]} has {degree[h]} links; every host needs exactly one (its NIC)",
                source=source,
            )
    return Topology(
        name=name,
        node_names=tuple(node_names),
        n_hosts=n_hosts,
        link_src=np.asarray(link_src, np.int32),
        link_dst=np.asarray(link_dst, np.int32),
        link_rate_bps=np.asarray(rate, np.int64),
        link_delay_ps=np.asarray(delay, np.int64),
        link_up=np.ones(len(link_src), bool),
    )
