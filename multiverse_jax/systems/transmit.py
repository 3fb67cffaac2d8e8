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
one packet, and with ``Static.run_packets`` > 1 some ports also the packets queued behind
it that the next rounds would start there, in any of its classes (a run, ``ops/runs.py``); rounds repeat until
no port can start another packet inside the window. Each round ends by working out what
every port would start in the next (its ``Front``: the offers, each port's chosen candidate and start
times), so the window stops after its last round that sends, not after a round that finds
nothing to send (on the htsim sweep's point 1-11 rounds a window sent, 3-5 on average in
its busy stretches; each window ran one more before). With ``Static.fifo_pass`` (where every
port has one class queue: an accelerator's default), the window starts with the FIFO pass
(``drain``, ``ops/fifo_pass.py``): every switch port's departures of the window at once, so
the rounds serve the NICs and the ports it stopped at a PFC pause (3.4 rounds a busy window
of that point, not 6.5); once no switch port can send, the rounds left run over the NICs'
ports alone (``nic_rounds``, a view of the experiment on them: ``ops/port_view.py``), 128
ports at k=8 instead of 768, and only where some NIC can still send. With
``Static.nic_pass`` too, the NIC pass follows (``drain_nics``, ``ops/nic_pass.py``): every
NIC's departures of the window, its new packets among them, in rows fixed at compile time,
so the rounds serve only what the two passes stopped at (0.3 rounds a window of that point).

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
priority) (these two and ``nic.offer``: ``round_front``, run at the end of the round before) -> ``depart`` (what each port starts, its wire size and times) -> ``account``
(port counters, queue maxima and overflows, errors) -> ``leave`` (the packet goes on the wire, ECN
mark and telemetry at switches) -> ``runs.follow`` (the runs behind the first packets,
their counters and pool writes: ``account_runs``, ``leave_runs``) -> ``nic_emit`` (NICs
create their new data packets).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import CC_HPCC, ERROR_BUFFER_OVERFLOW, ERROR_POOL_FULL, Params, State
from multiverse_jax.components.packets import PacketState
from multiverse_jax.ops import fifo_pass, lockstep, marking, nic, nic_pass, pfc, pool, port_view, queues, runs
from multiverse_jax.ops.runs import Departures
from multiverse_jax.ops.lockstep import while_any
from multiverse_jax.ops.packets import at_host, in_flight, serialization_ps
from multiverse_jax.ops.routing import route
from multiverse_jax.ops.segments import count_by
from multiverse_jax.units import NEVER


def _nic_host(params: Params):
    """(P,) int32 the host whose NIC each port is (0 for switch ports), (P,) bool a NIC port."""
    return jnp.maximum(params.ports.port_host, 0), params.ports.port_host >= 0


def class_heads(params: Params, state: State, offer: nic.NicOffer, order: queues.ServiceOrder, head, window_start_ps, seen):
    """The candidate packet of every class queue of every port: (P, 1 + C) int64 when it
    is (or becomes) available, (P, 1 + C) int32 its slot and (P, 1 + C) bool whether it
    is a NIC's offer (a data packet not created yet); class 0 is control, 1 + k data
    priority k. The earliest-queued packet of the class (NEVER and n_slots if none: the
    packet under the queue's pointer ``head`` (Q,) in the window's ``order``); at a
    NIC, in a data class k, the packet its NIC offers (``offer``, (H, C)) unless a queued
    ACK of that class (only with ``packet.ack_class=data``) can start no later than the
    offer could (PFC as ``seen`` from the window start, ``pfc.release_seen``): the NIC
    serves its ACKs ahead of its data (htsim's host queue gives ACKs high priority),
    non-preemptively, and PFC pauses both.
    """
    head_ps, head_slot = per_class(params.static, *queues.heads(order, head, params.static.n_slots))
    host, is_nic = _nic_host(params)
    is_offer = is_nic[:, None] & ~_nic_ack_first(params, state, head_ps[:, 1:], offer.ready_ps[host], window_start_ps, seen)
    data_ps = jnp.where(is_offer, offer.ready_ps[host], head_ps[:, 1:])
    data_slot = jnp.where(is_offer, offer.slot[host][:, None], head_slot[:, 1:])
    return (
        jnp.concatenate([head_ps[:, :1], data_ps], axis=1),
        jnp.concatenate([head_slot[:, :1], data_slot], axis=1),
        jnp.concatenate([jnp.zeros_like(is_offer[:, :1]), is_offer], axis=1),
    )


