"""The learned restorer inside the jitted step (``hybrid.restore=transformer``).

At a thaw, every switch port of the thawing partitions is given to the shipped model at
once (a batch over ports; under vmap, over experiments too): its depth history before the
phase and its context (``restorer/features.py``) → the depth it held when the phase ended,
in packet mode. ``ops/restore.py`` then drains or refills the queue to that depth.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.components.ports import UNLIMITED_BYTES
from multiverse_jax.ops.packets import PS_BITS_PER_BYTE, port_queue_bytes
from multiverse_jax.restorer.checkpoint import load_shipped
from multiverse_jax.restorer.features import context_features, history_features
from multiverse_jax.restorer.model import predict
from multiverse_jax.units import PS_PER_US


def learned_depth(params: Params, state: State, port_mask, phase_ps, thawing):
    """(P,) int64 the depth each port of ``port_mask`` (P,) is restored to after a phase of
    ``phase_ps`` (P,) int64 ps, its partition's flows ``thawing`` (F,) bool; other ports,
    and ports without a finite buffer (NICs), keep the depth they hold."""
    config, weights, _ = load_shipped()
    n_ports = params.static.n_ports
    current = port_queue_bytes(params, state.packets)
    buffer_bytes = params.ports.port_buffer_bytes
    switch_port = buffer_bytes < UNLIMITED_BYTES
    # The flows whose data path crosses each port, and their load at their steady rates.
    path = params.flows.flow_data_path
    crossing = thawing[:, None] & (path >= 0)
    port = jnp.where(crossing, path, n_ports)
    payload = params.payload_bytes.astype(jnp.float64)
    wire_rate = state.steady.steady_rate * (payload + params.header_bytes) / payload  # (F,) wire bytes/ps
    n_flows = jax.ops.segment_sum(crossing.reshape(-1).astype(jnp.int32), port.reshape(-1), n_ports + 1)[:n_ports]
    load = jax.ops.segment_sum(jnp.where(crossing, wire_rate[:, None], 0.0).reshape(-1), port.reshape(-1), n_ports + 1)
    capacity = params.links.link_rate_bps.astype(jnp.float64) / PS_BITS_PER_BYTE
    interval_ps = params.steady.sample_interval_ps.astype(jnp.float64)
    context = context_features(
        params.links.link_rate_bps,
        buffer_bytes,
        n_flows,
        load[:n_ports] / capacity,
        phase_ps.astype(jnp.float64) / interval_ps,
        interval_ps / PS_PER_US,
        jnp.broadcast_to(params.cc_kind, (n_ports,)),
    )
    history = history_features(state.steady.port_frozen_history, buffer_bytes)
    share = predict(config, weights, history, context)
    predicted = jnp.round(share.astype(jnp.float64) * buffer_bytes.astype(jnp.float64)).astype(jnp.int64)
    return jnp.where(port_mask & switch_port, jnp.maximum(predicted, 0), current)
