"""Steady: hybrid granularity (``sim.mode=hybrid``; Wormhole §5–6, HyGra §IV).

``steady`` (after ``sample``, before ``clock``): every ``hybrid.sample_interval_us`` it
samples each watched flow's sending rate — packets started since the last sample over
the time between their starts, so a flow paced at a constant rate measures exactly that
rate whatever the window boundaries — and its delivered rate (packets received over the
time between their arrivals, likewise) into rings of its last l samples. A flow is steady when (max - min) / mean of its last l samples is below θ
(Wormhole eq. 6); its steady rate is their mean (eq. 7; see ``steady_rates``), or with ``hybrid.rate=maxmin`` the
max-min fair share of its partition (HyGra eq. 2–3). A partition (``ops/partitions.py``) whose every flow is
steady, and that has at least one sample interval of flow-level time ahead of it, is
frozen (``ops/freeze.py``): its packets, ports and timers stop where they are, and it is
planned to end when its first flow has only ``margin_packets`` left to send at its rate, or
when a drifting flow's trend would move its rate too far (``ops/steady.py``).

``thaw`` (first in the step): a frozen partition thaws at its planned end (which is never
after a timed link event that moves one of its flows), or at the
start of a flow that crosses one of its ports (a flow or task starting anywhere else
leaves it frozen). It resumes ``delta`` later than it froze, its flows credited with the
packets they sent at their steady rates meanwhile; their rate rings start again.

When every active flow of an experiment is frozen, nothing is due before the earliest
planned end or flow start, and the clock (``systems/clock.py``) jumps there: the windows
not executed are where the speed comes from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import LB_ECMP, Params, State
from multiverse_jax.components.steady import FROZEN_OFFSET_PS
from multiverse_jax.ops.freeze import advance_flows, move_times
from multiverse_jax.ops.link_events import next_move_ps
from multiverse_jax.ops.partitions import partition_labels
from multiverse_jax.ops.maxmin import maxmin_rates
from multiverse_jax.ops.packets import PS_BITS_PER_BYTE, port_queue_bytes
from multiverse_jax.ops.restore import (
    RESTORE_FREEZE,
    RESTORE_TRANSFORMER,
    drain_queues,
    frozen_history,
    grow_queues,
    restored_depth,
    resume_drained_links,
)
from multiverse_jax.ops.steady import steady_rates
from multiverse_jax.restorer.inference import learned_depth
from multiverse_jax.units import NEVER


def watched(params: Params, state: State, window_end_ps):
    """(F,) bool flows running at packet level: begun before ``window_end_ps``, unfinished, not frozen."""
    fp, fs = params.flows, state.flows
    begun = (fs.flow_begin_ps != NEVER) & (fs.flow_begin_ps < window_end_ps)
    return fp.flow_valid & begun & (fs.flow_finish_ps == NEVER) & ~state.steady.frozen


def partition_ports(params: Params):
    """(F, K) int32 the ports that put flows in one partition: each flow's data and ACK paths
    under per-flow ECMP; with spraying or flowlets (paths vary per packet) every flow crosses
    port 0, so all flows of the experiment form one partition."""
    ports = flow_ports(params)
    return jnp.where(params.lb_kind == LB_ECMP, ports, jnp.where(jnp.arange(ports.shape[1]) == 0, 0, -1))


def flow_ports(params: Params):
    """(F, 2 Hp) int32 every egress port a flow's packets cross: its data path (source NIC
    first), then its ACK path (routed once per batch: ``batch.with_flow_paths``), -1 padded."""
    return jnp.concatenate([params.flows.flow_data_path, params.flows.flow_ack_path], axis=1)


def _sample(params: Params, state: State, window_end_ps) -> State:
    """Take a rate sample of every watched flow (its first sample only sets the base)."""
    st, fs = state.steady, state.flows
    watch = watched(params, state, window_end_ps)
    payload = params.payload_bytes.astype(jnp.float64)
    sent = (fs.flow_sent_packets - st.prev_sent_packets).astype(jnp.float64)
    between_ps = (fs.flow_last_send_ps - st.prev_last_send_ps).astype(jnp.float64)
    rate = jnp.where(between_ps > 0, sent * payload / jnp.maximum(between_ps, 1.0), 0.0)
    received = (fs.flow_rx_packets - st.prev_rx_packets).astype(jnp.float64)
    between_rx_ps = (fs.flow_last_rx_ps - st.prev_last_rx_ps).astype(jnp.float64)
    delivered = jnp.where(between_rx_ps > 0, received * payload / jnp.maximum(between_rx_ps, 1.0), 0.0)
    record = watch & (st.prev_sample_ps >= 0)
    at = jnp.where(record, st.n_samples % params.static.steady_window, params.static.steady_window)
    flow = jnp.arange(params.static.n_flows)
    interval = params.steady.sample_interval_ps
    depth_at = st.n_depth_samples % params.static.steady_window
    return state.replace(
        steady=st.replace(
            port_depth_ring=st.port_depth_ring.at[:, depth_at].set(port_queue_bytes(params, state.packets)),
            n_depth_samples=st.n_depth_samples + 1,
            next_sample_ps=window_end_ps + interval - (window_end_ps - st.next_sample_ps) % interval,
            rate_ring=st.rate_ring.at[flow, at].set(rate, mode="drop"),
            delivered_ring=st.delivered_ring.at[flow, at].set(delivered, mode="drop"),
            n_samples=jnp.where(record, st.n_samples + 1, jnp.where(watch, st.n_samples, 0)),
            prev_sent_packets=jnp.where(watch, fs.flow_sent_packets, st.prev_sent_packets),
            prev_last_send_ps=jnp.where(watch, fs.flow_last_send_ps, st.prev_last_send_ps),
            prev_rx_packets=jnp.where(watch, fs.flow_rx_packets, st.prev_rx_packets),
            prev_last_rx_ps=jnp.where(watch, fs.flow_last_rx_ps, st.prev_last_rx_ps),
            prev_sample_ps=jnp.where(watch, window_end_ps, jnp.where(st.frozen, st.prev_sample_ps, -1)),
        )
    )


OVERLOAD_SHARE = 0.1  # a port may look loaded past its capacity by this share of θ (rate noise)
BOTTLENECK_SLACK = 2.0  # a flow is bottlenecked where its partition loads a port to within this many θ of capacity


def _unsettled(params: Params, rate):
    """(F,) bool the flow's steady rate, with its partition's, is not a steady state of the network.

    Loads count wire bytes: each flow's data (payload + header per payload) on its data
    path, and its ACKs on its ACK path. Two tests, beyond Wormhole's rate test:

    * overload: constant rates above a port's capacity are not steady; the queue there grows
      until ECN or PFC acts (a DCQCN pair paced at 51 Gb/s each into a 100 Gb/s link);
    * no bottleneck: in a steady state of a work-conserving congestion control every flow
      crosses a port it saturates (its bottleneck, as in a max-min fair allocation); a flow
      whose every port has spare capacity is between two steps of its control (a DCQCN flow
      between rate-increase timers, constant for longer than the sample window).
    """
    ports, n_ports = flow_ports(params), params.static.n_ports
    payload = params.payload_bytes.astype(jnp.float64)
    per_packet = rate / payload
    on_data_path = jnp.arange(ports.shape[1]) < ports.shape[1] // 2  # flow_ports: data path, then ACK path
    wire = jnp.where(on_data_path, (per_packet * (payload + params.header_bytes))[:, None], (per_packet * params.ack_bytes)[:, None])
    load = jax.ops.segment_sum(wire.reshape(-1), jnp.where(ports >= 0, ports, n_ports).reshape(-1), n_ports + 1)
    capacity = params.links.link_rate_bps.astype(jnp.float64) / PS_BITS_PER_BYTE
    utilisation = jnp.where(ports >= 0, (load[:n_ports] / capacity)[jnp.maximum(ports, 0)], 0.0)  # (F, K)
    theta = params.steady.theta
    overloaded = jnp.max(utilisation, axis=1) > 1.0 + OVERLOAD_SHARE * theta
    unbottlenecked = jnp.max(jnp.where(on_data_path, utilisation, 0.0), axis=1) < 1.0 - BOTTLENECK_SLACK * theta
    return overloaded | unbottlenecked


def _maxmin_payload_rates(params: Params, flows):
    """(F,) bytes/ps of payload: the max-min fair shares (``hybrid.rate=maxmin``, HyGra eq. 2–3:
    strict priority classes first) of ``flows`` (F,) over their data paths' capacities, each
    link's capacity counted in payload (wire rate times payload / (payload + header))."""
    payload = params.payload_bytes.astype(jnp.float64)
    goodput = payload / (payload + params.header_bytes)
    capacity = params.links.link_rate_bps.astype(jnp.float64) / PS_BITS_PER_BYTE * goodput
    return maxmin_rates(params.flows.flow_data_path, flows, params.flows.flow_priority, capacity)