def per_class(static, head_ps, head_slot):
    """Each queue's head (``queues.heads``: (Q,) int64 its arrival, (Q,) int32 its slot)
    as (P, 1 + C) arrays over every class, the classes a port never queues in
    (``Static.first_queued_class``) empty (NEVER, no slot)."""
    n_ports, unqueued = static.n_ports, static.first_queued_class
    head_ps, head_slot = head_ps.reshape(n_ports, static.class_queues), head_slot.reshape(n_ports, static.class_queues)
    return (
        jnp.concatenate([jnp.full((n_ports, unqueued), NEVER, head_ps.dtype), head_ps], axis=1),
        jnp.concatenate([jnp.full((n_ports, unqueued), static.n_slots, head_slot.dtype), head_slot], axis=1),
    )


def chosen_queues(static, chosen):
    """(P,) int32 the class queue of each port's ``chosen`` class (P,) (``Static.n_queues``; a
    port that starts nothing may have chosen a class it never queues in: its lowest queue)."""
    port = jnp.arange(static.n_ports, dtype=jnp.int32)
    return queues.queue_of_class(static, port, jnp.maximum(chosen, static.first_queued_class))


def _nic_ack_first(params: Params, state: State, ack_ps, offer_ps, window_start_ps, seen):
    """(P, C) bool: at a NIC port, the queued ACK of a data class (available at ``ack_ps``,
    NEVER if none) starts before the NIC's offer (``offer_ps``): it can start no later
    than the offer could (port free, PFC release), ties to the ACK. Only
    ``packet.ack_class=data`` puts ACKs in data classes; otherwise nothing is computed."""
    free_ps = jnp.maximum(state.ports.port_free_ps, window_start_ps)[:, None]

    def start(ready_ps):
        earliest = jnp.maximum(free_ps, ready_ps)
        return jnp.stack([pfc.release_seen(params, state.links, seen, earliest[:, c]) for c in range(ready_ps.shape[1])], axis=1)

    return jax.lax.cond(
        params.ack_in_data_class,
        lambda: (ack_ps != NEVER) & (start(ack_ps) <= start(offer_ps)),
        lambda: jnp.zeros(ack_ps.shape, bool),
    )


def start_times(params: Params, state: State, ready_ps, window_start_ps, seen):
    """Each port's start time (P,) int64 and chosen class (P,) int32 in 0..C, from the
    availability of its class candidates ``ready_ps`` (P, 1 + C).

    A class can start at max(port free, candidate available), and a data class not before
    its PFC release. A data packet that could have started before the window would have
    started in the previous one, unless PFC held it: its start is at least the window
    start, which is also as far back as the PFC history must reach (``seen``: the ports'
    pauses as seen from it, ``pfc.release_seen``).
    """
    free_ps = state.ports.port_free_ps
    ctrl_start = jnp.maximum(free_ps, ready_ps[:, 0])
    data_start = [
        pfc.release_seen(params, state.links, seen, jnp.maximum(jnp.maximum(free_ps, ready_ps[:, 1 + c]), window_start_ps))
        for c in range(params.static.n_data_classes)
    ]
    # Non-preemptive strict priority: the class that can start first; among classes that
    # can start at the same time (all waiting when the port falls free), the highest.
    class_start = jnp.stack([ctrl_start] + data_start, axis=1)  # (P, 1 + C)
    chosen = jnp.argmin(class_start, axis=1)  # ties go to the lowest class: control, then priority 0
    return jnp.min(class_start, axis=1), chosen


