"""Runs: the packets a port starts one after another in a transmit round.

A transmit round (``systems/transmit.py``) chooses, at every port, the packet it starts
next (its first departure). Until the port falls free again nothing its later rounds
read changes but the port's own fields (``port_after``) and its queue pointers: other
ports' queues stay, PFC's decisions of the window are known at its start, and a NIC's
offers change only when it creates a packet. So the packets that follow the first leave
as the port's class queues merged by non-preemptive strict priority: when the port falls
free, the class whose candidate starts first, ties to the lower class, each class a FIFO,
start_i = max(available_i, start_(i-1) + ser_(i-1)) (a max-plus recurrence, DESIGN.md,
"Time"). ``behind`` follows it row by row over the ports that run, up to the first packet
the later rounds would not start there (a NIC's offer starts first, PFC's release is not
known exactly, the window ends, or more packets arrived at the port than the run's queue
count can see). After a NIC creates a packet its next offers are not known, but none
starts before the port falls free, where a queued packet already waiting wins: so a run
follows a NIC's new packet too, through the queued packets (ACKs) waiting by then.

The run is work per port that runs, not per pool slot: up to ``run_ports`` ports with
packets behind their first run (``runners``), ``run_rows`` - 1 packets each; the others
start one packet this round and go on in the next, and a round where no port has a
packet behind its first runs none of it. Which ports run changes no result, only how many
rounds a window takes (``tests/test_runs.py``). ``build_batch`` turns runs on
(``Static.run_packets`` 8; ``sim.run_packets`` chooses otherwise): where ACKs queue with
data (htsim's configuration) 40 rounds a busy window become 7; with control-class ACKs,
whose strict priority cut a single-class run after a packet or two, the merged classes
take a k=8 permutation's windows from 9.8 rounds to 4.0 (``benchmarks/HISTORY.md``, stop 36).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.components.ports import PortState
from multiverse_jax.ops import lockstep, pfc, queues
from multiverse_jax.ops.packets import link_serialization_ps
from multiverse_jax.ops.segments import prefix_sum
from multiverse_jax.units import NEVER


class Departures(NamedTuple):
    """What each port starts: arrays (P,), or (R, K) for the packets behind (``behind``)."""

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


def port_after(ports: PortState, dep: Departures) -> PortState:
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


def run_rows(static) -> int:
    """M: the packets a port may start in one round (``Static.run_packets``); one where a
    departure's telemetry looks ahead at the pool (``systems.transmit.queue_at_end``)."""
    return 1 if static.int_queue_with_packet else static.run_packets


