"""Failed and degraded links from the start, and the single-link sweeps over them.

A cable (both directions of a physical link) is named by its two nodes, ``a-b``: node
names (``agg0-core2``, ``tor1-h3``, ``rail0.leaf1-spine0``, a custom file's own names)
or node ids (``20-28``), in either order; a name names every parallel cable between the
two nodes. ``with_link_changes`` marks cables down (``Topology.link_up`` False: the
ports keep their numbers, routing never uses them) or gives them another rate
(``topology.links_down``, ``topology.link_rates_gbps``). ``htsim_failed_cables`` reads
an htsim ``.cm`` file's failure lines as htsim does.

For a sweep, ``tier_cables`` lists the cables between two tiers (``agg-core``,
``tor-agg``, ``leaf-spine``, ``host-tor`` ...; a node's tier is its name without the
number, hosts are ``host``) and ``sweep_override`` turns them into a Hydra ``-m``
override with one point per cable, plus the healthy fabric:
``multiverse-jax-failures --topology fattree --k 4 --tier agg-core``; with ``--at-us T``
each cable fails (or degrades) at time T instead (``topology.link_events``, timed events:
``topology/link_events.py``), and with ``--up-us T2`` comes back at T2.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import numbers
import re

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.topology.graph import Topology
from multiverse_jax.units import BPS_PER_GBPS

DOWN_KEY = "topology.links_down"
RATES_KEY = "topology.link_rates_gbps"
EVENTS_KEY = "topology.link_events"  # timed events: topology/link_events.py


def _node(topology: Topology, token: str) -> int | None:
    """The node ``token`` names (a name, else a decimal id), or None."""
    index = topology._name_to_index.get(token)
    if index is None and token.isdecimal() and int(token) < topology.n_nodes:
        index = int(token)
    return index


def _example(topology: Topology) -> str:
    """A cable of ``topology`` by name, for error messages (a switch-switch one if any)."""
    switch = np.flatnonzero((topology.link_src >= topology.n_hosts) & (topology.link_dst >= topology.n_hosts))
    p = int(switch[0]) if switch.size else 0
    return f"{topology.node_names[topology.link_src[p]]}-{topology.node_names[topology.link_dst[p]]}"


def cable_ports(topology: Topology, cable: object, key: str) -> np.ndarray:
    """(2C,) the directed links (both directions) of the cable(s) ``cable`` names, ``a-b``.

    Node names may hold ``-`` themselves: every split at a ``-`` is tried, and exactly one
    must name two adjacent nodes. An InputError naming ``key`` otherwise.
    """
    text = str(cable)
    found = []
    for split in (m.start() for m in re.finditer("-", text)):
        a, b = _node(topology, text[:split]), _node(topology, text[split + 1 :])
        if a is None or b is None:
            continue
        ports = np.flatnonzero(
            ((topology.link_src == a) & (topology.link_dst == b)) | ((topology.link_src == b) & (topology.link_dst == a))
        )
        if ports.size:
            found.append(ports)
    if len(found) != 1:
        why = "names no cable" if not found else "is ambiguous (node names with '-')"
        raise InputError(
            f"{key}: {text!r} {why}: expected 'a-b', two adjacent nodes of topology {topology.name} "
            f"by name or id, e.g. {_example(topology)}"
        )
    return found[0]


def _rate_bps(key: str, value: object) -> int:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok:
        raise InputError(f"{key} must be a finite number > 0 (a cable that is absent goes in {DOWN_KEY}), got {value!r}")
    return int(round(float(value) * BPS_PER_GBPS))


def with_link_changes(topology: Topology, links_down=(), link_rates_gbps=None) -> Topology:
    """``topology`` with the cables of ``links_down`` down and those of ``link_rates_gbps``
    ({cable: Gb/s}) at that rate, both directions (``topology.links_down``,
    ``topology.link_rates_gbps``). The same Topology when there is nothing to change."""
    if isinstance(links_down, str) or not isinstance(links_down, (list, tuple)):
        raise InputError(f"{DOWN_KEY} must be a list of cables 'a-b', e.g. [{_example(topology)}], got {links_down!r}")
    rates = link_rates_gbps or {}
    if not hasattr(rates, "items"):
        raise InputError(f"{RATES_KEY} must be a map cable: Gb/s, e.g. {{{_example(topology)}: 25}}, got {rates!r}")
    if not links_down and not rates:
        return topology
    link_up, link_rate_bps = topology.link_up.copy(), topology.link_rate_bps.copy()
    for cable in links_down:
        link_up[cable_ports(topology, cable, DOWN_KEY)] = False
    for cable, gbps in rates.items():
        link_rate_bps[cable_ports(topology, cable, f"{RATES_KEY}.{cable}")] = _rate_bps(f"{RATES_KEY}.{cable}", gbps)
    return dataclasses.replace(topology, link_up=link_up, link_rate_bps=link_rate_bps)


def htsim_failed_cables(topology: Topology, k: int, failures, source: str) -> list[str]:
    """The cables of a ``.cm`` file's ``failures`` (``CmFailure``: switch_id, link_id, line)
    in the k-ary fat-tree ``topology``; a cable failed twice is an error, as in htsim."""
    cables: dict[str, int] = {}
    for f in failures:
        cable = htsim_failed_cable(topology, k, f.switch_id, f.link_id, source=source, line=f.line)
        if cable in cables:
            raise InputError(f"failure: {cable} already failed on line {cables[cable]}", source=source, line=f.line)
        cables[cable] = f.line
    return list(cables)


def htsim_failed_cable(topology: Topology, k: int, switch_id: int, link_id: int, *, source: str, line: int) -> str:
    """The cable of a ``.cm`` line ``failure switch_type AGG switch_id i link_id j`` in the
    k-ary fat-tree ``topology``, as ``agg{i}-core{c}`` (InputErrors name the file and line).

    htsim's ``FatTreeTopology::add_failed_link`` removes the cable between agg i and core
    c = (i % aggs_per_pod) * aggs_per_pod + j. Its topology wires agg i's m-th uplink to
    core (i % aggs_per_pod) + aggs_per_pod * m instead (so does ``fattree.py``), so only
    some (i, j) name a cable: htsim asserts that it exists, and here that is an error.
    """
    half = k // 2
    if not switch_id < k * half:
        raise InputError(f"failure: switch_id {switch_id} is not an agg switch (valid: 0..{k * half - 1})", source=source, line=line)
    if not link_id < half:
        raise InputError(
            f"failure: link_id {link_id} is not an uplink of agg{switch_id} (valid: 0..{half - 1})", source=source, line=line
        )
    core = (switch_id % half) * half + link_id
    agg_name, core_name = f"agg{switch_id}", f"core{core}"
    if topology.link_between(topology.node_index(agg_name), topology.node_index(core_name)) < 0:
        cores = ", ".join(f"core{switch_id % half + half * m}" for m in range(half))
        raise InputError(
            f"failure: switch_id {switch_id} link_id {link_id} names the cable {agg_name}-{core_name} "
            f"(htsim: core = (switch_id % {half}) * {half} + link_id), which the fat-tree (k={k}) does not have: "
            f"{agg_name} links to {cores} (htsim stops on an assertion here)",
            source=source,
            line=line,
        )
    return f"{agg_name}-{core_name}"


def node_tier(topology: Topology, node: int) -> str:
    """The tier of ``node``: ``host`` for a host, else its name without the trailing number
    (and without a rail prefix): ``agg``, ``core``, ``leaf``, ``spine``, ``tor``."""
    if node < topology.n_hosts:
        return "host"
    name = topology.node_names[node].rsplit(".", 1)[-1]
    return re.sub(r"\d+$", "", name) or name


def tier_cables(topology: Topology, tier: str) -> list[str]:
    """The cables between the two tiers of ``tier`` (``agg-core``, either order), ``a-b``,
    in cable order; an InputError listing the topology's tier pairs if there are none."""
    tiers = [node_tier(topology, n) for n in range(topology.n_nodes)]
    names = topology.node_names
    pairs: dict[frozenset, list[str]] = {}
    for p in range(0, topology.n_links, 2):  # a cable's first direction (2u)
        a, b = int(topology.link_src[p]), int(topology.link_dst[p])
        pairs.setdefault(frozenset((tiers[a], tiers[b])), []).append(f"{names[a]}-{names[b]}")
    wanted = frozenset(tier.split("-", 1))
    if wanted not in pairs:
        valid = ", ".join(sorted("-".join(sorted(pair, key=tiers.index)) for pair in pairs))
        raise InputError(f"--tier {tier!r}: topology {topology.name} has no such cables (valid: {valid})")
    return pairs[wanted]