def depart(params: Params, state: State, front: Front, head_packet) -> Departures:
    """What each port starts, as its ``front`` chose (``round_front``: the chosen class's
    candidate, if it starts inside the window; ``head_packet``: the queued packet at the
    head of the chosen class; with switch.pipeline=serial, its rank is the order it left
    its switch's pipeline in, ``forward.pipeline_ranks``): its wire size and
    serialisation; its arrival at the far end, when that arrival is scheduled and its
    rank. A NIC whose host has no free slot starts nothing (``ERROR_POOL_FULL``)."""
    offer, start, chosen, sends, creates = front.offer, front.start, front.chosen, front.sends, front.creates
    host, _ = _nic_host(params)
    use_ctrl = chosen == 0
    data_class = jnp.maximum(chosen - 1, 0)
    slot = front.slot
    is_data = creates | ~head_packet.is_ack
    wire_bytes = jnp.where(creates, offer.wire_bytes[host, data_class], head_packet.wire_bytes)
    ser_ps = serialization_ps(wire_bytes, params.links.link_rate_bps)
    arrival_ps = start + ser_ps + params.links.link_delay_ps
    # A link delivers in order: the arrival is scheduled when the last bit leaves, or, while
    # the previous packet is still on the wire, when that one arrives (htsim's Pipe).
    scheduled_ps = jnp.maximum(start + ser_ps, state.ports.port_last_arrival_ps)
    fresh_link = start + ser_ps >= state.ports.port_last_arrival_ps
    prior_ps = jnp.where(fresh_link, start, state.ports.port_last_scheduled_ps)
    arriving_rank = jnp.where(creates, offer.flow[host, data_class], head_packet.rank)
    busy_rank, rank = _ranks(state.ports, front.ready_ps, arriving_rank, start + ser_ps)
    return Departures(
        start, use_ctrl, data_class, sends, is_data, creates, front.pool_full, slot, wire_bytes, ser_ps, arrival_ps,
        scheduled_ps, prior_ps, busy_rank, rank,
    )  # fmt: skip


def _of_chosen(per_class, chosen):
    """(P,) each port's entry of ``per_class`` (P, 1 + C) for its ``chosen`` class (P,)."""
    return jnp.take_along_axis(per_class, chosen[:, None], axis=1)[:, 0]


def _sending(params: Params, offer: nic.NicOffer, start, is_offer, window_end_ps):
    """(P,) bool each: the port starts a packet inside the window (from its ``start``),
    it creates a NIC's new data packet (its chosen candidate ``is_offer``), and it would
    but its host has no free slot (then it starts nothing)."""
    host, _ = _nic_host(params)
    sends = start < window_end_ps
    creates = sends & is_offer
    pool_full = creates & ~offer.has_slot[host]
    return sends & ~pool_full, creates & ~pool_full, pool_full


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
    one_row = (jnp.broadcast_to(x, sampled.shape)[None] for x in (sampled, at_ps, queue_bytes, leaving_bytes))
    watched, over = runs.watch(tuple(getattr(state.ports, name) for name in runs.WATCHED), params.ports.port_buffer_bytes, *one_row)
    return state.replace(
        ports=state.ports.replace(**dict(zip(runs.WATCHED, watched))),
        error=state.error | jnp.where(params.overflow_is_error & jnp.any(over), ERROR_BUFFER_OVERFLOW, 0),
    )


def account(params: Params, state: State, dep: Departures, queue_bytes) -> State:
    """Port counters (P,): free time, bytes sent, the queue watch (``queue_bytes``, the
    queue just before each departure); the pool error bit; the packet-hop count."""
    state = watch_queues(params, state, dep.sends, dep.start, queue_bytes, dep.wire_bytes)
    return state.replace(
        ports=runs.port_after(state.ports, dep),
        error=state.error | jnp.where(jnp.any(dep.pool_full), ERROR_POOL_FULL, 0),
        n_packet_hops=state.n_packet_hops + jnp.sum(dep.sends),
    )


