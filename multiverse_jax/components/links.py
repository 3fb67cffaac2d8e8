"""Links: the directed wires. Link p is fed by egress port p of its source node."""

from __future__ import annotations

import chex
from flax import struct


@struct.dataclass
class LinkParams:
    link_dst_node: chex.Array  # (P,) int32 node at the far end
    link_rate_bps: chex.Array  # (P,) int64 line rate in bits/s (padded links: 1)
    link_delay_ps: chex.Array  # (P,) int64 propagation delay in ps
    link_into_switch: chex.Array  # (P,) bool the far end is a switch (so it has a PFC ingress)
    link_pfc_xoff_bytes: chex.Array  # (P,) int64 ingress bytes above which the far switch pauses the link
    link_pfc_xon_bytes: chex.Array  # (P,) int64 ingress bytes below which it resumes the link


@struct.dataclass
class LinkState:
    """PFC as seen by the link's sender.

    At the end of every window the far switch decides, from the data bytes it holds that
    arrived over this link, whether the link is paused; the frame carrying that decision
    reaches the sender one link delay later. The last L decisions are kept (oldest first),
    enough to cover every decision still travelling on the wire.
    """

    pfc_decided_ps: chex.Array  # (P, L) int64 when the far switch took decision l (-1: never)
    pfc_paused: chex.Array  # (P, L) bool decision l: pause (True) or resume (False)
    pfc_pause_count: chex.Array  # (P,) int32 pause frames sent over the run (resume->pause transitions)