def run_ports(static) -> int:
    """K: the ports that may start more than one packet in a round (``Static.run_ports``,
    or by default max(32, P / 8))."""
    return min(static.n_ports, static.run_ports or max(32, static.n_ports // 8))


class Rows(NamedTuple):
    """What the runs behind the first departures add to a round: arrays (N,) over cells,
    the rows of the K ports that run ((R, K) flattened and padded to ``n_cells``: both
    ways of ``follow`` give one shape), and the ports after them."""

    dep: Departures  # (N,) each; a cell's ``sends`` is False once its run has ended, and in the padding
    port: jnp.ndarray  # (N,) int32 the port of each cell (P: none)
    packet: queues.QueuedPacket  # (N,) each: the queued packet of each departure
    queue_bytes: jnp.ndarray  # (N,) int64 the port's queue just before the departure, it included
    tx_bytes: jnp.ndarray  # (N,) int64 the port's bytes sent after it, it included
    ports: PortState  # (P,) each: the ports after their runs (``port_after``'s fields, the queue watch)
    over: jnp.ndarray  # () bool a queue the runs watched rose above its buffer
    served: jnp.ndarray  # (Q,) int32 the packets each class queue sent behind its port's first
    ends: jnp.ndarray  # (Q,) int32 one past each queue's packets arrived by its port's last departure


# The port fields the queue watch keeps (``PortState``), in ``watch``'s order.
WATCHED = ("port_max_queue_bytes", "port_overflow_events", "port_over_buffer_ps", "port_over_since_ps")


def watch(watched, buffer_bytes, sampled, at_ps, queue_bytes, leaving_bytes):
    """``systems.transmit.watch_queues`` over rows of samples, (R, K) each (K ports, any;
    ``watched`` and ``buffer_bytes`` (K,)), whose samples (``sampled``) are a prefix of
    the rows at each port, as a run's departures are (a round's: R = 1): the ``WATCHED``
    fields after them, and whether each queue is above its buffer at each (R, K). In
    closed form, not row after row: before each sample the queue is above its buffer
    since (``port_over_since_ps``) as the sample before left it."""
    max_queue_bytes, overflow_events, over_buffer_ps, over_since_ps = watched

    def before(since_after_ps):  # the row before's, the port's at the first
        return jnp.concatenate([over_since_ps[None], since_after_ps[:-1]])

    since_after_ps, over, new_event, over_ps = watch_samples(buffer_bytes, sampled, at_ps, queue_bytes, leaving_bytes, before)
    n_sampled = jnp.sum(sampled, axis=0)
    return (
        jnp.maximum(max_queue_bytes, jnp.max(jnp.where(sampled, queue_bytes, max_queue_bytes), axis=0)),
        overflow_events + jnp.sum(new_event, axis=0, dtype=jnp.int32),
        over_buffer_ps + jnp.sum(over_ps, axis=0),
        jnp.take_along_axis(jnp.concatenate([over_since_ps[None], since_after_ps]), n_sampled[None], axis=0)[0],
    ), over


def watch_samples(buffer_bytes, sampled, at_ps, queue_bytes, leaving_bytes, before):
    """The queue watch at each sample, element by element (any layout; ``before(values)``:
    each sample's value at the sample before it at its port, the port's
    ``port_over_since_ps`` at its first): the instant the queue is above its buffer since
    after it (NEVER: within it), whether it is above at the sample, whether that begins an
    overflow event, and the time above the buffer it closes (0 where not ``sampled``)."""
    since_after_ps = jnp.where(queue_bytes - leaving_bytes > buffer_bytes, at_ps, NEVER)  # each sample's own
    since_before_ps = before(since_after_ps)
    was_over = since_before_ps != NEVER
    over = sampled & (queue_bytes > buffer_bytes)
    return since_after_ps, over, over & ~was_over, jnp.where(sampled & was_over, at_ps - since_before_ps, 0)


class Behind(NamedTuple):
    """The packets behind the first departure of K ports, in the order the port would
    start them (its class queues merged by strict priority): (R, K) each, R = M - 1."""

    chosen_ok: jnp.ndarray  # bool the rounds after this one would start it there, as chosen (a queued packet, exact start)
    queue_class: jnp.ndarray  # int32 the class queue it comes from (0 control, 1 + k data priority k)
    slot: jnp.ndarray  # int32 its pool slot
    available_ps: jnp.ndarray  # int64 its arrival at the port
    packet: queues.QueuedPacket  # each its fields
    ser_ps: jnp.ndarray  # int64 its serialisation
    start: jnp.ndarray  # int64 when it starts
    free_ps: jnp.ndarray  # int64 when the port falls free before it (the departure before ends)


def behind(params: Params, order, head, first_end_ps, chosen, who, held, offer_ps, window_end_ps) -> Behind:
    """The next R packets that ports ``who`` (K,) start after their first departures
    (taken from class queue ``chosen`` (K,), 1 + C where it was a NIC's new packet;
    their last bits leave at ``first_end_ps`` (K,): the window's end where a port starts
    nothing), as the rounds after this one would choose them
    one by one (``systems.transmit.start_times``): when the port falls free, the class
    whose candidate starts first, ties to the lower class; a control packet at max(port
    free, its arrival), a data packet also not before the window start and its PFC
    release; each class queue a FIFO (a pointer per class moves along the window's
    ``order``). A row is ``chosen_ok`` where that choice is certain: a queued packet (a
    NIC's offer, ``offer_ps`` (K, C), NEVER at switches, is created only by a round) whose
    start is exact. PFC's releases come from ``held`` (``pfc.held_until_ps``, (K,) twice):
    exact before the port's next pause, a lower bound after it, so a class whose bound
    loses to the chosen start loses itself; a chosen start only bounded is not certain.
    The rows after the first that is not ``chosen_ok`` say nothing (the run ends there).

    A recurrence over the rows (R small steps over (K, 1 + C)): between one strict-priority
    choice and the next, the port's candidates change only by the class it served.
    """
    n_classes, n_rows = 1 + params.static.n_data_classes, run_rows(params.static) - 1
    assert params.static.first_queued_class == 0, "merged runs are for ports with rival class queues (control among them)"
    n_positions = order.slot.shape[0]
    window_start_ps = window_end_ps - params.window_ps
    queue, _ = queues.port_queues(params.static, who)  # (K, 1 + C)
    queue_end = order.queue_end[queue]
    position = head[queue] + (jnp.arange(n_classes) == chosen[:, None])  # the first's class: past it
    free_ps = first_end_ps
    # Candidates in order of precedence on ties: control, then per data class its queued
    # packet before its NIC's offer (a NIC serves a queued ACK of a class ahead of its data).
    # (Computed, not literal arrays: a function under ``lockstep.when_any`` may close over none.)
    candidate = jnp.arange(1 + 2 * (n_classes - 1), dtype=jnp.int32)
    candidate_class, is_offer = (candidate + 1) // 2, (candidate > 0) & (candidate % 2 == 0)
    rows = []
    for _ in range(n_rows):
        in_queue = position < queue_end
        available_ps = jnp.where(in_queue, order.time_ps[jnp.minimum(position, n_positions - 1)], NEVER)
        earliest_ps = jnp.maximum(free_ps[:, None], jnp.concatenate([available_ps, offer_ps], axis=1))
        data_start, data_exact = pfc.release_bound(held[0][:, None], held[1][:, None], jnp.maximum(earliest_ps[:, 1:], window_start_ps))
        control_start = earliest_ps[:, :1]
        queued_start, offer_start = data_start[:, : n_classes - 1], data_start[:, n_classes - 1 :]
        starts = jnp.concatenate([control_start, jnp.stack([queued_start, offer_start], axis=2).reshape(who.shape[0], -1)], axis=1)
        exact = jnp.concatenate([jnp.ones_like(control_start, bool), jnp.repeat(data_exact[:, : n_classes - 1], 2, axis=1)], axis=1)
        pick = jnp.argmin(starts, axis=1)  # ties to the earlier candidate
        start = jnp.take_along_axis(starts, pick[:, None], axis=1)[:, 0]
        queue_class = candidate_class[pick]
        at = jnp.minimum(jnp.take_along_axis(position, queue_class[:, None], axis=1)[:, 0], n_positions - 1)
        chosen_ok = ~is_offer[pick] & jnp.take_along_axis(exact, pick[:, None], axis=1)[:, 0] & (start != NEVER)
        wire_bytes = order.packet.wire_bytes[at]
        ser_ps = link_serialization_ps(params, wire_bytes, who)
        rows.append((chosen_ok, queue_class, at, start, ser_ps, free_ps))
        served = chosen_ok[:, None] & (jnp.arange(n_classes) == queue_class[:, None])
        position = position + served
        free_ps = jnp.where(chosen_ok, start + ser_ps, free_ps)
    chosen_ok, queue_class, at, start, ser_ps, free_before = (jnp.stack(column) for column in zip(*rows))
    packet = queues.QueuedPacket(*(column[at] for column in order.packet))
    return Behind(chosen_ok, queue_class, order.slot[at], order.time_ps[at], packet, ser_ps, start, free_before)


def _arrived_probes(order, low, end, at_ps, n_probes: int):
    """(R, n) how many of the ``n_probes`` positions of n queues from ``low`` (n,) on,
    before each queue's ``end`` (n,), have arrived by ``at_ps`` (R, n): a queue is sorted
    by arrival, so they are the first that many."""
    probe = low[:, None] + jnp.arange(n_probes, dtype=low.dtype)
    probe_ps = jnp.where(probe < end[:, None], order.time_ps[jnp.minimum(probe, order.slot.shape[0] - 1)], NEVER)
    return jnp.sum(probe_ps <= at_ps[..., None], axis=-1, dtype=low.dtype)


def queues_behind(order, head, end0, nxt: Behind, first_wire_bytes, who, n_classes: int, n_probes: int = queues.PROBES):
    """(R, K) int64 the queue of each port ``who`` (K,) just before each packet of ``nxt``,
    it included; (R, K (1 + C)) where its queues' arrived packets end then; and (R, K) bool
    whether that is known. What arrived since the first departure's start (``end0`` (Q,):
    one past each queue's packets arrived by then) is counted among the next
    ``queues.PROBES`` positions of each queue; where all of them have arrived, the run
    stops (the next round searches further)."""
    queue = (n_classes * who[:, None] + jnp.arange(n_classes)).reshape(-1)  # (K (1 + C),)
    start = jnp.repeat(nxt.start, n_classes, axis=-1)  # (R, K (1 + C))
    count = _arrived_probes(order, end0[queue], order.queue_end[queue], start, n_probes)
    per_port = count.shape[:-1] + (who.shape[0], n_classes)
    known = ~jnp.any((count == n_probes).reshape(per_port), axis=-1)
    ends = end0[queue] + count
    arrived = (order.bytes_before[ends] - order.bytes_before[head[queue]]).reshape(per_port).sum(axis=-1)
    wire = nxt.packet.wire_bytes.astype(jnp.int64)
    left_before = first_wire_bytes.astype(jnp.int64) + jnp.cumsum(wire, axis=0) - wire  # the run's packets before
    return arrived - left_before, ends, known


def departures_behind(params: Params, first: Departures, nxt: Behind, sends, who) -> Departures:
    """(R, K) each: the ``Departures`` of the packets ``nxt`` behind ``first`` ((K,) each)
    at the ports ``who``, those ``sends`` started: each row's link and rank fields in closed
    form along the run (``link_fields``), from the first departure's at row 0."""

    arrival_ps, scheduled_ps, prior_ps, busy_rank, rank = link_fields(
        params, nxt.start, nxt.ser_ps, who, nxt.free_ps, nxt.available_ps, nxt.packet.rank, row_before,
        latest,
        (first.arrival_ps, first.scheduled_ps, first.busy_rank, first.rank),
    )  # fmt: skip
    zeros = jnp.zeros_like(sends)
    return Departures(
        nxt.start, nxt.queue_class == 0, jnp.maximum(nxt.queue_class - 1, 0), sends, ~nxt.packet.is_ack, zeros, zeros, nxt.slot, nxt.packet.wire_bytes, nxt.ser_ps, arrival_ps,
        scheduled_ps, prior_ps, busy_rank, rank,
    )  # fmt: skip


def link_fields(params: Params, start, ser_ps, link, free_before_ps, available_ps, packet_rank, before, latest, base):
    """A port's departures one after another (any layout; ``systems.transmit.depart`` for
    one): when each arrives at the far end, is scheduled (a link delivers in order: when its
    last bit leaves, or when the one before arrives), what scheduled it (``prior_ps``), its
    busy period's rank (one begins at a packet that finds the port free: ``free_before_ps``
    <= ``available_ps``; a NIC's packet: its flow) and its train's (one begins at a packet
    whose last bit leaves once the one before has arrived). ``before(values, base)``: each
    departure's value at the one before it, ``base`` at the first; ``latest(values, begins,
    base)``: ``values`` at the latest departure up to each where ``begins``, ``base`` where
    none has; ``base``: the (arrival, scheduled, busy rank, train rank) before the first."""
    end_ps = start + ser_ps  # its last bit leaves
    arrival_ps = end_ps + params.links.link_delay_ps[link]
    arrival_before = before(arrival_ps, base[0])
    scheduled_ps = jnp.maximum(end_ps, arrival_before)
    fresh_link = end_ps >= arrival_before
    prior_ps = jnp.where(fresh_link, start, before(scheduled_ps, base[1]))
    busy_rank = latest(packet_rank, free_before_ps <= available_ps, base[2])
    return arrival_ps, scheduled_ps, prior_ps, busy_rank, latest(busy_rank, fresh_link, base[3])


def after_rows(ports: PortState, dep: Departures, tx_bytes, n_sent, at, write_at) -> PortState:
    """``port_after``'s fields of the ports ``at`` (K,) after their rows of departures ``dep``
    (R, K), of which each sent its first ``n_sent`` (K,) (``tx_bytes`` (R, K): its bytes sent
    after each), written at ``write_at`` (K,) (out of range: not written)."""

    def last(column, rows_column):  # (P,) a port field after its last departure
        at_last = jnp.take_along_axis(jnp.concatenate([column[at][None], rows_column]), n_sent[None], axis=0)[0]
        return column.at[write_at].set(at_last, mode="drop")

    return ports.replace(
        port_free_ps=last(ports.port_free_ps, dep.start + dep.ser_ps), port_tx_bytes=last(ports.port_tx_bytes, tx_bytes),
        port_last_arrival_ps=last(ports.port_last_arrival_ps, dep.arrival_ps),
        port_busy_rank=last(ports.port_busy_rank, dep.busy_rank), port_train_rank=last(ports.port_train_rank, dep.rank),
        port_last_scheduled_ps=last(ports.port_last_scheduled_ps, dep.scheduled_ps),
    )  # fmt: skip


def row_before(values, base):
    """(R, K): at each row, ``values`` (R, K) at the row before it, ``base`` (K,) at row 0
    (what ``link_fields`` reads as the departure before each of a port's rows)."""
    return jnp.concatenate([base[None], values[:-1]])


def latest(values, begins, base):
    """(R, K): at each row, ``values`` at the latest row up to it where ``begins`` (R, K),
    or ``base`` (K,) where none has."""
    row = jnp.arange(1, values.shape[0] + 1, dtype=jnp.int32)[:, None]
    latest = jax.lax.cummax(jnp.where(begins, row, 0), axis=0)
    return jnp.take_along_axis(jnp.concatenate([base[None], values]), latest, axis=0)


def follow(params: Params, state: State, order, head, end0, first: Departures, chosen, offer_ready_ps, window_end_ps, leave):
    """The runs behind every port's first departure ``first`` (class ``chosen`` (P,);
    ``state``: its ports after it; ``end0`` (Q,): one past each queue's packets arrived
    by its start; ``offer_ready_ps`` (P, C): each NIC port's offers, NEVER at switches):
    at the ports with the most packets queued behind it in any class (``runners``), as
    many of their next packets as the rounds after this one would start there, one a
    round. One of these ways runs (``lockstep.switch_largest``: a batch runs the last
    any experiment asks for, which gives every experiment the same results):

    0. no port has a packet behind its first: nothing;
    1. ``LONG``, with ``Static.long_runs`` (``build_batch``'s default off the CPU): at most
       ``long_ports`` do, each with packets of one class queue only (a switch port
       draining a burst at the end of a window): ``long_rows`` packets each, their starts
       in closed form (``single_class``);
    2. ``SINGLE``, also with ``Static.long_runs``: more ports do, but each with packets of
       one class queue only: ``run_ports`` ports, ``run_rows`` - 1 packets each, in the same
       closed form. Without ``Static.rival_classes`` (every experiment queues ACKs with
       data at one priority, htsim's configuration: a port has no other kind), every
       round takes it, long runs or not;
    3. ``MERGED``, otherwise (and always without ``Static.long_runs`` where some port may
       hold two class queues): ``run_ports`` ports, ``run_rows`` - 1 packets each, their
       class queues merged by strict priority (``behind``'s recurrence over the rows).

    In ways 1 and 2 a NIC's offers are rivals of the queued packets (a row is certain
    while it starts before every offer could), and after a NIC's new packet the run goes
    on through its queue from its head. Ways 1 and 2 take the same rounds as way 3 in
    fewer kernels: on an H200 a window of the htsim sweep's point took 2.09 ms against
    2.28 with way 3 alone; on a CPU, where a window's time does not follow its kernels,
    0-3 % less, and 1-2 % more with control-class ACKs, whose rounds mostly merge two
    class queues, so a CPU takes way 3 alone unless no port has rival classes; there, at
    ``RUN_PACKETS_SINGLE_CLASS`` packets a round, way 2 ran the htsim sweep 7 % faster than
    way 3 at 8 (``benchmarks/HISTORY.md``, stops 43 and 44).

    Returns the ``Ran`` and the pool with the runs' packets on the wire: ``leave(params,
    packets, rows)`` writes them (``systems.transmit.leave``), in the same branch, so an
    idle round writes nothing."""
    n_ports = params.static.n_ports
    n_queued = (order.queue_end - head).reshape(n_ports, params.static.class_queues)
    # (P,) the packets queued behind each port's first departure, every class's (a NIC's new packet was not queued).
    n_behind = jnp.where(first.sends, jnp.sum(n_queued, axis=1) - jnp.where(first.creates, 0, 1), 0)
    one_queue = jnp.sum(n_queued > 0, axis=1) <= 1  # (P,) one class queue holds the port's packets: no rival class queued
    consts = (params, state.ports, state.links, order, head, end0, first, chosen, offer_ready_ps, n_behind, window_end_ps, one_queue)

    def ran_and_pool(consts, idle):
        static = consts[0].static
        if long_rows(static) == 0:  # way 1 is off: way 2 where every port has one class queue, else way 3
            rows = _rows(*consts, way=MERGED if static.rival_classes else SINGLE)
        else:
            taken = (LONG, SINGLE, MERGED) if static.rival_classes else (LONG, SINGLE)  # (``_way`` never gives way 3 there)
            ways = [lambda consts, way=way: _rows(*consts, way=way) for way in taken]
            rows = lockstep.switch_largest(_way, ways, consts)
        return ran_of(rows), leave(consts[0], idle[1], rows)

    idle = Ran(state.ports, jnp.bool_(False), jnp.int32(0), jnp.zeros_like(head), end0)
    return lockstep.when_any(jnp.any(n_behind > 0), ran_and_pool, (idle, state.packets), consts)


LONG, SINGLE, MERGED = 0, 1, 2  # ``follow``'s ways 1, 2 and 3 (``_way``; the index ``switch_largest`` takes)


def _way(consts):
    """() int32 the way of ``follow`` that serves the experiment's runs: ``LONG`` where at
    most ``long_ports`` ports run, each with one class queue; else
    ``SINGLE`` where every port that runs has one class queue; else ``MERGED``."""
    params, n_behind, one_queue = consts[0], consts[9], consts[11]
    runs_here = n_behind > 0
    long = (jnp.sum(runs_here) <= long_ports(params.static)) & ~jnp.any(runs_here & ~one_queue)
    return jnp.where(long, LONG, jnp.where(jnp.any(runs_here & ~one_queue), MERGED, SINGLE))


class Ran(NamedTuple):
    """What a round's runs leave for the next: the ``Rows`` less their (N,) arrays over cells."""

    ports: PortState  # (P,) each: the ports after their runs
    over: jnp.ndarray  # () bool a queue the runs watched rose above its buffer
    n_sent: jnp.ndarray  # () int32 the packets the runs started (packet-hops)
    served: jnp.ndarray  # (Q,) int32 the packets each class queue sent behind its port's first
    ends: jnp.ndarray  # (Q,) int32 one past each queue's packets arrived by its port's last departure


def ran_of(rows: Rows) -> Ran:
    return Ran(rows.ports, rows.over, jnp.sum(rows.dep.sends, dtype=jnp.int32), rows.served, rows.ends)


def _rows(params: Params, ports, links, order, head, end0, first, chosen, offer_ready_ps, n_behind, window_end_ps, one_queue, way=MERGED) -> Rows:
    """The runs of one round (``follow``'s way ``way``: ``_way``)."""
    static = params.static
    n_ports, n_classes, class_queues, first_class = static.n_ports, 1 + static.n_data_classes, static.class_queues, static.first_queued_class
    window_start_ps = window_end_ps - params.window_ps
    single = way != MERGED
    if way == LONG:
        n_runners, n_rows = long_ports(params.static), long_rows(params.static)
    else:
        n_runners, n_rows = run_ports(params.static), run_rows(params.static) - 1
    who = runners(n_behind, n_runners, n_rows)  # (K,) P where none
    at = jnp.minimum(who, n_ports - 1)  # gathers read a port; writes to P are dropped
    first_k = jax.tree.map(lambda column: column[at], first)
    first_end_ps = jnp.where(first_k.sends, first_k.start + first_k.ser_ps, window_end_ps)  # no departure: no row follows
    held = pfc.held_until_ps(params, links, jnp.maximum(first_end_ps, window_start_ps), at)
    if single:
        # The class queue that holds the port's packets: the first's, or after a NIC's new packet the one with any.
        n_queued = (order.queue_end - head).reshape(n_ports, class_queues)[at]
        queue_class = jnp.where(first_k.creates, first_class + jnp.argmax(n_queued > 0, axis=1), chosen[at]).astype(jnp.int32)
        nxt, queue_bytes, ends, known = single_class(
            params, order, head, end0, first_k, first_end_ps, queue_class, at, held, offer_ready_ps[at], window_end_ps, n_rows, way == LONG
        )  # fmt: skip
    else:
        # After a NIC's new packet its next offers are unknown, but start no earlier than the
        # port falls free: a queued packet waiting by then wins (``transmit._nic_ack_first``'s
        # ties), one not yet there may lose, so the run stops at it. A bound of 0 is that.
        offer_ps = jnp.where(first_k.creates[:, None], 0, offer_ready_ps[at])
        took = jnp.where(first_k.creates, n_classes, chosen[at])  # the class queue the first came from (none: new)
        nxt = behind(params, order, head, first_end_ps, took, at, held, offer_ps, window_end_ps)
        first_queued_bytes = jnp.where(first_k.creates, 0, first_k.wire_bytes)
        queue_bytes, ends, known = queues_behind(order, head, end0, nxt, first_queued_bytes, at, n_classes)
    starts = nxt.chosen_ok & known & (nxt.start < window_end_ps)
    runs_here = (who < n_ports) & (n_behind[at] > 0)
    sends = runs_here & (jnp.cumsum(~starts, axis=0) == 0)  # (R, K) up to the first that does not
    dep = departures_behind(params, first_k, nxt, sends, at)
    tx_bytes = ports.port_tx_bytes[at] + jnp.cumsum(jnp.where(sends, dep.wire_bytes, 0), axis=0)
    n_sent = jnp.sum(sends, axis=0, dtype=jnp.int32)  # (K,) packets behind the first each port sent
    ports, over = _watched(params, ports, dep, queue_bytes, who)

    ports = after_rows(ports, dep, tx_bytes, n_sent, at, who)
    queue = queues.port_queues(static, who)[0].reshape(-1)
    sent_by_queue = jnp.repeat(n_sent, class_queues)
    last_ends = jnp.take_along_axis(ends, jnp.maximum(sent_by_queue - 1, 0)[None], axis=0)[0]
    kept_ends = end0[jnp.minimum(queue, end0.shape[0] - 1)]
    ends = end0.at[queue].set(jnp.where(sent_by_queue > 0, last_ends, kept_ends), mode="drop")
    served = jnp.zeros(static.n_queues, jnp.int32).at[queues.queue_of_class(static, who, nxt.queue_class)].add(sends.astype(jnp.int32), mode="drop")
    cells = n_cells(params.static)

    def flat(x, fill=0):  # (R, K) -> (N,): the padding sends nothing
        return jnp.pad(x.reshape(-1), (0, cells - x.size), constant_values=fill)

    port = flat(jnp.broadcast_to(who, sends.shape), n_ports)
    dep, packet, queue_bytes, tx_bytes = jax.tree.map(flat, (dep, nxt.packet, queue_bytes, tx_bytes))
    return Rows(dep, port, packet, queue_bytes, tx_bytes, ports, over, served, ends)


# Way 1 of ``follow``: a few ports, long runs (a switch port draining a burst of ACKs at
# the end of a window took 4-12 rounds of 8 packets on the htsim sweep's point).
LONG_PORTS = 8
# Positions past a packet of such a run a search reads for what has arrived by its start
# (a fixed-depth binary search, ``arrived_within``); where every one of them has, the run stops.
SEARCHED = 64


def long_ports(static) -> int:
    """K: the ports that may run long in a round (``follow``'s way 1)."""
    return min(static.n_ports, LONG_PORTS)


def n_cells(static) -> int:
    """N: the cells of a round's ``Rows``, the larger of the ways' (R, K) (ways 2 and 3 alike)."""
    return max((run_rows(static) - 1) * run_ports(static), long_rows(static) * long_ports(static))


def long_rows(static) -> int:
    """R: the packets behind its first that such a port may start (0: no way 1, where
    ``Static.long_runs`` is off or runs are)."""
    if not static.long_runs or run_rows(static) == 1:
        return 0
    return (run_rows(static) - 1) * run_ports(static) // long_ports(static)  # as many cells as ways 2 and 3: no padding


def single_class(params: Params, order, head, end0, first, first_end_ps, chosen, who, held, offer_ps, window_end_ps, n_rows: int, search: bool = True):
    """``behind`` and ``queues_behind`` where a port's run takes one class queue only
    (class ``chosen`` (K,) at ports ``who`` (K,); ``first``: their first departures,
    ending at ``first_end_ps``): the next ``n_rows`` packets of that FIFO start at the
    max-plus recurrence start_i = max(start_(i-1) + ser_(i-1), ready_i), in closed form:
    with C_i the serialisations before row i, start_i = C_i + max(port free, max over j <= i
    of ready_j - C_j) (a cumsum and a cummax, DESIGN.md "Time"). A data packet is ready
    at its arrival, not before the window start, and the port's first free instant waits
    for PFC's release (``held``). The run is certain (``chosen_ok``) while each start is
    before every rival's (another class's packet or a NIC's offer: ``offer_ps`` (K, C))
    and, for data, before the port's next pause; the queue before each departure is
    found by a search from the packet's own position on. Returns the ``Behind`` (R, K),
    the queue (R, K), where each queue's arrived packets end (R, K x ``Static.class_queues``) and whether
    that is known (R, K)."""
    n_classes, n_positions = 1 + params.static.n_data_classes, order.slot.shape[0]
    window_start_ps = window_end_ps - params.window_ps
    queue = queues.queue_of_class(params.static, who, chosen)  # (K,)
    creates = first.creates  # (K,) the first was a NIC's new packet, not this queue's head
    past_first = jnp.where(creates, 0, 1).astype(head.dtype)
    position = head[queue] + past_first + jnp.arange(n_rows, dtype=head.dtype)[:, None]  # (R, K): past the first's packet
    in_queue = position < order.queue_end[queue]
    at = jnp.minimum(position, n_positions - 1)
    available_ps = order.time_ps[at]
    is_data = chosen > 0
    ready_ps = jnp.where(in_queue, jnp.where(is_data, jnp.maximum(available_ps, window_start_ps), available_ps), 0)
    packet = queues.QueuedPacket(*(column[at] for column in order.packet))
    ser_ps = link_serialization_ps(params, packet.wire_bytes, who)
    before_ps = jnp.cumsum(ser_ps, axis=0) - ser_ps  # C_i
    free_ps = jnp.where(is_data, jnp.maximum(first_end_ps, held[0]), first_end_ps)
    start = before_ps + jnp.maximum(free_ps, jax.lax.cummax(ready_ps - before_ps, axis=0))
    # Rivals: the other class queues' next packets (their pointers do not move in the run), NIC offers.
    queue_k, class_k = queues.port_queues(params.static, who)  # (K, class queues), the class of each
    head_k = head[queue_k]
    rival_ps = jnp.where(
        (head_k < order.queue_end[queue_k]) & (class_k != chosen[:, None]),
        order.time_ps[jnp.minimum(head_k, n_positions - 1)], NEVER,
    )  # fmt: skip
    # A NIC's offer of data class c starts no earlier than the port falls free and the offer
    # is ready, and on a tie the queued packet of class q wins where q <= c (``behind``'s order
    # of candidates). After a NIC's new packet its next offers are unknown: ready at 0.
    offer_ps = jnp.where(creates[:, None], 0, offer_ps)  # (K, C)
    free_before_ps = jnp.concatenate([first_end_ps[None], (start + ser_ps)[:-1]])
    offer_start_ps = jnp.maximum(free_before_ps[..., None], offer_ps)  # (R, K, C) each offer's earliest start
    ties_to_queue = chosen[:, None] <= jnp.arange(1, n_classes, dtype=chosen.dtype)  # (K, C)
    before_offers = jnp.all((start[..., None] < offer_start_ps) | ((start[..., None] == offer_start_ps) & ties_to_queue), axis=-1)
    chosen_ok = in_queue & (start < jnp.min(rival_ps, axis=1)) & before_offers & (~is_data | (start < held[1]))
    queue_class = jnp.broadcast_to(chosen, start.shape).astype(jnp.int32)
    nxt = Behind(chosen_ok, queue_class, order.slot[at], available_ps, packet, ser_ps, start, free_before_ps)
    first_queued_bytes = jnp.where(creates, 0, first.wire_bytes)  # a NIC's new packet was not queued
    if not search:  # a few rows: what arrived by each start, among the next PROBES positions of its queue
        n_probes = max(queues.PROBES, n_rows + 1)  # every row's own position and one past the last
        count = _arrived_probes(order, end0[queue], order.queue_end[queue], start, n_probes)
        ends, known = end0[queue] + count, count < n_probes  # (R, K)
    else:
        # Arrived by each start: its own packet and those before it, those arrived by the first's start, and a search past them.
        low = jnp.maximum(end0[queue], position + 1)
        ends = arrived_within(order.time_ps, low, jnp.minimum(order.queue_end[queue], low + SEARCHED), start)
        known = (ends < low + SEARCHED) | (ends >= order.queue_end[queue])
    # The port's other class queues: nothing arrives there before a certain row's start
    # (their next arrival is a rival, ``chosen_ok``), so their packets arrived by then are
    # those by the first's.
    ends_k = jnp.where(class_k == chosen[:, None], ends[..., None], end0[queue_k])  # (R, K, class queues)
    arrived = jnp.sum(order.bytes_before[ends_k] - order.bytes_before[head_k], axis=-1)
    wire = packet.wire_bytes.astype(jnp.int64)
    queue_bytes = arrived - first_queued_bytes.astype(jnp.int64) - (jnp.cumsum(wire, axis=0) - wire)
    return nxt, queue_bytes, ends_k.reshape(n_rows, -1), known


def arrived_within(time_ps, low, high, at_ps, searched: int = SEARCHED):
    """One past the last position in [low, high) whose time is at most ``at_ps`` (arrays
    alike; times sorted there, or any key that never decreases: the FIFO pass searches the
    service order's bytes): a binary search of fixed depth, enough for ``searched``
    positions (``high - low`` at most that)."""
    for _ in range(searched.bit_length()):
        middle = (low + high) // 2
        searching = low < high
        arrived = time_ps[jnp.minimum(middle, time_ps.shape[0] - 1)] <= at_ps
        low, high = jnp.where(searching & arrived, middle + 1, low), jnp.where(searching & ~arrived, middle, high)
    return low


def _watched(params: Params, ports: PortState, dep: Departures, queue_bytes, who):
    """The queue watch (``watch``) at each departure of the runs (R, K), on the ports
    ``who`` that run; whether a queue rose above its buffer."""
    at = jnp.minimum(who, params.static.n_ports - 1)
    watched, buffer_bytes = tuple(getattr(ports, name)[at] for name in WATCHED), params.ports.port_buffer_bytes[at]
    watched, over = watch(watched, buffer_bytes, dep.sends, dep.start, queue_bytes, dep.wire_bytes)
    return ports.replace(**{name: getattr(ports, name).at[who].set(value, mode="drop") for name, value in zip(WATCHED, watched)}), jnp.any(over)


def runners(n_behind, n_runners: int, n_rows: int):
    """(K,) int32 the ports that run this round, P past them: of the ports with packets
    behind their first (``n_behind`` (P,)), first those with at least a run's worth
    (``n_rows``), then the others, each in port order, as many as fit in K places (the
    rest start one packet this round and go on in the next). Two cumsums and a scatter:
    sorting the ports by ``n_behind`` costs ~10 times more on a CPU."""
    n_ports = n_behind.shape[0]
    full, some = n_behind >= n_rows, (n_behind > 0) & (n_behind < n_rows)
    position = jnp.where(
        full, prefix_sum(full, dtype=jnp.int32) - 1,
        jnp.where(some, jnp.sum(full, dtype=jnp.int32) + prefix_sum(some, dtype=jnp.int32) - 1, n_runners),
    )  # fmt: skip
    return jnp.full(n_runners, n_ports, jnp.int32).at[position].set(jnp.arange(n_ports, dtype=jnp.int32), mode="drop")
