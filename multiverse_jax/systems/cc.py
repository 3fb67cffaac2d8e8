"""Congestion control: when may a flow hand its next packet to the NIC.

``cc_kind`` is a per-experiment value, so algorithms are chosen branch-free (``jnp.where``)
and a batch may mix them. Only ``CC_NONE`` exists so far: line rate, held back only by
PFC backpressure. Window- and rate-based algorithms (DCQCN, DCTCP, HPCC, TIMELY) plug in
here: ``may_send`` gates on the window, ``next_send_ps`` paces. A window-based rule must
only count ACKs that have arrived by the send time (ACKs of a window are processed at its
start, with their exact times).
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
from multiverse_jax.components.flows import FlowState


def may_send(params: Params, flows: FlowState):
    """(F,) bool: congestion control allows the flow another packet now."""
    del params
    return jnp.ones_like(flows.flow_sent_packets, dtype=bool)


def next_send_ps(params: Params, start_ps, serialization_ps):
    """Earliest time the flow may start its next packet after one started at ``start_ps``.

    CC_NONE: back to back at the NIC's line rate.
    """
    del params
    return start_ps + serialization_ps
