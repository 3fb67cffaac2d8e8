"""The FIFO pass (``ops/fifo_pass.py``) alone, against a FIFO served packet by packet in plain
Python: random switch-port queues (packets that arrived before the window and during it,
64-9,000 B), ports busy into the window, a PFC pause in effect at its start and one that
begins inside it, a NIC port (never served by the pass). Each port's departures are
start_i = max(ready_i, end_(i-1)) from when it falls free (and its pause ends), as long as
they start inside the window and before the port's next pause; the queue before each, it
included, is what has arrived by its start and not left. (Against the transmit rounds on
whole runs: ``test_runs.test_fifo_pass_equals_one_packet_a_round``.)"""

from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np

import multiverse_jax  # noqa: F401  (64-bit integers)
from multiverse_jax.components.ports import PortState
from multiverse_jax.ops import fifo_pass, queues
from multiverse_jax.units import NEVER

RATE_BPS = 100 * 10**9
PS_PER_BYTE = 8 * 10**12 // RATE_BPS
WINDOW_START_PS, WINDOW_PS = 1_000_000, 1_000_000
WINDOW_END_PS = WINDOW_START_PS + WINDOW_PS
N_PORTS, N_CELLS = 6, 256


def random_queues(rng):
    """Per port, (arrival ps, wire bytes) of its queued packets, sorted by arrival; port 5 is a NIC."""
    ports = []
    for _ in range(N_PORTS):
        n_before, n_during = int(rng.integers(0, 12)), int(rng.integers(0, 30))
        arrival = np.concatenate([
            rng.integers(WINDOW_START_PS - 400_000, WINDOW_START_PS, n_before),
            rng.integers(WINDOW_START_PS, WINDOW_END_PS, n_during),
        ])  # fmt: skip
        wire = rng.choice([64, 1_500, 4_000, 9_000], size=arrival.size, p=[0.5, 0.2, 0.1, 0.2])
        order = np.argsort(arrival, kind="stable")
        ports.append((arrival[order].astype(np.int64), wire[order].astype(np.int64)))
    return ports


def expected(ports, free_ps, held_ps, next_pause_ps):
    """Per switch port, the (start, queue bytes) of the departures the pass makes: a FIFO served
    packet by packet from when the port falls free and its pause ends, until the window's end
    or its next pause."""
    out = []
    for p, (arrival, wire) in enumerate(ports):
        if p == N_PORTS - 1:  # the NIC: the rounds serve it
            out.append([])
            continue
        t, departures = max(free_ps[p], WINDOW_START_PS, held_ps[p]), []
        for i in range(arrival.size):
            start = max(t, arrival[i])
            if start >= WINDOW_END_PS or start >= next_pause_ps[p]:
                break
            queue = int(wire[i:][arrival[i:] <= start].sum())
            departures.append((int(start), queue))
            t = start + int(wire[i]) * PS_PER_BYTE
        out.append(departures)
    return out


def service_order(ports, n_positions: int):
    """The window's service order of ``ports``' queues (one class queue a port)."""
    time_ps = np.full(n_positions, NEVER, np.int64)
    wire = np.zeros(n_positions, np.int64)
    queue_end, at = [], 0
    for arrival, size in ports:
        time_ps[at : at + arrival.size], wire[at : at + arrival.size] = arrival, size
        at += arrival.size
        queue_end.append(at)
    packet = queues.QueuedPacket(
        jnp.zeros(n_positions, bool), jnp.asarray(wire, jnp.int32), *(jnp.zeros(n_positions, jnp.int32) for _ in range(4))
    )
    slot = np.where(np.arange(n_positions) < at, np.arange(n_positions), n_positions)
    order = queues.ServiceOrder(
        jnp.asarray(slot, jnp.int32), jnp.asarray(time_ps), jnp.asarray(np.concatenate([[0], np.cumsum(wire)])),
        jnp.asarray(queue_end, jnp.int32), packet,
    )  # fmt: skip
    return order._replace(arrived_before=queues.queue_start(order))