def _jumpable_packets(params: Params, state: State):
    """(F,) int32 packets each flow may still send at flow level (all but its margin)."""
    left = params.flows.flow_n_packets - state.flows.flow_sent_packets - params.steady.margin_packets
    return jnp.maximum(left, 0)


def _to_margin_ps(params: Params, state: State, rate, trend):
    """(F,) float64 ps until each flow, sending at ``rate`` + ``trend`` · t (bytes/ps), has only
    its margin left: the root of rate · T + trend · T² / 2 = bytes, written
    T = 2 bytes / (rate + √(rate² + 2 trend bytes)) so that it holds as the trend goes to 0
    (never, if a falling rate stops first)."""
    to_send = _jumpable_packets(params, state) * params.payload_bytes.astype(jnp.float64)
    discriminant = rate**2 + 2.0 * trend * to_send
    root = 2.0 * to_send / jnp.maximum(rate + jnp.sqrt(jnp.maximum(discriminant, 0.0)), 1e-30)
    return jnp.where(discriminant >= 0.0, root, jnp.inf)


def _next_known_start_ps(params: Params, state: State, window_end_ps):
    """(F,) int64 for each flow, the earliest start after ``window_end_ps`` of a flow that
    shares a port with it and whose start is already known (an untriggered flow's start
    time; a triggered flow's is known only once its trigger fires): NEVER if none."""
    n_ports = params.static.n_ports
    ports = partition_ports(params)
    begin_ps = state.flows.flow_begin_ps
    upcoming = params.flows.flow_valid & (begin_ps != NEVER) & (begin_ps >= window_end_ps)
    on_port = jnp.where(upcoming[:, None] & (ports >= 0), ports, n_ports)
    port_start_ps = jnp.full(n_ports + 1, NEVER).at[on_port].min(jnp.broadcast_to(begin_ps[:, None], ports.shape))
    return jnp.min(jnp.where(ports >= 0, port_start_ps[jnp.maximum(ports, 0)], NEVER), axis=1)


