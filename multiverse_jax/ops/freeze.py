"""Freezing and thawing a partition: moving every time that belongs to it.

Freezing adds ``FROZEN_OFFSET_PS`` to each real time of the partition's packets, ports,
flows and congestion-control timers, so that no system sees an event of it (every system
acts on times before its window's end) while its queued packets keep their bytes in their
queues. Thawing after ``delta`` ps of flow-level time takes the offset off again and adds
``delta``: the partition resumes exactly as it was, ``delta`` later (the zombie-packet
paper's hot network; Wormhole §6.3's timestamp offsets), and its flows have advanced by
the packets they sent meanwhile (``advance``).

Times that are NEVER, or -1 for "none yet", mean "no time" and never move.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.components.steady import FROZEN_OFFSET_PS, FROZEN_THRESHOLD_PS
from multiverse_jax.units import NEVER


def _move(time_ps, mask, delta_ps, thawing: bool):
    """``time_ps`` (X, ...) moved by ``delta_ps`` (X,) where ``mask`` (X,) holds and the time is
    real (freezing) or frozen (thawing)."""
    extra = (1,) * (time_ps.ndim - mask.ndim)
    mask, delta_ps = mask.reshape(mask.shape + extra), delta_ps.reshape(delta_ps.shape + extra)
    frozen = (time_ps >= FROZEN_THRESHOLD_PS) & (time_ps != NEVER)
    eligible = frozen if thawing else (time_ps >= 0) & (time_ps < FROZEN_THRESHOLD_PS)
    return jnp.where(mask & eligible, time_ps + delta_ps, time_ps)


def move_times(state: State, flow_mask, flow_delta_ps, port_mask, port_delta_ps, thawing: bool) -> State:
    """Freeze (``thawing=False``: deltas are +FROZEN_OFFSET_PS) or thaw (deltas are the
    flow-level time minus FROZEN_OFFSET_PS) the flows of ``flow_mask`` (F,) and the ports
    of ``port_mask`` (P,): every time of their packets, ports, flows and CC state."""
    pkts, ports, flows, cc, steady = state.packets, state.ports, state.flows, state.cc, state.steady
    pkt_mask = pkts.pkt_valid & flow_mask[pkts.pkt_flow]
    pkt_delta = flow_delta_ps[pkts.pkt_flow]

    def of_pkt(t):
        return _move(t, pkt_mask, pkt_delta, thawing)

    def of_flow(t):
        return _move(t, flow_mask, flow_delta_ps, thawing)

    def of_port(t):
        return _move(t, port_mask, port_delta_ps, thawing)

    dcqcn = cc.dcqcn
    return state.replace(
        packets=pkts.replace(
            pkt_time_ps=of_pkt(pkts.pkt_time_ps),
            pkt_scheduled_ps=of_pkt(pkts.pkt_scheduled_ps),
            pkt_prior_ps=of_pkt(pkts.pkt_prior_ps),
            pkt_ingress_ps=of_pkt(pkts.pkt_ingress_ps),
            pkt_sent_ps=of_pkt(pkts.pkt_sent_ps),
            pkt_int_ts_ps=of_pkt(pkts.pkt_int_ts_ps),
        ),
        ports=ports.replace(
            port_free_ps=of_port(ports.port_free_ps),
            port_last_arrival_ps=of_port(ports.port_last_arrival_ps),
            port_last_scheduled_ps=of_port(ports.port_last_scheduled_ps),
            port_over_since_ps=of_port(ports.port_over_since_ps),
        ),
        flows=flows.replace(
            flow_next_send_ps=of_flow(flows.flow_next_send_ps),
            flow_last_poll_ps=of_flow(flows.flow_last_poll_ps),
            flow_admit_ps=of_flow(flows.flow_admit_ps),
            flow_last_send_ps=of_flow(flows.flow_last_send_ps),
            flow_last_rx_ps=of_flow(flows.flow_last_rx_ps),
        ),
        cc=cc.replace(
            flow_gate_ps=of_flow(cc.flow_gate_ps),
            dcqcn=dcqcn.replace(
                flow_alpha_timer_ps=of_flow(dcqcn.flow_alpha_timer_ps),
                flow_decrease_timer_ps=of_flow(dcqcn.flow_decrease_timer_ps),
                flow_increase_timer_ps=of_flow(dcqcn.flow_increase_timer_ps),
                flow_byte_event_ps=of_flow(dcqcn.flow_byte_event_ps),
                flow_last_cnp_ps=of_flow(dcqcn.flow_last_cnp_ps),
            ),
            hpcc=cc.hpcc.replace(flow_int_ts_ps=of_flow(cc.hpcc.flow_int_ts_ps)),
        ),
        steady=steady.replace(
            prev_last_send_ps=of_flow(steady.prev_last_send_ps), prev_last_rx_ps=of_flow(steady.prev_last_rx_ps)
        ),
    )


def advance_flows(params: Params, state: State, mask, n_packets) -> State:
    """Credit the flows of ``mask`` (F,) with ``n_packets`` (F,) int32 full packets sent,
    delivered and acknowledged while frozen: their counters, the sequence numbers of their
    packets still in the network, and the packet counts their CC compares ACKs against."""
    n = jnp.where(mask, n_packets, 0).astype(jnp.int32)
    flows, pkts, cc = state.flows, state.packets, state.cc
    payload = params.payload_bytes.astype(jnp.int64)
    allow = cc.flow_gate_allow_bytes
    return state.replace(
        flows=flows.replace(
            flow_sent_packets=flows.flow_sent_packets + n,
            flow_admitted_packets=flows.flow_admitted_packets + n,
            flow_rx_packets=flows.flow_rx_packets + n,
            flow_acked_packets=flows.flow_acked_packets + n,
            flow_rx_bytes=flows.flow_rx_bytes + n.astype(jnp.int64) * payload,
        ),
        packets=pkts.replace(pkt_seq=pkts.pkt_seq + jnp.where(pkts.pkt_valid, n[pkts.pkt_flow], 0)),
        cc=cc.replace(
            flow_gate_allow_bytes=allow + (n.astype(allow.dtype) * payload.astype(allow.dtype))[:, None],
            dctcp=cc.dctcp.replace(
                flow_cwr_high_seq=cc.dctcp.flow_cwr_high_seq + n, flow_round_end_seq=cc.dctcp.flow_round_end_seq + n
            ),
            hpcc=cc.hpcc.replace(flow_round_end_seq=cc.hpcc.flow_round_end_seq + n),
            timely=cc.timely.replace(flow_round_end_seq=cc.timely.flow_round_end_seq + n),
        ),
    )


def frozen_packets(params: Params, state: State):
    """(S,) bool the packets of flows whose partition is frozen (hybrid mode); a () False
    where no experiment of the batch is hybrid (``Static.steady_window`` 1), so that a
    window's pass over the pool reads no flow's state for them."""
    if params.static.steady_window == 1:
        return jnp.bool_(False)
    return state.steady.frozen[state.packets.pkt_flow]