def sweep_override(
    topology: Topology, tier: str, rate_gbps: float | None = None, at_us: float | None = None, up_us: float | None = None
) -> str:
    """The Hydra ``-m`` override of a sweep over every single cable of ``tier`` failed (or
    at ``rate_gbps``), first point the healthy fabric. From the start, or with ``at_us``
    as a timed event (``topology.link_events``) at that time, and back up at ``up_us``."""
    cables = tier_cables(topology, tier)
    if rate_gbps is not None:
        _rate_bps("--rate-gbps", rate_gbps)
    if at_us is not None:
        return _timed_override(cables, rate_gbps, at_us, up_us)
    if up_us is not None:
        raise InputError("--up-us needs --at-us: a cable comes back up only after a timed event")
    if rate_gbps is None:
        return f"{DOWN_KEY}=" + ",".join(["[]"] + [f"[{c}]" for c in cables])
    return f"{RATES_KEY}=" + ",".join(["{}"] + [f"{{{c}:{rate_gbps:g}}}" for c in cables])


def _timed_override(cables, rate_gbps, at_us: float, up_us: float | None) -> str:
    """``topology.link_events=[],[{at_us: T, link: c, action: down}, ...],...``."""
    if not (math.isfinite(at_us) and at_us >= 0):
        raise InputError(f"--at-us must be a finite time >= 0, got {at_us}")
    if up_us is not None and not (math.isfinite(up_us) and up_us > at_us):
        raise InputError(f"--up-us must be later than --at-us ({at_us:g}), got {up_us}")
    action = "action:down" if rate_gbps is None else f"action:rate,gbps:{rate_gbps:g}"

    def events(cable):
        first = f"{{at_us:{at_us:g},link:{cable},{action}}}"
        return f"[{first},{{at_us:{up_us:g},link:{cable},action:up}}]" if up_us is not None else f"[{first}]"

    return f"{EVENTS_KEY}=" + ",".join(["[]"] + [events(c) for c in cables])


