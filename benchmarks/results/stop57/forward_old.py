"""Forward plan: packets reaching a switch are queued at the egress port routing picks.

Pull-based forwarding (Multiverse §4.2): every packet that arrives at a switch during the
window marks the egress port it will leave by (its forward plan), keeping its exact
arrival time; each egress port later serves the packets marked for it in arrival order
(``transmit.py``). Each packet updates only its own slot, so there are no write
conflicts.

With ``switch.pipeline=serial`` (htsim's FatTreeSwitch), the packets that reach one
switch at the same instant pass its pipeline one at a time, and the order they leave it
in is the rank a busy period they begin takes (``pipeline_ranks``): it is fixed here,
as they arrive, into ``pkt_rank``.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.components.packets import PacketState
from multiverse_jax.ops.lockstep import switch_largest
from multiverse_jax.ops.packets import arriving, at_host, in_host_order, slots_in_host_order
from multiverse_jax.ops.queues import arrival_sizes, fifo_order, size_index, sort_by
from multiverse_jax.ops.routing import route
from multiverse_jax.ops.segments import compact, prefix_max
from multiverse_jax.units import NEVER


def set_forward_plan(params: Params, state: State, window_end_ps) -> State:
    pkts = state.packets
    at_switch = arriving(pkts, window_end_ps) & ~at_host(params, pkts)
    return state.replace(packets=forwarded(params, pkts, at_switch, window_end_ps))


def forwarded(params: Params, pkts: PacketState, at_switch, window_end_ps) -> PacketState:
    """The pool after the packets arriving at a switch (``at_switch`` (S,) bool) are
    queued there: each at the egress port routing picks, with its ingress link and
    instant, its next hop and, with switch.pipeline=serial, the order it leaves its
    switch's pipeline in (``pipeline_ranks``); no longer in flight.

    A window's arrivals are few next to the pool (about one or two per link), so they are
    compacted (a cumsum) into the smallest of 1,024, 4,096, 16,384, ... places that holds
    them (``queues.arrival_sizes``), routed there, not over every slot (routing is several
    gathers per packet), and written back by scatters to their slots alone, inside the
    branch: a select over the pool per column read and wrote every slot. One size runs
    (``lockstep.switch_largest``: under vmap the largest any experiment needs); every size
    gives the same pool.
    """
    n_slots = params.static.n_slots
    sizes = arrival_sizes(n_slots)

    def in_places(n_places: int):
        def forward(params, pkts, at_switch, window_end_ps):  # closes over no array: a custom_vmap function may not
            # In host order: simultaneous arrivals that tie on everything else rank by it.
            every_slot = slots_in_host_order(params)
            arrives = in_host_order(params, at_switch)
            if n_places >= n_slots:
                members = jnp.where(arrives, every_slot, n_slots)
            else:
                (members,), _ = compact(arrives, n_places, (every_slot, n_slots))
            at = jnp.minimum(members, n_slots - 1)

            def write(column, values):  # the arrivals' entries of a pool column (the others as they were)
                return column.at[members].set(values, mode="drop")

            rank = pkts.pkt_rank
            if params.static.switch_serial:
                ranks = pipeline_ranks(params, pkts, at, members < n_slots, window_end_ps)
                rank = rank.at[jnp.where(params.switch_serial, members, n_slots)].set(ranks, mode="drop")
            return pkts.replace(
                pkt_in_flight=write(pkts.pkt_in_flight, False),
                pkt_ingress=write(pkts.pkt_ingress, pkts.pkt_port[at]),
                pkt_ingress_ps=write(pkts.pkt_ingress_ps, pkts.pkt_time_ps[at]),
                pkt_port=write(pkts.pkt_port, _egress(params, pkts, at)),
                pkt_rank=rank,
                pkt_hop=write(pkts.pkt_hop, pkts.pkt_hop[at] + 1),
            )

        return forward

    def arrivals_index(params, pkts, at_switch, window_end_ps):
        return size_index(jnp.sum(at_switch, dtype=jnp.int32), sizes)

    branches = [in_places(n) for n in sizes + [n_slots]]
    if not sizes:
        return branches[0](params, pkts, at_switch, window_end_ps)
    return switch_largest(arrivals_index, branches, params, pkts, at_switch, window_end_ps)


def pipeline_ranks(params: Params, pkts: PacketState, slot, arrives, window_end_ps):
    """switch.pipeline=serial (htsim's FatTreeSwitch CallbackPipe): (n,) int32 the rank of
    each packet in ``slot`` (n,) that ``arrives`` (n,) bool at a switch this window as it
    leaves the switch's pipeline; a busy period it begins takes that rank
    (``PortState.port_busy_rank``).

    The packets that reach one switch at the same instant pass its pipeline one per round
    of the event list: the k-th in round k, after every switch's (k-1)-th. Within a round
    the switches go in the order of their first arrivals at that instant (each switch's
    pipeline event is scheduled when its first packet arrives, and reschedules itself).
    So the rank is (k, the place of the switch's first arrival among the instant's
    arrivals), as k * (P + 1) + place: both are below P + 1, as a link delivers at most
    one packet at an instant. Arrivals are ordered by their instant and the FIFO
    tie-breaks (``fifo_order``). Every packet of a window arrives before its ports
    transmit, so all of an instant's arrivals are ranked together, once.
    """
    n_ports, n = params.static.n_ports, slot.shape[0]
    at_ps = jnp.where(arrives, pkts.pkt_time_ps[slot], NEVER)
    prior_ps = pkts.pkt_prior_ps[slot]
    by_arrival = fifo_order(params, at_ps, pkts.pkt_scheduled_ps[slot], prior_ps, pkts.pkt_rank[slot], window_end_ps)
    node = jnp.where(arrives, params.links.link_dst_node[pkts.pkt_port[slot]], params.static.n_nodes)
    position = jnp.arange(n, dtype=jnp.int32)
    at_s = at_ps[by_arrival]
    instant_start = prefix_max(jnp.where(_group_starts(at_s), position, 0))
    place = jnp.zeros(n, jnp.int32).at[by_arrival].set(position - instant_start)  # among the instant's arrivals
    # The arrivals grouped by switch, stably (each switch's in FIFO order), then by instant.
    by_node = sort_by(node.astype(jnp.int64), by_arrival, max(1, n.bit_length()))
    node_s, at_s = node[by_node], at_ps[by_node]
    group_start = prefix_max(jnp.where(_group_starts(at_s) | _group_starts(node_s), position, 0))
    k = position - group_start  # (n,) in by_node's order
    rank = k * (n_ports + 1) + place[by_node[group_start]]
    return jnp.zeros(n, jnp.int32).at[by_node].set(rank)


def _group_starts(values):
    """(n,) bool where a run of equal ``values`` (n,) begins."""
    return jnp.concatenate([jnp.ones(1, bool), values[1:] != values[:-1]])


def _egress(params: Params, pkts: PacketState, slot=None):
    """The egress port routing picks for the packet in each ``slot`` (None: every slot) at
    the switch its link reaches."""
    def of(column):
        return column if slot is None else column[slot]

    flow, is_ack = of(pkts.pkt_flow), of(pkts.pkt_is_ack)
    node = params.links.link_dst_node[of(pkts.pkt_port)]
    dst_host = jnp.where(is_ack, params.flows.flow_src[flow], params.flows.flow_dst[flow])
    return route(params, node, dst_host, flow, is_ack, of(pkts.pkt_hop) + 1, of(pkts.pkt_path_salt))
