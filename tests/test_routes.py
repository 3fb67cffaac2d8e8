"""Pinned routes CSV: ports along the path and file:line errors."""

import numpy as np
import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload.flows import make_flows
from multiverse_jax.workload.routes import PinnedRoutes, load_routes

NAMES = ["h0", "h1", "h2", "s0", "s1", "s2"]
H0, H1, H2, S0, S1, S2 = range(6)


@pytest.fixture
def topo():
    # h0 - s0 ; h1 - s1 ; h2 - s2 ; s0 - s1 ; s0 - s2 ; s1 - s2
    cables = [(H0, S0), (H1, S1), (H2, S2), (S0, S1), (S0, S2), (S1, S2)]
    return from_cables("tri", NAMES, 3, [(a, b, 100.0, 1.0) for a, b in cables])


@pytest.fixture
def flows():
    return make_flows([0, 1, 2], [1, 0, 0], 1000, flow_id=[5, 6, 7])


def write(tmp_path, text, newline="\n"):
    path = tmp_path / "routes.csv"
    path.write_bytes(text.replace("\n", newline).encode())
    return path


def links(topo, names):
    idx = [NAMES.index(n) for n in names]
    return [topo.link_between(a, b) for a, b in zip(idx, idx[1:])]


def test_none():
    r = PinnedRoutes.none(4)
    assert r.data_ports.shape == (4, 1) and r.ack_ports.shape == (4, 1)
    assert r.data_ports.dtype == np.int32 and (r.data_ports == -1).all() and (r.ack_ports == -1).all()


def test_load(tmp_path, topo, flows):
    path = write(
        tmp_path,
        "id,kind,path\n"
        "5,data,h0 s0 s2 s1 h1\n"
        "# comment\n"
        "\n"
        "5,ack,h1 s1 s0 h0\n"
        "7,ack,h0 s0 s2 h2\n",
        newline="\r\n",
    )
    r = load_routes(path, topo, flows)
    assert r.data_ports.shape == (3, 4) and r.ack_ports.shape == (3, 4)
    assert r.data_ports.dtype == np.int32 and r.ack_ports.dtype == np.int32
    np.testing.assert_array_equal(r.data_ports[0], links(topo, ["h0", "s0", "s2", "s1", "h1"]))
    np.testing.assert_array_equal(r.ack_ports[0], links(topo, ["h1", "s1", "s0", "h0"]) + [-1])
    np.testing.assert_array_equal(r.data_ports[1], [-1] * 4)
    np.testing.assert_array_equal(r.ack_ports[1], [-1] * 4)
    np.testing.assert_array_equal(r.data_ports[2], [-1] * 4)
    np.testing.assert_array_equal(r.ack_ports[2], links(topo, ["h0", "s0", "s2", "h2"]) + [-1])
    # directed: each port goes from one node to the next
    for port, (a, b) in zip(r.data_ports[0], [(H0, S0), (S0, S2), (S2, S1), (S1, H1)]):
        assert topo.link_src[port] == a and topo.link_dst[port] == b


def test_header_only(tmp_path, topo, flows):
    r = load_routes(write(tmp_path, "id,kind,path\n"), topo, flows)
    assert r.data_ports.shape == (3, 1) and (r.data_ports == -1).all()


@pytest.mark.parametrize(
    "body,line,fragment",
    [
        ("5,data,h0 s0 s1 h1\n9,data,h0 s0 s1 h1\n", 3, "unknown flow id 9"),
        ("x,data,h0 s0 s1 h1\n", 2, "id (a flow id): expected an integer, got 'x'"),
        ("5,both,h0 s0 s1 h1\n", 2, "bad kind 'both'"),
        ("5,data,h0 s0 s9 h1\n", 2, "unknown node 's9'"),
        ("5,data,h2 s2 s1 h1\n", 2, "must start at the flow's src host h0"),
        ("5,data,h0 s0 s2 h2\n", 2, "must end at the flow's dst host h1"),
        ("5,ack,h0 s0 s1 h1\n", 2, "must start at the flow's dst host h1"),
        ("6,data,h1 s1 s2 h2 s2 s0 h0\n", 2, "goes through host h2"),
        ("5,data,h0 s1 h1\n", 2, "no link h0 -> s1"),
        ("5,data,h0 s0 s1 s0 s1 h1\n", 2, "visits s0 twice"),
        ("5,data,h0 s0 s1 h1\n\n5,data,h0 s0 s2 s1 h1\n", 4, "duplicate route for flow 5 data (first on line 2)"),
        ("5,data\n", 2, "expected 3 fields"),
        ("5,data,h0\n", 2, "at least two nodes"),
    ],
)
def test_errors(tmp_path, topo, flows, body, line, fragment):
    path = write(tmp_path, "id,kind,path\n" + body)
    with pytest.raises(InputError) as info:
        load_routes(path, topo, flows)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert fragment in msg, msg


def test_bad_header(tmp_path, topo, flows):
    path = write(tmp_path, "# routes\nflow,kind,path\n5,data,h0 s0 s1 h1\n")
    with pytest.raises(InputError, match=rf"{path}:2: bad header"):
        load_routes(path, topo, flows)


def test_missing_file(tmp_path, topo, flows):
    path = tmp_path / "none.csv"
    with pytest.raises(InputError, match="not found") as info:
        load_routes(path, topo, flows)
    assert str(path) in str(info.value)
