"""Forward plan: packets reaching a switch are queued at the egress port routing picks.

Pull-based forwarding (Multiverse §4.2): every packet that arrives at a switch during the
window marks the egress port it will leave by (its forward plan), keeping its exact
arrival time; each egress port later serves the packets marked for it in arrival order
(``transmit.py``). Each packet updates only its own slot, so there are no write
conflicts.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops.packets import arriving, at_host
from multiverse_jax.ops.routing import route


def set_forward_plan(params: Params, state: State, window_end_ps) -> State:
    pkts = state.packets
    node = params.links.link_dst_node[pkts.pkt_port]
    at_switch = arriving(pkts, window_end_ps) & ~at_host(params, pkts)
    dst_host = jnp.where(pkts.pkt_is_ack, params.flows.flow_src[pkts.pkt_flow], params.flows.flow_dst[pkts.pkt_flow])
    egress = route(params, node, dst_host, pkts.pkt_flow, pkts.pkt_is_ack, pkts.pkt_hop + 1, pkts.pkt_path_salt)
    packets = pkts.replace(
        pkt_in_flight=jnp.where(at_switch, False, pkts.pkt_in_flight),
        pkt_ingress=jnp.where(at_switch, pkts.pkt_port, pkts.pkt_ingress),
        pkt_ingress_ps=jnp.where(at_switch, pkts.pkt_time_ps, pkts.pkt_ingress_ps),
        pkt_port=jnp.where(at_switch, egress, pkts.pkt_port),
        pkt_hop=jnp.where(at_switch, pkts.pkt_hop + 1, pkts.pkt_hop),
    )
    return state.replace(packets=packets)