def account_runs(params: Params, state: State, ran: runs.Ran) -> State:
    """The ports after the runs (their watch and last departures), their packet-hops and
    the overflow error bit."""
    return state.replace(
        ports=ran.ports,
        error=state.error | jnp.where(params.overflow_is_error & ran.over, ERROR_BUFFER_OVERFLOW, 0),
        n_packet_hops=state.n_packet_hops + ran.n_sent,
    )


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
    included. ``queue_bytes`` where not wanted. Only where a port starts one packet a
    round (``runs.run_rows`` 1): ``dep`` (P,), every port's."""
    if upcoming is None:
        return queue_bytes
    n_ports = params.static.n_ports
    end_ps = dep.start + dep.ser_ps
    queued_by_end, _ = queues.arrived_bytes(order, head, n_ports, end_ps - 1, arrived)  # an arrival at that instant comes after
    arrives = (upcoming < n_ports) & (pkts.pkt_time_ps < end_ps[jnp.minimum(upcoming, n_ports - 1)])
    int_queue = queued_by_end + count_by(arrives, upcoming, n_ports, pkts.pkt_bytes.astype(jnp.int64))
    return jnp.where(int_queue_wanted(params), int_queue, queue_bytes)


def leave(params: Params, pkts: PacketState, dep: Departures, port, queue_bytes, tx_bytes, int_queue, head_packet) -> PacketState:
    """The queued packet each departure (at ``port``, (N,) like the rest) starts goes on
    the wire (in flight until ``arrival_ps``);
    a data packet leaving a switch is ECN-marked (RED on the queue it leaves behind) and
    records its in-band telemetry for this hop (``tx_bytes``: the port's bytes sent,
    this packet included; the queue it leaves behind, or ``int_queue`` with
    hpcc.int_queue=with_packet; None: never wanted).

    A NIC's new packet (``dep.creates``) goes on the wire here too, in the free slot it
    takes: its wire fields and its cleared ECN mark are written with the departures', so
    a round writes each of these columns once (``nic_emit`` writes the rest of it).

    One write per departure, to a slot no other touches (a port only ever starts a packet
    queued at it, once, or a new one in its host's next free slot), so the scatters have
    no conflicts. Ports that start nothing write nowhere.
    """
    n_slots = params.static.n_slots
    is_nic = _nic_host(params)[1][jnp.minimum(port, params.static.n_ports - 1)]  # P: no departure
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
        # Written as ``~dep.creates``, which is ``marked`` at every slot written (a NIC's new
        # packet is never at a switch): XLA computed the mark's hash again for the values.
        pkt_ecn=pkts.pkt_ecn.at[jnp.where(marked | dep.creates, dep.slot, n_slots)].set(~dep.creates, mode="drop"),
    )
    int_qlen = left_behind if int_queue is None else jnp.where(int_queue_wanted(params), int_queue, left_behind)
    return marking.record_telemetry(params, on_wire, at_switch, dep.slot, head_packet.hop, dep.start, tx_bytes, int_qlen, port)


def leave_runs(params: Params, pkts: PacketState, rows: runs.Rows) -> PacketState:
    """``leave`` for the packets of the runs (``rows``, (N,) each; no telemetry looks
    ahead where ports run: ``runs.run_rows``)."""
    return leave(params, pkts, rows.dep, rows.port, rows.queue_bytes, rows.tx_bytes, None, rows.packet)


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


class Front(NamedTuple):
    """A round's first phases, what every port would start (``round_front``): computed at
    the end of the round before (or at the window's start), so that the loop knows
    whether another round sends before it runs one."""

    offer: nic.NicOffer  # (H, C) each (``slot``, ``has_slot``: (H,)) what each NIC offers
    start: jnp.ndarray  # (P,) int64 when each port would start its chosen class (``start_times``)
    chosen: jnp.ndarray  # (P,) int32 the chosen class, 0..C
    ready_ps: jnp.ndarray  # (P,) int64 when the chosen class's candidate is available (``class_heads``)
    slot: jnp.ndarray  # (P,) int32 its slot (a NIC's offer: the free slot it would take)
    sends: jnp.ndarray  # (P,) bool the port starts a packet inside the window (``_sending``)
    creates: jnp.ndarray  # (P,) bool it is a NIC's new data packet
    pool_full: jnp.ndarray  # (P,) bool a NIC would create one, but its host has no free slot (it starts nothing)


