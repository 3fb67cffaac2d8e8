"""The FIFO pass: every switch port's departures of a window at once, where a port's
packets wait in one FIFO (no rival class queues: htsim's configuration,
``Static.rival_classes`` off).

Nothing joins a queue while ports transmit (``ops/queues.py``), and a switch port has no
NIC offers and, with one class queue, no strict-priority rival: so what the transmit
rounds would start there one a round is known at the window's start. Over the port's
queue in service order, from when the port falls free, start_i = max(ready_i, start_(i-1) +
ser_(i-1)) (the max-plus recurrence, DESIGN.md "Time"): with C_i the serialisations before
packet i, start_i = C_i + max(free, max over j <= i of ready_j - C_j) (a segmented cumsum
and cummax over cells that hold each queue's head packets, queue after queue). A data packet is ready at
its arrival, not before the window start; the port's first free instant waits for a PFC
pause in effect to end. The pass stops a port's departures at the first that does not start
inside the window, that starts at or after the port's next PFC pause (after it the release
is only bounded, ``pfc.release_bound``), past its ``CANDIDATES``, or whose queue's arrivals by
its start it cannot count within ``SEARCHED`` positions past those that arrived before the
window: the transmit rounds go on from there, exactly as they
would have. So a window's rounds serve the NICs (whose offers change as they create
packets) and the ports the pass stopped, not the switch ports' queues one packet (or one
run) a round.

Every other field of a departure follows in closed form along its queue as in a run
(``runs.departures_behind``, ``runs.watch``): the queue before it (arrived by its start,
less what left before it), its link's arrival, schedule and ranks, the port's queue watch.
The pass's cost is per cell: the packets that might start in the window at a switch port
(``candidates``: a bound from their bytes), in the smallest of ``pass_sizes`` cells that holds
them, not per queued packet (the htsim sweep's point queues ~22,000 under PFC, of which
~900 are candidates a window) or per round. ``Static.fifo_pass`` (``sim.fifo_pass``) turns
it on: by default on an accelerator, where a round costs its kernels' latency. On a CPU the
rounds it saves (6.5 -> 3.4 a busy window of that point) cost about what it does, until the
rounds left, the NICs', run over their ports alone (``systems.transmit.nic_rounds``): with
that the point runs 1.11x faster on one core, but the program compiles 1.7x as long, so a
CPU takes it only when asked (``benchmarks/HISTORY.md``, stops 60 and 61).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops import pfc, queues
from multiverse_jax.ops.packets import PS_BITS_PER_BYTE, link_serialization_ps
from multiverse_jax.ops.runs import WATCHED, Departures, Rows, arrived_within, link_fields, watch_samples
from multiverse_jax.ops.segments import prefix_max, prefix_sum
from multiverse_jax.units import NEVER

# Positions past a departing packet the pass reads for what has arrived at its port by its
# start (a fixed-depth binary search); where every one of them has, the port's pass stops
# there and the rounds go on.
SEARCHED = 64
# Packets at the head of a queue the pass may start in one window (``candidates``): a port
# that could start more (ACKs of 64 B at 100 Gb/s: ~195 a microsecond) goes on in the rounds.
CANDIDATES = 256


def pass_sizes(n_slots: int) -> list[int]:
    """The cell counts the pass may take (``candidates``' total), after none (no switch port
    has two: the rounds' first serve them as well): a sixteenth and a quarter of
    ``queues.SMALLEST_SORT``, then ``queues.sort_sizes``, then the whole pool."""
    smallest = queues.SMALLEST_SORT
    return [0] + sorted({n for n in [max(1, smallest // 16), max(1, smallest // 4)] + queues.sort_sizes(n_slots) if n < n_slots} | {n_slots})


def size_index(count, sizes: list[int]):
    """() int32 the branch of ``sizes`` the pass takes for ``count`` (Q,) candidates: none
    where no queue has two, else the smallest that holds them all."""
    return jnp.where(jnp.max(count) < 2, 0, 1 + queues.size_index(jnp.sum(count), sizes[1:]))


def applies(static) -> bool:
    """The pass runs where a batch has it (``Static.fifo_pass``) and a port's packets are in
    one class queue (``Static.class_queues``: no rival classes, one priority); not where a departure's telemetry looks ahead at the pool (HPCC's
    ``hpcc.int_queue=with_packet``, which the rounds serve one packet a port a round)."""
    return static.fifo_pass and static.class_queues == 1 and not static.int_queue_with_packet


def candidates(params: Params, state: State, order: queues.ServiceOrder, head, window_end_ps):
    """(Q,) int32 the packets at the head of each switch port's queue (from its pointer
    ``head`` (Q,)) that might start inside the window, up to ``CANDIDATES``: those whose
    serialisations before them fit between the port's free instant and the window's end (a
    bound from their bytes: a packet's serialisation is at least its bytes times the link's
    whole ps per byte). A binary search per queue over the service order's bytes
    (``runs.arrived_within``); 0 at NIC ports."""
    static = params.static
    n_queues, n_positions = static.n_queues, order.slot.shape[0]
    free_ps = jnp.maximum(state.ports.port_free_ps, window_end_ps - params.window_ps)  # (P,) = (Q,)
    ps_per_byte = PS_BITS_PER_BYTE // params.links.link_rate_bps  # (P,) whole ps per byte (0 past 8 Tb/s: all candidates)
    room_ps = window_end_ps - free_ps
    # bytes * ps_per_byte < room  <=>  bytes <= (room - 1) // ps_per_byte (none where room <= 0)
    room_bytes = jnp.where(ps_per_byte > 0, (room_ps - 1) // jnp.maximum(ps_per_byte, 1), jnp.iinfo(jnp.int64).max // 2)
    fit_bytes = order.bytes_before[jnp.minimum(head, n_positions)] + room_bytes  # bytes before a position that fits
    high = jnp.minimum(jnp.maximum(order.queue_end, head), head + CANDIDATES)
    low = arrived_within(order.bytes_before, head, high, fit_bytes, CANDIDATES)  # one past the last that fits
    return jnp.where(params.ports.port_host < 0, low - head, 0).astype(jnp.int32)[:n_queues]


def drain(params: Params, state: State, order: queues.ServiceOrder, head, end0, arrived_ps, window_end_ps, seen, count, n_cells: int, go=True):
    """The departures of every switch port at the window's start (``head`` (Q,): each
    queue's pointer; ``end0`` (Q,): the searches' hints, ``Serving.arrived``) among the
    ``count`` (Q,) packets at the head of each queue (``candidates``, at most ``n_cells``
    in all): a ``runs.Rows`` over N = ``n_cells`` cells, each queue's candidates one after
    another (``dep.sends`` where one leaves), the ports after the pass, and each queue's
    packets sent (``served``) and where its arrivals by its last departure end (``ends``);
    and (P,) the instant those are counted to, each port's last departure's start
    (``arrived_ps`` where it sent none). ``seen``: the ports' PFC pauses as seen from the
    window start (``pfc.seen_from``). Nothing departs where ``go`` (() bool) is False
    (``lockstep.switch_in_place``'s flag)."""
    static = params.static
    n_ports, n_queues, n_positions = static.n_ports, static.n_queues, order.slot.shape[0]
    window_start_ps = window_end_ps - params.window_ps
    ports = state.ports
    # Cells: queue q's candidates at cells offset[q] .. offset[q] + count[q] - 1, queue after queue.
    offset = prefix_sum(count) - count  # (Q,)
    cell = jnp.arange(n_cells, dtype=jnp.int32)
    starts_here = jnp.zeros(n_cells, jnp.int32).at[jnp.where(count > 0, offset, n_cells)].set(jnp.arange(n_queues, dtype=jnp.int32), mode="drop")
    port = prefix_max(starts_here)  # (N,) one class queue a port: queue p is port p's
    first = offset[port]  # (N,) the cell of its queue's first candidate
    queued = go & (cell < jnp.sum(count))
    position = jnp.minimum(head[port] + cell - first, n_positions - 1)  # (N,) in the service order
    time_ps = order.time_ps[position]
    packet = queues.QueuedPacket(*(column[position] for column in order.packet))
    ser_ps = jnp.where(queued, link_serialization_ps(params, packet.wire_bytes, port), 0)

    def before(values, base):
        """(N,) each cell's value at the cell before it in its queue, ``base`` (P,) of its
        port at its queue's first."""
        shifted = jnp.concatenate([values[:1], values[:-1]])
        return jnp.where(cell == first, base[port], shifted)

    # C_i: the serialisations before cell i in its queue.
    total_ps = prefix_sum(ser_ps)
    before_ps = total_ps - ser_ps - (total_ps - ser_ps)[first]
    ready_ps = jnp.maximum(time_ps, window_start_ps)  # a queued data packet (ACKs too: one class)
    latest_ps = _segment_max(port, ready_ps - before_ps - window_start_ps, queued, n_queues) + window_start_ps
    free_ps = jnp.maximum(ports.port_free_ps, window_start_ps)
    held_until_ps, next_pause_ps = pfc.seen_at(seen, free_ps)  # (P,) each
    start = before_ps + jnp.maximum(jnp.maximum(free_ps, held_until_ps)[port], latest_ps)
    # The queue just before each departure, it included: what arrived by its start, less
    # what left before it. Every queued packet that arrived before the window has arrived
    # by any start in it: a search of each queue (O(Q log) once) for where they end, then
    # one of SEARCHED positions past it (as ``runs.single_class``).
    before_window = queues.arrived_by(order, head, jnp.full(n_queues, window_start_ps - 1), end0)  # (Q,)
    queue_end = order.queue_end[port]
    low = jnp.maximum(position + 1, before_window[port])
    high = jnp.minimum(queue_end, low + SEARCHED)
    ends = arrived_within(order.time_ps, low, high, start, SEARCHED)
    known = (ends < low + SEARCHED) | (ends >= queue_end)
    queue_bytes = order.bytes_before[ends] - order.bytes_before[position]
    certain = queued & (start < window_end_ps) & (start < next_pause_ps[port]) & known
    # Starts only grow along a queue, but a search may not know: the departures stop at the first uncertain.
    last_uncertain = prefix_max(jnp.where(queued & ~certain, cell, -1))
    sends = certain & (last_uncertain < first)
    dep = _departures(params, ports, order, packet, position, cell, first, port, start, ser_ps, sends, before)
    n_sent = jax.ops.segment_sum(sends.astype(jnp.int32), port, n_ports)  # (P,) = (Q,)
    last = jnp.minimum(offset + n_sent - 1, n_cells - 1)  # each port's last departure's cell, where it sent
    sent = n_sent > 0
    tx_bytes = ports.port_tx_bytes[port] + order.bytes_before[position + 1] - order.bytes_before[head[port]]
    watched, over = _watch(params, ports, dep, queue_bytes, port, before, last, sent)

    def after(column, values):  # (P,) a port field after its last departure
        return jnp.where(sent, values[last], column)

    ports = ports.replace(
        port_free_ps=after(ports.port_free_ps, dep.start + dep.ser_ps), port_tx_bytes=after(ports.port_tx_bytes, tx_bytes),
        port_last_arrival_ps=after(ports.port_last_arrival_ps, dep.arrival_ps),
        port_busy_rank=after(ports.port_busy_rank, dep.busy_rank), port_train_rank=after(ports.port_train_rank, dep.rank),
        port_last_scheduled_ps=after(ports.port_last_scheduled_ps, dep.scheduled_ps), **watched,
    )  # fmt: skip
    ends_after = jnp.where(sent, ends[last], end0)
    cell_port = jnp.where(sends, port, n_ports)
    rows = Rows(dep, cell_port, packet, queue_bytes, tx_bytes, ports, over, n_sent, ends_after)
    return rows, jnp.where(sent, dep.start[last], arrived_ps)


def _segment_max(queue, values, counted, n_queues: int):
    """(N,) the largest of ``values`` (N,) int64 where ``counted`` from its queue's first cell
    to each (the cells of a queue, ``queue`` (N,) int32 below ``n_queues``, contiguous and
    ascending): one cummax of a key packing the queue above the value. The value keeps
    62 - log2(Q) bits, signed (+-2**51 ps, 37 minutes, at 768 queues): an instant of the
    window less the serialisations queued ahead of it at one port."""
    value_bits = 62 - int(n_queues).bit_length()
    half = 1 << (value_bits - 1)
    value = jnp.where(counted, jnp.clip(values + half, 0, 2 * half - 1), 0)  # not counted: the least
    packed = (queue.astype(jnp.int64) << value_bits) | value
    return (prefix_max(packed) & ((1 << value_bits) - 1)) - half


def _departures(params: Params, ports, order, packet, position, cell, first, port, start, ser_ps, sends, before) -> Departures:
    """(N,) each: the ``Departures`` of the pass's cells, their link and rank fields in
    closed form along each queue (``runs.link_fields``, as ``runs.departures_behind``)."""
    arrival_ps, scheduled_ps, prior_ps, busy_rank, rank = link_fields(
        params, start, ser_ps, port, before(start + ser_ps, ports.port_free_ps), order.time_ps[position], packet.rank, before,
        lambda values, begins, base: _latest(cell, first, port, values, begins, base),
        (ports.port_last_arrival_ps, ports.port_last_scheduled_ps, ports.port_busy_rank, ports.port_train_rank),
    )  # fmt: skip
    falses = jnp.zeros_like(sends)
    zeros = jnp.zeros_like(position)
    return Departures(
        start, falses, zeros, sends, ~packet.is_ack, falses, falses, order.slot[position], packet.wire_bytes, ser_ps,
        arrival_ps, scheduled_ps, prior_ps, busy_rank, rank,
    )  # fmt: skip


def _latest(cell, first, port, values, begins, base):
    """(N,) at each cell ``values`` at the latest cell of its queue up to it where
    ``begins``, or ``base`` (P,) of its port where none has."""
    latest = prefix_max(jnp.where(begins, cell, -1))
    return jnp.where(latest >= first, values[jnp.maximum(latest, 0)], base[port])


def _watch(params: Params, ports, dep: Departures, queue_bytes, port, before, last, sent):
    """``runs.watch`` along each queue's departures (``dep.sends``, a prefix of its cells;
    ``runs.watch_samples``, summed per port): the ``WATCHED`` port fields after them, and
    whether a queue rose above its buffer."""
    n_ports = params.static.n_ports
    max_queue_bytes, overflow_events, over_buffer_ps, over_since_ps = (getattr(ports, name) for name in WATCHED)
    buffer_bytes = params.ports.port_buffer_bytes[port]
    since_after_ps, over, new_event, over_ps = watch_samples(
        buffer_bytes, dep.sends, dep.start, queue_bytes, dep.wire_bytes, lambda values: before(values, over_since_ps)
    )  # fmt: skip
    at = jnp.where(dep.sends, port, n_ports)  # what no departure samples adds nowhere
    watched = (
        jnp.maximum(max_queue_bytes, jax.ops.segment_max(queue_bytes, at, n_ports)),
        overflow_events + jax.ops.segment_sum(new_event.astype(overflow_events.dtype), at, n_ports),
        over_buffer_ps + jax.ops.segment_sum(over_ps, at, n_ports),
        jnp.where(sent, since_after_ps[last], over_since_ps),
    )
    return dict(zip(WATCHED, watched)), jnp.any(over)
