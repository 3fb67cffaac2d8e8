"""Receive: data packets reaching their destination host are delivered, and each turns
into its ACK (a real ``ack_bytes`` packet, control class) queued at the receiver's NIC at
the data packet's arrival time.

The ACK echoes the data packet's ECN mark and in-band telemetry (same slot). DCQCN's
notification point (DCQCN experiments only): the earliest ECN-marked arrival of a flow in the window makes its
ACK carry a CNP if the flow's last CNP is at least ``dcqcn.cnp_interval`` old (so at most
one CNP per flow per interval, and per window).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from multiverse_jax.components.experiment import CC_DCQCN, Params, State
from multiverse_jax.components.packets import PacketState
from multiverse_jax.ops.fusion import computed_once
from multiverse_jax.ops.lockstep import switch_largest
from multiverse_jax.ops.packets import arriving, at_host
from multiverse_jax.ops.queues import arrival_sizes, size_index
from multiverse_jax.ops.segments import compact, count_by, fifo_head, latest_by


class Delivered(NamedTuple):
    """What the window's deliveries add up to per flow, (F,) each."""

    n_packets: jnp.ndarray  # int32 data packets delivered
    payload_bytes: jnp.ndarray  # int64 their payload
    n_marked: jnp.ndarray  # int32 those with an ECN mark
    last_ps: jnp.ndarray  # int64 the latest arrival (-1: none)
    first_marked_ps: jnp.ndarray  # int64 the earliest marked arrival (NEVER: none)
    first_marked_slot: jnp.ndarray  # int32 its slot (n_slots: none)


def per_flow(params: Params, pkts: PacketState, delivered, window_end_ps) -> Delivered:
    """The ``Delivered`` sums of the packets ``delivered`` (S,) bool.

    A window delivers few packets next to the pool (one or two per host link), so they are
    compacted (a cumsum) into the smallest of ``queues.arrival_sizes`` that holds them, in
    slot order, and summed there: five per-flow reductions over the pool were ten passes
    over it (each builds its updates, then scatters them). One size runs
    (``lockstep.switch_largest``); every size gives the same sums, and the earliest marked
    arrival breaks ties by the lowest slot in each (slot order is kept)."""
    n_slots = params.static.n_slots
    sizes = arrival_sizes(n_slots)

    def in_places(n_places: int):
        def sums(params, pkts, delivered, window_end_ps):  # closes over no array: a custom_vmap function may not
            every_slot = jnp.arange(n_slots, dtype=jnp.int32)
            if n_places >= n_slots:
                members = jnp.where(delivered, every_slot, n_slots)
            else:
                (members,), _ = compact(delivered, n_places, (every_slot, n_slots))
            return _sums(params, pkts, members, window_end_ps)

        return sums

    def places_index(params, pkts, delivered, window_end_ps):
        return size_index(jnp.sum(delivered, dtype=jnp.int32), sizes)

    branches = [in_places(n) for n in sizes + [n_slots]]
    if not sizes:
        return branches[0](params, pkts, delivered, window_end_ps)
    return switch_largest(places_index, branches, params, pkts, delivered, window_end_ps)


def _sums(params: Params, pkts: PacketState, members, window_end_ps) -> Delivered:
    """``Delivered`` of the slots ``members`` (n,) int32 in increasing order (n_slots: none)."""
    n_flows, n_slots = params.static.n_flows, params.static.n_slots
    valid = members < n_slots
    at = jnp.minimum(members, n_slots - 1)
    flow, time_ps, marked = pkts.pkt_flow[at], pkts.pkt_time_ps[at], valid & pkts.pkt_ecn[at]
    payload = pkts.pkt_bytes[at].astype(jnp.int64) - params.header_bytes
    window_start_ps = window_end_ps - params.window_ps
    first_marked_ps, first = fifo_head(marked, time_ps, flow, n_flows, window_start_ps)
    return Delivered(
        count_by(valid, flow, n_flows),
        count_by(valid, flow, n_flows, payload),
        count_by(marked, flow, n_flows),
        latest_by(valid, flow, n_flows, time_ps),
        first_marked_ps,
        jnp.where(first < members.shape[0], members[jnp.minimum(first, members.shape[0] - 1)], n_slots),
    )


def receive(params: Params, state: State, window_end_ps) -> State:
    pkts, flows = state.packets, state.flows
    n_hosts, n_flows, n_slots = params.static.n_hosts, params.static.n_flows, params.static.n_slots
    node = params.links.link_dst_node[pkts.pkt_port]
    # Read by every column write below: computed once (``computed_once``: 4-7 % of a busy window, stop 52).
    delivered = computed_once(arriving(pkts, window_end_ps) & ~pkts.pkt_is_ack & at_host(params, pkts), window_end_ps)
    got = per_flow(params, pkts, delivered, window_end_ps)
    rx_packets = flows.flow_rx_packets + got.n_packets
    rx_bytes = flows.flow_rx_bytes + got.payload_bytes
    # Arrivals of this window come after those of earlier windows, so the latest one
    # completes the flow when its count reaches the packet total.
    completes = (rx_packets == params.flows.flow_n_packets) & (flows.flow_rx_packets < rx_packets)
    last_arrival = got.last_ps
    receiver_nic = params.nics.nic_port[jnp.minimum(node, n_hosts - 1)]
    marked_ps, marked_slot = got.first_marked_ps, got.first_marked_slot
    cc = state.cc
    cnp_due = (
        (params.cc_kind == CC_DCQCN)
        & (marked_slot < n_slots)
        & (marked_ps - cc.dcqcn.flow_last_cnp_ps >= params.cc.dcqcn_cnp_interval_ps)
    )
    packets = pkts.replace(
        pkt_is_ack=pkts.pkt_is_ack | delivered,
        pkt_bytes=jnp.where(delivered, params.ack_bytes, pkts.pkt_bytes),
        pkt_port=jnp.where(delivered, receiver_nic, pkts.pkt_port),
        pkt_in_flight=pkts.pkt_in_flight & ~delivered,
        pkt_ingress=jnp.where(delivered, -1, pkts.pkt_ingress),
        pkt_hop=jnp.where(delivered, 0, pkts.pkt_hop),
        pkt_cnp=pkts.pkt_cnp.at[jnp.where(cnp_due, marked_slot, n_slots)].set(True, mode="drop"),
    )
    flows = flows.replace(
        flow_rx_packets=rx_packets,
        flow_rx_bytes=rx_bytes,
        flow_rx_finish_ps=jnp.where(completes, last_arrival, flows.flow_rx_finish_ps),
        flow_last_rx_ps=jnp.where(rx_packets > flows.flow_rx_packets, last_arrival, flows.flow_last_rx_ps),
    )
    cc = cc.replace(
        flow_ecn_marked_packets=cc.flow_ecn_marked_packets + got.n_marked,
        dcqcn=cc.dcqcn.replace(
            flow_last_cnp_ps=jnp.where(cnp_due, marked_ps, cc.dcqcn.flow_last_cnp_ps),
            flow_cnps_sent=cc.dcqcn.flow_cnps_sent + cnp_due,
        ),
    )
    return state.replace(packets=packets, flows=flows, cc=cc)
