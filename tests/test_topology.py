"""Topology builders and ECMP routing, checked against closed forms and a plain BFS."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.topology import (
    EcmpTable,
    Topology,
    build_topology,
    ecmp_table,
    fattree,
    leafspine,
    load_custom,
    rail,
)
from multiverse_jax.topology import routing


# ----------------------------------------------------------------------------- helpers


def neighbours(topo: Topology, name: str) -> set[str]:
    v = topo.node_index(name)
    return {topo.node_names[d] for s, d in zip(topo.link_src, topo.link_dst) if s == v}


def reference_routes(topo: Topology) -> tuple[np.ndarray, list[list[list[int]]]]:
    """Plain per-host BFS (hosts never transit): hops (N, H) and sorted next-hop ports."""
    n, h_count = topo.n_nodes, topo.n_hosts
    into = collections.defaultdict(list)  # node -> [(link, src)]
    for link, (s, d) in enumerate(zip(topo.link_src.tolist(), topo.link_dst.tolist())):
        into[d].append((link, s))
    hops = np.full((n, h_count), routing.UNREACHABLE, np.int64)
    for h in range(h_count):
        hops[h, h] = 0
        queue = collections.deque([h])
        while queue:
            v = queue.popleft()
            if v < h_count and v != h:
                continue  # a host other than the destination forwards nothing
            for _, u in into[v]:
                if hops[u, h] == routing.UNREACHABLE:
                    hops[u, h] = hops[v, h] + 1
                    queue.append(u)
    ports = [[[] for _ in range(h_count)] for _ in range(n)]
    for link, (s, d) in enumerate(zip(topo.link_src.tolist(), topo.link_dst.tolist())):
        for h in range(h_count):
            transit_ok = d >= h_count or d == h
            if transit_ok and hops[s, h] != routing.UNREACHABLE and hops[d, h] == hops[s, h] - 1:
                ports[s][h].append(link)
    return hops, ports


def assert_matches_reference(topo: Topology) -> EcmpTable:
    table = ecmp_table(topo)
    hops, ports = reference_routes(topo)
    n, h_count = topo.n_nodes, topo.n_hosts
    assert table.next_port.shape[:2] == (n, h_count)
    assert table.n_next.shape == table.hops.shape == (n, h_count)
    np.testing.assert_array_equal(table.hops, hops)
    for v, h in itertools.product(range(n), range(h_count)):
        count = int(table.n_next[v, h])
        assert count == len(ports[v][h]), (v, h)
        assert sorted(table.next_port[v, h, :count].tolist()) == ports[v][h]
        assert (table.next_port[v, h, count:] == -1).all()
    assert table.width == max(1, max(len(p) for row in ports for p in row))
    return table


def write(tmp_path, text: str, name: str = "topo.txt") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ----------------------------------------------------------------------------- fat-tree


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fattree_counts(k):
    topo = fattree(k, 100.0, 1.0)
    hosts, switches, cables = k**3 // 4, 5 * k * k // 4, 3 * k**3 // 4
    assert topo.n_hosts == hosts
    assert topo.n_nodes == hosts + switches
    assert topo.n_links == 2 * cables
    names = topo.node_names
    assert names[:hosts] == tuple(f"h{i}" for i in range(hosts))
    assert sum(n.startswith("tor") for n in names) == k * k // 2
    assert sum(n.startswith("agg") for n in names) == k * k // 2
    assert sum(n.startswith("core") for n in names) == k * k // 4
    # every switch has k ports; every host one
    degree = np.bincount(topo.link_src, minlength=topo.n_nodes)
    assert (degree[:hosts] == 1).all() and (degree[hosts:] == k).all()
    # directed links come in pairs 2u, 2u+1 of the same cable
    np.testing.assert_array_equal(topo.link_src[0::2], topo.link_dst[1::2])
    np.testing.assert_array_equal(topo.link_dst[0::2], topo.link_src[1::2])


def test_fattree_htsim_wiring_k4():
    topo = fattree(4, 100.0, 1.0)
    for p, j in itertools.product(range(4), range(2)):
        agg = f"agg{p * 2 + j}"
        # csg-htsim FatTreeTopology: agg j of a pod links to core{j + m*k/2}
        assert neighbours(topo, agg) == {f"tor{2 * p}", f"tor{2 * p + 1}", f"core{j}", f"core{j + 2}"}
    assert neighbours(topo, "h5") == {"tor2"}
    assert neighbours(topo, "tor2") == {"h4", "h5", "agg2", "agg3"}


@pytest.mark.parametrize("k", [2, 6])
def test_fattree_wiring_general(k):
    half = k // 2
    topo = fattree(k, 100.0, 1.0)
    for h in range(topo.n_hosts):
        assert neighbours(topo, f"h{h}") == {f"tor{h // half}"}
    for t in range(k * half):
        pod = t // half
        ups = {f"agg{pod * half + j}" for j in range(half)}
        assert neighbours(topo, f"tor{t}") == ups | {f"h{t * half + i}" for i in range(half)}
    for c in range(half * half):
        # each core reaches every pod exactly once, through the agg at pod position c % (k/2)
        assert neighbours(topo, f"core{c}") == {f"agg{p * half + c % half}" for p in range(k)}


def test_fattree_cable_order():
    topo = fattree(4, 100.0, 1.0)
    src, dst = topo.link_src[0::2], topo.link_dst[0::2]
    kinds = [(topo.node_names[a].rstrip("0123456789"), topo.node_names[b].rstrip("0123456789")) for a, b in zip(src, dst)]
    assert kinds == [("h", "tor")] * 16 + [("tor", "agg")] * 16 + [("agg", "core")] * 16
    assert src[:16].tolist() == list(range(16))


@pytest.mark.parametrize("k", [4, 6, 8])
def test_fattree_ecmp(k):
    half = k // 2
    topo = fattree(k, 100.0, 1.0)
    table = ecmp_table(topo)
    hosts_per_pod = k * k // 4
    pod = np.arange(topo.n_hosts) // hosts_per_pod
    tor = np.arange(topo.n_hosts) // half
    a, b = np.meshgrid(np.arange(topo.n_hosts), np.arange(topo.n_hosts), indexing="ij")
    hops = table.hops[: topo.n_hosts, : topo.n_hosts]
    np.testing.assert_array_equal(hops[a == b], 0)
    np.testing.assert_array_equal(hops[(tor[a] == tor[b]) & (a != b)], 2)
    np.testing.assert_array_equal(hops[(pod[a] == pod[b]) & (tor[a] != tor[b])], 4)
    np.testing.assert_array_equal(hops[pod[a] != pod[b]], 6)
    # hosts have exactly one way out
    off = a != b
    np.testing.assert_array_equal(table.n_next[: topo.n_hosts, : topo.n_hosts][off], 1)
    np.testing.assert_array_equal(table.n_next[: topo.n_hosts, : topo.n_hosts][~off], 0)
    # ToR / agg towards another pod: k/2 equal-cost uplinks
    dst = topo.n_hosts - 1  # in the last pod
    for t in range(half * (k - 1)):  # ToRs of the other pods
        assert table.n_next[topo.node_index(f"tor{t}"), dst] == half
    for g in range(half * (k - 1)):
        assert table.n_next[topo.node_index(f"agg{g}"), dst] == half
    # same pod, other ToR: the ToR has k/2 uplinks, the agg goes straight down
    assert table.n_next[topo.node_index("tor0"), half] == half
    assert table.n_next[topo.node_index("agg0"), half] == 1
    # a core has one way down to any host
    assert (table.n_next[topo.node_index("core0"), :] == 1).all()
    assert table.width == half


def test_fattree_matches_reference_bfs():
    assert_matches_reference(fattree(4, 100.0, 1.0))


@pytest.mark.parametrize("k", [3, 0, 1, -2, 4.0, "4", True])
def test_fattree_bad_k(k):
    with pytest.raises(InputError, match="topology.k must be an even integer >= 2"):
        fattree(k, 100.0, 1.0)


@pytest.mark.parametrize(
    ("rate", "delay", "key"),
    [(0, 1.0, "link.rate_gbps"), (-1, 1.0, "link.rate_gbps"), (100.0, 0, "link.delay_us"), (100.0, float("nan"), "link.delay_us")],
)
def test_bad_link_defaults(rate, delay, key):
    with pytest.raises(InputError, match=key):
        fattree(4, rate, delay)
    with pytest.raises(InputError, match=key):
        leafspine(2, 2, 1, rate, delay)
    with pytest.raises(InputError, match=key):
        rail(2, 2, 1, 1, rate, delay)


def test_rates_and_delays_units():
    topo = fattree(2, 12.5, 0.5)
    assert topo.link_rate_bps.dtype == np.int64 and topo.link_delay_ps.dtype == np.int64
    assert (topo.link_rate_bps == 12_500_000_000).all()
    assert (topo.link_delay_ps == 500_000).all()


# ----------------------------------------------------------------------------- leaf-spine


@pytest.mark.parametrize(("over", "spines"), [(1, 8), (2, 4), (4, 2), (8, 1), (2.0, 4), (8 / 3, 3), (0.5, 16)])
def test_leafspine_spines(over, spines):
    topo = leafspine(3, 8, over, 100.0, 1.0)
    assert topo.n_hosts == 24
    assert topo.n_nodes == 24 + 3 + spines
    assert topo.n_links == 2 * (24 + 3 * spines)
    assert sum(n.startswith("spine") for n in topo.node_names) == spines
    for l in range(3):
        assert neighbours(topo, f"leaf{l}") == {f"h{l * 8 + i}" for i in range(8)} | {f"spine{s}" for s in range(spines)}
    table = ecmp_table(topo)
    assert table.hops[0, 1] == 2 and table.hops[0, 8] == 4
    assert table.n_next[topo.node_index("leaf0"), 8] == spines


def test_leafspine_matches_reference_bfs():
    assert_matches_reference(leafspine(3, 4, 2, 100.0, 1.0))


@pytest.mark.parametrize("over", [3, 5, 16, 0, -1, "2"])
def test_leafspine_bad_oversubscription(over):
    with pytest.raises(InputError) as err:
        leafspine(2, 8, over, 100.0, 1.0)
    assert "topology.oversubscription" in str(err.value)
    assert "1, 2, 4, 8" in str(err.value)


@pytest.mark.parametrize(("args", "key"), [((0, 4), "topology.leaves"), ((2, 0), "topology.hosts_per_leaf"), ((2.5, 4), "topology.leaves")])
def test_leafspine_bad_sizes(args, key):
    with pytest.raises(InputError, match=key):
        leafspine(*args, 1, 100.0, 1.0)


# ----------------------------------------------------------------------------- rail


def test_rail_structure_and_hops():
    servers, gpus, per_leaf, spines = 4, 4, 2, 3
    topo = rail(servers, gpus, per_leaf, spines, 100.0, 1.0)
    leaves_per_rail = servers // per_leaf
    assert topo.n_hosts == servers * gpus
    assert topo.n_nodes == servers * gpus + gpus * leaves_per_rail + spines
    assert topo.n_links == 2 * (servers * gpus + gpus * leaves_per_rail * spines)
    for s, g in itertools.product(range(servers), range(gpus)):
        assert neighbours(topo, f"h{s * gpus + g}") == {f"rail{g}.leaf{s // per_leaf}"}
    for sp in range(spines):
        assert neighbours(topo, f"spine{sp}") == {f"rail{g}.leaf{j}" for g in range(gpus) for j in range(leaves_per_rail)}
    table = ecmp_table(topo)

    def hops(s1, g1, s2, g2):
        return int(table.hops[s1 * gpus + g1, s2 * gpus + g2])

    for g in range(gpus):
        assert hops(0, g, 1, g) == 2  # same rail, same leaf group
        assert hops(1, g, 2, g) == 4  # same rail, other leaf group
    assert hops(0, 0, 0, 1) == 4  # same server, other rail: through the spine
    assert hops(0, 0, 1, 3) == 4
    assert table.n_next[topo.node_index("rail0.leaf0"), 1 * gpus + 1] == spines


def test_rail_matches_reference_bfs():
    assert_matches_reference(rail(4, 2, 2, 2, 100.0, 1.0))


def test_rail_bad_args():
    with pytest.raises(InputError, match="topology.servers_per_leaf") as err:
        rail(6, 2, 4, 1, 100.0, 1.0)
    assert "1, 2, 3, 6" in str(err.value)
    for args, key in [((0, 2, 1, 1), "topology.servers"), ((2, 0, 1, 1), "topology.gpus_per_server"),
                      ((2, 2, 0, 1), "topology.servers_per_leaf"), ((2, 2, 1, 0), "topology.spines")]:
        with pytest.raises(InputError, match=key):
            rail(*args, 100.0, 1.0)


# ----------------------------------------------------------------------------- custom files

CUSTOM = """\
# a two-switch line with named GPUs
switch s0
host gpu3          # host 0
host gpu7
switch s1
host cpu           # host 2