def _plan(params: Params, state: State, window_end_ps, candidate, rate, trend, horizon_ps):
    """Which flows freeze now (F,) bool, their partitions (F,) int32 and planned ends (F,) int64.

    A phase is planned to end at the earliest of its flows' margins and drift horizons, the
    next known start of a flow that crosses its ports (which would end it then), and the
    next timed link event that moves one of its flows (changes its paths, or a link on them:
    ``ops/link_events.py``); one shorter than a sample interval is not begun."""
    n_flows = params.static.n_flows
    member = watched(params, state, window_end_ps)
    label = partition_labels(partition_ports(params), member, params.static.n_ports)
    slot = jnp.where(member, label, n_flows)  # a spare segment for non-members
    unsteady = jnp.zeros(n_flows + 1, bool).at[slot].max(member & ~candidate)
    to_margin_ps = jnp.floor(_to_margin_ps(params, state, rate, trend))
    end_ps = window_end_ps + jnp.minimum(jnp.minimum(to_margin_ps, 2.0**60).astype(jnp.int64), horizon_ps)
    end_ps = jnp.minimum(end_ps, _next_known_start_ps(params, state, window_end_ps))
    end_ps = jnp.minimum(end_ps, next_move_ps(params, window_end_ps))  # a link event on its paths ends it
    end_ps = jnp.full(n_flows + 1, NEVER).at[slot].min(jnp.where(candidate, end_ps, NEVER))
    end_ps = jnp.minimum(end_ps, params.max_time_ps + 1)[slot]
    long_enough = end_ps - window_end_ps >= params.steady.sample_interval_ps
    freeze = member & ~unsteady[slot] & long_enough
    return freeze, label, end_ps


