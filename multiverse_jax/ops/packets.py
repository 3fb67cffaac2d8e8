"""The packet pool: which packets are in flight or queued, which reach the far end of
their link in a window, the bytes queued at each port, and serialisation time.

A packet is either queued at egress port ``pkt_port`` or in flight on link ``pkt_port``
(``components/packets.py``); arrays (S_total,) are over the experiment's pool slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
from multiverse_jax.components.packets import PacketState
from multiverse_jax.ops.segments import count_by

PS_BITS_PER_BYTE = 8 * 10**12  # bits per byte times picoseconds per second


def by_host(static, column):
    """A pool array (S_total, ...) as (H, S, ...): host h's slots in column order (slot
    c H + h is host h's column c; ``components/packets.py``)."""
    return jnp.swapaxes(column.reshape((static.slots_per_host, static.n_hosts) + column.shape[1:]), 0, 1)


def in_host_order(params: Params, column):
    """A pool array (S_total,) in (host, column) order: host 0's slots first. FIFO ties
    that nothing else breaks go to the packet earlier in this order, as they did when host
    h owned slots h*S .. h*S+S-1 (and do in a pool of any size: ``ops/pool.py``). A
    per-host prefix (``Params.pool_layout``) lists its places in that order."""
    if params.pool_layout is None:
        return by_host(params.static, column).reshape(-1)
    return column[params.pool_layout.host_order]


def slots_in_host_order(params: Params):
    """(S_total,) int32 the pool's slots in (host, column) order (``in_host_order``)."""
    if params.pool_layout is None:
        return in_host_order(params, jnp.arange(params.static.n_slots, dtype=jnp.int32))
    return params.pool_layout.host_order


def slot_host(static):
    """(S_total,) int32 the host that owns each slot."""
    return jnp.arange(static.n_slots, dtype=jnp.int32) % static.n_hosts


def serialization_ps(wire_bytes, rate_bps):
    """Time to put ``wire_bytes`` on a wire of ``rate_bps``, in ps, rounded up.

    Exact (no rounding) for every rate that divides 8e12 bits*ps/s, e.g. 25/40/50/100/200/400/800 Gb/s.
    """
    numerator = wire_bytes.astype(jnp.int64) * PS_BITS_PER_BYTE
    # Both non-negative: a truncating division is the floor, without the sign fix-up of //.
    rate_bps = jnp.asarray(rate_bps, jnp.int64)
    numerator, rate_bps = jnp.broadcast_arrays(numerator + rate_bps - 1, rate_bps)
    return jax.lax.div(numerator, rate_bps)


def link_serialization_ps(params: Params, wire_bytes, link):
    """``serialization_ps`` of ``wire_bytes`` on each ``link`` (arrays alike): a product by
    the link's ps per byte where every rate of the batch divides 8e12 (``Static.inexact_rates``
    unset), an integer division (slow over the pool on a CPU) only where one does not."""
    rate_bps = params.links.link_rate_bps
    if params.static.inexact_rates:
        return serialization_ps(wire_bytes, rate_bps[link])
    return wire_bytes.astype(jnp.int64) * (PS_BITS_PER_BYTE // rate_bps)[link]


def in_flight(pkts: PacketState):
    """(S_total,) bool packets on a wire."""
    return pkts.pkt_valid & pkts.pkt_in_flight


def queued(pkts: PacketState):
    """(S_total,) bool packets waiting in an egress queue."""
    return pkts.pkt_valid & ~pkts.pkt_in_flight


def arriving(pkts: PacketState, window_end_ps):
    """(S_total,) bool packets in flight whose last bit reaches the far end of their link
    before the window ends (each at its own ``pkt_time_ps``)."""
    return in_flight(pkts) & (pkts.pkt_time_ps < window_end_ps)


def at_host(params: Params, pkts: PacketState):
    """(S_total,) bool the far end of the packet's link is a host (else a switch): one
    gather of the link's flag per packet (``LinkParams.link_into_switch``), not the far
    node's then its kind (four passes over the pool a window read it)."""
    return ~params.links.link_into_switch[pkts.pkt_port]


def arriving_acks(params: Params, pkts: PacketState, window_end_ps):
    """(S_total,) bool ACKs reaching their sender (a host) before the window ends."""
    return arriving(pkts, window_end_ps) & pkts.pkt_is_ack & at_host(params, pkts)


def port_queue_bytes(params: Params, pkts: PacketState, arrived_by_ps=None):
    """(P,) int64 wire bytes queued at each egress port, every class. With ``arrived_by_ps``
    (P,): only the packets that reached their port by ``arrived_by_ps[port]``."""
    held = queued(pkts)
    if arrived_by_ps is not None:
        held = held & (pkts.pkt_time_ps <= arrived_by_ps[pkts.pkt_port])
    return count_by(held, pkts.pkt_port, params.static.n_ports, pkts.pkt_bytes.astype(jnp.int64))
