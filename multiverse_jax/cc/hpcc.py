"""HPCC (Li et al., SIGCOMM 2019), Algorithm 1: window from in-band telemetry.

Every data packet collects, at each switch egress port it leaves, (queue length, bytes
the port has sent, timestamp, link rate); the ACK echoes them. Per ACK the sender:

* MeasureInflight: per hop, txRate = delta(txBytes) / delta(ts) and
  u' = min(qlen, qlen_prev) / (B T) + txRate / B; the most utilised hop gives u and its
  delta(ts) gives tau (at most T); U = (1 - tau/T) U + tau/T u;
* ComputeWind: if U >= eta or incStage >= maxStage: W = W_c / (U / eta) + W_AI, else
  W = W_c + W_AI; W_c and incStage are updated (incStage reset after a multiplicative
  step, else + 1) only once per RTT: when the ACK passes the sequence that was next to
  send at the last reference update (lastUpdateSeq); other ACKs react fast from the same W_c;
* window W (at least the minimum rate times T, at most line rate times T), pacing rate R = W / T;
* remembers this ACK's telemetry for the next one.

Hops whose port differs from the remembered one (another path) or whose time did not
advance are skipped; the first ACK only records telemetry.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.cc.events import AckEvent
from multiverse_jax.components.cc import CcParams, CcState, HpccState

PS_PER_S = 1e12


def hop_utilisation(ev: AckEvent, st: HpccState, base_rtt_s):
    """(F, Hi) u' of every hop (-1 where the hop has no usable sample) and (F, Hi) tau in ps."""
    dt_ps = ev.int_ts_ps - st.flow_int_ts_ps
    usable = (ev.int_port >= 0) & (ev.int_port == st.flow_int_port) & (dt_ps > 0)
    dt_s = jnp.maximum(dt_ps, 1) / PS_PER_S
    tx_rate_bps = (ev.int_tx_bytes - st.flow_int_tx_bytes) * 8.0 / dt_s
    rate = jnp.maximum(ev.int_rate_bps, 1.0)
    qlen = jnp.minimum(ev.int_qlen_bytes, st.flow_int_qlen_bytes) * 8.0
    u = qlen / (rate * base_rtt_s) + tx_rate_bps / rate
    return jnp.where(usable, u, -1.0), dt_ps


def measure_inflight(ev: AckEvent, st: HpccState, cp: CcParams, u_before):
    """(F,) the new U (from ``u_before``) and (F,) whether any hop gave a sample."""
    base_rtt_ps = cp.hpcc_base_rtt_ps
    u_hop, dt_ps = hop_utilisation(ev, st, base_rtt_ps / PS_PER_S)
    if u_hop.shape[-1] == 0:  # no telemetry compiled in (Static.int_hops = 0: no experiment of the batch runs HPCC)
        return u_before, jnp.zeros(u_before.shape, bool)
    best = jnp.argmax(u_hop, axis=-1)
    u = jnp.take_along_axis(u_hop, best[:, None], axis=-1)[:, 0]
    tau = jnp.minimum(jnp.take_along_axis(dt_ps, best[:, None], axis=-1)[:, 0], base_rtt_ps)
    weight = tau / base_rtt_ps
    weight = jnp.where(cp.hpcc_u_whole_rtt, jnp.floor(weight), weight)  # htsim: tau/_T in integers
    sampled = u >= 0.0
    return jnp.where(sampled, (1.0 - weight) * u_before + weight * u, u_before), sampled


def compute_window(u, wc_bytes, inc_stage, cp: CcParams):
    """(W, multiplicative) from ComputeWind."""
    multiplicative = (u >= cp.hpcc_eta) | (inc_stage >= cp.hpcc_max_stage)
    w = jnp.where(multiplicative, wc_bytes / jnp.maximum(u / cp.hpcc_eta, 1e-9), wc_bytes) + cp.hpcc_w_ai_bytes
    return w, multiplicative


def window_bounds(cp: CcParams, line_rate_bps, min_rate_bps):
    """(lowest, highest) window: the minimum rate and the line rate (inf with
    hpcc.window_cap=none), times T."""
    base_rtt_s = cp.hpcc_base_rtt_ps / PS_PER_S
    highest = jnp.where(cp.hpcc_window_capped, line_rate_bps * base_rtt_s / 8.0, jnp.inf)
    return min_rate_bps * base_rtt_s / 8.0, highest


def on_ack(cp: CcParams, cc: CcState, ev: AckEvent) -> CcState:
    st = cc.hpcc
    first = ~st.flow_has_int
    # hpcc.first_ack=update (htsim): U starts at eta and every ACK runs ComputeWind.
    u_before = jnp.where(first & cp.hpcc_first_update, cp.hpcc_eta, st.flow_inflight_u)
    u, sampled = measure_inflight(ev, st, cp, u_before)
    u = jnp.where(first, u_before, u)
    update = (st.flow_has_int & sampled) | cp.hpcc_first_update
    update_reference = ev.acked_packets > st.flow_round_end_seq
    # hpcc.window_update=ack (htsim): W_c is the window itself, in whole bytes.
    wc = jnp.where(cp.hpcc_window_per_ack, cc.flow_window_bytes, st.flow_ref_window_bytes)
    w, multiplicative = compute_window(u, wc, st.flow_inc_stage, cp)
    w = jnp.where(cp.hpcc_window_per_ack, jnp.floor(w), w)
    lowest, highest = window_bounds(cp, ev.line_rate_bps, cp.hpcc_min_rate_bps)
    w = jnp.clip(w, lowest, highest)
    window = jnp.where(update, w, cc.flow_window_bytes)
    set_reference = update & update_reference
    # hpcc.int_reference=first (htsim): the first ACK's telemetry on a path is kept.
    path_changed = jnp.any(ev.int_port != st.flow_int_port, axis=-1)
    keep_int = cp.hpcc_int_first & st.flow_has_int & ~path_changed
    keep = keep_int[:, None]
    return cc.replace(
        flow_window_bytes=window,
        # hpcc.pacing=ticks: htsim's arithmetic (_pacing_rate = _cwnd * 8 * 10^12 / _T, _T in ps).
        flow_rate_bps=jnp.where(
            cp.hpcc_pacing_ticks,
            window * 8.0 * PS_PER_S / cp.hpcc_base_rtt_ps,
            window * 8.0 / (cp.hpcc_base_rtt_ps / PS_PER_S),
        ),
        hpcc=st.replace(
            flow_inflight_u=jnp.where(st.flow_has_int | cp.hpcc_first_update, u, st.flow_inflight_u),
            flow_ref_window_bytes=jnp.where(set_reference | (update & cp.hpcc_window_per_ack), w, st.flow_ref_window_bytes),
            flow_inc_stage=jnp.where(
                set_reference, jnp.where(multiplicative, 0, st.flow_inc_stage + 1), st.flow_inc_stage
            ),
            flow_round_end_seq=jnp.where(update_reference | first, ev.sent_packets, st.flow_round_end_seq),
            flow_has_int=jnp.ones_like(st.flow_has_int),
            flow_int_port=jnp.where(keep, st.flow_int_port, ev.int_port),
            flow_int_ts_ps=jnp.where(keep, st.flow_int_ts_ps, ev.int_ts_ps),
            flow_int_tx_bytes=jnp.where(keep, st.flow_int_tx_bytes, ev.int_tx_bytes),
            flow_int_qlen_bytes=jnp.where(keep, st.flow_int_qlen_bytes, ev.int_qlen_bytes),
        ),
    )
