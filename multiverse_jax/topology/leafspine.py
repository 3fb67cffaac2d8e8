"""2-tier leaf-spine Clos: every leaf links to every spine.

``hosts_per_leaf`` hosts hang off each leaf (host h on ``leaf{h // hosts_per_leaf}``) and
there are ``hosts_per_leaf / oversubscription`` spines, so a leaf's uplink capacity is
its downlink capacity divided by the oversubscription (all links run at one rate).
Nodes: hosts ``h{i}``, then ``leaf{l}``, then ``spine{s}``. Cables: host-leaf (host
order), then leaf-spine (leaf order, then spine).
"""

from __future__ import annotations

import math
import numbers

from multiverse_jax.errors import InputError
from multiverse_jax.topology.fattree import check_int, check_link
from multiverse_jax.topology.graph import Topology, from_cables


def _n_spines(hosts_per_leaf: int, oversubscription: object) -> int:
    valid = ", ".join(str(d) for d in range(1, hosts_per_leaf + 1) if hosts_per_leaf % d == 0)
    hint = (
        f"hosts_per_leaf / oversubscription must be a positive integer (the spine count); "
        f"with topology.hosts_per_leaf={hosts_per_leaf} valid values are {valid} "
        f"(or {hosts_per_leaf}/n for any integer n >= 1)"
    )
    ok = isinstance(oversubscription, numbers.Real) and not isinstance(oversubscription, bool)
    if not ok or not math.isfinite(oversubscription) or not oversubscription > 0:
        raise InputError(f"topology.oversubscription must be a number > 0, got {oversubscription!r}; {hint}")
    spines = hosts_per_leaf / float(oversubscription)
    n = round(spines)
    if n < 1 or abs(spines - n) > 1e-9 * max(spines, 1.0):
        raise InputError(
            f"topology.oversubscription={oversubscription!r} gives {spines:g} spines; {hint}"
        )
    return int(n)


def leafspine(
    leaves: int, hosts_per_leaf: int, oversubscription: float, rate_gbps: float, delay_us: float
) -> Topology:
    """The leaf-spine fabric with every link at ``rate_gbps`` and ``delay_us``."""
    leaves = check_int("topology.leaves", leaves)
    hosts_per_leaf = check_int("topology.hosts_per_leaf", hosts_per_leaf)
    n_spines = _n_spines(hosts_per_leaf, oversubscription)
    rate, delay = check_link(rate_gbps, delay_us)
    return two_tier(
        f"leafspine(leaves={leaves}, hosts_per_leaf={hosts_per_leaf}, spines={n_spines})",
        [h // hosts_per_leaf for h in range(leaves * hosts_per_leaf)],
        [f"leaf{l}" for l in range(leaves)],
        n_spines,
        rate,
        delay,
    )


def two_tier(
    name: str, host_leaf: list[int], leaf_names: list[str], n_spines: int, rate: float, delay: float
) -> Topology:
    """Hosts ``h{i}`` on leaf ``host_leaf[i]`` (named ``leaf_names[host_leaf[i]]``), every
    leaf linked to every spine.

    Nodes: hosts, then the leaves, then ``spine{s}``; cables: host-leaf (host order),
    then leaf-spine (leaf order, then spine). Shared by leaf-spine and rail fabrics.
    """
    n_hosts, n_leaves = len(host_leaf), len(leaf_names)
    leaf0, spine0 = n_hosts, n_hosts + n_leaves
    names = [f"h{i}" for i in range(n_hosts)] + list(leaf_names) + [f"spine{s}" for s in range(n_spines)]
    cables = [(h, leaf0 + leaf, rate, delay) for h, leaf in enumerate(host_leaf)]
    cables += [(leaf0 + l, spine0 + s, rate, delay) for l in range(n_leaves) for s in range(n_spines)]
    return from_cables(name, names, n_hosts, cables)
