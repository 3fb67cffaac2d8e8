"""DCQCN (Zhu et al., SIGCOMM 2015), with the reaction-point timers of the Mellanox
implementation as modelled in the HPCC ns-3 code (``rdma-hw.cc``, ``*Mlx``).

Notification point (receiver, ``systems/receive.py``): an ECN-marked data packet makes
its ACK carry a CNP, at most one per flow per ``cnp_interval``.

Reaction point (sender), all per flow:

* first CNP: rate *= rate_on_first_cnp, target = rate, alpha = 1; the alpha timer and the
  decrease timer start;
* alpha timer (every ``alpha_timer``): alpha = (1 - g) alpha + g if a CNP arrived since
  the last update, else (1 - g) alpha;
* decrease timer (every ``decrease_interval``): if a CNP arrived since the last check:
  target = rate (only after an increase event, as ns-3's ClampTargetRate=0), rate =
  max(min_rate, rate (1 - alpha/2)), both increase stages reset, the increase timer
  restarts and the byte counter clears;
* increase events, from the increase timer (every ``increase_timer``) and from the byte
  counter (every ``byte_counter`` bytes sent): fast recovery while both stages are below
  F (rate = (rate + target)/2); hyper increase once both exceed F (target += R_HAI);
  additive increase otherwise (target += R_AI); target is capped at line rate and
  rate = (rate + target)/2.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.cc.events import AckEvent
from multiverse_jax.components.cc import CcParams, CcState, DcqcnState
from multiverse_jax.units import NEVER

# Which timer fires (the order breaks ties between timers due at the same time).
TIMER_ALPHA, TIMER_DECREASE, TIMER_INCREASE, TIMER_BYTES = 0, 1, 2, 3


def update_alpha(alpha, cnp_seen, g):
    """alpha <- (1 - g) alpha + g * [a CNP arrived in the last period]."""
    return (1.0 - g) * alpha + g * cnp_seen.astype(alpha.dtype)


def cut_rate(rate_bps, alpha, min_rate_bps):
    """R_C <- max(min_rate, R_C (1 - alpha / 2))."""
    return jnp.maximum(min_rate_bps, rate_bps * (1.0 - alpha / 2.0))


def increase(rate_bps, target_bps, timer_stage, byte_stage, line_rate_bps, cp: CcParams):
    """One rate-increase event: fast recovery, additive or hyper increase. Returns (rate, target)."""
    f = cp.dcqcn_fast_recovery_steps
    high, low = jnp.maximum(timer_stage, byte_stage), jnp.minimum(timer_stage, byte_stage)
    step = jnp.where(high < f, 0.0, jnp.where(low > f, cp.dcqcn_rate_hai_bps, cp.dcqcn_rate_ai_bps))
    target = jnp.minimum(target_bps + step, line_rate_bps)
    return (rate_bps + target) / 2.0, target


def on_ack(cp: CcParams, cc: CcState, ev: AckEvent) -> CcState:
    """An ACK: only its CNP flag matters to DCQCN."""
    st = cc.dcqcn
    cnp, t = ev.cnp, ev.time_ps
    first = cnp & ~st.flow_rate_limited
    rate = jnp.where(first, cc.flow_rate_bps * cp.dcqcn_rate_on_first_cnp, cc.flow_rate_bps)
    return cc.replace(
        flow_rate_bps=rate,
        dcqcn=st.replace(
            flow_target_rate_bps=jnp.where(first, rate, st.flow_target_rate_bps),
            flow_alpha=jnp.where(first, 1.0, st.flow_alpha),
            flow_cnp_seen_alpha=jnp.where(first, False, st.flow_cnp_seen_alpha | cnp),
            flow_cnp_seen_decrease=st.flow_cnp_seen_decrease | cnp,
            flow_rate_limited=st.flow_rate_limited | cnp,
            flow_alpha_timer_ps=jnp.where(first, t + cp.dcqcn_alpha_timer_ps, st.flow_alpha_timer_ps),
            flow_decrease_timer_ps=jnp.where(first, t + cp.dcqcn_decrease_interval_ps, st.flow_decrease_timer_ps),
        ),
    )


def next_timer(st: DcqcnState):
    """(F,) time of each flow's next timer event and (F,) which timer (TIMER_*)."""
    timers = jnp.stack(
        [st.flow_alpha_timer_ps, st.flow_decrease_timer_ps, st.flow_increase_timer_ps, st.flow_byte_event_ps], axis=-1
    )
    which = jnp.argmin(timers, axis=-1).astype(jnp.int32)
    return jnp.min(timers, axis=-1), which