class Serving(NamedTuple):
    """The carry of the window's rounds: the state and what the window's start fixed."""

    state: State
    head: jnp.ndarray  # (Q,) int32 each class queue's next position in the window's service order
    arrived: jnp.ndarray  # (Q,) int32 one past each queue's last packet arrived by its port's ``arrived_ps`` (the
    #   searches' hint; at the window start ``ServiceOrder.arrived_before``)
    used: jnp.ndarray  # (H,) int32 free slots each host has taken this window (``nic.FreeSlots``)
    front: Front  # the next round's first phases (the loop runs while some port of it sends)
    pfc_seen: tuple  # ((P,) int64 held until, (P,) int64 next pause) x pfc.SEEN_PAUSES: the ports' PFC
    #   pauses seen from the window start (``pfc.seen_from``)
    arrived_ps: jnp.ndarray  # (P,) int64 the instant ``arrived`` counts each port's queues to: its last departure's start


def round_front(params: Params, state: State, head, used, window_end_ps, order, free, seen) -> Front:
    """What each port would start next (a round's first phases, before it changes
    anything): the NICs' offers, every class queue's candidate, each port's start time
    and class, from the queues' pointers ``head`` (Q,), the free slots each host has
    taken ``used`` (H,) and the window's ``order``, ``free`` and PFC pauses ``seen``."""
    window_start_ps = window_end_ps - params.window_ps
    offer = nic.offer(params, state, window_start_ps, free, used)  # (H, C)
    ready_ps, class_slot, class_is_offer = class_heads(params, state, offer, order, head, window_start_ps, seen)  # (P, 1 + C)
    start, chosen = start_times(params, state, ready_ps, window_start_ps, seen)  # (P,)
    ready_ps, slot, is_offer = (_of_chosen(a, chosen) for a in (ready_ps, class_slot, class_is_offer))  # (P,) each
    return Front(offer, start, chosen, ready_ps, slot, *_sending(params, offer, start, is_offer, window_end_ps))


def serve_round(params: Params, serving: Serving, window_end_ps, order, free, upcoming) -> Serving:
    """One round: every port starts at most one packet, as ``serving.front`` says, and
    the next round's front is computed. ``order``: the window's
    ``queues.service_order``; ``free``: its ``nic.free_slots``; ``upcoming``: see
    ``upcoming_egress``. Its cost is per port and per flow, not per pool slot."""
    state, head, used, front = serving.state, serving.head, serving.used, serving.front
    n_ports = params.static.n_ports
    offer, chosen = front.offer, front.chosen
    chosen_queue = chosen_queues(params.static, chosen)
    head_packet = queues.at_head(order, head, chosen_queue)  # (P,) each: what a port serving its queue sends
    dep = depart(params, state, front, head_packet)
    # Queue just before each departure: everything queued at the port that has arrived by
    # then, the departing packet included (see watch_queues).
    # The last round's ends start the search: a port's next departure starts no earlier. A
    # port that starts nothing reads no queue: its search stays where it was (else it would
    # run to the end of a queue PFC holds, each round).
    arrived_ps = jnp.where(dep.sends, dep.start, serving.arrived_ps)
    queue_bytes, arrived = queues.arrived_bytes(order, head, n_ports, arrived_ps, serving.arrived)  # (P,), (Q,)
    int_queue = queue_at_end(params, state.packets, dep, queue_bytes, order, head, arrived, upcoming)
    state = account(params, state, dep, queue_bytes)
    everyone = jnp.arange(n_ports, dtype=jnp.int32)
    state = state.replace(
        packets=leave(params, state.packets, dep, everyone, queue_bytes, state.ports.port_tx_bytes, int_queue, head_packet)
    )
    # The queue a port served moves its pointer; a host that created a packet took its next free slot.
    next_head = head.at[chosen_queue].add((dep.sends & ~dep.creates).astype(head.dtype))
    if runs.run_rows(params.static) > 1:  # the ports with packets behind their first start them too
        host, is_nic = _nic_host(params)
        offer_ready_ps = jnp.where(is_nic[:, None], offer.ready_ps[host], NEVER)  # (P, C)
        ran, packets = runs.follow(params, state, order, head, arrived, dep, chosen, offer_ready_ps, window_end_ps, leave_runs)
        state = account_runs(params, state, ran).replace(packets=packets)
        next_head, arrived = next_head + ran.served, ran.ends
    state = nic_emit(params, state, offer, dep)
    next_used = used + host_creates(params, dep)
    next_front = round_front(params, state, next_head, next_used, window_end_ps, order, free, serving.pfc_seen)
    return Serving(state, next_head, arrived, next_used, next_front, serving.pfc_seen, arrived_ps)


