"""Congestion control: the constants of every algorithm (``CcParams``) and the per-flow
sender and receiver state they update (``CcState``).

One batch may mix algorithms (``Params.cc_kind`` is per experiment), so every experiment
carries every algorithm's constants and state; each rule only reads and writes its own
fields. Rates are float64 bits per second, windows float64 bytes, times int64 ps.
Defaults and their sources are in ``cc/config.py`` and the README; ``cc_params`` and
``initial_cc_state`` build both from an experiment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import chex
import numpy as np
from flax import struct

from multiverse_jax.components.static import Static
from multiverse_jax.topology.graph import PS_PER_US

if TYPE_CHECKING:
    from multiverse_jax.experiment import Experiment
    from multiverse_jax.topology.routing import EcmpTable

# Window-based algorithms keep, per window of the simulation, up to GATE_ENTRIES
# (allowance, time) pairs: "from time t, the flow may have sent up to A bytes". Entry 0
# is the allowance at the window start; each ACK that arrives in the window adds one
# entry (past the last, ACKs merge into the last entry: later, so never early).
GATE_ENTRIES = 4


@struct.dataclass
class CcParams:
    """Per-experiment constants, all () scalars."""

    # RED / ECN marking at switch egress (probability rises from 0 at Kmin to Pmax at Kmax; 1 above).
    ecn_kmin_bytes: chex.Array  # () int64
    ecn_kmax_bytes: chex.Array  # () int64
    ecn_pmax: chex.Array  # () float64
    # DCQCN (Zhu et al. 2015; the Mellanox rules of the HPCC ns-3 code)
    dcqcn_g: chex.Array  # () float64 alpha gain
    dcqcn_alpha_timer_ps: chex.Array  # () int64 alpha update period
    dcqcn_decrease_interval_ps: chex.Array  # () int64 at most one rate cut per interval
    dcqcn_increase_timer_ps: chex.Array  # () int64 rate-increase timer period
    dcqcn_byte_counter_bytes: chex.Array  # () int64 bytes sent per byte-counter increase event
    dcqcn_fast_recovery_steps: chex.Array  # () int32 F: increase events of fast recovery
    dcqcn_rate_ai_bps: chex.Array  # () float64 additive increase of the target rate
    dcqcn_rate_hai_bps: chex.Array  # () float64 hyper increase of the target rate
    dcqcn_min_rate_bps: chex.Array  # () float64
    dcqcn_cnp_interval_ps: chex.Array  # () int64 receiver: at most one CNP per flow per interval
    dcqcn_rate_on_first_cnp: chex.Array  # () float64 fraction of the rate kept on the first CNP
    # DCTCP (Alizadeh et al. 2010)
    dctcp_g: chex.Array  # () float64 alpha gain
    dctcp_init_window_bytes: chex.Array  # () float64 initial congestion window
    dctcp_min_window_bytes: chex.Array  # () float64 the window never goes below this (one packet)
    # HPCC (Li et al. 2019)
    hpcc_eta: chex.Array  # () float64 target utilisation
    hpcc_max_stage: chex.Array  # () int32 additive steps before a multiplicative update
    hpcc_w_ai_bytes: chex.Array  # () float64 additive increase of the window
    hpcc_base_rtt_ps: chex.Array  # () int64 T: base RTT (one for the experiment, as ns-3's GLOBAL_T)
    hpcc_min_rate_bps: chex.Array  # () float64 the window never goes below this rate times T
    # TIMELY (Mittal et al. 2015)
    timely_alpha: chex.Array  # () float64 EWMA weight of the RTT difference
    timely_beta: chex.Array  # () float64 multiplicative decrease factor
    timely_t_low_ps: chex.Array  # () int64 below: always increase
    timely_t_high_ps: chex.Array  # () int64 above: decrease in proportion
    timely_min_rtt_ps: chex.Array  # () int64 normalises the gradient
    timely_rate_ai_bps: chex.Array  # () float64 additive increase
    timely_rate_hai_bps: chex.Array  # () float64 hyper-active increase
    timely_hai_after: chex.Array  # () int32 consecutive increases before HAI
    timely_min_rate_bps: chex.Array  # () float64


@struct.dataclass
class CcState:
    """Per-flow congestion-control state. (F,) unless noted; Hi = Static.int_hops."""

    rate_bps: chex.Array  # (F,) float64 sending (pacing) rate
    window_bytes: chex.Array  # (F,) float64 congestion window (window-based algorithms)
    alpha: chex.Array  # (F,) float64 DCQCN / DCTCP congestion estimate
    # DCQCN
    target_rate_bps: chex.Array  # (F,) float64 R_T
    cnp_seen_alpha: chex.Array  # (F,) bool a CNP arrived since the last alpha update
    cnp_seen_decrease: chex.Array  # (F,) bool a CNP arrived since the last decrease check
    rate_limited: chex.Array  # (F,) bool the first CNP has arrived (timers run)
    timer_stage: chex.Array  # (F,) int32 DCQCN increase-timer events since the last cut
    byte_stage: chex.Array  # (F,) int32 DCQCN byte-counter events since the last cut
    bytes_counted: chex.Array  # (F,) int64 bytes sent since the last byte-counter event
    alpha_timer_ps: chex.Array  # (F,) int64 next alpha update (NEVER: not armed)
    decrease_timer_ps: chex.Array  # (F,) int64 next decrease check
    increase_timer_ps: chex.Array  # (F,) int64 next rate-increase timer event
    byte_event_ps: chex.Array  # (F,) int64 a byte-counter event pending since then (NEVER: none)
    last_cnp_ps: chex.Array  # (F,) int64 receiver: when it last sent this flow a CNP
    ecn_marked_packets: chex.Array  # (F,) int32 receiver: ECN-marked data packets delivered
    cnps_sent: chex.Array  # (F,) int32 receiver: CNPs sent
    # DCTCP
    ssthresh_bytes: chex.Array  # (F,) float64 slow-start threshold
    in_cwr: chex.Array  # (F,) bool window already cut for this window of data
    cwr_high_seq: chex.Array  # (F,) int32 CWR ends when ACKs pass this packet count
    acks_in_round: chex.Array  # (F,) int32 ACKs since the last alpha update
    marks_in_round: chex.Array  # (F,) int32 ECN-echo ACKs since the last alpha update
    # shared by DCTCP, HPCC, TIMELY: one "round" = one window of data acknowledged
    last_update_seq: chex.Array  # (F,) int32 the round ends when ACKs pass this packet count
    started: chex.Array  # (F,) bool the first ACK has been seen
    # HPCC
    hpcc_u: chex.Array  # (F,) float64 normalised inflight U
    hpcc_wc_bytes: chex.Array  # (F,) float64 reference window W_c
    stage: chex.Array  # (F,) int32 HPCC incStage / TIMELY consecutive increases
    int_port: chex.Array  # (F, Hi) int32 last INT seen per hop: egress port (-1: none)
    int_ts_ps: chex.Array  # (F, Hi) int64 its timestamp
    int_tx_bytes: chex.Array  # (F, Hi) int64 its port's transmitted bytes
    int_qlen_bytes: chex.Array  # (F, Hi) int64 its queue length
    # TIMELY
    last_rtt_ps: chex.Array  # (F,) int64 RTT sample of the last update
    rtt_diff_ps: chex.Array  # (F,) float64 EWMA of RTT differences
    # window gate (see GATE_ENTRIES)
    gate_allow_bytes: chex.Array  # (F, G) float64 bytes the flow may have sent from gate_ps on
    gate_ps: chex.Array  # (F, G) int64 when that allowance starts (NEVER: unused entry)


def base_rtt_ps(exp: Experiment, ecmp: EcmpTable) -> int:
    """An upper bound of the unloaded RTT of the experiment's flows (HPCC's T when not given):
    per hop, the longest link delay and a full packet (then an ACK) at the slowest rate."""
    topo, flows = exp.topology, exp.flows
    links = ecmp.hops[flows.src, flows.dst].astype(np.int64)
    slowest, longest = int(topo.link_rate_bps.min()), int(topo.link_delay_ps.max())
    data_ps = -(-(exp.packet.payload_bytes + exp.packet.header_bytes) * 8 * 10**12 // slowest)
    ack_ps = -(-exp.packet.ack_bytes * 8 * 10**12 // slowest)
    return max(1, int(links.max(initial=0))) * (data_ps + ack_ps + 2 * longest)


def cc_params(exp: Experiment, ecmp: EcmpTable) -> CcParams:
    """Per-experiment constants in engine units (ps, bits per second, bytes)."""
    d, c, h, t, sw = exp.dcqcn, exp.dctcp, exp.hpcc, exp.timely, exp.switch
    rtt_ps = base_rtt_ps(exp, ecmp) if h.base_rtt_us is None else round(h.base_rtt_us * PS_PER_US)

    def ps(us):
        return np.int64(round(us * PS_PER_US))

    def bps(mbps):
        return np.float64(mbps * 1e6)

    return CcParams(
        ecn_kmin_bytes=np.int64(sw.ecn_kmin_bytes),
        ecn_kmax_bytes=np.int64(sw.ecn_kmax_bytes),
        ecn_pmax=np.float64(sw.ecn_pmax),
        dcqcn_g=np.float64(d.g),
        dcqcn_alpha_timer_ps=ps(d.alpha_timer_us),
        dcqcn_decrease_interval_ps=ps(d.decrease_interval_us),
        dcqcn_increase_timer_ps=ps(d.increase_timer_us),
        dcqcn_byte_counter_bytes=np.int64(d.byte_counter_bytes),
        dcqcn_fast_recovery_steps=np.int32(d.fast_recovery_steps),
        dcqcn_rate_ai_bps=bps(d.rate_ai_mbps),
        dcqcn_rate_hai_bps=bps(d.rate_hai_mbps),
        dcqcn_min_rate_bps=bps(d.min_rate_mbps),
        dcqcn_cnp_interval_ps=ps(d.cnp_interval_us),
        dcqcn_rate_on_first_cnp=np.float64(d.rate_on_first_cnp),
        dctcp_g=np.float64(c.g),
        dctcp_init_window_bytes=np.float64(c.init_window_packets * exp.packet.payload_bytes),
        dctcp_min_window_bytes=np.float64(c.min_window_packets * exp.packet.payload_bytes),
        hpcc_eta=np.float64(h.eta),
        hpcc_max_stage=np.int32(h.max_stage),
        hpcc_w_ai_bytes=np.float64(h.rate_ai_mbps * 1e6 * rtt_ps / 1e12 / 8),
        hpcc_base_rtt_ps=np.int64(rtt_ps),
        hpcc_min_rate_bps=bps(h.min_rate_mbps),
        timely_alpha=np.float64(t.alpha),
        timely_beta=np.float64(t.beta),
        timely_t_low_ps=ps(t.t_low_us),
        timely_t_high_ps=ps(t.t_high_us),
        timely_min_rtt_ps=ps(t.min_rtt_us),
        timely_rate_ai_bps=bps(t.rate_ai_mbps),
        timely_rate_hai_bps=bps(t.rate_hai_mbps),
        timely_hai_after=np.int32(t.hai_after),
        timely_min_rate_bps=bps(t.min_rate_mbps),
    )


def initial_cc_state(exp: Experiment, cp: CcParams, line_rate_bps: np.ndarray, s: Static) -> CcState:
    """Initial state of ``s.n_flows`` flows (``line_rate_bps``: the real flows' NIC rates;
    padded flows get 1 b/s): line rate; DCTCP's initial window, HPCC's W = B T."""
    from multiverse_jax.units import NEVER

    n = s.n_flows
    rate = np.ones(n)
    rate[: line_rate_bps.shape[0]] = line_rate_bps
    bdp = rate * float(cp.hpcc_base_rtt_ps) / 1e12 / 8
    window = {"dctcp": np.full(n, float(cp.dctcp_init_window_bytes)), "hpcc": bdp}.get(exp.cc, np.zeros(n))
    # The window gate starts open up to the initial window (no limit without one).
    gate_allow = np.full((n, GATE_ENTRIES), np.inf)
    gate_allow[:, 0] = window if exp.cc in ("dctcp", "hpcc") else np.inf
    gate_ps = np.full((n, GATE_ENTRIES), NEVER, np.int64)
    gate_ps[:, 0] = 0

    def zeros(dtype):
        return np.zeros(n, dtype)

    never = np.full(n, NEVER, np.int64)
    hops = (n, s.int_hops)
    return CcState(
        rate_bps=rate,
        window_bytes=window.astype(np.float64),
        alpha=np.ones(n),
        target_rate_bps=rate.copy(),
        cnp_seen_alpha=zeros(bool),
        cnp_seen_decrease=zeros(bool),
        rate_limited=zeros(bool),
        timer_stage=zeros(np.int32),
        byte_stage=zeros(np.int32),
        bytes_counted=zeros(np.int64),
        alpha_timer_ps=never,
        decrease_timer_ps=never.copy(),
        increase_timer_ps=never.copy(),
        byte_event_ps=never.copy(),
        last_cnp_ps=np.full(n, -(1 << 60), np.int64),
        ecn_marked_packets=zeros(np.int32),
        cnps_sent=zeros(np.int32),
        ssthresh_bytes=np.full(n, np.inf),
        in_cwr=zeros(bool),
        cwr_high_seq=zeros(np.int32),
        acks_in_round=zeros(np.int32),
        marks_in_round=zeros(np.int32),
        last_update_seq=zeros(np.int32),
        started=zeros(bool),
        hpcc_u=zeros(np.float64),
        hpcc_wc_bytes=bdp.astype(np.float64),
        stage=zeros(np.int32),
        int_port=np.full(hops, -1, np.int32),
        int_ts_ps=np.zeros(hops, np.int64),
        int_tx_bytes=np.zeros(hops, np.int64),
        int_qlen_bytes=np.zeros(hops, np.int64),
        last_rtt_ps=zeros(np.int64),
        rtt_diff_ps=zeros(np.float64),
        gate_allow_bytes=gate_allow,
        gate_ps=gate_ps,
    )
