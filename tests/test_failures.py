"""Links failed or degraded from the start (``topology/failures.py``): ECMP routes around a
down cable and leaves other flows bit for bit alone, a batch of single-link failures equals
each run alone, a degraded link meets the closed form, htsim's ``.cm`` failure lines, the
errors, and the sweep helper."""

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module

from conftest import chain, run_small, store_and_forward_ps, wire_sizes
from multiverse_jax.config import experiment_from_config
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.report.paths import flow_path_names
from multiverse_jax.topology import fattree, leafspine, rail
from multiverse_jax.topology.failures import main, sweep_override, tier_cables, with_link_changes
from multiverse_jax.workload.flows import make_flows
from multiverse_jax.workload.routes import load_routes

PS = 1_000_000  # ps per µs
K4 = fattree(4, 100.0, 1.0)
# Pods 0 <-> 2 (flows 0, 1, 6), pods 1 <-> 3 (2, 3), inside a ToR (4, 5). With the default
# seed, flows 1 and 6 cross agg0-core0 (core0 -> agg0 and agg0 -> core0).
FLOWS = make_flows([0, 10, 4, 12, 6, 14, 1], [9, 3, 13, 5, 7, 15, 8], [30_000] * 7, [0, 0, 2 * PS, 0, PS, 0, 0])


def _config(**topology):
    return {"topology": {"kind": "fattree", "k": 4, **topology}, "workload": {"kind": "permutation", "flow_bytes": 10_000}}


def test_agg_core_failure_reroutes_and_leaves_others_alone():
    down = with_link_changes(K4, ["agg0-core0"])
    assert down.links_down() == ["agg0-core0"]
    assert (~down.link_up).sum() == 2 and down.port_names()[~down.link_up].tolist() == ["agg0->core0", "core0->agg0"]
    healthy_paths = flow_path_names(Experiment(K4, FLOWS))
    paths = flow_path_names(Experiment(down, FLOWS))
    crossed = [f for f, p in enumerate(healthy_paths) if "agg0->core0" in p or "core0->agg0" in p]
    assert crossed == [1, 6]
    # By hand: agg0's one uplink left is core2, whose pod-2 agg is agg4 (core j + 2m wiring).
    assert healthy_paths[6] == "h1->tor0->agg0->core0->agg4->tor4->h8"
    assert paths[6] == "h1->tor0->agg0->core2->agg4->tor4->h8"
    assert paths[1] == "h10->tor5->agg4->core2->agg0->tor1->h3"
    assert all("core0->agg0" not in p and "agg0->core0" not in p for p in paths)
    healthy, failed = (run_small([Experiment(topo, FLOWS)])[0] for topo in (K4, down))
    assert healthy.ok and failed.ok
    same = [0, 2, 3, 4, 5]  # flows whose data and ACK paths share no link with flows 1 and 6
    for column in ("rx_finish_ps", "finish_ps", "fct_ps"):
        np.testing.assert_array_equal(failed.flows[column][same], healthy.flows[column][same])
    assert (failed.flows["rx_bytes"] == 30_000).all()


def test_single_agg_core_failures_batched_equal_each_alone():
    """The healthy k=4 fat-tree and its 16 single agg-core failures: one program, and each
    experiment's FCTs (ps) equal its run alone."""
    cables = tier_cables(K4, "agg-core")
    assert len(cables) == 16
    flows = make_flows(np.arange(16), (np.arange(16) + 5) % 16, 20_000, 0)
    exps = [Experiment(with_link_changes(K4, down), flows) for down in [[]] + [[c] for c in cables]]
    together = run_small(exps)
    fcts = []
    for exp, batched in zip(exps, together):
        alone = run_small([exp], batch_size=len(exps))[0]
        assert batched.ok and alone.ok
        np.testing.assert_array_equal(batched.flows["fct_ps"], alone.flows["fct_ps"])
        np.testing.assert_array_equal(batched.flows["rx_finish_ps"], alone.flows["rx_finish_ps"])
        fcts.append(tuple(batched.flows["fct_ps"]))
    assert len(set(fcts)) > 1  # some failure changes some flow's time