def window_start(params: Params, state: State, window_end_ps):
    """What the window's rounds start from: the ``Serving`` carry (its first round's
    front), and what every round reads (``serve_round``'s ``order``, ``free`` and ``upcoming``)."""
    order = queues.service_order(params, state.packets, window_end_ps, state.order)
    free = nic.free_slots(params, state.packets, pool.creatable_packets(params, state))
    upcoming = upcoming_egress(params, state.packets)
    start = queues.queue_start(order)
    seen = pfc.seen_from(params, state.links, window_end_ps - params.window_ps)  # the history holds all window
    # The searches start past the packets that arrived before the window (``ServiceOrder.arrived_before``).
    before_window = jnp.full(params.static.n_ports, window_end_ps - params.window_ps - 1)
    used = jnp.zeros(params.static.n_hosts, jnp.int32)
    head, arrived = start, order.arrived_before
    if fifo_pass.applies(params.static):  # the switch ports' departures of the window, at once
        state, head, arrived, before_window = drain(params, state, order, head, arrived, before_window, window_end_ps, seen)
    if nic_pass_applies(params.static):  # the NICs', their new packets among them, in a fixed number of rows
        state, head, arrived, before_window, used = drain_nics(params, state, order, head, arrived, before_window, used, window_end_ps, seen, free)
    front = round_front(params, state, head, used, window_end_ps, order, free, seen)
    serving = Serving(state, head, arrived, used, front, seen, before_window)
    return serving, order, free, upcoming


def drain(params: Params, state: State, order, head, arrived, arrived_ps, window_end_ps, seen):
    """The FIFO pass (``ops/fifo_pass.py``): every switch port's departures of the window
    that the rounds would start, on the wire at once, their counters and queue watch; the
    state, and the ``Serving`` pointers ``head``, ``arrived`` (Q,) and ``arrived_ps`` (P,)
    after them. Its cells are the packets at the head of each switch port's queue that
    might start in the window (``fifo_pass.candidates``), in the smallest of
    ``fifo_pass.pass_sizes`` cell counts that holds them (``lockstep.switch_in_place``: the
    pool written in place; under vmap the largest any experiment needs); every size gives
    the same state."""
    sizes = fifo_pass.pass_sizes(params.static.n_slots)

    def in_cells(n_cells: int):
        def drained(go, carry, consts):  # closes over no array: a custom_vmap function may not
            state, head, arrived, arrived_ps = carry
            params, order, window_end_ps, seen, count = consts
            rows, arrived_ps = fifo_pass.drain(params, state, order, head, arrived, arrived_ps, window_end_ps, seen, count, n_cells, go)
            state = account_runs(params, state, runs.ran_of(rows))
            state = state.replace(packets=leave_runs(params, state.packets, rows))
            return state, head + rows.served, rows.ends, arrived_ps

        return drained

    def size(carry, consts):
        return fifo_pass.size_index(consts[-1], sizes)

    count = fifo_pass.candidates(params, state, order, head, window_end_ps)  # (Q,)
    branches = [lambda go, carry, consts: carry] + [in_cells(n) for n in sizes[1:]]  # none: the rounds serve every port
    carry, consts = (state, head, arrived, arrived_ps), (params, order, window_end_ps, seen, count)
    return lockstep.switch_in_place(size, branches, carry, consts)


