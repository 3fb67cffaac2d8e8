"""Transmit: every egress port serialises packets at line rate through the window.

A port is a non-preemptive strict-priority server with 1 + C classes: control first,
then the data classes by flow priority (0 highest). ACKs are control packets, or, with
``packet.ack_class=data`` (htsim), packets of their flow's data class that wait in its
FIFO with the data. When it falls free, a port starts the earliest-queued packet of the
highest class that has one waiting (at a NIC: of a data class, the earlier of a queued
ACK and the packet its NIC offers for that class); PFC pauses every data class. If none has arrived,
it starts whichever arrives first. Start times are exact:
start = max(port free, packet arrival, PFC release); the last bit reaches the far end
``serialisation + link delay`` later, which is past the window because every link delay
is at least the window. Each round (``serve_round``), all ports of all experiments start
at most one packet; rounds repeat until no port can start another packet inside the
window.

Nothing joins a queue during the window (arrivals were queued by ``forward``), so the
window starts by sorting the pool once into every class queue's service order
(``ops/queues.py``) and listing each host's free slots (``nic.free_slots``); a round then
reads each queue's head under a pointer, and the bytes queued at an instant by a search
from where the last round's ended (``queues.arrived_by``), so its cost is per port and
per flow, not per pool slot. A round reads what it needs of a queued packet from the
service order, never from the pool arrays it writes (XLA would copy those whole every
round).

A round is a chain of phases, arrays over ports P, classes 1 + C and hosts H:
``class_heads`` (the candidate of each class queue) -> ``start_times`` (PFC and strict
priority) -> ``depart`` (what each port starts, its wire size and times) -> ``account``
(port counters, queue maxima and overflows, errors) -> ``leave`` (the packet goes on the wire, ECN
mark and telemetry at switches) -> ``nic_emit`` (NICs create their new data packets).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import CC_HPCC, ERROR_BUFFER_OVERFLOW, ERROR_POOL_FULL, Params, State
from multiverse_jax.components.packets import PacketState
from multiverse_jax.components.ports import PortState
from multiverse_jax.ops import marking, nic, pfc, queues
from multiverse_jax.ops.lockstep import while_any
from multiverse_jax.ops.packets import at_host, in_flight, serialization_ps
from multiverse_jax.ops.routing import route
from multiverse_jax.ops.segments import count_by
from multiverse_jax.units import NEVER


class Departures(NamedTuple):
    """What each port does this round: arrays (P,)."""

    start: jnp.ndarray  # int64 when the port starts its chosen packet (may be past the window)
    use_ctrl: jnp.ndarray  # bool the chosen class is control
    data_class: jnp.ndarray  # int32 the chosen data class (0 when control is chosen)
    sends: jnp.ndarray  # bool a packet starts inside the window
    is_data: jnp.ndarray  # bool it is a data packet (not an ACK)
    creates: jnp.ndarray  # bool a NIC puts a new data packet on the wire (so it has no slot yet)
    pool_full: jnp.ndarray  # bool a NIC would create a packet but its host has no free slot
    slot: jnp.ndarray  # int32 pool slot of the packet (a NIC's new packet: the free slot it takes)
    wire_bytes: jnp.ndarray  # int32 its wire size
    ser_ps: jnp.ndarray  # int64 its serialisation time
    arrival_ps: jnp.ndarray  # int64 when its last bit reaches the far end
    scheduled_ps: jnp.ndarray  # int64 when that arrival is scheduled (``PacketState.pkt_scheduled_ps``)
    prior_ps: jnp.ndarray  # int64 when what scheduled it was scheduled (``PacketState.pkt_prior_ps``)
    busy_rank: jnp.ndarray  # int32 the port's busy-period rank after this departure (``PortState``)
    rank: jnp.ndarray  # int32 the rank of the packet's arrival at the far end: its link train's


def _nic_host(params: Params):
    """(P,) int32 the host whose NIC each port is (0 for switch ports), (P,) bool a NIC port."""
    return jnp.maximum(params.ports.port_host, 0), params.ports.port_host >= 0


def class_heads(params: Params, state: State, offer: nic.NicOffer, order: queues.ServiceOrder, head, window_start_ps):
    """The candidate packet of every class queue of every port: (P, 1 + C) int64 when it
    is (or becomes) available, (P, 1 + C) int32 its slot and (P, 1 + C) bool whether it
    is a NIC's offer (a data packet not created yet); class 0 is control, 1 + k data
    priority k. The earliest-queued packet of the class (NEVER and n_slots if none: the
    packet under the queue's pointer ``head`` (Q,) in the window's ``order``); at a
    NIC, in a data class k, the packet its NIC offers (``offer``, (H, C)) unless a queued
    ACK of that class (only with ``packet.ack_class=data``) can start no later than the
    offer could: the NIC serves its ACKs ahead of its data (htsim's host queue gives ACKs
    high priority), non-preemptively, and PFC pauses both.
    """
    n_ports, n_classes = params.static.n_ports, 1 + params.static.n_data_classes
    head_ps, head_slot = queues.heads(order, head, params.static.n_slots)
    head_ps, head_slot = head_ps.reshape(n_ports, n_classes), head_slot.reshape(n_ports, n_classes)
    host, is_nic = _nic_host(params)
    is_offer = is_nic[:, None] & ~_nic_ack_first(params, state, head_ps[:, 1:], offer.ready_ps[host], window_start_ps)
    data_ps = jnp.where(is_offer, offer.ready_ps[host], head_ps[:, 1:])
    data_slot = jnp.where(is_offer, offer.slot[host][:, None], head_slot[:, 1:])
    return (
        jnp.concatenate([head_ps[:, :1], data_ps], axis=1),
        jnp.concatenate([head_slot[:, :1], data_slot], axis=1),
        jnp.concatenate([jnp.zeros_like(is_offer[:, :1]), is_offer], axis=1),
    )


def _nic_ack_first(params: Params, state: State, ack_ps, offer_ps, window_start_ps):
    """(P, C) bool: at a NIC port, the queued ACK of a data class (available at ``ack_ps``,
    NEVER if none) starts before the NIC's offer (``offer_ps``): it can start no later
    than the offer could (port free, PFC release), ties to the ACK. Only
    ``packet.ack_class=data`` puts ACKs in data classes; otherwise nothing is computed."""
    free_ps = jnp.maximum(state.ports.port_free_ps, window_start_ps)[:, None]

    def start(ready_ps):
        earliest = jnp.maximum(free_ps, ready_ps)
        return jnp.stack([pfc.release_ps(params, state, earliest[:, c]) for c in range(ready_ps.shape[1])], axis=1)

    return jax.lax.cond(
        params.ack_in_data_class,
        lambda: (ack_ps != NEVER) & (start(ack_ps) <= start(offer_ps)),
        lambda: jnp.zeros(ack_ps.shape, bool),
    )


def start_times(params: Params, state: State, ready_ps, window_start_ps):
    """Each port's start time (P,) int64 and chosen class (P,) int32 in 0..C, from the
    availability of its class candidates ``ready_ps`` (P, 1 + C) (``class_starts``)."""
    class_start = class_starts(params, state, state.ports.port_free_ps, ready_ps, window_start_ps)
    # Non-preemptive strict priority: the class that can start first; among classes that
    # can start at the same time (all waiting when the port falls free), the highest.
    chosen = jnp.argmin(class_start, axis=-1)  # ties go to the lowest class: control, then priority 0
    return jnp.min(class_start, axis=-1), chosen


def class_starts(params: Params, state: State, free_ps, ready_ps, window_start_ps):
    """(..., P, 1 + C) when each class of each port can start, the port falling free at
    ``free_ps`` (..., P) and the classes' candidates available at ``ready_ps`` (..., P, 1 + C).

    A class can start at max(port free, candidate available), and a data class not before
    its PFC release. A data packet that could have started before the window would have
    started in the previous one, unless PFC held it: its start is at least the window
    start, which is also as far back as the PFC history must reach.
    """
    ctrl_start = jnp.maximum(free_ps, ready_ps[..., 0])
    data_start = [
        pfc.release_ps(params, state, jnp.maximum(jnp.maximum(free_ps, ready_ps[..., 1 + c]), window_start_ps))
        for c in range(params.static.n_data_classes)
    ]
    return jnp.stack([ctrl_start] + data_start, axis=-1)


def depart(
    params: Params, state: State, offer: nic.NicOffer, start, chosen, heads, window_end_ps, head_packet
) -> Departures:
    """What each port starts: the chosen class's candidate (``heads``: ``class_heads``'
    slots, offer flags and availability times, (P, 1 + C) each; ``head_packet``: the
    queued packet at the head of the chosen class; with switch.pipeline=serial, its rank
    is the order it left its switch's pipeline in, ``forward.pipeline_ranks``), if it
    starts inside the window; its wire size and serialisation; its arrival at the far
    end, when that arrival is scheduled and its rank. A NIC whose host has no free slot
    starts nothing (``ERROR_POOL_FULL``)."""
    class_slot, class_is_offer, class_ready_ps = (
        jnp.take_along_axis(a, chosen[:, None], axis=1)[:, 0] for a in heads
    )  # the chosen class's, (P,) each
    host, _ = _nic_host(params)
    use_ctrl = chosen == 0
    data_class = jnp.maximum(chosen - 1, 0)
    sends = start < window_end_ps
    creates = sends & class_is_offer
    pool_full = creates & ~offer.has_slot[host]
    sends, creates = sends & ~pool_full, creates & ~pool_full
    slot = class_slot
    is_data = creates | ~head_packet.is_ack
    wire_bytes = jnp.where(creates, offer.wire_bytes[host, data_class], head_packet.wire_bytes)
    arriving_rank = jnp.where(creates, offer.flow[host, data_class], head_packet.rank)
    return Departures(
        start, use_ctrl, data_class, sends, is_data, creates, pool_full, slot, wire_bytes,
        *_on_wire(params, state.ports, start, wire_bytes, class_ready_ps, arriving_rank),
    )  # fmt: skip


def _on_wire(params: Params, ports, start, wire_bytes, available_ps, arriving_rank):
    """The ``Departures`` fields from ``ser_ps`` on, (P,) each, of packets of ``wire_bytes``
    that ports whose state is ``ports`` start at ``start`` (available at the port at
    ``available_ps``, of rank ``arriving_rank``)."""
    ser_ps = serialization_ps(wire_bytes, params.links.link_rate_bps)
    arrival_ps = start + ser_ps + params.links.link_delay_ps
    # A link delivers in order: the arrival is scheduled when the last bit leaves, or, while
    # the previous packet is still on the wire, when that one arrives (htsim's Pipe).
    scheduled_ps = jnp.maximum(start + ser_ps, ports.port_last_arrival_ps)
    fresh_link = start + ser_ps >= ports.port_last_arrival_ps
    prior_ps = jnp.where(fresh_link, start, ports.port_last_scheduled_ps)
    busy_rank, rank = _ranks(ports, available_ps, arriving_rank, start + ser_ps)
    return ser_ps, arrival_ps, scheduled_ps, prior_ps, busy_rank, rank


def _ranks(ports, available_ps, arriving_rank, last_bit_ps):
    """(P,) each port's busy-period rank after its departure and (P,) the rank of the
    departing packet's arrival at the far end (see ``PortState.port_busy_rank``), from the
    departing packet's availability ``available_ps`` and rank ``arriving_rank`` (a NIC's
    new packet: its flow's index) and the instant its last bit leaves."""
    busy_rank = jnp.where(ports.port_free_ps <= available_ps, arriving_rank, ports.port_busy_rank)
    new_train = last_bit_ps >= ports.port_last_arrival_ps
    return busy_rank, jnp.where(new_train, busy_rank, ports.port_train_rank)


