"""Collectives on an idle, non-blocking fabric (one switch) against their closed forms."""

import dataclasses

import numpy as np
import pytest

from conftest import SMALL, store_and_forward_ps, wire_sizes
from multiverse_jax.experiment import Experiment
from multiverse_jax.simulate import simulate
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload.collectives import CommConfig, collective
from multiverse_jax.workload.tasks import TaskGraphBuilder

N = 8  # hosts on one 100 Gb/s switch, 1 us links: every pair is two links apart
STAR = from_cables("star8", [f"h{i}" for i in range(N)] + ["s0"], N, [(i, N, 100, 1) for i in range(N)])
SIZE = 4_000_000
# The star's 8 hosts: a pool of 4,096 slots, which a window sorts whole (16 hosts' 8,192 would
# compile the service order's sort-size branches too: ~10 s more).
STATIC = dataclasses.replace(SMALL, n_hosts=N, n_tasks=512, task_deps=17, n_flows=256, slots_per_host=512)


ACK_PS = 64 * 8 * 10**12 // 100e9  # an ACK on a 100 Gb/s link


def chunk_rx_ps(size_bytes):
    """One ring step: a flow of ``size_bytes`` over two links, each of which also carries,
    first (ACKs have priority), one ACK per packet of the flow going the other way round
    the ring (every host sends one chunk and receives one)."""
    packets = len(wire_sizes(size_bytes))
    return store_and_forward_ps(wire_sizes(size_bytes), [100e9, 100e9], [1_000_000, 1_000_000])[0] + packets * ACK_PS


def collective_time_us(kind, size, channels=1):
    b = TaskGraphBuilder(N)
    collective(b, kind, list(range(N)), size, [], CommConfig(channels=channels))
    graph = b.build()
    result = simulate([Experiment(STAR, graph.flow_set(), tasks=graph)], slots_per_host=512, static=STATIC)[0]
    assert result.ok, result.summary
    return result.summary["iteration_time_us"]


@pytest.mark.parametrize(
    "kind, steps",
    [("all_reduce", 2 * (N - 1)), ("all_gather", N - 1), ("reduce_scatter", N - 1)],
)
def test_ring_collectives_take_their_steps_of_s_over_n(kind, steps):
    """A ring collective is ``steps`` steps, each one chunk of S/n crossing two links."""
    closed_form_us = steps * chunk_rx_ps(SIZE // N) / 1e6
    assert collective_time_us(kind, SIZE) == pytest.approx(closed_form_us, rel=0.01)


def test_all_to_all_is_bound_by_each_receivers_link():
    """Every rank sends S/n to each of the n-1 others at once: each receiver's link carries
    (n-1) S/n bytes (plus headers) and the ACKs of what its host sent, at line rate, after
    one packet's path latency."""
    piece = SIZE // N
    wire = (N - 1) * (sum(wire_sizes(piece)) + 64 * len(wire_sizes(piece)))
    first_packet_ps = wire_sizes(piece)[0] * 8 * 10**12 // 100e9 + 2 * 1_000_000  # one extra hop
    closed_form_us = (wire * 8 * 10**12 / 100e9 + first_packet_ps) / 1e6
    assert collective_time_us("all_to_all", SIZE) == pytest.approx(closed_form_us, rel=0.01)


def test_channels_split_the_ring():
    """Two channels halve every chunk; on one switch they share each link, so the ring
    takes the same time within 1 % (the bytes per link are the same)."""
    one = collective_time_us("all_reduce", SIZE, channels=1)
    two = collective_time_us("all_reduce", SIZE, channels=2)
    assert two == pytest.approx(one, rel=0.01)