def test_quarter_rate_link_closed_form():
    """A chain with its middle cable at a quarter of 100 Gb/s, both directions: the
    store-and-forward closed form at rates (100, 25, 100)."""
    topo = with_link_changes(chain([100, 100, 100], [1.0, 1.0, 1.0]), link_rates_gbps={"s0-s1": 25})
    size = 3 * 4096 + 1
    result = run_small([Experiment(topo, make_flows([0], [1], [size], [PS]))])[0]
    rx, ack = store_and_forward_ps(wire_sizes(size), [100 * 10**9, 25 * 10**9, 100 * 10**9], [PS] * 3, start_ps=PS)
    assert result.flows["rx_finish_ps"][0] == rx
    assert result.flows["finish_ps"][0] == ack


def test_config_keys():
    """As Hydra overrides (the command line's syntax), node names and ids."""
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        cfg = compose("config", overrides=["topology.links_down=[agg0-core0,33-29]", "topology.link_rates_gbps={tor0-agg1:25}"])
    exp = experiment_from_config(cfg)
    topo = exp.topology
    assert topo.links_down() == ["agg0-core0", "agg5-core1"]  # ids: core1 is node 33, agg5 node 29
    rates = dict(zip(topo.port_names(), topo.link_rate_bps))
    assert rates["tor0->agg1"] == rates["agg1->tor0"] == 25 * 10**9 and rates["tor0->agg0"] == 100 * 10**9
    assert not exp.routing.next_port[topo.node_index("agg0")].tolist().count(topo.link_between(24, 32))


@pytest.mark.parametrize(
    "topology,fragment",
    [
        ({"links_down": ["agg0-core1"]}, "topology.links_down: 'agg0-core1' names no cable"),
        ({"links_down": ["agg0-spine0"]}, "e.g. tor0-agg0"),
        ({"link_rates_gbps": {"agg0-core0": 0}}, "topology.link_rates_gbps.agg0-core0 must be a finite number > 0"),
        ({"link_rates_gbps": {"agg0-core9": 10}}, "topology.link_rates_gbps.agg0-core9: 'agg0-core9' names no cable"),
    ],
)
def test_config_errors(topology, fragment):
    with pytest.raises(InputError, match=fragment):
        experiment_from_config(_config(**topology))


def test_unreachable_destination_names_links_and_flow():
    pod0_up = ["agg0-core0", "agg0-core2", "agg1-core1", "agg1-core3"]
    with pytest.raises(InputError) as info:
        experiment_from_config(_config(links_down=pod0_up))
    message = str(info.value)
    assert "flow 0 (h0->h" in message and "is unreachable from h0" in message
    assert "links down (agg0-core0, agg0-core2, agg1-core1, agg1-core3)" in message


def test_pinned_route_over_down_link(tmp_path):
    routes = tmp_path / "routes.csv"
    routes.write_text("id,kind,path\n1,data,h10 tor5 agg4 core0 agg0 tor1 h3\n")
    down = with_link_changes(K4, ["agg0-core0"])
    with pytest.raises(InputError, match=r"flow 1 \(h10->h3\): its pinned data path .* crosses core0->agg0, a link that is down"):
        Experiment(down, FLOWS, routes=load_routes(routes, down, FLOWS)).validate()


CM = """Nodes 16
Connections 2
Failures {n}
0->9 id 1 start 0 size 20000
1->8 id 2 start 0 size 20000
{failures}"""


def _cm_config(tmp_path, failures, **topology):
    path = tmp_path / "f.cm"
    path.write_text(CM.format(n=len(failures), failures="".join(f"failure {f}\n" for f in failures)))
    return {"topology": {"kind": "fattree", "k": 4, **topology}, "workload": {"kind": "cm", "path": str(path)}}


def test_cm_failures_parse_and_run(tmp_path):
    """htsim's formula: agg i, link j -> core (i % 2) * 2 + j: (0, 0) -> core0, (5, 1) -> core3;
    with the config's own failure too."""
    failures = ["switch_type AGG switch_id 0 link_id 0", "link_id 1 switch_id 5 switch_type AGG"]
    exp = experiment_from_config(_cm_config(tmp_path, failures, links_down=["agg4-core2"]))
    assert exp.topology.links_down() == ["agg0-core0", "agg4-core2", "agg5-core3"]
    result = run_small([exp])[0]
    assert result.ok and (result.flows["rx_bytes"] == 20_000).all()
    assert all("agg0->core0" not in p and "core0->agg0" not in p for p in flow_path_names(exp))