def watch_queues(params: Params, state: State, sampled, at_ps, queue_bytes, leaving_bytes) -> State:
    """Each port's queue at an instant the engine samples it (``sampled`` (P,) bool, at
    ``at_ps``: a departure start or the window end): ``queue_bytes`` (P,) just before it,
    ``leaving_bytes`` (P,) what that instant's departure takes out (0 at the window end).
    Updates the largest queue and the overflow counters, and sets ``ERROR_BUFFER_OVERFLOW`` where ``switch.overflow=error``.

    Between two samples a queue only grows (arrivals; it shrinks only at departure starts),
    so the samples give its exact maximum, the exact number of times it rose above the
    buffer, and the exact end of each such period (the departure that takes it back within
    the buffer). The period is counted from the first sample that sees it, the port's
    next departure start or the window end after the arrival that crossed the buffer: at
    most one packet's serialisation later on a port that is sending, one window on a port
    PFC holds. So the time above the buffer is a lower bound, short by at most that much
    per event, and exact when the crossing arrival coincides with a departure start.
    """
    ports = state.ports
    buffer_bytes = params.ports.port_buffer_bytes
    was_over = ports.port_over_since_ps != NEVER
    over = sampled & (queue_bytes > buffer_bytes)
    since_ps = jnp.where(queue_bytes - leaving_bytes > buffer_bytes, at_ps, NEVER)
    return state.replace(
        ports=ports.replace(
            port_max_queue_bytes=jnp.where(
                sampled, jnp.maximum(ports.port_max_queue_bytes, queue_bytes), ports.port_max_queue_bytes
            ),
            port_overflow_events=ports.port_overflow_events + (over & ~was_over).astype(jnp.int32),
            port_over_buffer_ps=ports.port_over_buffer_ps
            + jnp.where(sampled & was_over, at_ps - ports.port_over_since_ps, 0),
            port_over_since_ps=jnp.where(sampled, since_ps, ports.port_over_since_ps),
        ),
        error=state.error | jnp.where(params.overflow_is_error & jnp.any(over), ERROR_BUFFER_OVERFLOW, 0),
    )


