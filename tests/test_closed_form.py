"""One flow on an idle path finishes exactly at the store-and-forward closed form (to the
picosecond: the results' integer ps columns)."""

import pytest

from conftest import chain, run_small, store_and_forward_ps, wire_sizes
from multiverse_jax.experiment import Experiment
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows

PS = 1_000_000  # ps per µs


@pytest.mark.parametrize("size", [1, 4096, 10_000, 3 * 4096 + 1, 100_000])
@pytest.mark.parametrize(
    "rates,delays",
    [
        ([100], [1.0]),  # 1 hop: two NICs back to back
        ([100, 100], [1.0, 1.0]),  # 2 hops: through one switch
        ([100, 40, 400, 100], [1.0, 2.5, 1.5, 1.0]),  # 4 hops, mixed rates and delays
    ],
)
def test_chain_matches_closed_form(size, rates, delays):
    topo = chain(rates, delays)
    result = run_small([Experiment(topo, make_flows([0], [1], [size], [3 * PS]))])[0]
    assert result.ok, result.summary
    rx, ack = store_and_forward_ps(
        wire_sizes(size), [int(r * 1e9) for r in rates], [int(d * PS) for d in delays], start_ps=3 * PS
    )
    assert result.flows["rx_finish_ps"][0] == rx
    assert result.flows["finish_ps"][0] == ack
    assert result.flows["rx_bytes"][0] == size


@pytest.mark.parametrize("size", [10_000, 64 * 4096])
def test_fattree_six_hops_closed_form(size):
    """Cross-pod in a k=4 fat-tree: 6 hops; with equal packets (P + h - 1) W 8/R + h d."""
    topo = fattree(4, 100.0, 1.0)
    result = run_small([Experiment(topo, make_flows([0], [15], [size], [0]))])[0]
    rx, ack = store_and_forward_ps(wire_sizes(size), [100 * 10**9] * 6, [PS] * 6)
    assert result.flows["rx_finish_ps"][0] == rx
    assert result.flows["finish_ps"][0] == ack
    if size % 4096 == 0:
        packets, wire_ps = size // 4096, 4160 * 80  # 80 ps per byte at 100 Gb/s
        assert rx == (packets + 6 - 1) * wire_ps + 6 * PS


def test_idle_network_jumps_to_next_flow():
    """A flow starting late costs no windows while the network is idle."""
    topo = fattree(4, 100.0, 1.0)
    early = run_small([Experiment(topo, make_flows([0], [15], [10_000], [0]))])[0]
    late = run_small([Experiment(topo, make_flows([0], [15], [10_000], [500 * PS]))])[0]
    assert late.flows["fct_ps"][0] == early.flows["fct_ps"][0]
    assert late.summary["n_windows"] == early.summary["n_windows"]
    assert late.flows["start_ps"][0] == 500 * PS


@pytest.mark.parametrize("dst,hops", [(4, 2), (12, 4), (1, 4)])
def test_rail_fabric_closed_form(dst, hops):
    """Rail-optimised fabric (4 servers x 4 GPUs, 2 servers per leaf): GPU 0 of server 0
    reaches GPU 0 of server 1 through its rail leaf (2 hops), GPU 0 of server 3 or GPU 1
    of its own server through a spine (4 hops)."""
    from multiverse_jax.topology import rail

    topo = rail(4, 4, 2, 2, 100.0, 1.0)
    result = run_small([Experiment(topo, make_flows([0], [dst], [20_000], [0]))])[0]
    rx, ack = store_and_forward_ps(wire_sizes(20_000), [100 * 10**9] * hops, [PS] * hops)
    assert result.flows["rx_finish_ps"][0] == rx
    assert result.flows["finish_ps"][0] == ack
