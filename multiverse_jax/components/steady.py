"""Steady-state detection and fast-forward (``sim.mode=hybrid``; Wormhole §5–6, HyGra §IV).

Every ``hybrid.sample_interval_us`` the ``steady`` systems sample each flow's sending rate
into a ring of its last l = ``hybrid.window`` samples. A partition (flows that share an
egress port, data or ACK path, transitively) whose every flow is steady is *frozen*: its
packets, ports and timers are moved ``FROZEN_OFFSET_PS`` into the future, so no system
touches them (its queues keep their bytes), while its flows advance analytically at their
steady rates. It thaws when something touches it; see ``systems/steady.py``.
"""

from __future__ import annotations

import chex
from flax import struct
import numpy as np

from multiverse_jax.components.static import Static
from multiverse_jax.conf.schema import CcKind, HybridRate, HybridRestore, SimMode
from multiverse_jax.experiment import Experiment
from multiverse_jax.units import NEVER, PS_PER_US

# A frozen partition's times are moved this far into the future (2^61 ps, 27 days): far
# past any simulated time, far below NEVER (2^63 - 1), so shifted times never overflow and
# a time at or above FROZEN_THRESHOLD_PS that is not NEVER is a frozen one.
FROZEN_OFFSET_PS = 1 << 61
FROZEN_THRESHOLD_PS = 1 << 60

RESTORE_CODES = {  # ops/restore.py
    HybridRestore.freeze: 0,
    HybridRestore.empty: 1,
    HybridRestore.last: 2,
    HybridRestore.mean: 3,
    HybridRestore.transformer: 4,
}


@struct.dataclass
class SteadyParams:
    hybrid: chex.Array  # () bool the experiment runs in hybrid mode (else packet: nothing here runs)
    theta: chex.Array  # () float64 θ: steady when (max - min) / mean of the last l samples is below it
    window: chex.Array  # () int32 l: samples the test looks at (<= Static.steady_window)
    sample_interval_ps: chex.Array  # () int64 time between rate samples (``sample_interval_ps``)
    rate_maxmin: chex.Array  # () bool jump at max-min fair shares (hybrid.rate=maxmin) instead of the measured mean
    restore: chex.Array  # () int32 RESTORE_CODES[hybrid.restore]
    margin_packets: chex.Array  # () int32 packets a flow keeps for packet level at the end of a jump


@struct.dataclass
class SteadyState:
    next_sample_ps: chex.Array  # () int64 next rate sample (NEVER outside hybrid mode)
    rate_ring: chex.Array  # (F, L) float64 sending-rate samples in bytes/ps (L = Static.steady_window)
    delivered_ring: chex.Array  # (F, L) float64 delivered-rate samples in bytes/ps (same ring positions)
    n_samples: chex.Array  # (F,) int32 samples since the flow (re)started being watched
    prev_sent_packets: chex.Array  # (F,) int32 flow_sent_packets at the last sample
    prev_last_send_ps: chex.Array  # (F,) int64 flow_last_send_ps at the last sample (-1: none)
    prev_rx_packets: chex.Array  # (F,) int32 flow_rx_packets at the last sample
    prev_last_rx_ps: chex.Array  # (F,) int64 flow_last_rx_ps at the last sample (-1: none)
    prev_sample_ps: chex.Array  # (F,) int64 when the flow's last sample was taken (-1: none)
    frozen: chex.Array  # (F,) bool the flow's partition is frozen (advancing at flow level)
    frozen_label: chex.Array  # (F,) int32 its partition while frozen (lowest flow index; -1: not frozen)
    port_frozen_label: chex.Array  # (P,) int32 partition whose frozen packets hold the port (-1: none)
    frozen_since_ps: chex.Array  # (F,) int64 when its partition froze
    thaw_at_ps: chex.Array  # (F,) int64 the partition's planned end (a flow of it reaching its margin)
    port_depth_ring: chex.Array  # (P, L) int64 queue depth of each port at the last L rate samples (bytes)
    n_depth_samples: chex.Array  # () int32 depth samples taken (the newest at (n - 1) % L)
    port_restore_bytes: chex.Array  # (P,) int64 the depth a frozen port is rebuilt to when it thaws (ops/restore.py)
    port_frozen_history: chex.Array  # (P, Hr) int64 a frozen port's last Hr depth samples before its phase, newest
    #   first (Hr = Static.restorer_history: the learned restorer's input; 1 when no experiment uses it)
    steady_rate: chex.Array  # (F,) float64 bytes/ps it advances at when its phase begins
    steady_trend: chex.Array  # (F,) float64 bytes/ps per ps: how that rate drifts during the phase (0: constant)
    flow_level_ps: chex.Array  # (F,) int64 simulated time the flow spent frozen (at flow level)
    flow_jumps: chex.Array  # (F,) int32 frozen phases the flow took part in
    n_freezes: chex.Array  # () int32 partitions frozen (steady entries)
    n_thaws: chex.Array  # () int32 partitions thawed (steady exits)
    restore_added_packets: chex.Array  # () int64 packets put back into queues at re-entry (hybrid.restore=transformer)
    restore_drained_packets: chex.Array  # () int64 packets drained from queues at re-entry (delivered at once)
    skipped_hops: chex.Array  # () int64 packet-hops not simulated (packets jumped times their path's links, ACKs included)


