"""NIC send: each host's NIC offers the next packet of one of its flows to its egress port
(``systems/transmit.py`` decides which offer its port starts; ``emit`` creates the packet).

Load balancing is decided here, at the source: each packet carries a path salt that the
switches mix into their ECMP hash (0 for per-flow ECMP, the packet's sequence number for
spraying, the flow's flowlet number for flowlet switching).

The NIC serves its flows round-robin, as htsim's host queue does (a cursor over the
flows it has seen, in flow order): of the flows ready by the time its port falls free,
the first at or after the cursor, cyclically; if none is ready by then, the first to
become ready. After a packet of flow f, the cursor moves to the next flow after f that
had started by then, or back to the first flow when there is none (so a flow that starts
later joins the cycle after the wrap, as in htsim's map iterator). After sending, a flow
is next ready when congestion control says (``ops.cc.next_send_ps``); a polling sender's
flow (hpcc.pacing=ticks) when its poll has handed its next packet to the NIC's queue
(``ops/polls.py``). A data packet is created only when the port puts it on the wire, in a
free slot of its host's share of the pool.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import LB_FLOWLET, LB_SPRAY, Params, State
from multiverse_jax.ops import cc, polls
from multiverse_jax.ops.lockstep import switch_largest
from multiverse_jax.ops.packets import by_host
from multiverse_jax.ops.segments import count_by, fifo_head, prefix_sum
from multiverse_jax.units import NEVER


class NicOffer(NamedTuple):
    """What each host's NIC could send next, per data class: arrays (H, C), or (H,) for
    one class per host (``of_class``)."""

    ready_ps: jnp.ndarray  # int64 earliest start of the offered packet (NEVER: nothing to send)
    flow: jnp.ndarray  # int32 flow of the offered packet
    wire_bytes: jnp.ndarray  # int32 its wire size
    slot: jnp.ndarray  # (H,) int32 free pool slot it would take
    has_slot: jnp.ndarray  # (H,) bool the host has a free slot


def sendable_and_ready(params: Params, state: State):
    """(F,) bool: started, packets left and the CC window opens in this window (a polling
    sender: a packet has been handed to the NIC); and (F,) int64 when each flow may start
    its next packet (started, paced, window open; a polling sender: when it was handed over)."""
    fp, fs = params.flows, state.flows
    gate_ps = cc.gate_ps(params, state)
    started = fp.flow_valid & (fs.flow_begin_ps != NEVER)
    left = started & (fs.flow_sent_packets < fp.flow_n_packets)
    handed_ps = polls.head_ps(state)
    polling = cc.polls(params)
    sendable = left & jnp.where(polling, handed_ps != NEVER, gate_ps != NEVER)
    paced_ps = jnp.maximum(jnp.maximum(fs.flow_begin_ps, fs.flow_next_send_ps), gate_ps)
    return sendable, jnp.where(polling, handed_ps, paced_ps)


class FreeSlots(NamedTuple):
    """Each host's free pool slots at the window start, lowest first: a NIC's new packet
    takes the lowest free slot of its host, and no slot is freed while ports transmit
    (ACKs free theirs in ``ack``, before), so the n-th packet a host creates in a window
    takes its n-th free slot."""

    slot: jnp.ndarray  # (H, S) int32 the n-th free slot of each host (at n < count)
    count: jnp.ndarray  # (H,) int32 free slots of each host


FREE_SEARCHED = 8  # free places found by search for each host, where no host can create more in a window


def free_slots(params: Params, pkts, most_created=None) -> FreeSlots:
    """Each host's free slots, listed once per window (one pass over the pool): its first
    S (``Static.slots_per_host``) of them, which is every one but on a per-host prefix.

    On a per-host prefix, given ``most_created`` (() int32, at least the most packets a
    host can create in the window: ``pool.creatable_packets``), each host's first
    ``FREE_SEARCHED`` free places are found by binary searches in the pass's prefix sum
    (as a window takes no more, the rest of the list is not read): no scatter of every
    place into the list (0.33 ms a window on the htsim sweep's point at stop 44, with the pass).
    Where a host could create more, every free place is listed."""
    n_hosts, slots_per_host = params.static.n_hosts, params.static.slots_per_host
    if params.pool_layout is not None:
        if most_created is None or FREE_SEARCHED >= slots_per_host:
            return _free_places(params, pkts)
        listing = lambda params, pkts, most_created: (most_created > FREE_SEARCHED).astype(jnp.int32)  # noqa: E731
        return switch_largest(listing, [_free_places_searched, lambda p, k, _: _free_places(p, k)], params, pkts, most_created)
    free = by_host(params.static, ~pkts.pkt_valid)  # (H, S)
    rank = prefix_sum(free, axis=1, dtype=jnp.int32) - 1
    slot = by_host(params.static, jnp.arange(params.static.n_slots, dtype=jnp.int32))
    column = jnp.where(free, rank, slots_per_host)
    listed = jnp.zeros((n_hosts, slots_per_host), jnp.int32).at[jnp.arange(n_hosts)[:, None], column].set(slot, mode="drop")
    return FreeSlots(listed, jnp.sum(free, axis=1, dtype=jnp.int32))


def _free_in_host_order(params: Params, pkts):
    """(N,) bool each place of a per-host prefix, in host order, is free (padding is not)."""
    layout = params.pool_layout
    return ~pkts.pkt_valid[layout.host_order] & (layout.order_host < params.static.n_hosts)


def _free_places_searched(params: Params, pkts, _most_created) -> FreeSlots:
    """``free_slots``' first ``FREE_SEARCHED`` free places of each host (0 past them): a
    host's places are one run of the host order, ``[host_start, host_start + host_columns)``,
    so its n-th free place is the first whose count of free places up to it, inclusive,
    reaches the count before its run plus n + 1."""
    layout, n_hosts, width = params.pool_layout, params.static.n_hosts, params.static.slots_per_host
    free = _free_in_host_order(params, pkts)
    n_places = free.shape[0]
    through = prefix_sum(free, dtype=jnp.int32)  # (N,) free places up to each, inclusive

    def free_before(place):  # free places before ``place`` (H,)
        return jnp.where(place > 0, through[jnp.clip(place - 1, 0, n_places - 1)], 0)

    before = free_before(layout.host_start)
    count = free_before(layout.host_start + layout.host_columns) - before  # (H,)
    nth = jnp.arange(FREE_SEARCHED, dtype=jnp.int32)
    place = jnp.searchsorted(through, before[:, None] + nth + 1, side="left", method="scan_unrolled")  # (H, K)
    found = jnp.where(nth < count[:, None], layout.host_order[jnp.minimum(place, n_places - 1)], 0)
    listed = jnp.concatenate([found, jnp.zeros((n_hosts, width - FREE_SEARCHED), jnp.int32)], axis=1)
    return FreeSlots(listed, count)


def _free_places(params: Params, pkts) -> FreeSlots:
    """``free_slots`` on a per-host prefix (``Params.pool_layout``): each host's places
    are one run of its host order, its columns in order, so a host's n-th free place is
    its n-th free column. A window creates at most S packets a host (``pool.per_host_fits``)."""
    layout, n_hosts, width = params.pool_layout, params.static.n_hosts, params.static.slots_per_host
    free = _free_in_host_order(params, pkts)  # (N,)
    before = prefix_sum(free, dtype=jnp.int32) - free  # free places before each, all hosts
    host = jnp.minimum(layout.order_host, n_hosts - 1)
    rank = before - before[jnp.minimum(layout.host_start, free.shape[0] - 1)][host]  # among its host's
    listed = jnp.zeros((n_hosts, width), jnp.int32).at[host, jnp.where(free, rank, width)].set(layout.host_order, mode="drop")
    return FreeSlots(listed, count_by(free, host, n_hosts))


def offer(params: Params, state: State, now_ps, free: FreeSlots, used) -> NicOffer:
    """Per host and data class, the packet of the next flow in round-robin order, to be
    created (if sent) in the host's next free slot: ``free``'s entry ``used`` (H,)."""
    fp, fs = params.flows, state.flows
    n_hosts, n_flows, n_classes = params.static.n_hosts, params.static.n_flows, params.static.n_data_classes
    queue = fp.flow_src * n_classes + fp.flow_priority
    sendable, flow_ready = sendable_and_ready(params, state)
    nic_port = params.nics.nic_port[fp.flow_src]  # (F,)
    # Flows ready by the time the port falls free wait together; among them, round robin.
    waiting_from = jnp.maximum(state.ports.port_free_ps[nic_port], now_ps)
    after_cursor = (jnp.arange(n_flows) - state.ports.port_rr_flow[nic_port]) % n_flows
    ready, flow = fifo_head(
        sendable, jnp.maximum(flow_ready, waiting_from), queue, n_hosts * n_classes, now_ps, tie=after_cursor.astype(jnp.int64)
    )
    ready, flow = ready.reshape(n_hosts, n_classes), jnp.minimum(flow, n_flows - 1).reshape(n_hosts, n_classes)
    has_slot = used < free.count
    slot = jnp.take_along_axis(free.slot, jnp.minimum(used, free.slot.shape[1] - 1)[:, None], axis=1)[:, 0]
    return NicOffer(
        ready_ps=ready,
        flow=flow,
        wire_bytes=data_wire_bytes(params, flow, fs.flow_sent_packets[flow]),
        slot=slot,
        has_slot=has_slot,
    )


def data_wire_bytes(params: Params, flow, seq):
    """int32 the wire size of packet ``seq`` of ``flow`` (arrays alike): every packet of a
    flow but its last is full (payload + header); the last carries what is left."""
    n_packets = params.flows.flow_n_packets[flow]
    last_payload = params.flows.flow_size_bytes[flow] - (n_packets - 1).astype(jnp.int64) * params.payload_bytes
    payload = jnp.where(seq == n_packets - 1, last_payload, params.payload_bytes)
    return (payload + params.header_bytes).astype(jnp.int32)


def of_class(offer_: NicOffer, data_class) -> NicOffer:
    """Each host's offer for one data class, ``data_class`` (H,)."""

    def pick(a):
        return jnp.take_along_axis(a, data_class[:, None], axis=1)[:, 0]

    picked = {key: pick(getattr(offer_, key)) for key in ("ready_ps", "flow", "wire_bytes")}
    return offer_._replace(**picked)


def next_cursor(params: Params, state: State, sent_flow, sent, start_ps):
    """(P,) each NIC port's round-robin cursor after its host sent a packet of
    ``sent_flow`` (H,) where ``sent`` (H,), starting at ``start_ps`` (H,): the first flow
    of the host after it that had started by then, else 0 (wrap)."""
    fp = params.flows
    n_flows = params.static.n_flows
    index = jnp.arange(n_flows, dtype=jnp.int32)
    started = fp.flow_valid & (state.flows.flow_begin_ps <= start_ps[fp.flow_src])
    later = started & sent[fp.flow_src] & (index > sent_flow[fp.flow_src])
    successor = jax.ops.segment_min(jnp.where(later, index, n_flows), fp.flow_src, params.static.n_hosts)
    cursor = jnp.where(successor == n_flows, 0, successor)
    nic_port = jnp.where(sent, params.nics.nic_port, params.static.n_ports)
    return state.ports.port_rr_flow.at[nic_port].set(cursor, mode="drop")


def next_flowlet(params: Params, flowlet, last_send_ps, start_ps):
    """The flowlet number of a flow's packet that starts at ``start_ps``, after its packet
    before (started at ``last_send_ps``, negative if none; its flowlet ``flowlet``): a flow
    that has been idle longer than the flowlet gap starts a new flowlet. Arrays alike."""
    return flowlet + ((last_send_ps < 0) | (start_ps - last_send_ps > params.flowlet_gap_ps))


def path_salt(params: Params, seq, flowlet):
    """The path salt of a new data packet (``seq``, its flow's ``flowlet``; arrays alike):
    0 for per-flow ECMP, the sequence number + 1 for spraying, the flowlet number for flowlets."""
    return jnp.where(
        params.lb_kind == LB_SPRAY,
        (seq + 1).astype(jnp.uint32),
        jnp.where(params.lb_kind == LB_FLOWLET, flowlet.astype(jnp.uint32), jnp.uint32(0)),
    )


def new_packets(params: Params, pkts, target, flow, seq, wire_bytes, salt, port_id, start_ps):
    """The pool with new data packets written at the slots ``target`` (N,) (``n_slots``:
    none, dropped): of ``flow``, ``seq``, ``wire_bytes``, path ``salt``, leaving NIC port
    ``port_id`` at ``start_ps`` ((N,) each, or broadcasting). What only a new packet has:
    the departure's own columns (in flight, arrival, ranks, ECN) are ``transmit.leave``'s."""

    def put(column, value):
        return column.at[target].set(jnp.broadcast_to(value, target.shape).astype(column.dtype), mode="drop")

    packets = pkts.replace(
        pkt_valid=put(pkts.pkt_valid, True),
        pkt_is_ack=put(pkts.pkt_is_ack, False),
        pkt_flow=put(pkts.pkt_flow, flow),
        pkt_seq=put(pkts.pkt_seq, seq),
        pkt_bytes=put(pkts.pkt_bytes, wire_bytes),
        pkt_port=put(pkts.pkt_port, port_id),
        pkt_ingress=put(pkts.pkt_ingress, -1),
        pkt_hop=put(pkts.pkt_hop, 0),
        pkt_path_salt=put(pkts.pkt_path_salt, salt),
        pkt_cnp=put(pkts.pkt_cnp, False),
        pkt_sent_ps=put(pkts.pkt_sent_ps, start_ps),
    )
    if params.static.int_hops:  # its telemetry starts empty (none compiled in without HPCC)
        packets = packets.replace(pkt_int_port=pkts.pkt_int_port.at[target].set(-1, mode="drop"))
    return packets


def emit(params: Params, state: State, offer_: NicOffer, sent, start_ps, serialization_ps) -> State:
    """Create the packets that NICs put on the wire this round: ``sent``, ``start_ps``,
    ``serialization_ps`` (H,). The caller writes what every departure writes (in flight,
    its arrival, ranks, a cleared ECN mark: ``systems.transmit.leave``); this writes what
    only a new packet has: its flow, sequence, size, path salt and the rest.

    Each sending host writes one free slot of its own share of the pool, so the writes
    never collide; hosts that send nothing write nowhere (index out of range, dropped).
    """
    fp, fs, pkts = params.flows, state.flows, state.packets
    n_flows = params.static.n_flows
    target = jnp.where(sent, offer_.slot, params.static.n_slots)
    seq = fs.flow_sent_packets[offer_.flow]
    flowlet = next_flowlet(params, fs.flow_flowlet[offer_.flow], fs.flow_last_send_ps[offer_.flow], start_ps)
    port_id = params.ports.port_id[params.nics.nic_port]
    packets = new_packets(params, pkts, target, offer_.flow, seq, offer_.wire_bytes, path_salt(params, seq, flowlet), port_id, start_ps)
    # Each flow reads whether its host's NIC sent one of its packets (a gather, no scatter).
    src = fp.flow_src
    flow_sent = sent[src] & (offer_.flow[src] == jnp.arange(n_flows))
    flow_start_ps, flow_wire = start_ps[src], offer_.wire_bytes[src].astype(jnp.int64)
    next_send = cc.next_send_ps(params, state.cc, jnp.arange(n_flows), flow_start_ps, serialization_ps[src], flow_wire)
    flows = fs.replace(
        flow_sent_packets=fs.flow_sent_packets + flow_sent,
        flow_next_send_ps=jnp.where(flow_sent & ~cc.polls(params), next_send, fs.flow_next_send_ps),
        flow_last_send_ps=jnp.where(flow_sent, start_ps[src], fs.flow_last_send_ps),
        flow_flowlet=jnp.where(flow_sent, flowlet[src].astype(jnp.uint32), fs.flow_flowlet),
    )
    ports = state.ports.replace(port_rr_flow=next_cursor(params, state, offer_.flow, sent, start_ps))
    return state.replace(
        packets=packets, ports=ports, flows=flows, cc=cc.on_send(params, state.cc, flow_sent, flow_wire, flow_start_ps)
    )
