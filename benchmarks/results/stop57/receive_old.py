"""Receive: data packets reaching their destination host are delivered, and each turns
into its ACK (a real ``ack_bytes`` packet, control class) queued at the receiver's NIC at
the data packet's arrival time.

The ACK echoes the data packet's ECN mark and in-band telemetry (same slot). DCQCN's
notification point (DCQCN experiments only): the earliest ECN-marked arrival of a flow in the window makes its
ACK carry a CNP if the flow's last CNP is at least ``dcqcn.cnp_interval`` old (so at most
one CNP per flow per interval, and per window).
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import CC_DCQCN, Params, State
from multiverse_jax.ops.fusion import computed_once
from multiverse_jax.ops.packets import arriving, at_host
from multiverse_jax.ops.segments import count_by, fifo_head, latest_by


def receive(params: Params, state: State, window_end_ps) -> State:
    pkts, flows = state.packets, state.flows
    n_hosts, n_flows, n_slots = params.static.n_hosts, params.static.n_flows, params.static.n_slots
    node = params.links.link_dst_node[pkts.pkt_port]
    # Read by every column write below: computed once (``computed_once``: 4-7 % of a busy window, stop 52).
    delivered = computed_once(arriving(pkts, window_end_ps) & ~pkts.pkt_is_ack & at_host(params, pkts), window_end_ps)
    payload = pkts.pkt_bytes.astype(jnp.int64) - params.header_bytes
    rx_packets = flows.flow_rx_packets + count_by(delivered, pkts.pkt_flow, n_flows)
    rx_bytes = flows.flow_rx_bytes + count_by(delivered, pkts.pkt_flow, n_flows, payload)
    # Arrivals of this window come after those of earlier windows, so the latest one
    # completes the flow when its count reaches the packet total.
    completes = (rx_packets == params.flows.flow_n_packets) & (flows.flow_rx_packets < rx_packets)
    last_arrival = latest_by(delivered, pkts.pkt_flow, n_flows, pkts.pkt_time_ps)
    receiver_nic = params.nics.nic_port[jnp.minimum(node, n_hosts - 1)]
    window_start_ps = window_end_ps - params.window_ps
    marked_ps, marked_slot = fifo_head(delivered & pkts.pkt_ecn, pkts.pkt_time_ps, pkts.pkt_flow, n_flows, window_start_ps)
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
        flow_ecn_marked_packets=cc.flow_ecn_marked_packets + count_by(delivered & pkts.pkt_ecn, pkts.pkt_flow, n_flows),
        dcqcn=cc.dcqcn.replace(
            flow_last_cnp_ps=jnp.where(cnp_due, marked_ps, cc.dcqcn.flow_last_cnp_ps),
            flow_cnps_sent=cc.dcqcn.flow_cnps_sent + cnp_due,
        ),
    )
    return state.replace(packets=packets, flows=flows, cc=cc)
