"""DCTCP (Alizadeh et al., SIGCOMM 2010): a window-based sender driven by ECN echoes.

Per ACK, in this order (as the HPCC ns-3 code orders them):

1. alpha, once per window of data: when the ACKs pass the sequence that was next to send
   at the previous update, alpha = (1 - g) alpha + g F, F = the fraction of ACKs of that
   window that echoed a mark (the first window only starts the count);
2. leave CWR once the ACKs pass the sequence sent when the window was last cut;
3. an ECN echo outside CWR cuts the window: cwnd = max(min_window, cwnd (1 - alpha/2)),
   ssthresh = cwnd, and enters CWR (one cut per window of data);
4. outside CWR the window grows as TCP's: slow start (one MSS per ACK) below ssthresh,
   congestion avoidance (MSS^2 / cwnd per ACK, one MSS per RTT) above.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.cc.events import AckEvent
from multiverse_jax.components.cc import CcParams, CcState


def update_alpha(alpha, marks, acks, g):
    """alpha <- (1 - g) alpha + g F with F = marks / acks of the last window of data."""
    fraction = jnp.minimum(1.0, jnp.asarray(marks, jnp.float64) / jnp.maximum(acks, 1))
    return (1.0 - g) * alpha + g * fraction


def cut_window(window_bytes, alpha, min_window_bytes):
    """cwnd <- max(min_window, cwnd (1 - alpha / 2))."""
    return jnp.maximum(min_window_bytes, window_bytes * (1.0 - alpha / 2.0))


def grow_window(window_bytes, ssthresh_bytes, mss_bytes):
    """TCP's per-ACK increase: + MSS in slow start, + MSS^2 / cwnd in congestion avoidance."""
    return jnp.where(window_bytes < ssthresh_bytes, window_bytes + mss_bytes, window_bytes + mss_bytes**2 / window_bytes)


def on_ack(cp: CcParams, cc: CcState, ev: AckEvent) -> CcState:
    st = cc.dctcp
    acks = st.flow_acks_in_round + 1
    marks = st.flow_marks_in_round + ev.ece.astype(jnp.int32)
    round_done = ev.acked_packets > st.flow_round_end_seq
    alpha = jnp.where(round_done & st.flow_started, update_alpha(st.flow_alpha, marks, acks, cp.dctcp_g), st.flow_alpha)
    in_cwr = st.flow_in_cwr & ~(ev.acked_packets > st.flow_cwr_high_seq)
    cut = ev.ece & ~in_cwr
    window = jnp.where(cut, cut_window(cc.flow_window_bytes, alpha, cp.dctcp_min_window_bytes), cc.flow_window_bytes)
    in_cwr = in_cwr | cut
    window = jnp.where(in_cwr, window, grow_window(window, st.flow_ssthresh_bytes, ev.mss_bytes))
    return cc.replace(
        flow_window_bytes=window,
        dctcp=st.replace(
            flow_alpha=alpha,
            flow_acks_in_round=jnp.where(round_done, 0, acks),
            flow_marks_in_round=jnp.where(round_done, 0, marks),
            flow_round_end_seq=jnp.where(round_done, ev.sent_packets, st.flow_round_end_seq),
            flow_started=jnp.ones_like(st.flow_started),
            flow_in_cwr=in_cwr,
            flow_cwr_high_seq=jnp.where(cut, ev.sent_packets, st.flow_cwr_high_seq),
            flow_ssthresh_bytes=jnp.where(cut, window, st.flow_ssthresh_bytes),
        ),
    )