def port_after(ports, dep: Departures):
    """The port fields a departure sets (P,): when the port falls free, bytes sent, its
    link's last arrival and the ranks of its busy period and train (where ``dep.sends``)."""
    sends = dep.sends
    return ports.replace(
        port_free_ps=jnp.where(sends, dep.start + dep.ser_ps, ports.port_free_ps),
        port_tx_bytes=ports.port_tx_bytes + jnp.where(sends, dep.wire_bytes, 0),
        port_last_arrival_ps=jnp.where(sends, dep.arrival_ps, ports.port_last_arrival_ps),
        port_busy_rank=jnp.where(sends, dep.busy_rank, ports.port_busy_rank),
        port_train_rank=jnp.where(sends, dep.rank, ports.port_train_rank),
        port_last_scheduled_ps=jnp.where(sends, dep.scheduled_ps, ports.port_last_scheduled_ps),
    )


def account(params: Params, state: State, run: "Run") -> State:
    """Port counters after a round's runs (``run``: (M, P) departures in the order each
    port starts them, and the queue just before each): the queue watch at each
    departure, then the fields the last departure leaves (``port_after``); the pool
    error bit; the packet-hop count."""
    dep = run.dep
    for i in range(dep.sends.shape[0]):  # in the order each port starts them: the watch is a recurrence
        state = watch_queues(params, state, dep.sends[i], dep.start[i], run.queue_bytes[i], dep.wire_bytes[i])
    sent = run.ports
    ports = state.ports.replace(
        port_free_ps=sent.port_free_ps, port_tx_bytes=sent.port_tx_bytes,
        port_last_arrival_ps=sent.port_last_arrival_ps, port_busy_rank=sent.port_busy_rank,
        port_train_rank=sent.port_train_rank, port_last_scheduled_ps=sent.port_last_scheduled_ps,
    )  # fmt: skip
    return state.replace(
        ports=ports,
        error=state.error | jnp.where(jnp.any(dep.pool_full), ERROR_POOL_FULL, 0),
        n_packet_hops=state.n_packet_hops + jnp.sum(dep.sends),
    )


