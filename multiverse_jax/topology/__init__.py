"""Network topologies (host-side NumPy descriptions) and their ECMP routing tables."""

from __future__ import annotations

from pathlib import Path

from multiverse_jax.errors import InputError
from multiverse_jax.topology.custom import load_custom
from multiverse_jax.topology.fattree import fattree
from multiverse_jax.topology.graph import Topology
from multiverse_jax.topology.leafspine import leafspine
from multiverse_jax.topology.rail import rail
from multiverse_jax.topology.routing import UNREACHABLE, EcmpTable, ecmp_table, hop_distances

KINDS = ("fattree", "leafspine", "rail", "custom")

__all__ = [
    "KINDS",
    "UNREACHABLE",
    "EcmpTable",
    "Topology",
    "build_topology",
    "ecmp_table",
    "fattree",
    "hop_distances",
    "leafspine",
    "load_custom",
    "rail",
]


def build_topology(
    kind: str,
    *,
    k: int = 4,
    leaves: int = 4,
    hosts_per_leaf: int = 4,
    oversubscription: float = 1,
    servers: int = 4,
    gpus_per_server: int = 4,
    servers_per_leaf: int = 2,
    spines: int = 2,
    path: str | Path | None = None,
    rate_gbps: float = 100.0,
    delay_us: float = 1.0,
) -> Topology:
    """Build the topology of ``kind`` (the ``topology.kind`` config key).

    Only the arguments of that kind are used: ``fattree`` takes ``k``; ``leafspine`` takes
    ``leaves``, ``hosts_per_leaf``, ``oversubscription``; ``rail`` takes ``servers``,
    ``gpus_per_server``, ``servers_per_leaf``, ``spines``; ``custom`` takes ``path``.
    ``rate_gbps`` and ``delay_us`` apply to every link (custom: to links that give none).
    """
    if kind == "fattree":
        return fattree(k, rate_gbps, delay_us)
    if kind == "leafspine":
        return leafspine(leaves, hosts_per_leaf, oversubscription, rate_gbps, delay_us)
    if kind == "rail":
        return rail(servers, gpus_per_server, servers_per_leaf, spines, rate_gbps, delay_us)
    if kind == "custom":
        if path is None or str(path) == "":
            raise InputError("topology.path must name a topology file when topology.kind is 'custom'")
        return load_custom(path, rate_gbps, delay_us)
    raise InputError(f"topology.kind must be one of {', '.join(KINDS)}, got {kind!r}")
