"""The steady-state test (Wormhole §5.1, eq. 6–7) on a flow's rate rings (``components/steady.py``)."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import CC_NONE, Params, State


DRIFT_SHARE = 0.25  # a phase ends before a drifting rate would move by this share of θ


def _ring_test(params: Params, ring, n_samples):
    """Over the last l samples of ``ring`` (F, L): (F,) bool they spread by less than θ of
    their mean, (F,) float64 that mean (Wormhole eq. 6–7), and (F,) float64 their trend,
    the least-squares slope in rate per sample (positive: rising)."""
    size, l = params.static.steady_window, params.steady.window
    back = jnp.arange(size)
    samples = jnp.take_along_axis(ring, (n_samples[:, None] - 1 - back) % size, axis=1)  # newest first
    used = back < l
    mean = jnp.sum(jnp.where(used, samples, 0.0), axis=1) / l
    spread = jnp.max(jnp.where(used, samples, -jnp.inf), axis=1) - jnp.min(jnp.where(used, samples, jnp.inf), axis=1)
    age = back - (l - 1) / 2.0  # centred sample index, newest first
    slope = -jnp.sum(jnp.where(used, age * (samples - mean[:, None]), 0.0), axis=1) / jnp.sum(jnp.where(used, age**2, 0.0))
    steady = (n_samples >= l) & (mean > 0) & (spread < params.steady.theta * mean)
    return steady, mean, slope


def steady_rates(params: Params, state: State):
    """(F,) bool steady, (F,) float64 its steady rate in bytes/ps, and (F,) int64 the longest
    phase its trend allows (ps).

    The sending rate is exact for a paced or ACK-clocked flow, but a flow that PFC turns on
    and off (``cc=none`` on a shared bottleneck) sends in bursts shorter than a sample; its
    delivered rate (packets received over the time between their arrivals) is then the
    steady one.
    Only under ``cc=none``: with a congestion control, a bottleneck queue that fills or
    drains over a sawtooth (DCQCN) delivers at the link's share while the senders' rates
    move, so only their sending rate says whether they are steady. A flow is steady when
    either is, at that one's mean (the sending rate when both are).

    A congestion control that converges slowly (HPCC's fairness between flows that share a
    bottleneck, over milliseconds) passes the spread test while its rate still drifts, and a
    frozen phase stops that drift. So a phase of a flow steady by its (exact) sending rate
    lasts at most until its trend would have moved the rate by ``DRIFT_SHARE`` θ of its
    mean; the delivered rate's trend is mostly the noise of whole packets, and PFC's on-off
    has no slow dynamics, so it sets no limit.
    """
    st = state.steady
    sending_steady, sending, trend = _ring_test(params, st.rate_ring, st.n_samples)
    delivered_steady, delivered, _ = _ring_test(params, st.delivered_ring, st.n_samples)
    delivered_steady = delivered_steady & (params.cc_kind == CC_NONE)
    samples = DRIFT_SHARE * params.steady.theta * sending / jnp.maximum(jnp.abs(trend), 1e-30)
    horizon_ps = jnp.minimum(samples * params.steady.sample_interval_ps.astype(jnp.float64), 2.0**60)
    horizon_ps = jnp.where(sending_steady, horizon_ps, 2.0**60).astype(jnp.int64)
    return sending_steady | delivered_steady, jnp.where(sending_steady, sending, delivered), horizon_ps