def nic_pass_applies(static) -> bool:
    """The NIC pass (``ops/nic_pass.py``) runs where a batch has it (``Static.nic_pass``) and
    the FIFO pass runs (one class queue a port). A function of its own so that A/B runs can
    turn it off alone."""
    return static.nic_pass and fifo_pass.applies(static)


def drain_nics(params: Params, state: State, order, head, arrived, arrived_ps, used, window_end_ps, seen, free):
    """The NIC pass (``ops/nic_pass.py``): every NIC's departures of the window that the
    rounds would start, its new packets among them, on the wire at once, their counters,
    queue watch and flows; the state, the ``Serving`` pointers ``head``, ``arrived`` (Q,),
    ``arrived_ps`` (P,) and the free slots each host has taken ``used`` (H,) after them."""
    rows, made, arrived_ps = nic_pass.drain(params, state, order, head, arrived, arrived_ps, window_end_ps, seen, free, used)
    state = account_runs(params, state, runs.ran_of(rows))
    state = state.replace(packets=leave_runs(params, state.packets, rows))
    return nic_pass.create(params, state, made), head + rows.served, rows.ends, arrived_ps, used + made.count


def _rounds(params: Params, serving: Serving, window_end_ps, order, free, upcoming, sending) -> Serving:
    """``serve_round`` while ``sending(params, serving)`` (() bool) holds.

    Rounds run while the next one sends (its front, computed at the end of the last, says
    so): no round runs only to find that nothing can start. A round in which no port
    sends changes nothing, so a lockstep batch runs rounds until no experiment sends,
    without keeping each experiment's carry (ops/lockstep.while_any)."""
    return while_any(
        lambda consts, serving: sending(consts[0], serving),
        lambda consts, serving: serve_round(consts[0], serving, *consts[1:]),
        serving,
        (params, window_end_ps, order, free, upcoming),
    )


def any_sends(params: Params, serving: Serving):
    """() bool some port starts a packet in the next round."""
    return jnp.any(serving.front.sends)


def a_switch_port_sends(params: Params, serving: Serving):
    """() bool some switch port starts a packet in the next round."""
    return jnp.any(serving.front.sends & (params.ports.port_host < 0))


def nic_rounds_apply(static) -> bool:
    """The window's last rounds run on the NICs' ports alone (``nic_rounds``): with the FIFO
    pass, after which most windows' rounds serve only NICs (``fifo_pass.applies`` already
    excludes telemetry that looks ahead at the packets in flight to a port, which the view
    would not see: ``upcoming_egress``). A function of its own so that A/B runs can turn the
    view off alone (``benchmarks/results/stop61/v_no_view.py``)."""
    return fifo_pass.applies(static)


def nic_rounds(params: Params, serving: Serving, window_end_ps, order, free) -> Serving:
    """The window's rounds once no switch port can send in it, on a view of the experiment
    on its NICs' ports (``ops/port_view.py``): the same rounds over H ports instead of P.
    A switch port whose front does not send sends nothing more in the window (its queue
    gains nothing, its PFC pauses were seen at the window's start, and the NICs' packets
    arrive after the window), so these rounds leave it as it is."""
    ports, real = port_view.nic_ports(params)
    view_queue = port_view.view_queues(params.static, ports)  # (H class_queues,)
    order_view = port_view.view_order(order, view_queue)
    inside = _into_view(params, serving, ports, real, view_queue, order_view)
    inside = _rounds(port_view.view_params(params, ports, real), inside, window_end_ps, order_view, free, None, any_sends)
    return _out_of_view(params, serving, inside, ports, real, view_queue)


