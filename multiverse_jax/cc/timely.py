"""TIMELY (Mittal et al., SIGCOMM 2015): rate control from the RTT gradient.

Once per RTT (when the ACKs pass the sequence that was next to send at the last update,
as in the HPCC ns-3 code), with the RTT sample of that ACK (ACK arrival minus the data
packet's send time):

    rtt_diff = (1 - alpha) rtt_diff + alpha (rtt - prev_rtt);  gradient = rtt_diff / minRTT
    rtt < T_low:            rate += delta                 (additive increase; the hyper-
                                                          active step after ``hai_after``
                                                          consecutive increases, as ns-3)
    rtt > T_high:           rate *= 1 - beta (1 - T_high / rtt)
    gradient <= 0:          rate += N delta  (N = 1, or the hyper-active step after
                                              ``hai_after`` consecutive increases)
    otherwise:              rate *= 1 - beta gradient
    bounded to [min_rate, line rate]. The first ACK only takes the first sample.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.cc.events import AckEvent
from multiverse_jax.components.cc import CcParams, CcState


def new_rate(cp: CcParams, rate_bps, rtt_ps, rtt_diff_ps, increases, line_rate_bps):
    """(rate, increased) of one update from the RTT sample and the smoothed difference
    (``increases``: consecutive increases so far)."""
    gradient = rtt_diff_ps / cp.timely_min_rtt_ps
    rtt = rtt_ps.astype(jnp.float64)
    increase = (rtt_ps < cp.timely_t_low_ps) | ((rtt_ps <= cp.timely_t_high_ps) & (gradient <= 0.0))
    factor = jnp.where(
        rtt_ps > cp.timely_t_high_ps,
        1.0 - cp.timely_beta * (1.0 - cp.timely_t_high_ps / rtt),
        jnp.maximum(0.0, 1.0 - cp.timely_beta * gradient),
    )
    step = jnp.where(increases < cp.timely_hai_after, cp.timely_rate_ai_bps, cp.timely_rate_hai_bps)
    up = jnp.minimum(rate_bps + step, line_rate_bps)
    down = jnp.maximum(cp.timely_min_rate_bps, rate_bps * factor)
    return jnp.where(increase, up, down), increase


def on_ack(cp: CcParams, cc: CcState, ev: AckEvent) -> CcState:
    st = cc.timely
    rtt_ps = ev.time_ps - ev.data_sent_ps
    update = ev.acked_packets > st.flow_round_end_seq
    apply = update & st.flow_has_rtt
    rtt_diff = (1.0 - cp.timely_alpha) * st.flow_rtt_diff_ps + cp.timely_alpha * (rtt_ps - st.flow_prev_rtt_ps)
    rate, increased = new_rate(cp, cc.flow_rate_bps, rtt_ps, rtt_diff, st.flow_increases, ev.line_rate_bps)
    return cc.replace(
        flow_rate_bps=jnp.where(apply, rate, cc.flow_rate_bps),
        timely=st.replace(
            flow_increases=jnp.where(apply, jnp.where(increased, st.flow_increases + 1, 0), st.flow_increases),
            flow_rtt_diff_ps=jnp.where(apply, rtt_diff, st.flow_rtt_diff_ps),
            flow_prev_rtt_ps=jnp.where(update, rtt_ps, st.flow_prev_rtt_ps),
            flow_round_end_seq=jnp.where(update, ev.sent_packets, st.flow_round_end_seq),
            flow_has_rtt=st.flow_has_rtt | update,
        ),
    )