def on_timer(cp: CcParams, cc: CcState, time_ps, which, line_rate_bps) -> CcState:
    """The timer ``which`` (F,) of each flow fires at ``time_ps`` (F,)."""
    st = cc.dcqcn
    # alpha timer
    is_alpha = which == TIMER_ALPHA
    alpha = jnp.where(is_alpha, update_alpha(st.flow_alpha, st.flow_cnp_seen_alpha, cp.dcqcn_g), st.flow_alpha)
    # decrease check
    is_check = which == TIMER_DECREASE
    cut = is_check & st.flow_cnp_seen_decrease
    clamp = (st.flow_timer_stage != 0) | (st.flow_byte_stage != 0)  # ns-3 ClampTargetRate=0: keep R_T right after a cut
    target = jnp.where(cut & clamp, cc.flow_rate_bps, st.flow_target_rate_bps)
    rate = jnp.where(cut, cut_rate(cc.flow_rate_bps, st.flow_alpha, cp.dcqcn_min_rate_bps), cc.flow_rate_bps)
    # increase events
    is_timer_inc, is_byte_inc = which == TIMER_INCREASE, which == TIMER_BYTES
    inc_rate, inc_target = increase(rate, target, st.flow_timer_stage, st.flow_byte_stage, line_rate_bps, cp)
    incr = is_timer_inc | is_byte_inc
    return cc.replace(
        flow_rate_bps=jnp.where(incr, inc_rate, rate),
        dcqcn=st.replace(
            flow_alpha=alpha,
            flow_cnp_seen_alpha=jnp.where(is_alpha, False, st.flow_cnp_seen_alpha),
            flow_alpha_timer_ps=jnp.where(is_alpha, time_ps + cp.dcqcn_alpha_timer_ps, st.flow_alpha_timer_ps),
            flow_cnp_seen_decrease=jnp.where(is_check, False, st.flow_cnp_seen_decrease),
            flow_decrease_timer_ps=jnp.where(
                is_check, time_ps + cp.dcqcn_decrease_interval_ps, st.flow_decrease_timer_ps
            ),
            flow_target_rate_bps=jnp.where(incr, inc_target, target),
            flow_timer_stage=jnp.where(cut, 0, st.flow_timer_stage + is_timer_inc),
            flow_byte_stage=jnp.where(cut, 0, st.flow_byte_stage + is_byte_inc),
            flow_bytes_counted=jnp.where(cut, 0, st.flow_bytes_counted),
            flow_increase_timer_ps=jnp.where(
                cut | is_timer_inc, time_ps + cp.dcqcn_increase_timer_ps, st.flow_increase_timer_ps
            ),
            flow_byte_event_ps=jnp.where(cut | is_byte_inc, NEVER, st.flow_byte_event_ps),
        ),
    )


def on_send(cp: CcParams, st: DcqcnState, sent, wire_bytes, start_ps) -> DcqcnState:
    """Byte counter: flows that sent a packet (``sent`` (F,)) count its bytes; every
    ``byte_counter`` bytes schedule an increase event at that send time."""
    counted = st.flow_bytes_counted + jnp.where(sent & st.flow_rate_limited, wire_bytes, 0)
    full = sent & (counted >= cp.dcqcn_byte_counter_bytes)  # at a send only: a round sending nothing changes nothing
    return st.replace(
        flow_bytes_counted=jnp.where(full, counted - cp.dcqcn_byte_counter_bytes, counted),
        flow_byte_event_ps=jnp.where(full, jnp.minimum(st.flow_byte_event_ps, start_ps), st.flow_byte_event_ps),
    )