def cc_period_us(exp: Experiment) -> float:
    """The longest period of the experiment's congestion control, in µs: a DCQCN sender's rate
    moves in steps of its rate-increase timer, and recovers from a cut over F of them (fast
    recovery), a cycle far longer than an RTT. The others react per RTT (0: no floor)."""
    if exp.cc == CcKind.dcqcn:
        return exp.dcqcn.increase_timer_us * exp.dcqcn.fast_recovery_steps
    return 0.0


def sample_interval_ps(exp: Experiment) -> int:
    """``hybrid.sample_interval_us``, raised where needed so that the l samples of the steady
    test span the congestion control's period (Wormhole App. F, eq. 23: Δt(l) >= T_C)."""
    h = exp.hybrid
    return max(1, round(max(h.sample_interval_us, cc_period_us(exp) / (h.window - 1)) * PS_PER_US))


def steady_params(exp: Experiment) -> SteadyParams:
    h = exp.hybrid
    return SteadyParams(
        hybrid=np.bool_(exp.sim.mode == SimMode.hybrid),
        theta=np.float64(h.theta),
        window=np.int32(h.window),
        sample_interval_ps=np.int64(sample_interval_ps(exp)),
        rate_maxmin=np.bool_(h.rate == HybridRate.maxmin),
        restore=np.int32(RESTORE_CODES[h.restore]),
        margin_packets=np.int32(2),
    )


def initial_steady_state(exp: Experiment, s: Static) -> SteadyState:
    """Nothing sampled; the first sample one interval in (never outside hybrid mode)."""
    n, ring = s.n_flows, (s.n_flows, s.steady_window)
    first = sample_interval_ps(exp) if exp.sim.mode == SimMode.hybrid else NEVER
    return SteadyState(
        next_sample_ps=np.int64(first),
        rate_ring=np.zeros(ring),
        delivered_ring=np.zeros(ring),
        n_samples=np.zeros(n, np.int32),
        prev_sent_packets=np.zeros(n, np.int32),
        prev_last_send_ps=np.full(n, -1, np.int64),
        prev_rx_packets=np.zeros(n, np.int32),
        prev_last_rx_ps=np.full(n, -1, np.int64),
        prev_sample_ps=np.full(n, -1, np.int64),
        frozen=np.zeros(n, bool),
        frozen_label=np.full(n, -1, np.int32),
        port_frozen_label=np.full(s.n_ports, -1, np.int32),
        frozen_since_ps=np.zeros(n, np.int64),
        thaw_at_ps=np.full(n, NEVER, np.int64),
        port_depth_ring=np.zeros((s.n_ports, s.steady_window), np.int64),
        n_depth_samples=np.int32(0),
        port_restore_bytes=np.zeros(s.n_ports, np.int64),
        port_frozen_history=np.zeros((s.n_ports, s.restorer_history), np.int64),
        steady_rate=np.zeros(n),
        steady_trend=np.zeros(n),
        flow_level_ps=np.zeros(n, np.int64),
        flow_jumps=np.zeros(n, np.int32),
        n_freezes=np.int32(0),
        n_thaws=np.int32(0),
        restore_added_packets=np.int64(0),
        restore_drained_packets=np.int64(0),
        skipped_hops=np.int64(0),
    )
