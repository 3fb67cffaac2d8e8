"""The packet pool: serialisation time, and which packets reach the far end of their link
in a window."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State

PS_BITS_PER_BYTE = 8 * 10**12  # bits per byte times picoseconds per second


def serialization_ps(wire_bytes, rate_bps):
    """Time to put ``wire_bytes`` on a wire of ``rate_bps``, in ps, rounded up.

    Exact (no rounding) for every rate that divides 8e12 bits*ps/s, e.g. 25/40/50/100/200/400/800 Gb/s.
    """
    numerator = wire_bytes.astype(jnp.int64) * PS_BITS_PER_BYTE
    return (numerator + rate_bps - 1) // rate_bps


def arriving_acks(params: Params, state: State, window_end_ps):
    """(S_total,) bool: ACKs reaching their sender (a host) before the window ends."""
    pkts = state.packets
    node = params.links.link_dst_node[pkts.pkt_port]
    return (
        pkts.pkt_valid
        & pkts.pkt_in_flight
        & pkts.pkt_is_ack
        & (pkts.pkt_time_ps < window_end_ps)
        & params.nodes.node_is_host[node]
    )
