"""Each flow's path by node names (``report/paths.py``, the ``path`` column of
flows.parquet): the engine's own route, pinned routes as written, and the names of the
topology (generated or a custom file's)."""

import numpy as np

from multiverse_jax.conf.schema import SimConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.report.paths import data_path_ports, flow_path_names
from multiverse_jax.restorer.dataset import data_paths
from multiverse_jax.topology import fattree, load_custom
from multiverse_jax.workload.flows import make_flows
from multiverse_jax.workload.routes import load_routes

TOPO = fattree(4, rate_gbps=100.0, delay_us=1.0)
# Every host to three others: same ToR, same pod, another pod (k=4: 2 hosts per ToR, 4 per pod).
SRC = np.repeat(np.arange(16), 3)
DST = (SRC + np.tile([1, 2, 8], 16) * np.where(SRC % 2, -1, 1)) % 16
FLOWS = make_flows(SRC, DST, [5000] * len(SRC), 0)


def test_path_is_the_engines_route():
    """The host's walk gives the ports the engine's routing gives (``ops.paths.flow_paths``,
    on the device), for per-flow ECMP (a seed other than the default's)."""
    experiment = Experiment(TOPO, FLOWS, sim=SimConfig(seed=3))
    ours, engine = data_path_ports(experiment), data_paths(experiment)
    width = max(ours.shape[1], engine.shape[1])
    pad = [np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1) for a in (ours, engine)]
    np.testing.assert_array_equal(pad[0], pad[1])
    assert len({tuple(row) for row in ours[2::3]}) > 8  # the hash spreads the inter-pod flows


def test_fattree_paths_by_hand():
    """Same ToR: through it; another pod: up ToR, agg j, a core of agg j's group
    (core j + 2m), down agg j of the other pod (htsim's wiring, ``topology/fattree.py``)."""
    paths = flow_path_names(Experiment(TOPO, FLOWS))
    assert paths[0] == "h0->tor0->h1" and paths[3] == "h1->tor0->h0"
    for path in paths[2::3]:  # host h -> h +- 8: pod p -> pod p +- 2
        src, tor, agg, core, agg2, tor2, dst = path.split("->")
        h, d, j, c, j2 = (int(n.lstrip("hagcore")) for n in (src, dst, agg, core, agg2))
        assert (tor, tor2) == (f"tor{h // 2}", f"tor{d // 2}")
        assert j // 2 == h // 4 and j2 // 2 == d // 4  # the aggs of each end's pod
        assert c % 2 == j % 2 == j2 % 2  # one core group


def test_pinned_path_and_spray(tmp_path):
    """A pinned flow's path is its route file's, under any load balancing; under spraying
    a flow that is not pinned has no one path (empty)."""
    flows = make_flows([0, 0, 2], [8, 1, 12], [5000] * 3, 0)
    routes = tmp_path / "routes.csv"
    routes.write_text("id,kind,path\n0,data,h0 tor0 agg0 core2 agg4 tor4 h8\n")
    pinned = load_routes(routes, TOPO, flows)
    ecmp = flow_path_names(Experiment(TOPO, flows, routes=pinned))
    assert ecmp[0] == "h0->tor0->agg0->core2->agg4->tor4->h8" and ecmp[1] == "h0->tor0->h1"
    spray = flow_path_names(Experiment(TOPO, flows, routes=pinned, lb="spray"))
    assert list(spray) == ["h0->tor0->agg0->core2->agg4->tor4->h8", "", ""]


def test_custom_topology_names(tmp_path):
    path = tmp_path / "net.topo"
    path.write_text("host gpu3\nhost gpu7\nhost cpu\nswitch s0\nswitch s1\nlink gpu3 s0\nlink gpu7 s0\nlink s0 s1\nlink cpu s1\n")
    topo = load_custom(path, 100.0, 1.0)
    paths = flow_path_names(Experiment(topo, make_flows([0, 2], [1, 0], [5000, 5000], 0)))
    assert list(paths) == ["gpu3->s0->gpu7", "cpu->s1->s0->gpu3"]
    assert list(topo.port_names()[:4]) == ["gpu3->s0", "s0->gpu3", "gpu7->s0", "s0->gpu7"]