def _freeze(params: Params, state: State, window_end_ps) -> State:
    """Freeze every partition whose flows are all steady (see the module docstring)."""
    st = state.steady
    is_steady, rate, horizon_ps, trend = steady_rates(params, state)
    watch = watched(params, state, window_end_ps)
    # The mean of the ring is the rate at its centre, (l - 1) / 2 samples ago: a drifting
    # flow is now that many samples further along its trend.
    lag_ps = (params.steady.window - 1).astype(jnp.float64) / 2.0 * params.steady.sample_interval_ps.astype(jnp.float64)
    rate = jnp.maximum(rate + trend * lag_ps, 0.0)
    rate, trend = jax.lax.cond(
        params.steady.rate_maxmin, lambda: (_maxmin_payload_rates(params, watch), jnp.zeros_like(trend)), lambda: (rate, trend)
    )
    candidate = watch & is_steady & (_jumpable_packets(params, state) > 0)
    candidate = candidate & ~_unsettled(params, jnp.where(candidate, rate, 0.0))
    freeze, label, end_ps = _plan(params, state, window_end_ps, candidate, rate, trend, horizon_ps)
    ports = partition_ports(params)
    n_ports = params.static.n_ports
    port_label = jnp.full(n_ports, -1, jnp.int32).at[jnp.where(freeze[:, None] & (ports >= 0), ports, n_ports)].max(
        jnp.broadcast_to(label[:, None], ports.shape), mode="drop"
    )
    port_mask = port_label >= 0
    restore_bytes = restored_depth(params, st.port_depth_ring, st.n_depth_samples, port_queue_bytes(params, state.packets))
    history = frozen_history(params, st.port_depth_ring, st.n_depth_samples)
    offset = jnp.int64(FROZEN_OFFSET_PS)
    state = move_times(
        state, freeze, jnp.full_like(end_ps, offset), port_mask, jnp.full(n_ports, offset, jnp.int64), thawing=False
    )
    flow = jnp.arange(params.static.n_flows)
    st = state.steady
    return state.replace(
        steady=st.replace(
            frozen=st.frozen | freeze,
            frozen_label=jnp.where(freeze, label, st.frozen_label),
            port_frozen_label=jnp.where(port_mask, port_label, st.port_frozen_label),
            port_restore_bytes=jnp.where(port_mask, restore_bytes, st.port_restore_bytes),
            port_frozen_history=jnp.where(port_mask[:, None], history, st.port_frozen_history),
            frozen_since_ps=jnp.where(freeze, window_end_ps, st.frozen_since_ps),
            thaw_at_ps=jnp.where(freeze, end_ps, st.thaw_at_ps),
            steady_rate=jnp.where(freeze, rate, st.steady_rate),
            steady_trend=jnp.where(freeze, trend, st.steady_trend),
            flow_jumps=st.flow_jumps + freeze,
            n_freezes=st.n_freezes + jnp.sum(freeze & (label == flow)).astype(jnp.int32),
        )
    )


def steady(params: Params, state: State, window_end_ps) -> State:
    """Sample rates when a sample is due (hybrid experiments only), then freeze steady partitions."""

    if params.static.steady_window == 1:  # no hybrid experiment in the batch: compiled out
        return state

    def sample_and_freeze(state):
        state = _sample(params, state, window_end_ps)
        return _freeze(params, state, window_end_ps)

    due = params.steady.hybrid & (window_end_ps >= state.steady.next_sample_ps)
    return jax.lax.cond(due, sample_and_freeze, lambda s: s, state)


def _thaw_times(params: Params, state: State, window_end_ps):
    """(F,) int64 when each frozen flow's partition thaws in this window (NEVER: not now)."""
    st, fs, n_flows = state.steady, state.flows, params.static.n_flows
    window_start_ps = window_end_ps - params.window_ps
    # A flow starting at packet level that crosses a frozen port ends that partition's phase.
    starting = watched(params, state, window_end_ps)
    ports = partition_ports(params)
    touched = jnp.where(ports >= 0, st.port_frozen_label[jnp.maximum(ports, 0)], -1)  # (F, K)
    touch_ps = jnp.where(starting[:, None] & (touched >= 0), jnp.maximum(fs.flow_begin_ps, window_start_ps)[:, None], NEVER)
    trigger = jnp.full(n_flows + 1, NEVER).at[jnp.where(touched >= 0, touched, n_flows)].min(touch_ps)
    planned = jnp.where(st.frozen, st.thaw_at_ps, NEVER)
    trigger = trigger.at[jnp.where(st.frozen, st.frozen_label, n_flows)].min(planned)
    at_ps = jnp.maximum(trigger[jnp.where(st.frozen, st.frozen_label, n_flows)], window_start_ps)
    return jnp.where(st.frozen & (at_ps < window_end_ps), at_ps, NEVER)


