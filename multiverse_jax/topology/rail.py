"""Rail-optimised 2-tier fabric for GPU servers.

Each server has ``gpus_per_server`` GPUs, each with its own NIC; the NIC of GPU g of
server s is host ``h{s * gpus_per_server + g}``. Rail r is GPU r of every server. Each
rail has its own leaf switches: rail r, leaf j is ``rail{r}.leaf{j}`` (node
``n_hosts + r * n_leaf_per_rail + j``) and serves GPU r of servers
``j * servers_per_leaf .. (j + 1) * servers_per_leaf - 1`` (so
``n_leaf_per_rail = servers / servers_per_leaf``). ``spines`` spine switches
``spine{s}`` each link to every leaf of every rail.

Traffic between GPUs of the same rail whose servers are in the same leaf group crosses a
single leaf (2 hops); everything else -- same rail in another leaf group, or a different
rail -- goes up to a spine and down (4 hops). Intra-server NVLink, which real systems
use to move data onto the right rail first, is not part of this network model: GPUs of
one server reach each other only through the fabric.

Nodes: hosts, then leaves (rail-major), then spines. Cables: host-leaf (host order),
then leaf-spine (leaf order, then spine).
"""

from __future__ import annotations

from multiverse_jax.errors import InputError
from multiverse_jax.topology.fattree import check_int, check_link
from multiverse_jax.topology.graph import Topology
from multiverse_jax.topology.leafspine import two_tier


def rail(
    servers: int,
    gpus_per_server: int,
    servers_per_leaf: int,
    spines: int,
    rate_gbps: float,
    delay_us: float,
) -> Topology:
    """The rail-optimised fabric with every link at ``rate_gbps`` and ``delay_us``."""
    servers = check_int("topology.servers", servers)
    gpus = check_int("topology.gpus_per_server", gpus_per_server)
    per_leaf = check_int("topology.servers_per_leaf", servers_per_leaf)
    spines = check_int("topology.spines", spines)
    if servers % per_leaf:
        valid = ", ".join(str(d) for d in range(1, servers + 1) if servers % d == 0)
        raise InputError(
            f"topology.servers_per_leaf must divide topology.servers={servers}, got {per_leaf}; "
            f"valid values are {valid}"
        )
    rate, delay = check_link(rate_gbps, delay_us)
    leaves_per_rail = servers // per_leaf
    # GPU g of server s (host s * gpus + g) hangs off rail g's leaf for its server group.
    host_leaf = [g * leaves_per_rail + s // per_leaf for s in range(servers) for g in range(gpus)]
    return two_tier(
        f"rail(servers={servers}, gpus_per_server={gpus}, servers_per_leaf={per_leaf}, spines={spines})",
        host_leaf,
        [f"rail{r}.leaf{j}" for r in range(gpus) for j in range(leaves_per_rail)],
        spines,
        rate,
        delay,
    )