class Run(NamedTuple):
    """The packets each port starts in a round, one after another: (M, P) each, row 0 the
    round's choice (``depart``), rows 1.. the packets that follow it from the same queue
    (``follow``)."""

    dep: Departures  # (M, P) each; a row's ``sends`` is False once the run has ended
    packet: queues.QueuedPacket  # (M, P) each: the queued packet of each departure (row 0: ``at_head``)
    queue_bytes: jnp.ndarray  # (M, P) int64 the port's queue just before each departure, it included
    tx_bytes: jnp.ndarray  # (M, P) int64 the port's bytes sent after each departure (it included)
    ends: jnp.ndarray  # (M, Q) int32 one past each queue's packets arrived by each row's start (``queues.arrived_by``)
    ports: PortState  # (P,) each: the ports after the run's last departure (``port_after``)


def run_rows(static) -> int:
    """M: the packets a port may start in one round (``Static.run_packets``); one where a
    departure's telemetry looks ahead at the pool (``queue_at_end``)."""
    return 1 if static.int_queue_with_packet else static.run_packets


class Follow(NamedTuple):
    """The packets behind each port's first departure in its queue: (R, P) each, R = M - 1."""

    in_queue: jnp.ndarray  # bool there is one
    slot: jnp.ndarray  # int32 its pool slot
    available_ps: jnp.ndarray  # int64 its arrival at the port (the window's end past the queue)
    packet: queues.QueuedPacket  # each its fields
    ser_ps: jnp.ndarray  # int64 its serialisation
    start: jnp.ndarray  # int64 when it starts if the port serves it next, as FIFO (the max-plus scan)
    free_ps: jnp.ndarray  # int64 when the port falls free before it (the departure before ends)


def behind(params: Params, order, head, first: Departures, chosen, window_end_ps) -> Follow:
    """The next R packets of each port's chosen queue (class ``chosen`` (P,)) behind the
    first departure, and their starts as one FIFO: start_i = max(available_i, start_(i-1)
    + ser_(i-1)), a max-plus recurrence solved in closed form: with T_i the
    serialisations of the packets before i (from the first on), start_i = T_i +
    max(first's end, max over j <= i of available_j - T_j), a cumsum and a cummax."""
    n_ports, n_classes = params.static.n_ports, 1 + params.static.n_data_classes
    n_rows = run_rows(params.static) - 1
    chosen_queue = n_classes * jnp.arange(n_ports) + chosen
    position = head[chosen_queue] + jnp.arange(1, n_rows + 1, dtype=head.dtype)[:, None]  # (R, P)
    in_queue = position < order.queue_end[chosen_queue]
    at = jnp.minimum(position, order.slot.shape[0] - 1)
    # When the first's last bit leaves (where it starts nothing: any time, no row follows
    # it). Past the queue: the window's end (no such row is sent), keeping the sums small.
    end_ps = jnp.where(first.sends, first.start + first.ser_ps, window_end_ps)
    available_ps = jnp.where(in_queue, order.time_ps[at], window_end_ps)
    packet = queues.QueuedPacket(*(column[at] for column in order.packet))
    ser_ps = serialization_ps(packet.wire_bytes, params.links.link_rate_bps)
    before_ps = jnp.cumsum(ser_ps, axis=0) - ser_ps  # (R, P) T: serialisations of the rows before
    start = before_ps + jnp.maximum(end_ps, jax.lax.cummax(available_ps - before_ps, axis=0))
    free_ps = jnp.concatenate([end_ps[None], (start + ser_ps)[:-1]])
    return Follow(in_queue, order.slot[at], available_ps, packet, ser_ps, start, free_ps)