def _thaw(params: Params, state: State, window_end_ps) -> State:
    st, n_flows = state.steady, params.static.n_flows
    thaw_ps = _thaw_times(params, state, window_end_ps)
    thawing = thaw_ps != NEVER
    delta_ps = jnp.where(thawing, thaw_ps - st.frozen_since_ps, 0)
    # The ports of a thawing partition move with it.
    delta_by_label = jnp.zeros(n_flows + 1, jnp.int64).at[jnp.where(thawing, st.frozen_label, n_flows)].max(delta_ps)
    port_label = st.port_frozen_label
    port_thaws = (port_label >= 0) & jnp.zeros(n_flows + 1, bool).at[jnp.where(thawing, st.frozen_label, n_flows)].set(True)[
        jnp.where(port_label >= 0, port_label, n_flows)
    ]
    port_delta = jnp.where(port_thaws, delta_by_label[jnp.maximum(port_label, 0)], 0)
    offset = jnp.int64(FROZEN_OFFSET_PS)
    state = move_times(state, thawing, delta_ps - offset, port_thaws, port_delta - offset, thawing=True)
    decided = state.links.pfc_decided_ps
    decided = jnp.where(port_thaws[:, None] & (decided >= 0), decided + port_delta[:, None], decided)
    state = state.replace(links=state.links.replace(pfc_decided_ps=decided))
    # Credit the packets each flow sent at its steady rate, drifting along its trend.
    payload = params.payload_bytes.astype(jnp.float64)
    phase_ps = delta_ps.astype(jnp.float64)
    sent = jnp.floor((st.steady_rate + st.steady_trend * phase_ps / 2.0) * phase_ps / payload)
    sent = jnp.clip(sent, 0.0, _jumpable_packets(params, state).astype(jnp.float64)).astype(jnp.int32)
    state = advance_flows(params, state, thawing, sent)
    port_thaw_ps = thaw_ps[jnp.maximum(port_label, 0)]  # a partition is named by one of its flows
    state = jax.lax.cond(
        params.steady.restore == RESTORE_FREEZE,
        lambda s: s,
        lambda s: _restore(params, s, port_thaws, port_thaw_ps, port_delta, thawing, sent),
        state,
    )
    hops = jnp.sum(flow_ports(params) >= 0, axis=1).astype(jnp.int64)
    flow = jnp.arange(n_flows)
    st = state.steady
    return state.replace(
        steady=st.replace(
            frozen=st.frozen & ~thawing,
            frozen_label=jnp.where(thawing, -1, st.frozen_label),
            port_frozen_label=jnp.where(port_thaws, -1, port_label),
            thaw_at_ps=jnp.where(thawing, NEVER, st.thaw_at_ps),
            n_samples=jnp.where(thawing, 0, st.n_samples),
            prev_sample_ps=jnp.where(thawing, -1, st.prev_sample_ps),
            flow_level_ps=st.flow_level_ps + delta_ps,
            skipped_hops=st.skipped_hops + jnp.sum(jnp.where(thawing, sent, 0).astype(jnp.int64) * hops),
            n_thaws=st.n_thaws + jnp.sum(thawing & (st.frozen_label == flow)).astype(jnp.int32),
        ),
    )


def _restore(params: Params, state: State, port_mask, now_ps, phase_ps, thawing, credited) -> State:
    """Rebuild the queues of the ports of ``port_mask`` (P,) to their restore depths at
    ``now_ps`` (P,), after phases of ``phase_ps`` (P,); ``thawing`` (F,) the partitions'
    flows, ``credited`` (F,) the packets they were just credited with as delivered.

    The learned restorer (``hybrid.restore=transformer``; compiled in only when a batch has
    it) predicts the depths here, at the phase's end, and may grow a queue from the credit."""
    target = state.steady.port_restore_bytes
    if params.static.restorer_history > 1:
        learned = params.steady.restore == RESTORE_TRANSFORMER
        target = jnp.where(learned, learned_depth(params, state, port_mask, phase_ps, thawing), target)
    state = drain_queues(params, state, port_mask, target)
    if params.static.restorer_history > 1:
        state = grow_queues(params, state, port_mask & learned, target, now_ps, jnp.where(thawing, credited, 0))
    return resume_drained_links(params, state, port_mask, now_ps)


def thaw(params: Params, state: State, window_end_ps) -> State:
    """Thaw the partitions whose phase ends in this window (nothing to do while none is frozen).

    A batch without hybrid experiments compiles both ``steady`` systems out: under vmap a
    ``lax.cond`` on a per-experiment value runs both branches for every experiment."""
    if params.static.steady_window == 1:
        return state
    return jax.lax.cond(jnp.any(state.steady.frozen), lambda s: _thaw(params, s, window_end_ps), lambda s: s, state)