HTSIM_CMS = Path(__file__).parents[2] / "shared" / "peers" / "csg-htsim" / "sim" / "datacenter" / "connection_matrices"


@pytest.mark.skipif(not HTSIM_CMS.is_dir(), reason=f"{HTSIM_CMS} is not beside this checkout (htsim's example files)")
def test_htsim_example_cm_with_failure_lines_runs(tmp_path):
    """htsim's own 16-host permutation (perm_16n_16c_2MB.cm) with a Failures header and two
    failure lines, as htsim's ConnectionMatrix::load reads them: both cables down, every
    byte delivered, no path over them."""
    text = (HTSIM_CMS / "perm_16n_16c_2MB.cm").read_text()
    header, _, rest = text.partition("\n7->5")
    path = tmp_path / "perm_failures.cm"
    failures = "failure switch_type AGG switch_id 2 link_id 0\nfailure switch_type AGG switch_id 7 link_id 1\n"
    path.write_text(f"{header}\nFailures 2\n7->5{rest.rstrip()}\n{failures}")
    config = {"topology": {"kind": "fattree", "k": 4}, "workload": {"kind": "cm", "path": str(path)}}
    exp = experiment_from_config(config)
    assert exp.topology.links_down() == ["agg2-core0", "agg7-core3"]
    result = run_small([exp], slots_per_host=256)[0]  # 2 MB flows congested under PFC: more in flight than 128 a host
    assert result.ok and (result.flows["rx_bytes"] == 2_000_000).all()
    down = {"agg2->core0", "core0->agg2", "agg7->core3", "core3->agg7"}
    assert not any(link in p for p in flow_path_names(exp) for link in down)


@pytest.mark.parametrize(
    "failures,topology,line,fragment",
    [
        (["switch_type AGG switch_id 0 link_id 1"], {}, 6, "names the cable agg0-core1 (htsim: core = (switch_id % 2) * 2 + link_id)"),
        (["switch_type AGG switch_id 8 link_id 0"], {}, 6, "switch_id 8 is not an agg switch (valid: 0..7)"),
        (["switch_type AGG switch_id 0 link_id 2"], {}, 6, "link_id 2 is not an uplink of agg0 (valid: 0..1)"),
        (["switch_type AGG switch_id 0 link_id 0"] * 2, {}, 7, "agg0-core0 already failed on line 6"),
        (["switch_type AGG switch_id 0 link_id 0"], {"kind": "leafspine"}, 6, "need topology.kind=fattree"),
    ],
)
def test_cm_failure_errors(tmp_path, failures, topology, line, fragment):
    with pytest.raises(InputError) as info:
        experiment_from_config(_cm_config(tmp_path, failures, **topology))
    assert info.value.line == line and fragment in str(info.value), str(info.value)


def test_tier_cables_and_sweep_override(capsys):
    assert tier_cables(K4, "core-agg")[:3] == ["agg0-core0", "agg0-core2", "agg1-core1"]
    assert len(tier_cables(K4, "tor-agg")) == 16 and tier_cables(K4, "host-tor")[0] == "h0-tor0"
    assert tier_cables(leafspine(2, 4, 2, 100.0, 1.0), "leaf-spine") == ["leaf0-spine0", "leaf0-spine1", "leaf1-spine0", "leaf1-spine1"]
    assert tier_cables(rail(2, 2, 2, 1, 100.0, 1.0), "leaf-spine") == ["rail0.leaf0-spine0", "rail1.leaf0-spine0"]
    with pytest.raises(InputError, match=r"no such cables \(valid: agg-core, host-tor, tor-agg\)"):
        tier_cables(K4, "leaf-spine")
    assert sweep_override(leafspine(2, 4, 4, 100.0, 1.0), "leaf-spine") == (
        "topology.links_down=[],[leaf0-spine0],[leaf1-spine0]"
    )
    main(["--topology", "leafspine", "--leaves", "2", "--hosts-per-leaf", "4", "--oversubscription", "4",
          "--tier", "spine-leaf", "--rate-gbps", "25"])
    assert capsys.readouterr().out == "topology.link_rates_gbps={},{leaf0-spine0:25},{leaf1-spine0:25}\n"
