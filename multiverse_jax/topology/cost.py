"""What a fabric costs, counted from its ``Topology``: the cost columns of the results table.

Hosts are node ids ``0 .. n_hosts-1``, switches the others; every cable is two directed
links. The counts are the usual first-order proxies of a fabric's price (switch silicon
and optics scale with ports, cabling with cables):

* ``switches``: switch nodes;
* ``switch_ports``: cable ends on switches (a port per directed link out of a switch);
* ``cables``: host-switch and switch-switch cables;
* ``max_radix``: ports of the biggest switch (what a switch ASIC must offer).

Every run's ``summary.json`` and every sweep's ``results.parquet`` carry them, so a
search can minimise time against cost (``hydra.sweeper.objective=[job_time_us,switch_ports]``).
"""

from __future__ import annotations

import numpy as np

COST_COLUMNS = ("switch_ports", "switches", "cables", "max_radix")


def topology_cost(topology) -> dict[str, int]:
    """The cost columns of a ``multiverse_jax.topology.graph.Topology``."""
    n_hosts = topology.n_hosts
    degree = np.bincount(np.asarray(topology.link_src), minlength=topology.n_nodes)  # links out = ports
    switch_degree = degree[n_hosts:]
    return {
        "switches": int(topology.n_nodes - n_hosts),
        "switch_ports": int(switch_degree.sum()),
        "cables": int(topology.n_links // 2),
        "max_radix": int(switch_degree.max(initial=0)),
    }
