"""Shortest-path ECMP next-hop tables, built once per topology on the host (NumPy).

For every node v and destination host h, the table lists the egress ports (directed
links) of v that lie on a shortest path to h over the links that are up, as a switch's ECMP group would; a flow's
hash picks one of them at each hop.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from multiverse_jax.topology.graph import Topology

UNREACHABLE = np.iinfo(np.int32).max


@dataclasses.dataclass(frozen=True)
class EcmpTable:
    """Equal-cost next hops for every (node, destination host)."""

    next_port: np.ndarray  # (N, H, W) int32 egress ports of node v towards host h, -1 padded
    n_next: np.ndarray  # (N, H) int32 how many of next_port[v, h] are valid (0: unreachable or v == h)
    hops: np.ndarray  # (N, H) int32 shortest hop count from v to h (UNREACHABLE if none)

    @property
    def width(self) -> int:
        return int(self.next_port.shape[2])


def _by_source(topology: Topology) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Links that are up, grouped by source node: (order, sources, starts).

    ``order`` lists the links that are up (``Topology.link_up``) sorted by source (stable,
    so by index within a node): a down link is on no path. ``sources`` are the distinct
    source nodes and ``starts`` where each one's links begin in ``order``.
    """
    up = np.flatnonzero(topology.link_up)
    order = up[np.argsort(topology.link_src[up], kind="stable")]
    src_sorted = topology.link_src[order]
    starts = np.flatnonzero(np.r_[True, src_sorted[1:] != src_sorted[:-1]]) if order.size else order
    return order, src_sorted[starts], starts


def hop_distances(topology: Topology) -> np.ndarray:
    """(H, N) int32: hop count from every node to every host, by breadth-first search.

    Runs all hosts at once: each level moves the frontier one link backwards (from a
    link's destination to its source), O(H * L) work per level. Hosts are never transit
    nodes: a host is on the frontier only as the destination itself.
    """
    n_hosts, n_nodes = topology.n_hosts, topology.n_nodes
    dist = np.full((n_hosts, n_nodes), UNREACHABLE, np.int32)
    dist[np.arange(n_hosts), np.arange(n_hosts)] = 0
    order, sources, starts = _by_source(topology)
    if order.size == 0:
        return dist
    dst_sorted = topology.link_dst[order]
    frontier = dist == 0  # level 0: each host itself, the only time a host is on it
    for level in range(1, n_nodes):
        reached = np.zeros((n_hosts, n_nodes), bool)
        reached[:, sources] = np.logical_or.reduceat(frontier[:, dst_sorted], starts, axis=1)
        new = reached & (dist == UNREACHABLE)
        if not new.any():
            break
        dist[new] = level
        new[:, :n_hosts] = False  # reached hosts (other than the destination) forward nothing
        frontier = new
        if not frontier.any():
            break
    return dist


def ecmp_table(topology: Topology) -> EcmpTable:
    """Build the ECMP next-hop table of ``topology``.

    Ports of one (node, host) entry are listed in increasing link index.
    """
    n_nodes, n_hosts = topology.n_nodes, topology.n_hosts
    dist = hop_distances(topology)  # (H, N)
    hops = np.ascontiguousarray(dist.T)
    order, sources, starts = _by_source(topology)
    if order.size == 0:
        return EcmpTable(np.full((n_nodes, n_hosts, 1), -1, np.int32), np.zeros((n_nodes, n_hosts), np.int32), hops)
    src, dst = topology.link_src[order], topology.link_dst[order]
    d_src = dist[:, src]  # (H, L), links in source order
    d_dst = dist[:, dst]
    # Link l is on a shortest path to h if it brings the packet one hop closer; a link into
    # a host other than h is never on the way.
    on_path = (d_src != UNREACHABLE) & (d_dst == d_src - 1)
    on_path &= (dst[None, :] >= n_hosts) | (dst[None, :] == np.arange(n_hosts)[:, None])
    del d_src, d_dst
    # Slot of each on-path link among its source node's on-path links to the same host.
    count = np.cumsum(on_path, axis=1, dtype=np.int32)  # (H, L)
    before = np.where(starts > 0, count[:, np.maximum(starts - 1, 0)], 0)  # (H, S) counts before each node
    segment = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, src.size]))  # (L,) node of link
    n_next = np.zeros((n_nodes, n_hosts), np.int32)
    ends = np.r_[starts[1:], src.size] - 1
    n_next[sources, :] = (count[:, ends] - before).T
    width = max(int(n_next.max()), 1)
    next_port = np.full((n_nodes, n_hosts, width), -1, np.int32)
    h_idx, l_idx = np.nonzero(on_path)
    slot = count[h_idx, l_idx] - before[h_idx, segment[l_idx]] - 1
    next_port[src[l_idx], h_idx, slot] = order[l_idx]
    return EcmpTable(next_port=next_port, n_next=n_next, hops=hops)
