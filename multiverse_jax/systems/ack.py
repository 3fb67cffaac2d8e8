"""ACK: ACKs reaching the sender count the packet as acknowledged and free its slot; the
flow finishes when its last ACK is back."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops.packets import arriving_acks
from multiverse_jax.ops.segments import count_by, latest_by


def ack(params: Params, state: State, window_end_ps) -> State:
    pkts, flows = state.packets, state.flows
    n_flows = params.static.n_flows
    acked_now = arriving_acks(params, pkts, window_end_ps)
    acked = flows.flow_acked_packets + count_by(acked_now, pkts.pkt_flow, n_flows)
    finishes = (acked == params.flows.flow_n_packets) & (flows.flow_acked_packets < acked)
    last_ack = latest_by(acked_now, pkts.pkt_flow, n_flows, pkts.pkt_time_ps)
    flows = flows.replace(
        flow_acked_packets=acked,
        flow_finish_ps=jnp.where(finishes, last_ack, flows.flow_finish_ps),
    )
    return state.replace(packets=pkts.replace(pkt_valid=pkts.pkt_valid & ~acked_now), flows=flows)
