"""3-tier k-ary fat-tree (Al-Fares et al.), wired the way htsim's FatTreeTopology wires it.

For an even k: k pods, each with k/2 ToR and k/2 aggregation switches, and (k/2)^2 core
switches; k^3/4 hosts, k/2 per ToR.

Numbering (nodes in this order: hosts, ToRs, aggs, cores):

* host ``h{h}`` sits on ToR ``tor{h // (k/2)}``; ToR ``tor{t}`` is in pod ``t // (k/2)``;
* aggregation switch j (0 <= j < k/2) of pod p is ``agg{p*k/2 + j}`` and links to every
  ToR of its pod;
* it links to the k/2 cores ``core{j + m*k/2}``, m = 0 .. k/2-1 — the wiring of
  csg-htsim's FatTreeTopology (core = podpos + aggs_per_pod * l) — so a route read off
  htsim (ToR, agg, core indices) names the same switches here.

Cable order: host-ToR cables (host order), then ToR-agg (ToR order, then agg), then
agg-core (agg order, then core).
"""

from __future__ import annotations

import math
import numbers

from multiverse_jax.errors import InputError
from multiverse_jax.topology.graph import Topology, from_cables


def check_int(key: str, value: object, *, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; an InputError naming the config ``key`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InputError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_link(rate_gbps: object, delay_us: object) -> tuple[float, float]:
    """The default link rate and delay, checked to be finite numbers > 0."""
    checked = []
    for key, value in (("link.rate_gbps", rate_gbps), ("link.delay_us", delay_us)):
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not value > 0:
            raise InputError(f"{key} must be a finite number > 0, got {value!r}")
        checked.append(float(value))
    return checked[0], checked[1]


def fattree(k: int, rate_gbps: float, delay_us: float) -> Topology:
    """The k-ary fat-tree with every link at ``rate_gbps`` and ``delay_us``."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 2 or k % 2:
        raise InputError(f"topology.k must be an even integer >= 2, got {k!r}")
    k = int(k)
    rate, delay = check_link(rate_gbps, delay_us)
    half = k // 2
    n_hosts = k**3 // 4
    n_tor = n_agg = k * half
    n_core = half * half
    tor0 = n_hosts
    agg0 = tor0 + n_tor
    core0 = agg0 + n_agg
    names = (
        [f"h{i}" for i in range(n_hosts)]
        + [f"tor{t}" for t in range(n_tor)]
        + [f"agg{a}" for a in range(n_agg)]
        + [f"core{c}" for c in range(n_core)]
    )
    cables = [(h, tor0 + h // half, rate, delay) for h in range(n_hosts)]
    for t in range(n_tor):
        pod = t // half
        cables += [(tor0 + t, agg0 + pod * half + j, rate, delay) for j in range(half)]
    for a in range(n_agg):
        j = a % half
        cables += [(agg0 + a, core0 + j + m * half, rate, delay) for m in range(half)]
    return from_cables(f"fattree(k={k})", names, n_hosts, cables)