def params_and_state(free_ps):
    static = SimpleNamespace(n_ports=N_PORTS, n_queues=N_PORTS, inexact_rates=False)
    full = lambda value, dtype=jnp.int64: jnp.full(N_PORTS, value, dtype)  # noqa: E731
    params = SimpleNamespace(
        static=static, window_ps=WINDOW_PS,
        links=SimpleNamespace(link_rate_bps=full(RATE_BPS), link_delay_ps=full(WINDOW_PS)),
        ports=SimpleNamespace(port_host=jnp.array([-1] * (N_PORTS - 1) + [0], jnp.int32), port_buffer_bytes=full(30_000)),
    )  # fmt: skip
    ports = PortState(
        port_free_ps=jnp.asarray(free_ps), port_max_queue_bytes=full(0), port_tx_bytes=full(0), port_last_arrival_ps=full(-1),
        port_rr_flow=full(0, jnp.int32), port_busy_rank=full(0, jnp.int32), port_train_rank=full(0, jnp.int32),
        port_last_scheduled_ps=full(0), port_overflow_events=full(0, jnp.int32), port_over_buffer_ps=full(0),
        port_over_since_ps=full(NEVER),
    )  # fmt: skip
    return params, SimpleNamespace(ports=ports)


def test_fifo_pass_serves_each_queue_as_a_fifo_until_the_window_end_or_a_pause():
    rng = np.random.default_rng(7)
    for trial in range(8):
        ports = random_queues(rng)
        free_ps = rng.integers(WINDOW_START_PS - 50_000, WINDOW_START_PS + 300_000, N_PORTS).astype(np.int64)
        # Port 1 paused at the window start until 1.2 ms; port 2 pauses from 1.5 ms on.
        held_ps = np.full(N_PORTS, WINDOW_START_PS, np.int64)
        held_ps[1] = WINDOW_START_PS + 200_000
        next_pause_ps = np.full(N_PORTS, NEVER, np.int64)
        next_pause_ps[2] = WINDOW_START_PS + 500_000
        seen = ((jnp.asarray(held_ps), jnp.asarray(next_pause_ps)), (jnp.asarray(held_ps), jnp.full(N_PORTS, NEVER)))
        order = service_order(ports, 512)
        params, state = params_and_state(free_ps)
        head = queues.queue_start(order)
        count = fifo_pass.candidates(params, state, order, head, WINDOW_END_PS)
        rows, _ = fifo_pass.drain(
            params, state, order, head, order.arrived_before, jnp.full(N_PORTS, WINDOW_START_PS - 1), WINDOW_END_PS,
            seen, count, N_CELLS,
        )  # fmt: skip
        sends, port = np.asarray(rows.dep.sends), np.asarray(rows.port)
        start, queue_bytes = np.asarray(rows.dep.start), np.asarray(rows.queue_bytes)
        for p, departures in enumerate(expected(ports, free_ps, held_ps, next_pause_ps)):
            mine = sends & (port == p)
            got = list(zip(start[mine].tolist(), queue_bytes[mine].tolist()))
            assert got == departures, (trial, p)
            assert int(rows.served[p]) == len(departures)
            end = departures[-1][0] + int(ports[p][1][len(departures) - 1]) * PS_PER_BYTE if departures else free_ps[p]
            assert int(rows.ports.port_free_ps[p]) == end, (trial, p)
            assert int(rows.ports.port_tx_bytes[p]) == int(ports[p][1][: len(departures)].sum())
            assert int(rows.ports.port_max_queue_bytes[p]) == max([q for _, q in departures], default=0)
        assert any(expected(ports, free_ps, held_ps, next_pause_ps)[1])  # the paused port sends after its pause


def test_pass_sizes_and_branch():
    """No cells where no switch queue has two candidates (the rounds' first departures serve
    them); else the smallest size that holds them all."""
    sizes = fifo_pass.pass_sizes(65_536)
    assert sizes == [0, 256, 1_024, 4_096, 16_384, 65_536]
    assert int(fifo_pass.size_index(jnp.array([1, 1, 0, 1]), sizes)) == 0
    assert int(fifo_pass.size_index(jnp.array([2, 1, 0, 1]), sizes)) == 1
    assert int(fifo_pass.size_index(jnp.array([200, 100, 0, 1]), sizes)) == 2
    assert fifo_pass.pass_sizes(2_048) == [0, 256, 1_024, 2_048]
