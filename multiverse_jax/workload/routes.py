"""Pinned routes: per-flow explicit paths for data and/or ACK packets (CSV).

File format (CSV, header ``id,kind,path``)::

    id,kind,path
    1,data,h0 tor0 agg0 core0 agg6 tor7 h15
    1,ack,h15 tor7 agg6 core0 agg0 tor0 h0

``id`` is the flow's ``flow_id``; ``kind`` is ``data`` (from the flow's src host to its
dst host) or ``ack`` (from dst back to src); ``path`` lists node names separated by
spaces. Blank lines and lines starting with ``#`` are ignored. Flows/kinds without a row
are not pinned (they use ECMP).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.textfile import parse_int, read_lines
from multiverse_jax.topology.graph import Topology
from multiverse_jax.workload.flows import FlowSet

_HEADER = ["id", "kind", "path"]
_KINDS = ("data", "ack")


@dataclasses.dataclass(frozen=True)
class PinnedRoutes:
    """Directed links (ports) of each flow's pinned path; a row of -1 means "use ECMP"."""

    data_ports: np.ndarray  # (F, M) int32 links from src host to dst host, -1 padded
    ack_ports: np.ndarray  # (F, M) int32 links from dst host back to src host, -1 padded

    @staticmethod
    def none(n_flows: int) -> "PinnedRoutes":
        return PinnedRoutes(np.full((n_flows, 1), -1, np.int32), np.full((n_flows, 1), -1, np.int32))

    @property
    def max_links(self) -> int:
        return int(self.data_ports.shape[1])


def load_routes(path, topology: Topology, flows: FlowSet) -> PinnedRoutes:
    """Read a pinned-route CSV for ``flows`` on ``topology``; InputError naming file:line."""
    source = str(os.fspath(path))
    lines = read_lines(source, "route file (workload.routes)")

    index_of_id: dict[int, int] = {}
    for f in range(len(flows)):
        index_of_id.setdefault(int(flows.flow_id[f]), f)
    link_of: dict[tuple[int, int], int] = {}
    for link in np.argsort(~topology.link_up, kind="stable"):  # a cable that is up before a parallel one that is down
        link_of.setdefault((int(topology.link_src[link]), int(topology.link_dst[link])), link)

    paths: dict[tuple[int, str], list[int]] = {}
    seen_at: dict[tuple[int, str], int] = {}
    header_seen = False
    for number, line_text in enumerate(lines, start=1):
        line_text = line_text.strip()
        if not line_text or line_text.startswith("#"):
            continue
        fields = [field.strip() for field in line_text.split(",")]
        if not header_seen:
            if fields != _HEADER:
                raise InputError(
                    f"bad header {line_text!r}: the first line must be 'id,kind,path'", source=source, line=number
                )
            header_seen = True
            continue
        if len(fields) != 3:
            raise InputError(
                f"expected 3 fields 'id,kind,path', got {len(fields)}: {line_text!r}", source=source, line=number
            )
        id_text, kind, path_text = fields
        fid = parse_int(id_text, "id (a flow id)", source, number)
        if fid not in index_of_id:
            raise InputError(f"unknown flow id {fid}: no flow has that id", source=source, line=number)
        if kind not in _KINDS:
            raise InputError(f"bad kind {kind!r}: expected 'data' or 'ack'", source=source, line=number)
        key = (fid, kind)
        if key in seen_at:
            raise InputError(
                f"duplicate route for flow {fid} {kind} (first on line {seen_at[key]})", source=source, line=number
            )
        seen_at[key] = number
        f = index_of_id[fid]
        paths[(f, kind)] = _parse_path(path_text, kind, f, fid, topology, flows, link_of, source, number)

    if not header_seen:
        raise InputError("empty route file: expected a header 'id,kind,path'", source=source, line=1)

    width = max([1] + [len(p) for p in paths.values()])
    data = np.full((len(flows), width), -1, np.int32)
    ack = np.full((len(flows), width), -1, np.int32)
    for (f, kind), links in paths.items():
        (data if kind == "data" else ack)[f, : len(links)] = links
    return PinnedRoutes(data_ports=data, ack_ports=ack)


def _parse_path(
    text: str,
    kind: str,
    f: int,
    fid: int,
    topology: Topology,
    flows: FlowSet,
    link_of: dict[tuple[int, int], int],
    source: str,
    line: int,
) -> list[int]:
    names = text.split()
    if len(names) < 2:
        raise InputError(
            f"flow {fid} {kind}: a path needs at least two nodes (source host ... destination host), got {text!r}",
            source=source,
            line=line,
        )
    nodes = [topology.node_index(name, source=source, line=line) for name in names]
    first, last = (int(flows.src[f]), int(flows.dst[f])) if kind == "data" else (int(flows.dst[f]), int(flows.src[f]))
    role_first, role_last = ("src", "dst") if kind == "data" else ("dst", "src")
    if nodes[0] != first:
        raise InputError(
            f"flow {fid} {kind} path must start at the flow's {role_first} host h{first}, not {names[0]}",
            source=source,
            line=line,
        )
    if nodes[-1] != last:
        raise InputError(
            f"flow {fid} {kind} path must end at the flow's {role_last} host h{last}, not {names[-1]}",
            source=source,
            line=line,
        )
    for name, node in zip(names[1:-1], nodes[1:-1]):
        if node < topology.n_hosts:
            raise InputError(
                f"flow {fid} {kind} path goes through host {name}; hosts do not forward packets",
                source=source,
                line=line,
            )
    visited: set[int] = set()
    for name, node in zip(names, nodes):
        if node in visited:
            raise InputError(f"flow {fid} {kind} path visits {name} twice (a loop)", source=source, line=line)
        visited.add(node)
    links = []
    for a, b, name_a, name_b in zip(nodes, nodes[1:], names, names[1:]):
        link = link_of.get((a, b), -1)
        if link < 0:
            raise InputError(f"flow {fid} {kind} path: no link {name_a} -> {name_b}", source=source, line=line)
        links.append(link)
    return links
