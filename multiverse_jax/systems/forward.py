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
from multiverse_jax.ops.hashing import mix32
from multiverse_jax.ops.packets import arriving, at_host

ACK_SALT = 0x5BD1E995  # ACKs hash independently of their data packets


def route(params: Params, node, dst_host, flow, is_ack, hop, path_salt):
    """Egress port at ``node`` for a packet of ``flow`` whose next link is number ``hop``.

    A pinned path (data or ACK) wins; otherwise ECMP: a hash of the flow's seeded hash,
    the packet's path salt and the switch picks one of the equal-cost next hops. With
    salt 0 a flow keeps one path (per-flow ECMP); spraying and flowlets vary the salt.
    """
    flows, nodes = params.flows, params.nodes
    pinned_len = params.static.pinned_len
    hop_c = jnp.minimum(hop, pinned_len - 1)
    pinned = jnp.where(is_ack, flows.flow_pinned_ack[flow, hop_c], flows.flow_pinned_data[flow, hop_c])
    pinned = jnp.where(hop < pinned_len, pinned, -1)
    n_next = jnp.maximum(nodes.route_n_next[node, dst_host], 1)
    salt = jnp.where(is_ack, jnp.uint32(ACK_SALT), jnp.uint32(0)) + mix32(path_salt)
    choice = mix32(flows.flow_hash[flow] ^ mix32(node.astype(jnp.uint32) + salt)) % n_next.astype(jnp.uint32)
    ecmp = nodes.route_next_port[node, dst_host, choice.astype(jnp.int32)]
    return jnp.where(pinned >= 0, pinned, ecmp)


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
