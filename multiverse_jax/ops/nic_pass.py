"""The NIC pass: every NIC's departures of a window at its start, its new data packets
among them, in a fixed number of rows, where a port's packets wait in one FIFO (no rival
class queues: htsim's configuration, as for the FIFO pass, ``ops/fifo_pass.py``).

A NIC port serves two candidates: the ACK at the head of its queue (nothing joins a queue
while ports transmit, ``ops/queues.py``) and the packet its NIC offers, the next of one
of its host's flows (``ops/nic.py``), which is created only when the port starts it. The
ACK goes first when it can start no later than the offer could (``systems.transmit``'s
``_nic_ack_first``); both wait for the port to fall free, not before the window start,
and for PFC's release. What the port starts next depends only on the port (its queue,
its host's flows, the PFC pauses seen at the window's start), so a NIC's window is known
at its start as a recurrence over its departures: row after row, (H,) arrays, ``ROWS``
rows unrolled (a bound known at compile time, the same for every experiment of a batch).

After a new packet, the next offer is known in closed form where the host has one flow
that may send (``nic.sendable_and_ready``) and its sender does not poll: it is that
flow's next packet, ready when congestion control lets it go (``cc.next_send_ps``: back
to back at line rate without CC, paced at the flow's rate otherwise, which nothing in a
window changes) once its gate opens (``cc.open_gate_ps`` at its new count). Where a host
has several, round robin may pick another flow once the port falls later: the pass stops
that NIC at its second candidate offer (the rounds go on from there). A NIC also stops
where a start is not exact (past a PFC pause seen from the window start), past the
window's end, where its host has no free slot left (the rounds flag the pool full), where
its queue's arrivals by a start are more than ``SEARCHED`` positions past those known, or
after ``ROWS`` departures: the transmit rounds go on from there, exactly as they would
have. Before the rows, the ACKs already waiting as the port falls free go first, back to
back, in closed form (``_waiting_acks``): on the htsim sweep's point a NIC starts 0-5
packets a window one by one (a 720 ns packet every 1 us window, and the ACKs of the packets
it receives), but 20-30 ACKs at once after a PFC pause held them.

``Static.nic_pass`` (``sim.nic_pass``) turns it on: by default on an accelerator. On a CPU
its rows' work costs more than the rounds it saves (0.3 rounds a window of that point are
left instead of 3.4, but a window takes 1.2-1.3x as long on one core), so a CPU takes it
only when asked (``benchmarks/HISTORY.md``, stop 63).

Every other field of a departure follows in closed form along the rows as in a run
(``runs.link_fields``, ``runs.watch``); the packets' columns are written once for all rows
(``create``: the new packets' own, ``transmit.leave_runs``: every departure's).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops import cc, nic, pfc, port_view, queues
from multiverse_jax.ops.packets import link_serialization_ps
from multiverse_jax.ops.runs import WATCHED, Departures, Rows, after_rows, arrived_within, latest, link_fields, row_before, watch
from multiverse_jax.ops.segments import count_by, prefix_sum
from multiverse_jax.units import NEVER

# Departures a NIC may start in the pass (R): a bound known at compile time. The htsim
# sweep's point needs 0-5 a window (see above); a NIC with more goes on in the rounds.
ROWS = 6
# ACKs a NIC may start back to back before its rows, where they wait as its port falls
# free (``_waiting_acks``): a backlog PFC held, 20-30 ACKs on the htsim sweep's point.
WAITING = 16
# Cells the pass's departures are written from, all NICs together (a scatter's cost on a CPU
# is per entry written, dropped or not: not the W + R rows of every NIC). A window of the
# htsim sweep's point sends ~80; a NIC whose departures do not fit goes on in the rounds.
CELLS = 256
# Positions past those known to have arrived that a row's search reads for the NIC's queue
# just before its start (a fixed-depth binary search): a NIC's queue holds a few ACKs.
SEARCHED = 16


class Made(NamedTuple):
    """The NICs' new packets of the pass: (N,) over its ``CELLS`` cells, or (H,) per host
    (all of one flow each: its first offer's)."""

    slot: jnp.ndarray  # (N,) int32 the free slot each takes (n_slots: no new packet there)
    flow: jnp.ndarray  # (N,) int32 its flow
    seq: jnp.ndarray  # (N,) int32 its sequence number
    wire_bytes: jnp.ndarray  # (N,) int32 its wire size
    salt: jnp.ndarray  # (N,) uint32 its path salt
    port_id: jnp.ndarray  # (N,) int32 the NIC port it leaves by (``PortParams.port_id``)
    start_ps: jnp.ndarray  # (N,) int64 when it starts
    host_flow: jnp.ndarray  # (H,) int32 the flow of the host's new packets
    count: jnp.ndarray  # (H,) int32 how many the host made
    next_send_ps: jnp.ndarray  # (H,) int64 when that flow may send again after the last (``cc.next_send_ps``)
    last_send_ps: jnp.ndarray  # (H,) int64 the last one's start
    flowlet: jnp.ndarray  # (H,) uint32 the flow's flowlet after it
    dcqcn: object  # ``DcqcnState`` at the hosts' flows, (H,) each: after their sends (``cc.on_send``)


class Nics(NamedTuple):
    """What the pass reads of each host's NIC (H,) at the window's start: its port and queue,
    and the flow of its first offer, from which its next offers follow (``follows``)."""

    port: jnp.ndarray  # (H,) int32 the NIC's port (``port_view.nic_ports``)
    real: jnp.ndarray  # (H,) bool a real NIC (not a padding host's)
    queue: jnp.ndarray  # (H,) int32 its port's one class queue
    queue_end: jnp.ndarray  # (H,) int32 one past that queue's last position in the window's order
    seen: tuple  # the PFC pauses seen from the window start (``pfc.seen_from``) at its port
    offer_ps: jnp.ndarray  # (H,) int64 when its first offer is ready (NEVER: none)
    flow: jnp.ndarray  # (H,) int32 that offer's flow
    follows: jnp.ndarray  # (H,) bool its next offers are that flow's next packets (one flow may send, no polls)
    sent_before: jnp.ndarray  # (H,) int32 the packets that flow has sent
    n_packets: jnp.ndarray  # (H,) int32 its packets
    begin_ps: jnp.ndarray  # (H,) int64 when it began
    cc: object  # ``CcState`` at that flow, (H, ...) each


def _nics(params: Params, state: State, order: queues.ServiceOrder, window_start_ps, seen, free, used) -> Nics:
    static, n_hosts = params.static, params.static.n_hosts
    port, real = port_view.nic_ports(params)
    queue = queues.queue_of_class(static, port, static.first_queued_class)  # one class queue a port
    first_offer = nic.of_class(nic.offer(params, state, window_start_ps, free, used), jnp.zeros(n_hosts, jnp.int32))
    flow = first_offer.flow
    sendable, _ = nic.sendable_and_ready(params, state)
    follows = (count_by(sendable, params.flows.flow_src, n_hosts) == 1) & ~cc.polls(params)
    return Nics(
        port, real, queue, order.queue_end[queue], port_view.take(seen, port), jnp.where(real, first_offer.ready_ps, NEVER),
        flow, follows, state.flows.flow_sent_packets[flow], params.flows.flow_n_packets[flow], state.flows.flow_begin_ps[flow],
        jax.tree.map(lambda x: x[flow], state.cc),
    )  # fmt: skip


def drain(params: Params, state: State, order: queues.ServiceOrder, head, end0, arrived_ps, window_end_ps, seen, free, used):
    """Every NIC's departures at the window's start (``head`` (Q,): each queue's pointer;
    ``end0`` (Q,): one past each queue's packets known to have arrived by the window start,
    ``Serving.arrived``; ``arrived_ps`` (P,): ``Serving.arrived_ps``; ``seen``: the ports'
    PFC pauses seen from the window start, ``pfc.seen_from``; ``free``: the window's
    ``nic.FreeSlots``, of which each host has taken ``used`` (H,)). Returns a ``runs.Rows``
    over N = ``CELLS`` cells, the departures of the (``WAITING`` + ``ROWS``) x H rows packed
    row after row (``dep.sends`` where one leaves, ``dep.creates`` where it is a new packet),
    the ``Made`` packets, and (P,) ``arrived_ps`` after them."""
    window_start_ps = window_end_ps - params.window_ps
    nics = _nics(params, state, order, window_start_ps, seen, free, used)
    free_ps, position = state.ports.port_free_ps[nics.port], head[nics.queue]
    waiting, n_waiting = _waiting_acks(params, order, nics, position, free_ps, window_start_ps, window_end_ps)
    last_waiting = jnp.maximum(n_waiting - 1, 0)[None]
    free_ps = jnp.where(n_waiting > 0, jnp.take_along_axis(waiting["start"] + waiting["ser_ps"], last_waiting, axis=0)[0], free_ps)
    row, carried = _one_by_one(params, state, order, nics, free, used, free_ps, position + n_waiting, n_waiting > 0, window_end_ps)
    row = _after_waiting(waiting, n_waiting, row)  # (W + R, H) each: each NIC's waiting ACKs, then its rows
    sends, ends, cell = _cut(order, nics, end0, row)
    makes, n_sent = sends & ~row["ack_first"], jnp.sum(sends, axis=0, dtype=jnp.int32)
    fs = state.flows
    flow_after = _after(
        (jnp.zeros(params.static.n_hosts, jnp.int32), fs.flow_next_send_ps[nics.flow], fs.flow_last_send_ps[nics.flow],
         fs.flow_flowlet[nics.flow], nics.cc.dcqcn),
        carried, jnp.maximum(n_sent - n_waiting, 0),
    )  # fmt: skip
    packet, new_slot = _packets(params, order, nics, free, used, row, makes)
    at = jnp.minimum(row["position"], order.slot.shape[0] - 1)
    row.update(sends=sends, makes=makes, ends=ends, slot=jnp.where(makes, new_slot, order.slot[at]))
    row["queue_bytes"] = order.bytes_before[ends] - order.bytes_before[row["position"]]
    dep = _departures(params, state.ports, row, packet, nics.port)
    at_cells = _at_cells(cell)
    n_made, next_send_ps, last_send_ps, flowlet, dcqcn = flow_after
    made = Made(
        at_cells(jnp.where(makes, new_slot, params.static.n_slots), params.static.n_slots), at_cells(packet.flow),
        at_cells(row["seq"]), at_cells(row["wire_bytes"]), at_cells(row["salt"]),
        at_cells(jnp.broadcast_to(params.ports.port_id[nics.port], makes.shape)), at_cells(row["start"]),
        nics.flow, n_made, next_send_ps, last_send_ps, flowlet.astype(jnp.uint32), dcqcn,
    )  # fmt: skip
    rows_out, arrived_ps = _rows(params, state.ports, dep, packet, row, nics, end0, arrived_ps, at_cells)
    return rows_out, made, arrived_ps


def _one_by_one(params: Params, state: State, order, nics: Nics, free, used, free_ps, position, sent_any, window_end_ps):
    """The ``ROWS`` departures of each NIC one by one, from when its port falls free
    ``free_ps`` and its queue's pointer ``position`` (H,) (``sent_any``: it sent before them):
    (R, H) each of a row's fields, and after each row what its new packets changed of their
    flow (its count, next send, last send, flowlet, DCQCN's counter), a list of R."""
    n_positions, window_start_ps = order.slot.shape[0], window_end_ps - params.window_ps
    flow, offer_ps, going = nics.flow, nics.offer_ps, nics.real
    allow_bytes, gate_ps = nics.cc.flow_gate_allow_bytes, nics.cc.flow_gate_ps  # (H, G)
    n_made = jnp.zeros_like(nics.sent_before)
    fs = state.flows
    flowlet, last_send_ps, next_send_ps, dcqcn = fs.flow_flowlet[flow], fs.flow_last_send_ps[flow], fs.flow_next_send_ps[flow], nics.cc.dcqcn
    rows, carried = [], []
    for _ in range(ROWS):
        # What the port starts next (``transmit.class_heads`` and ``start_times`` at a NIC): its
        # queue's head (an ACK) or its offer, the earlier start, ties to the ACK.
        free_from_ps = jnp.maximum(free_ps, window_start_ps)
        in_queue = position < nics.queue_end
        at = jnp.minimum(position, n_positions - 1)
        ack_ps = jnp.where(in_queue, order.time_ps[at], NEVER)
        ack_start, ack_exact = pfc.release_from_seen(nics.seen, jnp.maximum(free_from_ps, ack_ps))
        offer_start, offer_exact = pfc.release_from_seen(nics.seen, jnp.maximum(free_from_ps, offer_ps))
        ack_first = in_queue & (ack_start <= offer_start)
        start = jnp.where(ack_first, ack_start, offer_start)
        exact = (ack_exact | ~in_queue) & (offer_exact | (offer_ps == NEVER))
        seq = nics.sent_before + n_made
        wire_bytes = jnp.where(ack_first, order.packet.wire_bytes[at], nic.data_wire_bytes(params, flow, seq))
        ser_ps = link_serialization_ps(params, wire_bytes, nics.port)
        offer_known = nics.follows | ~sent_any  # several flows: round robin may pick another once the port falls later
        # Sent if nothing stops it here (the searches for its queue, after the rows, may yet).
        sends = going & exact & (start < window_end_ps) & (ack_first | (offer_known & (used + n_made < free.count)))
        makes = sends & ~ack_first
        new_flowlet = nic.next_flowlet(params, flowlet, last_send_ps, start)
        rows.append(dict(
            sends=sends, ack_first=ack_first, start=start, ser_ps=ser_ps, wire_bytes=wire_bytes, free_ps=free_ps,
            position=position, made_before=n_made, seq=seq, salt=nic.path_salt(params, seq, new_flowlet),
            available_ps=jnp.where(ack_first, ack_ps, jnp.maximum(offer_ps, free_from_ps)),
        ))  # fmt: skip
        # The port after the row; a new packet moves its flow on (its next offer, its bookkeeping).
        going, sent_any = sends, sent_any | sends
        free_ps = jnp.where(sends, start + ser_ps, free_ps)
        position = position + (sends & ack_first).astype(position.dtype)
        n_made = n_made + makes.astype(jnp.int32)
        wire = wire_bytes.astype(jnp.int64)
        flow_next_ps = cc.next_send_ps(params, state.cc, flow, start, ser_ps, wire)
        gate_open_ps = cc.open_gate_ps(params, allow_bytes, gate_ps, nics.sent_before + n_made)
        more = (nics.sent_before + n_made < nics.n_packets) & (gate_open_ps != NEVER)
        ready_ps = jnp.maximum(jnp.maximum(nics.begin_ps, flow_next_ps), gate_open_ps)
        offer_ps = jnp.where(makes, jnp.where(nics.follows, jnp.where(more, ready_ps, NEVER), 0), offer_ps)  # 0: unknown
        flowlet, last_send_ps = jnp.where(makes, new_flowlet, flowlet), jnp.where(makes, start, last_send_ps)
        next_send_ps = jnp.where(makes, flow_next_ps, next_send_ps)
        dcqcn = cc.on_send(params, nics.cc.replace(dcqcn=dcqcn), makes, wire, start).dcqcn
        carried.append((n_made, next_send_ps, last_send_ps, flowlet, dcqcn))
    return {key: jnp.stack([r[key] for r in rows]) for key in rows[0]}, carried


def _cut(order, nics: Nics, end0, row):
    """Each NIC's rows cut where a search cannot tell its queue just before a departure
    (what arrived by the start from the pointer on, found past the packets known to have
    arrived, ``end0`` (Q,)), then to the ``CELLS`` that fit, row after row: (W + R, H) bool
    the departures (a prefix of each NIC's rows), (W + R, H) one past each queue's packets
    arrived by each start, and the cells they are written from (``_at_cells``)."""
    position, ack_first, start = row["position"], row["ack_first"], row["start"]
    low = jnp.maximum(position + ack_first.astype(position.dtype), end0[nics.queue])
    ends = arrived_within(order.time_ps, low, jnp.minimum(nics.queue_end, low + SEARCHED), start, SEARCHED)
    known = (ends < low + SEARCHED) | (ends >= nics.queue_end)
    sends = row["sends"] & (prefix_sum((row["sends"] & ~known).astype(jnp.int32), axis=0) == 0)
    in_row = prefix_sum(sends.astype(jnp.int32), axis=1)  # row-major: along the row, then rows before
    sent_before_cell = in_row + (prefix_sum(in_row[:, -1], axis=0) - in_row[:, -1])[:, None]
    sends = sends & (sent_before_cell <= CELLS)
    cell = jnp.searchsorted(sent_before_cell.reshape(-1), jnp.arange(1, CELLS + 1, dtype=jnp.int32), side="left", method="scan_unrolled")
    return sends, ends, (jnp.minimum(cell, sends.size - 1).astype(jnp.int32), jnp.arange(CELLS) < jnp.sum(sends))


def _packets(params: Params, order, nics: Nics, free, used, row, makes):
    """(W + R, H) each: what a departure reads of its packet, the queued ACK's or the new
    packet's (its arrival rank: its flow), and the free slot a new packet takes (its host's
    next, ``free``'s entry ``used`` (H,) + the packets it made before)."""
    at = jnp.minimum(row["position"], order.slot.shape[0] - 1)
    queued = jax.tree.map(lambda column: column[at], order.packet)
    new_slot = jnp.take_along_axis(free.slot, jnp.minimum(used[:, None] + row["made_before"].T, free.slot.shape[1] - 1), axis=1).T
    made_flow = jnp.broadcast_to(nics.flow, makes.shape)
    packet = queues.QueuedPacket(
        queued.is_ack & ~makes, row["wire_bytes"], jnp.where(makes, made_flow, queued.rank), jnp.where(makes, made_flow, queued.flow),
        jnp.where(makes, row["seq"], queued.seq), jnp.where(makes, 0, queued.hop),
    )  # fmt: skip
    return packet, new_slot


def _waiting_acks(params: Params, order, nics: Nics, position, free_ps, window_start_ps, window_end_ps):
    """The ACKs a NIC starts first, back to back, as its port falls free: those at the head of
    its queue (from ``position`` (H,) on), up to ``WAITING``, each arrived
    by the time the port reaches it. Such an ACK starts when the port falls free, no later
    than any offer could, so it goes first (ties to the ACK); a backlog of ACKs a PFC pause
    held is sent so at once, not one a row. With C_i the serialisations before ACK i, it
    starts at C_i + the port's first free instant (its free time, not before the window
    start, nor before a pause in effect ends), while that is before the window's end and
    the port's next pause (``pfc.seen_at``). Returns the rows ((W, H) each, as the
    recurrence's, ``sends`` a prefix) and (H,) how many start."""
    n_positions = order.slot.shape[0]
    free_from_ps = jnp.maximum(free_ps, window_start_ps)
    held_until_ps, next_pause_ps = pfc.seen_at(nics.seen, free_from_ps)
    position_k = position + jnp.arange(WAITING, dtype=position.dtype)[:, None]  # (W, H)
    in_queue = position_k < nics.queue_end
    at = jnp.minimum(position_k, n_positions - 1)
    arrival_ps = jnp.where(in_queue, order.time_ps[at], NEVER)
    wire_bytes = order.packet.wire_bytes[at]
    ser_ps = link_serialization_ps(params, wire_bytes, nics.port)
    start = jnp.maximum(free_from_ps, held_until_ps) + prefix_sum(ser_ps, axis=0) - ser_ps
    ok = nics.real & in_queue & (arrival_ps <= start) & (start < window_end_ps) & (start < next_pause_ps)
    sends = prefix_sum((~ok).astype(jnp.int32), axis=0) == 0
    zeros = jnp.zeros_like(position_k)
    rows = dict(
        sends=sends, ack_first=jnp.ones_like(sends), start=start, ser_ps=ser_ps, wire_bytes=wire_bytes,
        free_ps=row_before(start + ser_ps, free_ps), position=position_k, made_before=zeros,
        seq=jnp.broadcast_to(nics.sent_before, zeros.shape), salt=zeros.astype(jnp.uint32), available_ps=arrival_ps,
    )  # fmt: skip
    return rows, jnp.sum(sends, axis=0, dtype=position.dtype)


def _after_waiting(waiting, n_waiting, row):
    """The rows of each NIC, (W + R, H) each: its ``n_waiting`` (H,) waiting ACKs (of
    ``waiting``, (W, H) each), then its recurrence's rows (``row``, (R, H) each), then none."""
    n_waiting_rows, n_rows = waiting["sends"].shape[0], row["sends"].shape[0]
    k = jnp.arange(n_waiting_rows + n_rows)[:, None]
    index = jnp.minimum(jnp.where(k < n_waiting, k, n_waiting_rows + k - n_waiting), n_waiting_rows + n_rows - 1)
    joined = {key: jnp.take_along_axis(jnp.concatenate([waiting[key], row[key]]), index, axis=0) for key in row}
    joined["sends"] = joined["sends"] & (k < n_waiting + n_rows)
    return joined


def _at_cells(cell):
    """A function that takes an (R, H) array's entries at the ``CELLS`` cells ``cell`` =
    ((CELLS,) int32 their row-major index, (CELLS,) bool a departure there): where none,
    ``fill`` (False for the departures' ``sends``)."""
    index, valid = cell

    def at_cells(x, fill=None):
        taken = x.reshape(-1)[index]
        if x.dtype == jnp.bool_:
            return taken & valid
        return taken if fill is None else jnp.where(valid, taken, fill)

    return at_cells


def _after(initial, carried, n_rows):
    """Each of ``initial`` (pytrees of (H,) arrays) after each host's first ``n_rows`` (H,)
    rows, from its value after every row, ``carried`` (a list of R such pytrees)."""

    def pick(first, *per_row):
        return jnp.take_along_axis(jnp.stack((first,) + per_row), n_rows[None], axis=0)[0]

    return jax.tree.map(pick, initial, *carried)


def _departures(params: Params, ports, row, packet: queues.QueuedPacket, port) -> Departures:
    """(R, H) each: the ``Departures`` of the rows, their link and rank fields in closed form
    along each NIC's rows (``runs.link_fields``, as ``runs.departures_behind``)."""
    base = (ports.port_last_arrival_ps[port], ports.port_last_scheduled_ps[port], ports.port_busy_rank[port], ports.port_train_rank[port])
    arrival_ps, scheduled_ps, prior_ps, busy_rank, rank = link_fields(
        params, row["start"], row["ser_ps"], port, row["free_ps"], row["available_ps"], packet.rank, row_before, latest, base
    )
    falses, zeros = jnp.zeros_like(row["sends"]), jnp.zeros_like(packet.flow)
    return Departures(
        row["start"], falses, zeros, row["sends"], ~packet.is_ack, row["makes"], falses, row["slot"], packet.wire_bytes,
        row["ser_ps"], arrival_ps, scheduled_ps, prior_ps, busy_rank, rank,
    )  # fmt: skip


def _rows(params: Params, ports, dep: Departures, packet, row, nics: Nics, end0, arrived_ps, at_cells):
    """The rows (W + R, H) as a ``runs.Rows`` over their cells (what ``transmit.account_runs``
    and ``transmit.leave_runs`` take): the NIC ports after their departures (``port_after``'s
    fields at the last, the queue watch along them, ``runs.watch``), the ACKs each queue
    sent, where its arrivals by its last departure end; and (P,) ``arrived_ps`` after them."""
    static, port = params.static, nics.port
    n_ports, n_queues = static.n_ports, static.n_queues
    sends = dep.sends
    n_sent = jnp.sum(sends, axis=0, dtype=jnp.int32)  # (H,)
    last_row = jnp.maximum(n_sent - 1, 0)[None]
    tx_bytes = ports.port_tx_bytes[port] + prefix_sum(jnp.where(sends, dep.wire_bytes, 0).astype(jnp.int64), axis=0)
    watched, over = watch(
        tuple(getattr(ports, name)[port] for name in WATCHED), params.ports.port_buffer_bytes[port], sends, dep.start,
        row["queue_bytes"], dep.wire_bytes,
    )  # fmt: skip
    at_port = jnp.where(nics.real, port, n_ports)  # a padding host's (another port's) is never written
    ports = after_rows(ports, dep, tx_bytes, n_sent, port, at_port)
    ports = ports.replace(**{name: getattr(ports, name).at[at_port].set(value, mode="drop") for name, value in zip(WATCHED, watched)})
    sent_here = nics.real & (n_sent > 0)
    at_queue = jnp.where(nics.real, nics.queue, n_queues)
    served = jnp.zeros(n_queues, jnp.int32).at[at_queue].add(jnp.sum(sends & ~dep.creates, axis=0, dtype=jnp.int32), mode="drop")
    ends = end0.at[jnp.where(sent_here, nics.queue, n_queues)].set(jnp.take_along_axis(row["ends"], last_row, axis=0)[0], mode="drop")
    last_start = jnp.take_along_axis(dep.start, last_row, axis=0)[0]
    arrived_ps = arrived_ps.at[jnp.where(sent_here, port, n_ports)].set(last_start, mode="drop")
    cell_port = jnp.broadcast_to(port, sends.shape)
    cells = jax.tree.map(at_cells, (dep, cell_port, packet, row["queue_bytes"], tx_bytes))
    return Rows(*cells, ports, jnp.any(over), served, ends), arrived_ps


def create(params: Params, state: State, made: Made) -> State:
    """The pass's new packets in the pool (what only a new packet has: ``nic.new_packets``;
    ``transmit.leave_runs`` writes the rest), their flows moved on (packets sent, next send,
    flowlet, DCQCN's byte counter) and their NICs' round-robin cursors (``nic.emit``'s, for
    each host's last new packet)."""
    packets = nic.new_packets(
        params, state.packets, made.slot, made.flow, made.seq, made.wire_bytes, made.salt, made.port_id, made.start_ps
    )
    fs, made_any = state.flows, made.count > 0
    target = jnp.where(made_any, made.host_flow, params.static.n_flows)  # a flow has one host: no collisions

    def put(column, value):
        return column.at[target].set(value.astype(column.dtype), mode="drop")

    flows = fs.replace(
        flow_sent_packets=fs.flow_sent_packets.at[target].add(made.count, mode="drop"),
        flow_next_send_ps=jnp.where(cc.polls(params), fs.flow_next_send_ps, put(fs.flow_next_send_ps, made.next_send_ps)),
        flow_last_send_ps=put(fs.flow_last_send_ps, made.last_send_ps),
        flow_flowlet=put(fs.flow_flowlet, made.flowlet),
    )
    dcqcn = jax.tree.map(put, state.cc.dcqcn, made.dcqcn)
    ports = state.ports.replace(port_rr_flow=nic.next_cursor(params, state, made.host_flow, made_any, made.last_send_ps))
    return state.replace(packets=packets, flows=flows, cc=state.cc.replace(dcqcn=dcqcn), ports=ports)
