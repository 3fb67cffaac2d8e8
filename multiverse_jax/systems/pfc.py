"""PFC (802.1Qbb-style, one lossless data class): per-ingress pause and resume.

A switch counts, per ingress link, the bytes of the paused class it holds that arrived
over that link: data, plus ACKs when they travel in their flow's data class
(``packet.ack_class=data``, as htsim; as control packets they are neither counted nor paused).
At the end of every window it compares that count with the link's XOFF / XON thresholds
(hysteresis: above XOFF -> pause, below XON -> resume, else unchanged) and sends the
decision upstream; the frame takes the link delay to arrive, and from then on the
upstream port starts no packet of a data class while paused (control packets never are).
Deciding at window ends makes a pause up to one window (the smallest link delay) later
than a per-packet check would; XOFF headroom must cover that window plus the round trip,
which the defaults do. No packet is ever dropped.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops.packets import queued
from multiverse_jax.ops.segments import count_by


def pfc(params: Params, state: State, window_end_ps) -> State:
    pkts, links = state.packets, state.links
    n_ports = params.static.n_ports
    # What PFC accounts is what it pauses: data, and ACKs where they share the data class.
    paused_class = ~pkts.pkt_is_ack | params.ack_in_data_class
    held = queued(pkts) & paused_class & (pkts.pkt_ingress >= 0)
    ingress_bytes = count_by(held, pkts.pkt_ingress, n_ports, pkts.pkt_bytes.astype(jnp.int64))
    before = links.pfc_paused[:, -1]
    after = jnp.where(
        ingress_bytes > params.links.link_pfc_xoff_bytes,
        True,
        jnp.where(ingress_bytes < params.links.link_pfc_xon_bytes, False, before),
    )
    after = after & params.links.link_into_switch
    decided = jnp.broadcast_to(window_end_ps, (n_ports, 1)).astype(jnp.int64)
    links = links.replace(
        pfc_decided_ps=jnp.concatenate([links.pfc_decided_ps[:, 1:], decided], axis=1),
        pfc_paused=jnp.concatenate([links.pfc_paused[:, 1:], after[:, None]], axis=1),
        pfc_pause_count=links.pfc_pause_count + (after & ~before),
    )
    return state.replace(links=links)