def main(argv: list[str] | None = None) -> None:
    """``multiverse-jax-failures``: print the sweep override of every single-cable failure."""
    from multiverse_jax.topology import KINDS, build_topology

    parser = argparse.ArgumentParser(
        prog="multiverse-jax-failures",
        description="Print a Hydra -m override: the healthy fabric, then every cable of a tier pair failed "
        "(or degraded with --rate-gbps), from the start or at --at-us. Give the topology as the run's topology.* keys.",
    )
    parser.add_argument("--topology", choices=KINDS, default="fattree", help="topology.kind")
    parser.add_argument("--tier", required=True, help="two tiers joined by '-': agg-core, tor-agg, host-tor, leaf-spine ...")
    parser.add_argument("--rate-gbps", type=float, default=None, help="degrade each cable to this rate instead of failing it")
    parser.add_argument("--at-us", type=float, default=None, help="fail (or degrade) each cable at this time, µs (default: from the start)")
    parser.add_argument("--up-us", type=float, default=None, help="with --at-us: bring the cable back up at this time, µs")
    for name, kind in (("k", int), ("leaves", int), ("hosts-per-leaf", int), ("oversubscription", float)):
        parser.add_argument(f"--{name}", type=kind, default=argparse.SUPPRESS, help=f"topology.{name.replace('-', '_')}")
    for name in ("servers", "gpus-per-server", "servers-per-leaf", "spines"):
        parser.add_argument(f"--{name}", type=int, default=argparse.SUPPRESS, help=f"topology.{name.replace('-', '_')}")
    parser.add_argument("--path", default=argparse.SUPPRESS, help="topology.path (custom)")
    args = vars(parser.parse_args(argv))
    kind, tier, rate = args.pop("topology"), args.pop("tier"), args.pop("rate_gbps")
    at_us, up_us = args.pop("at_us"), args.pop("up_us")
    try:
        print(sweep_override(build_topology(kind, **args), tier, rate, at_us, up_us))
    except InputError as exc:
        parser.exit(2, f"multiverse-jax-failures: {exc}\n")


if __name__ == "__main__":
    main()
