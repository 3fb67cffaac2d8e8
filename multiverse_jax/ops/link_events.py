"""The fabric of the current epoch (timed link events: ``topology/link_events.py``).

``params_at`` gives the step the params of the epoch its window starts in: that epoch's
link rates, ECMP tables and (hybrid, flow modes) flow paths replace the configured ones,
and the window is cut at the next event time, so that every event falls on a window
boundary and applies at its exact picosecond. Everything downstream reads
``params.links.link_rate_bps``, ``params.nodes.route_*`` and ``params.flows.flow_*_path``
as before. Compiled in only when some experiment of the batch has events
(``Static.n_link_epochs > 1``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
from multiverse_jax.units import NEVER


def epoch_index(params: Params, time_ps):
    """() int32 the epoch in force at ``time_ps``: the last that began at or before it."""
    begun = params.link_events.epoch_start_ps <= time_ps
    return jnp.maximum(jnp.sum(begun.astype(jnp.int32)) - 1, 0)


def next_event_ps(params: Params, time_ps):
    """() int64 the next link event strictly after ``time_ps`` (NEVER: none)."""
    starts = params.link_events.epoch_start_ps
    return jnp.min(jnp.where(starts > time_ps, starts, NEVER))


def params_at(params: Params, time_ps) -> Params:
    """``params`` with the fabric of the epoch in force at ``time_ps`` and the window cut
    at the next event (``params`` itself when the batch has no link events)."""
    if params.static.n_link_epochs == 1:
        return params
    params = with_epoch(params, epoch_index(params, time_ps))
    window_ps = jnp.minimum(params.window_ps, next_event_ps(params, time_ps) - time_ps)
    return params.replace(window_ps=window_ps)


def with_epoch(params: Params, k) -> Params:
    """``params`` with epoch ``k``'s link rates, ECMP tables and flow paths."""
    ev = params.link_events
    links = params.links.replace(link_rate_bps=ev.epoch_link_rate_bps[k])
    nodes = params.nodes.replace(route_next_port=ev.epoch_route_next_port[k], route_n_next=ev.epoch_route_n_next[k])
    flows = params.flows.replace(
        flow_data_path=ev.epoch_flow_data_path[k],
        flow_ack_path=ev.epoch_flow_ack_path[k],
        flow_data_tail_ps=ev.epoch_flow_data_tail_ps[k],
        flow_ack_path_ps=ev.epoch_flow_ack_path_ps[k],
    )
    return params.replace(links=links, nodes=nodes, flows=flows)


def next_move_ps(params: Params, after_ps):
    """(F,) int64 the first event at or after ``after_ps`` that moves each flow (changes its
    paths, or the state of a link on them): NEVER if none, or without link events."""
    ev = params.link_events
    if params.static.n_link_epochs == 1:
        return jnp.full(params.static.n_flows, NEVER)
    due = ev.epoch_flow_moved & (ev.epoch_start_ps >= after_ps)[:, None]  # (K, F)
    return jnp.min(jnp.where(due, ev.epoch_start_ps[:, None], NEVER), axis=0)


def with_epoch_flow_paths(params: Params, flow_paths) -> Params:
    """One experiment's ``params`` with every epoch's flow paths (``flow_paths(p) ->
    (data, ack, data tail ps, ack path ps)``), which flows each event moves, and epoch 0's
    paths as the configured ones (``batch.with_flow_paths``)."""
    n_epochs = params.static.n_link_epochs
    if n_epochs == 1:
        return params.replace(flows=_set_paths(params.flows, *flow_paths(params)))
    data, ack, tail, back = jax.vmap(lambda k: flow_paths(with_epoch(params, k)))(jnp.arange(n_epochs))
    ev = params.link_events
    ports = jnp.concatenate([data, ack], axis=2)  # (K, F, 2 Hp)
    previous = jnp.concatenate([ports[:1], ports[:-1]])
    changed_before = jnp.take_along_axis(
        jnp.broadcast_to(ev.epoch_link_changed[:, None, :], ports.shape[:2] + ev.epoch_link_changed.shape[1:]),
        jnp.maximum(previous, 0),
        axis=2,
    )  # (K, F, 2 Hp): the link on the previous epoch's path changed as epoch k began
    crosses_change = jnp.any(changed_before & (previous >= 0), axis=2)
    moved = (jnp.any(ports != previous, axis=2) | crosses_change) & (jnp.arange(n_epochs) > 0)[:, None]
    events = ev.replace(
        epoch_flow_data_path=data,
        epoch_flow_ack_path=ack,
        epoch_flow_data_tail_ps=tail,
        epoch_flow_ack_path_ps=back,
        epoch_flow_moved=moved,
    )
    return params.replace(flows=_set_paths(params.flows, data[0], ack[0], tail[0], back[0]), link_events=events)


def _set_paths(flows, data, ack, tail, back):
    return flows.replace(flow_data_path=data, flow_ack_path=ack, flow_data_tail_ps=tail, flow_ack_path_ps=back)
