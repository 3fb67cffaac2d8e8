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
from multiverse_jax.components.packets import PacketState
from multiverse_jax.ops.lockstep import switch_largest
from multiverse_jax.ops.packets import arriving, at_host
from multiverse_jax.ops.queues import size_index, sort_sizes
from multiverse_jax.ops.routing import route
from multiverse_jax.ops.segments import compact


def set_forward_plan(params: Params, state: State, window_end_ps) -> State:
    pkts = state.packets
    at_switch = arriving(pkts, window_end_ps) & ~at_host(params, pkts)
    packets = pkts.replace(
        pkt_in_flight=jnp.where(at_switch, False, pkts.pkt_in_flight),
        pkt_ingress=jnp.where(at_switch, pkts.pkt_port, pkts.pkt_ingress),
        pkt_ingress_ps=jnp.where(at_switch, pkts.pkt_time_ps, pkts.pkt_ingress_ps),
        pkt_port=forwarded_ports(params, pkts, at_switch),
        pkt_hop=jnp.where(at_switch, pkts.pkt_hop + 1, pkts.pkt_hop),
    )
    return state.replace(packets=packets)


def forwarded_ports(params: Params, pkts: PacketState, at_switch):
    """(S,) int32 each packet's port after forwarding: the egress routing picks for those
    arriving at a switch (``at_switch`` (S,) bool), the link it is on for the others.

    A window's arrivals are few next to the pool (about one or two per link), so they are
    compacted (a cumsum) into the smallest of 4096, 16,384, ... places that holds them and
    routed there, not over every slot: routing is several gathers per packet. One size runs
    (``lockstep.switch_largest``: under vmap the largest any experiment needs); every size
    gives the same ports.
    """
    n_slots = params.static.n_slots
    sizes = sort_sizes(n_slots)

    def in_places(n_places: int):
        def ports(params, pkts, at_switch):  # closes over no array: a custom_vmap function may not
            if n_places >= n_slots:
                return jnp.where(at_switch, _egress(params, pkts), pkts.pkt_port)
            every_slot = jnp.arange(n_slots, dtype=jnp.int32)
            (members,), _ = compact(at_switch, n_places, (every_slot, n_slots))
            egress = _egress(params, pkts, jnp.minimum(members, n_slots - 1))
            return pkts.pkt_port.at[members].set(egress, mode="drop")

        return ports

    def arrivals_index(params, pkts, at_switch):
        return size_index(jnp.sum(at_switch, dtype=jnp.int32), sizes)

    if not sizes:
        return in_places(n_slots)(params, pkts, at_switch)
    return switch_largest(arrivals_index, [in_places(n) for n in sizes + [n_slots]], params, pkts, at_switch)


def _egress(params: Params, pkts: PacketState, slot=None):
    """The egress port routing picks for the packet in each ``slot`` (None: every slot) at
    the switch its link reaches."""
    def of(column):
        return column if slot is None else column[slot]

    flow, is_ack = of(pkts.pkt_flow), of(pkts.pkt_is_ack)
    node = params.links.link_dst_node[of(pkts.pkt_port)]
    dst_host = jnp.where(is_ack, params.flows.flow_src[flow], params.flows.flow_dst[flow])
    return route(params, node, dst_host, flow, is_ack, of(pkts.pkt_hop) + 1, of(pkts.pkt_path_salt))