def still_chosen(params: Params, held, nxt: Follow, chosen, class_ready_ps, run_offer_ps, window_start_ps):
    """(R, P) bool: the rounds after this one would start each packet behind the first
    where ``nxt`` says, it being the one chosen. When the port falls free, its class
    starts first (ties to the lower class, ``start_times``), at its FIFO start (not held
    later by PFC), and at a NIC before the class's offer (the queued ACK first).
    Other classes start with their earliest candidate (``class_ready_ps`` (P, 1 + C)):
    a start is monotone in availability.

    PFC's releases come from ``held`` (``pfc.held_until_ps`` at the first's end): exact
    before the port's next pause, and a lower bound after it. The run's own start must
    be exact; another class's bound that loses to it means the class itself loses; an
    offer not known to lose stops the run (the next round decides it exactly)."""
    n_classes = 1 + params.static.n_data_classes
    in_run_class = jnp.arange(n_classes) == chosen[:, None]  # (P, 1 + C)
    ready_ps = jnp.where(in_run_class, nxt.available_ps[..., None], class_ready_ps)  # (R, P, 1 + C)
    free_ps = nxt.free_ps[..., None]
    data_ps = jnp.maximum(jnp.maximum(free_ps, ready_ps[..., 1:]), window_start_ps)
    data_start, data_exact = pfc.release_bound(held[0][:, None], held[1][:, None], data_ps)
    class_start = jnp.concatenate([jnp.maximum(free_ps, ready_ps[..., :1]), data_start], axis=-1)
    run_exact = (chosen == 0) | jnp.take_along_axis(data_exact, jnp.maximum(chosen - 1, 0)[None, :, None], axis=-1)[..., 0]
    offer_ps = jnp.maximum(jnp.maximum(nxt.free_ps, run_offer_ps), window_start_ps)
    offer_start, offer_exact = pfc.release_bound(held[0], held[1], offer_ps)
    offer_first = (chosen > 0) & (run_offer_ps != NEVER) & (~offer_exact | (offer_start < nxt.start))
    first_class = jnp.argmin(class_start, axis=-1)  # ties to the lower class, as start_times
    return nxt.in_queue & (first_class == chosen) & run_exact & (jnp.min(class_start, axis=-1) == nxt.start) & ~offer_first