link gpu3 s0 400 0.5
link gpu7 s0
link s0 s1 12.5
link cpu s1 25 2   # trailing comment
"""


def test_custom_round_trip(tmp_path):
    path = write(tmp_path, CUSTOM)
    topo = load_custom(path, 100.0, 1.0)
    assert topo.node_names == ("gpu3", "gpu7", "cpu", "s0", "s1")
    assert topo.n_hosts == 3
    assert topo.n_links == 8
    np.testing.assert_array_equal(topo.link_src, [0, 3, 1, 3, 3, 4, 2, 4])
    np.testing.assert_array_equal(topo.link_dst, [3, 0, 3, 1, 4, 3, 4, 2])
    gbps, us = 1_000_000_000, 1_000_000
    np.testing.assert_array_equal(
        topo.link_rate_bps, np.repeat([400 * gbps, 100 * gbps, 12_500_000_000, 25 * gbps], 2)
    )
    np.testing.assert_array_equal(topo.link_delay_ps, np.repeat([us // 2, us, us, 2 * us], 2))
    assert topo.link_rate_bps.dtype == np.int64 and topo.link_delay_ps.dtype == np.int64
    assert topo.node_index("gpu7") == 1
    table = assert_matches_reference(topo)
    assert table.hops[0, 1] == 2 and table.hops[0, 2] == 3
    # same file through the dispatcher, with other defaults
    again = build_topology("custom", path=path, rate_gbps=50.0, delay_us=3.0)
    assert again.link_rate_bps[2] == 50 * gbps and again.link_delay_ps[2] == 3 * us


def test_custom_host_to_host_and_forward_declaration(tmp_path):
    path = write(tmp_path, "link a b\nhost a\nhost b\n")
    topo = load_custom(path, 10.0, 1.0)
    table = ecmp_table(topo)
    assert table.hops[0, 1] == 1 and table.n_next[0, 1] == 1


def test_custom_unreachable_islands(tmp_path):
    text = "host a\nhost b\nhost c\nhost d\nswitch x\nswitch y\nlink a x\nlink b x\nlink c y\nlink d y\n"
    topo = load_custom(write(tmp_path, text), 100.0, 1.0)
    table = assert_matches_reference(topo)
    x, y = topo.node_index("x"), topo.node_index("y")
    for v, h in [(0, 2), (0, 3), (1, 2), (2, 0), (3, 1), (x, 2), (y, 0)]:
        assert table.n_next[v, h] == 0
        assert table.hops[v, h] == routing.UNREACHABLE
        assert (table.next_port[v, h] == -1).all()
    assert table.hops[0, 1] == 2 and table.n_next[x, 1] == 1


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("host a\nrouter r\n", 2, "unknown keyword"),
        ("host a b\n", 1, "exactly one name"),
        ("host\n", 1, "exactly one name"),
        ("switch s t\n", 1, "exactly one name"),
        ("host a\nswitch s\nlink a\n", 3, "2 to 4 fields"),
        ("host a\nswitch s\nlink a s 1 2 3\n", 3, "2 to 4 fields"),
        ("host a\nswitch s\n\n# c\nswitch a\nlink a s\n", 5, "duplicate node name 'a'"),
        ("host a\nhost a\n", 2, "duplicate node name"),
        ("host a\nswitch s\nlink a t\n", 3, "undeclared node 't'"),
        ("host a\nswitch s\nlink a s fast\n", 3, "rate_gbps (field 4) must be a number > 0"),
        ("host a\nswitch s\nlink a s 0\n", 3, "rate_gbps (field 4) must be a number > 0"),
        ("host a\nswitch s\nlink a s -5 1\n", 3, "rate_gbps (field 4) must be a number > 0"),
        ("host a\nswitch s\nlink a s inf\n", 3, "rate_gbps"),
        ("host a\nswitch s\nlink a s 100 x\n", 3, "delay_us (field 5) must be a number > 0"),
        ("host a\nswitch s\nlink a s 100 0\n", 3, "delay_us (field 5) must be a number > 0"),
        ("host a\nswitch s\nlink a s 100 -1\n", 3, "delay_us (field 5) must be a number > 0"),
        ("host a\nswitch s\nswitch t\nlink a s\nlink a t\n", 5, "host a already has a link"),
        ("host a\nhost b\nswitch s\nlink a s\n", 2, "host b has no link"),
        ("host a\nlink a a\n", 2, "two different nodes"),
        ("host a\nswitch s\nlink a s\nlink s s\n", 4, "two different nodes"),
    ],
)
def test_custom_errors_name_file_and_line(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_custom(path, 100.0, 1.0)
    message = str(err.value)
    assert path in message
    assert f":{line}:" in message
    assert words in message
    assert err.value.source == path and err.value.line == line


def test_custom_no_hosts(tmp_path):
    path = write(tmp_path, "# only switches\nswitch s\nswitch t\nlink s t\n")
    with pytest.raises(InputError, match="no hosts") as err:
        load_custom(path, 100.0, 1.0)
    assert path in str(err.value)
    empty = write(tmp_path, "", "empty.txt")
    with pytest.raises(InputError, match="no hosts") as err:
        load_custom(empty, 100.0, 1.0)
    assert empty in str(err.value)


def test_custom_missing_file(tmp_path):
    path = str(tmp_path / "nope.txt")
    with pytest.raises(InputError, match="not found") as err:
        load_custom(path, 100.0, 1.0)
    assert path in str(err.value)


# ----------------------------------------------------------------------------- dispatcher


def test_build_topology_kinds(tmp_path):
    assert build_topology("fattree").n_hosts == 16
    assert build_topology("fattree", k=6, rate_gbps=40.0).link_rate_bps[0] == 40_000_000_000
    ls = build_topology("leafspine", leaves=2, hosts_per_leaf=4, oversubscription=2)
    assert ls.n_nodes == 8 + 2 + 2
    r = build_topology("rail", servers=2, gpus_per_server=8, servers_per_leaf=2, spines=4)
    assert r.n_hosts == 16 and r.n_nodes == 16 + 8 + 4
    assert build_topology("custom", path=write(tmp_path, CUSTOM)).n_hosts == 3
    for kind in ("leafspine", "rail"):
        assert isinstance(build_topology(kind), Topology)


def test_build_topology_errors():
    with pytest.raises(InputError, match="topology.kind") as err:
        build_topology("torus")
    assert "fattree, leafspine, rail, custom" in str(err.value)
    with pytest.raises(InputError, match="topology.path"):
        build_topology("custom")
    with pytest.raises(InputError, match="topology.k"):
        build_topology("fattree", k=5)
