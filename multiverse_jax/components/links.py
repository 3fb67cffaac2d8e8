"""Links: the directed wires. Link p is fed by egress port p of its source node."""

from __future__ import annotations

import chex
from flax import struct
import numpy as np

from multiverse_jax.components.padding import pad
from multiverse_jax.components.static import Static
from multiverse_jax.experiment import Experiment
from multiverse_jax.units import NEVER


@struct.dataclass
class LinkParams:
    link_dst_node: chex.Array  # (P,) int32 node at the far end
    link_rate_bps: chex.Array  # (P,) int64 line rate in bits/s (padded links: 1)
    link_delay_ps: chex.Array  # (P,) int64 propagation delay in ps
    link_into_switch: chex.Array  # (P,) bool the far end is a switch (so it has a PFC ingress)
    link_pfc_xoff_bytes: chex.Array  # (P,) int64 ingress bytes above which the far switch pauses the link
    link_pfc_xon_bytes: chex.Array  # (P,) int64 ingress bytes below which it resumes the link


# PFC history entries each window appends per link: its first two pause/resume decisions,
# at their exact instants (entries with nothing to say repeat the state at the window end).
PFC_ENTRIES_PER_WINDOW = 2


@struct.dataclass
class LinkState:
    """PFC as seen by the link's sender.

    The far switch pauses the link at the instant an arrival over it takes the bytes it
    holds from it above XOFF, and resumes it at the instant a departure takes them below
    XON (``systems/pfc.py``); the frame carrying that decision reaches the sender one link
    delay later. The last L decisions are kept (oldest first), enough to cover every
    decision still travelling on the wire.
    """

    pfc_decided_ps: chex.Array  # (P, L) int64 when the far switch took decision l (-1: never)
    pfc_paused: chex.Array  # (P, L) bool decision l: pause (True) or resume (False)
    pfc_pause_count: chex.Array  # (P,) int32 pause frames sent over the run (resume->pause transitions)


def link_params(exp: Experiment, s: Static) -> LinkParams:
    """The experiment's links, padded to P (padded links: never routed to, rate 1, a huge delay)."""
    topo = exp.topology
    return LinkParams(
        link_dst_node=pad(topo.link_dst.astype(np.int32), (s.n_ports,), 0),
        link_rate_bps=pad(topo.link_rate_bps.astype(np.int64), (s.n_ports,), 1),
        link_delay_ps=pad(topo.link_delay_ps.astype(np.int64), (s.n_ports,), NEVER // 4),
        link_into_switch=pad(topo.link_dst >= topo.n_hosts, (s.n_ports,), False),
        link_pfc_xoff_bytes=np.full(s.n_ports, exp.switch.pfc_xoff_bytes, np.int64),
        link_pfc_xon_bytes=np.full(s.n_ports, exp.switch.pfc_xon_bytes, np.int64),
    )


def initial_link_state(s: Static) -> LinkState:
    """Every link running: no PFC decision taken yet."""
    return LinkState(
        pfc_decided_ps=np.full((s.n_ports, s.pfc_history), -1, np.int64),
        pfc_paused=np.zeros((s.n_ports, s.pfc_history), bool),
        pfc_pause_count=np.zeros(s.n_ports, np.int32),
    )