def queues_behind(order, head, end0, nxt: Follow, first: Departures, n_ports: int):
    """(R, P) int64 each port's queue just before each packet behind the first, it
    included, (R, Q) where each queue's arrived packets end then, and (R, P) bool whether
    they are known: the packets arrived since the first's start (``end0`` (Q,) one past
    those arrived by then) are counted among the next ``queues.PROBES`` of each queue.
    Where as many have arrived, the run stops there (the next round searches further)."""
    n_queues = head.shape[0]
    probe = end0[:, None] + jnp.arange(queues.PROBES, dtype=end0.dtype)  # (Q, PROBES)
    probe_ps = jnp.where(probe < order.queue_end[:, None], order.time_ps[jnp.minimum(probe, order.slot.shape[0] - 1)], NEVER)
    start = jnp.repeat(nxt.start, n_queues // n_ports, axis=-1)  # (R, Q)
    count = jnp.sum(probe_ps <= start[..., None], axis=-1, dtype=end0.dtype)
    known = ~jnp.any((count == queues.PROBES).reshape(count.shape[:-1] + (n_ports, -1)), axis=-1)
    ends = end0 + count
    arrived = (order.bytes_before[ends] - order.bytes_before[head]).reshape(count.shape[:-1] + (n_ports, -1)).sum(-1)
    wire = nxt.packet.wire_bytes.astype(jnp.int64)
    left_before = first.wire_bytes.astype(jnp.int64) + jnp.cumsum(wire, axis=0) - wire  # the run's packets before
    return arrived - left_before, ends, known


def departures_behind(params: Params, first: Departures, nxt: Follow, sends) -> Departures:
    """(R, P) each: the ``Departures`` of the packets behind the first (``nxt``), those
    ``sends`` (R, P) started. Each row's link and rank fields follow from the row before
    (``_on_wire``, ``_ranks``), in closed form along the run: a busy period begins at a
    packet that finds the port free, a train at one whose last bit leaves once the one
    before has arrived, and each row takes the rank of the latest that began."""
    end_ps = nxt.start + nxt.ser_ps  # its last bit leaves
    arrival_ps = end_ps + params.links.link_delay_ps
    arrival_before = jnp.concatenate([first.arrival_ps[None], arrival_ps[:-1]])
    scheduled_ps = jnp.maximum(end_ps, arrival_before)
    fresh_link = end_ps >= arrival_before
    prior_ps = jnp.where(fresh_link, nxt.start, jnp.concatenate([first.scheduled_ps[None], scheduled_ps[:-1]]))
    busy_rank = _latest(first.busy_rank, nxt.packet.rank, nxt.free_ps <= nxt.available_ps)
    rank = _latest(first.rank, busy_rank, fresh_link)
    zeros = jnp.zeros_like(sends)
    return Departures(
        nxt.start, jnp.broadcast_to(first.use_ctrl, sends.shape), jnp.broadcast_to(first.data_class, sends.shape),
        sends, ~nxt.packet.is_ack, zeros, zeros, nxt.slot, nxt.packet.wire_bytes, nxt.ser_ps, arrival_ps,
        scheduled_ps, prior_ps, busy_rank, rank,
    )  # fmt: skip


def _latest(base, values, begins):
    """(R, P): at each row, ``values`` at the latest row up to it where ``begins`` (R, P),
    or ``base`` (P,) where none has."""
    row = jnp.arange(1, values.shape[0] + 1, dtype=jnp.int32)[:, None]
    latest = jax.lax.cummax(jnp.where(begins, row, 0), axis=0)
    return jnp.take_along_axis(jnp.concatenate([base[None], values]), latest, axis=0)


def _class_ready(params: Params, order, head, offer):
    """(P, 1 + C) when each class's earliest candidate is available (a NIC's data class:
    its queued ACK or its offer), and (P, C) each NIC's offers (NEVER elsewhere)."""
    n_ports, n_classes = params.static.n_ports, 1 + params.static.n_data_classes
    host, is_nic = _nic_host(params)
    head_ps, _ = queues.heads(order, head, params.static.n_slots)
    head_ps = head_ps.reshape(n_ports, n_classes)
    offer_ps = jnp.where(is_nic[:, None], offer.ready_ps[host], NEVER)
    return jnp.concatenate([head_ps[:, :1], jnp.minimum(head_ps[:, 1:], offer_ps)], axis=1), offer_ps


def follow(params: Params, state: State, order, head, hint, first: Departures, chosen, offer, head_packet, window_end_ps) -> Run:
    """Each port's run: the round's departure ``first`` (class ``chosen`` (P,)), then the
    packets queued behind it in the same class queue, as many of the next
    ``Static.run_packets - 1`` as the rounds after this one would start, one a round;
    with the queue just before each (``hint``: the last round's ``Run.ends[-1]``).

    Nothing a port's later rounds read changes in between but the port's own fields
    (``port_after``) and its queue pointer: other queues' heads stay, and a NIC's offers
    change only when it creates a packet (a run never follows one). So the run is the
    FIFO recurrence of its queue (``behind``), cut at the first packet the rounds would
    not start there (``still_chosen``, ``queues_behind``) or past the window. All of it
    is arrays over (R, P): scans along the run, no loop.
    """
    n_ports = params.static.n_ports
    # The first's queue: everything queued at the port that has arrived by its start, it included.
    queue_bytes, end0 = queues.arrived_bytes(order, head, n_ports, first.start, hint)
    ports = port_after(state.ports, first)
    if run_rows(params.static) == 1:
        one = lambda x: x[None]  # noqa: E731
        return Run(jax.tree.map(one, first), jax.tree.map(one, head_packet), one(queue_bytes), one(ports.port_tx_bytes), one(end0), ports)
    window_start_ps = window_end_ps - params.window_ps
    class_ready_ps, offer_ps = _class_ready(params, order, head, offer)
    run_offer_ps = jnp.take_along_axis(jnp.concatenate([jnp.full_like(offer_ps[:, :1], NEVER), offer_ps], axis=1), chosen[:, None], axis=1)[:, 0]
    nxt = behind(params, order, head, first, chosen, window_end_ps)
    held = pfc.held_until_ps(params, state, jnp.maximum(nxt.free_ps[0], window_start_ps))
    chosen_next = still_chosen(params, held, nxt, chosen, class_ready_ps, run_offer_ps, window_start_ps)
    next_queue_bytes, ends, known = queues_behind(order, head, end0, nxt, first, n_ports)
    starts = chosen_next & known & (nxt.start < window_end_ps)
    sends = (first.sends & ~first.creates) & (jnp.cumsum(~starts, axis=0) == 0)  # (R, P) up to the first that does not
    rows = departures_behind(params, first, nxt, sends)
    first_tx_bytes = ports.port_tx_bytes
    tx_bytes = first_tx_bytes + jnp.cumsum(jnp.where(sends, rows.wire_bytes, 0), axis=0)
    n_behind = jnp.sum(sends, axis=0)[None]  # (1, P) the row each port's run ends at (0: the first)

    def last(column, rows_column):  # (P,) a port field after the run's last departure
        return jnp.take_along_axis(jnp.concatenate([column[None], rows_column]), n_behind, axis=0)[0]

    ports = ports.replace(
        port_free_ps=last(ports.port_free_ps, rows.start + rows.ser_ps), port_tx_bytes=last(ports.port_tx_bytes, tx_bytes),
        port_last_arrival_ps=last(ports.port_last_arrival_ps, rows.arrival_ps),
        port_busy_rank=last(ports.port_busy_rank, rows.busy_rank), port_train_rank=last(ports.port_train_rank, rows.rank),
        port_last_scheduled_ps=last(ports.port_last_scheduled_ps, rows.scheduled_ps),
    )  # fmt: skip
    both = lambda one, more: jnp.concatenate([one[None], more])  # noqa: E731
    return Run(
        jax.tree.map(both, first, rows), jax.tree.map(both, head_packet, nxt.packet), both(queue_bytes, next_queue_bytes),
        both(first_tx_bytes, tx_bytes), both(end0, ends), ports,
    )  # fmt: skip


def int_queue_wanted(params: Params):
    """() bool the experiment's telemetry records the queue as the packet's last bit leaves
    (HPCC with hpcc.int_queue=with_packet)."""
    return (params.cc_kind == CC_HPCC) & params.cc.hpcc_int_queue_with_packet


def upcoming_egress(params: Params, pkts: PacketState):
    """(S_total,) int32 the egress port each packet in flight to a switch will be queued at
    (n_ports: none). Packets in flight as transmit starts stay so all window (forward has
    queued those that arrive before its end), so this holds for every round. Computed only
    when some experiment of the batch records the queue with the departing packet
    (``Static.int_queue_with_packet``); None otherwise."""
    if not params.static.int_queue_with_packet:
        return None
    n_ports = params.static.n_ports
    node = params.links.link_dst_node[pkts.pkt_port]
    dst_host = jnp.where(pkts.pkt_is_ack, params.flows.flow_src[pkts.pkt_flow], params.flows.flow_dst[pkts.pkt_flow])
    egress = route(params, node, dst_host, pkts.pkt_flow, pkts.pkt_is_ack, pkts.pkt_hop + 1, pkts.pkt_path_salt)
    return jnp.where(in_flight(pkts) & ~at_host(params, pkts), egress, n_ports).astype(jnp.int32)


def queue_at_end(params: Params, pkts: PacketState, dep: Departures, queue_bytes, order, head, arrived, upcoming):
    """(P,) the queue of each port as its departing packet's last bit leaves, the packet
    still counted (htsim's completeService): what was queued by then (from the window's
    ``order``, each queue's pointer ``head`` and ``arrived`` (Q,), its end at the
    departure's start), the packets in flight to it (``upcoming``) that arrive by then
    included. ``queue_bytes`` where not wanted. Arrays (1, P) and (1, Q): a port starts
    one packet a round when this is wanted (``Static.run_packets`` 1)."""
    if upcoming is None:
        return queue_bytes
    n_ports = params.static.n_ports
    end_ps = dep.start[0] + dep.ser_ps[0]
    queued_by_end, _ = queues.arrived_bytes(order, head, n_ports, end_ps - 1, arrived[0])  # an arrival at that instant comes after
    arrives = (upcoming < n_ports) & (pkts.pkt_time_ps < end_ps[jnp.minimum(upcoming, n_ports - 1)])
    int_queue = queued_by_end + count_by(arrives, upcoming, n_ports, pkts.pkt_bytes.astype(jnp.int64))
    return jnp.where(int_queue_wanted(params), int_queue, queue_bytes[0])[None]


def leave(params: Params, pkts: PacketState, dep: Departures, queue_bytes, tx_bytes, int_queue, head_packet) -> PacketState:
    """The queued packet each port starts goes on the wire (in flight until ``arrival_ps``);
    a data packet leaving a switch is ECN-marked (RED on the queue it leaves behind) and
    records its in-band telemetry for this hop (``tx_bytes`` (P,): the port's bytes sent,
    this packet included; the queue it leaves behind, or ``int_queue`` with
    hpcc.int_queue=with_packet).

    A NIC's new packet (``dep.creates``) goes on the wire here too, in the free slot it
    takes: its wire fields and its cleared ECN mark are written with the departures', so
    a round writes each of these columns once (``nic_emit`` writes the rest of it).

    One write per port, to a slot no other port touches (a port only ever starts a packet
    queued at it, or a new one in its host's next free slot), so the scatters have no
    conflicts. Ports that start nothing write nowhere.
    """
    n_slots = params.static.n_slots
    _, is_nic = _nic_host(params)
    leaving = jnp.where(dep.sends, dep.slot, n_slots)
    at_switch = dep.sends & dep.is_data & ~is_nic
    left_behind = queue_bytes - dep.wire_bytes
    marked = at_switch & marking.ecn_mark(params, left_behind, head_packet.flow, head_packet.seq, head_packet.hop)
    on_wire = pkts.replace(
        pkt_in_flight=pkts.pkt_in_flight.at[leaving].set(True, mode="drop"),
        pkt_time_ps=pkts.pkt_time_ps.at[leaving].set(dep.arrival_ps, mode="drop"),
        pkt_scheduled_ps=pkts.pkt_scheduled_ps.at[leaving].set(dep.scheduled_ps, mode="drop"),
        pkt_rank=pkts.pkt_rank.at[leaving].set(dep.rank, mode="drop"),
        pkt_prior_ps=pkts.pkt_prior_ps.at[leaving].set(dep.prior_ps, mode="drop"),
        # Marked at this hop, or new (unmarked); a queued packet not marked here keeps its mark.
        pkt_ecn=pkts.pkt_ecn.at[jnp.where(marked | dep.creates, dep.slot, n_slots)].set(marked, mode="drop"),
    )
    int_qlen = jnp.where(int_queue_wanted(params), int_queue, left_behind)
    return marking.record_telemetry(params, on_wire, at_switch, dep.slot, head_packet.hop, dep.start, tx_bytes, int_qlen)


def host_creates(params: Params, dep: Departures):
    """(H,) bool each host's NIC port puts a new data packet on the wire this round."""
    nic_port = params.nics.nic_port
    return dep.creates[nic_port] & (params.ports.port_host[nic_port] == jnp.arange(params.static.n_hosts))


def nic_emit(params: Params, state: State, offer: nic.NicOffer, dep: Departures) -> State:
    """Each host (H,) whose NIC port started a new data packet creates it from its offer
    for the chosen class (``leave`` has put it on the wire)."""
    nic_port = params.nics.nic_port
    creates = host_creates(params, dep)
    host_offer = nic.of_class(offer, dep.data_class[nic_port])
    return nic.emit(params, state, host_offer, creates, dep.start[nic_port], dep.ser_ps[nic_port])


class Serving(NamedTuple):
    """The carry of the window's rounds: the state and what the window's start fixed."""

    state: State
    head: jnp.ndarray  # (Q,) int32 each class queue's next position in the window's service order
    arrived: jnp.ndarray  # (Q,) int32 one past each queue's last packet arrived by its port's last round's start
    used: jnp.ndarray  # (H,) int32 free slots each host has taken this window (``nic.FreeSlots``)
    sent: jnp.ndarray  # () bool some port started a packet in the last round


def serve_round(params: Params, serving: Serving, window_end_ps, order, free, upcoming) -> Serving:
    """One round: every port starts at most one packet. ``order``: the window's
    ``queues.service_order``; ``free``: its ``nic.free_slots``; ``upcoming``: see
    ``upcoming_egress``. Its cost is per port and per flow, not per pool slot."""
    state, head, used = serving.state, serving.head, serving.used
    n_ports, n_classes = params.static.n_ports, 1 + params.static.n_data_classes
    window_start_ps = window_end_ps - params.window_ps
    offer = nic.offer(params, state, window_start_ps, free, used)  # (H, C)
    ready_ps, class_slot, class_is_offer = class_heads(params, state, offer, order, head, window_start_ps)  # (P, 1 + C)
    start, chosen = start_times(params, state, ready_ps, window_start_ps)  # (P,)
    chosen_queue = n_classes * jnp.arange(n_ports) + chosen
    head_packet = queues.at_head(order, head, chosen_queue)  # (P,) each: what a port serving its queue sends
    heads = (class_slot, class_is_offer, ready_ps)
    dep = depart(params, state, offer, start, chosen, heads, window_end_ps, head_packet)
    # The last round's ends start the queue's search: a port's next departure starts no earlier.
    run = follow(params, state, order, head, serving.arrived, dep, chosen, offer, head_packet, window_end_ps)  # (M, P)
    int_queue = queue_at_end(params, state.packets, run.dep, run.queue_bytes, order, head, run.ends, upcoming)
    state = account(params, state, run)
    state = state.replace(packets=leave(params, state.packets, run.dep, run.queue_bytes, run.tx_bytes, int_queue, run.packet))
    state = nic_emit(params, state, offer, dep)
    # The queue a port served moves its pointer past its run; a host that created a packet took its next free slot.
    served = jnp.sum(run.dep.sends & ~run.dep.creates, axis=0, dtype=head.dtype)  # (P,)
    # The next round's search starts from each queue's ends at its port's last departure.
    last = jnp.repeat(jnp.maximum(jnp.sum(run.dep.sends, axis=0) - 1, 0), n_classes)  # (Q,)
    arrived = jnp.take_along_axis(run.ends, last[None, :], axis=0)[0]
    return Serving(state, head.at[chosen_queue].add(served), arrived, used + host_creates(params, dep), jnp.any(dep.sends))


def window_start(params: Params, state: State, window_end_ps):
    """What the window's rounds start from: the ``Serving`` carry, and what every round
    reads (``serve_round``'s ``order``, ``free`` and ``upcoming``)."""
    order = queues.service_order(params, state.packets, window_end_ps, state.order)
    free = nic.free_slots(params, state.packets)
    upcoming = upcoming_egress(params, state.packets)
    start = queues.queue_start(order)
    serving = Serving(state, start, start, jnp.zeros(params.static.n_hosts, jnp.int32), jnp.bool_(True))
    return serving, order, free, upcoming


def transmit(params: Params, state: State, window_end_ps) -> State:
    serving, order, free, upcoming = window_start(params, state, window_end_ps)
    # A round in which no port sends changes nothing, so a lockstep batch runs rounds until
    # no experiment sends, without keeping each experiment's carry (ops/lockstep.while_any).
    serving = while_any(
        lambda consts, serving: serving.sent,
        lambda consts, serving: serve_round(consts[0], serving, *consts[1:]),
        serving,
        (params, window_end_ps, order, free, upcoming),
    )
    # The queue at the window's end closes the exact maximum (see watch_queues).
    everywhere = jnp.ones(params.static.n_ports, bool)
    end_bytes = queues.queued_bytes(order, serving.head, params.static.n_ports)
    state = watch_queues(params, serving.state, everywhere, window_end_ps, end_bytes, 0)
    if not queues.sort_sizes(params.static.n_slots):  # a pool this small is sorted whole every window
        return state
    return state.replace(order=queues.keep(order, serving.head, window_end_ps))
