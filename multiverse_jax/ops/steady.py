"""The steady-state test (Wormhole §5.1, eq. 6–7) on a flow's rate rings (``components/steady.py``)."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import CC_NONE, Params, State


DRIFT_SHARE = 2.0  # a phase ends before a drifting rate could move by this share of θ ...
TREND_ERRORS = 2.0  # ... at its trend plus this many standard errors of it (~95 %)


def newest_first(ring, n_taken):
    """``ring`` (R, L) reordered newest sample first: ``n_taken`` (R,) or () samples written so
    far, the newest at ``(n_taken - 1) % L``."""
    size = ring.shape[1]
    index = (jnp.reshape(n_taken, (-1, 1)) - 1 - jnp.arange(size)) % size
    return jnp.take_along_axis(ring, jnp.broadcast_to(index, ring.shape), axis=1)


def _ring_test(params: Params, ring, n_samples):
    """Over the last l samples of ``ring`` (F, L): (F,) bool they spread by less than θ of
    their mean, (F,) float64 that mean (Wormhole eq. 6–7), (F,) float64 their trend, the
    least-squares slope in rate per sample (positive: rising), and (F,) float64 that
    slope's standard error (the residuals' spread around the line over √Σ age²)."""
    size, l = params.static.steady_window, params.steady.window
    back = jnp.arange(size)
    samples = newest_first(ring, n_samples)
    used = back < l
    mean = jnp.sum(jnp.where(used, samples, 0.0), axis=1) / l
    spread = jnp.max(jnp.where(used, samples, -jnp.inf), axis=1) - jnp.min(jnp.where(used, samples, jnp.inf), axis=1)
    age = back - (l - 1) / 2.0  # centred sample index, newest first
    sum_age2 = jnp.sum(jnp.where(used, age**2, 0.0))
    slope = -jnp.sum(jnp.where(used, age * (samples - mean[:, None]), 0.0), axis=1) / sum_age2
    residual = samples - mean[:, None] + slope[:, None] * age  # the fit is mean - slope · age
    variance = jnp.sum(jnp.where(used, residual**2, 0.0), axis=1) / jnp.maximum(l - 2, 1)
    slope_error = jnp.sqrt(variance / sum_age2)
    steady = (n_samples >= l) & (mean > 0) & (spread < params.steady.theta * mean)
    return steady, mean, slope, slope_error


def steady_rates(params: Params, state: State):
    """Which flows are steady, at what rate, for how long, drifting how (see Returns).

    The sending rate is exact for a paced or ACK-clocked flow, but a flow that PFC turns on
    and off (``cc=none`` on a shared bottleneck) sends in bursts shorter than a sample; its
    delivered rate (packets received over the time between their arrivals) is then the
    steady one.
    Only under ``cc=none``: with a congestion control, a bottleneck queue that fills or
    drains over a sawtooth (DCQCN) delivers at the link's share while the senders' rates
    move, so only their sending rate says whether they are steady. A flow is steady when
    either is, at that one's mean (the sending rate when both are).

    A congestion control that converges slowly (HPCC's fairness between flows that share a
    bottleneck, over milliseconds) passes the spread test while its rate still drifts. A
    phase of a flow steady by its (exact) sending rate under a congestion control follows
    that drift in the bytes it credits: it advances along the least-squares trend of its
    samples (``steady_trend``, from the rate the trend gives now, not the ring's centre).
    Its congestion control resumes where it froze (moving HPCC's windows along the trend
    was tried, and its transients cost more than they saved), and a linear extrapolation
    is trusted only so far: the phase lasts at most until the trend, plus ``TREND_ERRORS``
    standard errors of it, would move the rate by ``DRIFT_SHARE`` θ of its mean. A slope
    within that many standard errors of zero is noise (a lone flow), or a sawtooth seen at
    a few points of its cycle (DCQCN): it is not followed, and its scatter keeps the phase
    short. Under ``cc=none`` rates are the line rate and PFC's on-off, which have no slow
    dynamics: no trend and no limit (nor for a flow steady by its delivered rate, whose
    trend is mostly the noise of whole packets).

    Returns (F,) bool steady, (F,) float64 rate (bytes/ps), (F,) int64 horizon (ps) and
    (F,) float64 trend (bytes/ps per ps; 0 where not followed).
    """
    st = state.steady
    sending_steady, sending, trend, trend_error = _ring_test(params, st.rate_ring, st.n_samples)
    delivered_steady, delivered, _, _ = _ring_test(params, st.delivered_ring, st.n_samples)
    delivered_steady = delivered_steady & (params.cc_kind == CC_NONE)
    # The horizon counts the slope's uncertainty: samples scattered around their line
    # (a sawtooth seen at a few points of its cycle) trust the line for less long.
    drift = jnp.abs(trend) + TREND_ERRORS * trend_error
    samples = DRIFT_SHARE * params.steady.theta * sending / jnp.maximum(drift, 1e-30)
    horizon_ps = jnp.minimum(samples * params.steady.sample_interval_ps.astype(jnp.float64), 2.0**60)
    controlled = sending_steady & (params.cc_kind != CC_NONE)  # line rate and PFC have no slow dynamics
    horizon_ps = jnp.where(controlled, horizon_ps, 2.0**60).astype(jnp.int64)
    drifts = controlled & (jnp.abs(trend) > TREND_ERRORS * trend_error)  # a slope within its noise is none
    trend_per_ps = jnp.where(drifts, trend / params.steady.sample_interval_ps.astype(jnp.float64), 0.0)
    return sending_steady | delivered_steady, jnp.where(sending_steady, sending, delivered), horizon_ps, trend_per_ps