def _into_view(params: Params, serving: Serving, ports, real, view_queue, order_view) -> Serving:
    """``serving`` at the view's ports ``ports`` (H,) (``real``: not padding) and their class
    queues ``view_queue``. A padding host's view port has empty queues (its pointers at their
    ends) and sends nothing."""
    state, front = serving.state, serving.front
    queue_real = jnp.repeat(real, params.static.class_queues)
    at_ports = {name: port_view.take(getattr(front, name), ports) for name in ("start", "chosen", "ready_ps", "slot")}
    if_real = {name: port_view.take(getattr(front, name), ports) & real for name in ("sends", "creates", "pool_full")}
    return Serving(
        state.replace(ports=port_view.take(state.ports, ports), links=port_view.take(state.links, ports)),
        jnp.where(queue_real, serving.head[view_queue], order_view.queue_end),
        jnp.where(queue_real, serving.arrived[view_queue], order_view.queue_end),
        serving.used,
        front._replace(**at_ports, **if_real),
        port_view.take(serving.pfc_seen, ports),
        port_view.take(serving.arrived_ps, ports),
    )


def _out_of_view(params: Params, serving: Serving, inside: Serving, ports, real, view_queue) -> Serving:
    """``serving`` after the view's rounds ``inside``: the NIC ports' state, queue pointers
    and searches written back; the packets, flows and counters the view's. Only the front's
    ``pool_full`` is read after the rounds (``transmit``), and only a NIC's can be set."""
    state, queue_real = serving.state, jnp.repeat(real, params.static.class_queues)
    pool_full = port_view.put(jnp.zeros_like(serving.front.pool_full), inside.front.pool_full, ports, real)
    return Serving(
        inside.state.replace(ports=port_view.put(state.ports, inside.state.ports, ports, real), links=state.links),
        port_view.put(serving.head, inside.head, view_queue, queue_real),
        port_view.put(serving.arrived, inside.arrived, view_queue, queue_real),
        inside.used,
        serving.front._replace(pool_full=pool_full),
        serving.pfc_seen,
        port_view.put(serving.arrived_ps, inside.arrived_ps, ports, real),
    )


def transmit(params: Params, state: State, window_end_ps) -> State:
    serving, order, free, upcoming = window_start(params, state, window_end_ps)
    if nic_rounds_apply(params.static):  # rounds over every port while a switch port sends, then over the NICs'
        # In a lockstep batch the first rounds run while any experiment's switch port sends:
        # an experiment whose do not runs there the NIC rounds it would run next anyway (a
        # round over every port in which no switch port sends is the view's round).
        serving = _rounds(params, serving, window_end_ps, order, free, upcoming, a_switch_port_sends)
        if nic_pass_applies(params.static):  # most windows leave the NICs nothing to send: their view is not taken
            serving = lockstep.when_any(
                any_sends(params, serving), lambda consts, serving: nic_rounds(consts[0], serving, *consts[1:]), serving,
                (params, window_end_ps, order, free),
            )
        else:
            serving = nic_rounds(params, serving, window_end_ps, order, free)
    else:
        serving = _rounds(params, serving, window_end_ps, order, free, upcoming, any_sends)
    # A NIC whose host had no free slot for the packet it would have started next: the
    # round that found nothing else to send would have flagged it (``account``).
    pool_full = jnp.any(serving.front.pool_full)
    state = serving.state.replace(error=serving.state.error | jnp.where(pool_full, ERROR_POOL_FULL, 0))
    # The queue at the window's end closes the exact maximum (see watch_queues).
    everywhere = jnp.ones(params.static.n_ports, bool)
    end_bytes = queues.queued_bytes(order, serving.head, params.static.n_ports)
    state = watch_queues(params, state, everywhere, window_end_ps, end_bytes, 0)
    if not queues.sort_sizes(params.static.n_slots):  # a pool this small is sorted whole every window
        return state
    return state.replace(order=queues.keep(order, serving.head, window_end_ps))
