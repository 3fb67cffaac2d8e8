"""Congestion control: the constants of every algorithm (``CcParams``) and the per-flow
sender and receiver state they update (``CcState``).

One batch may mix algorithms (``Params.cc_kind`` is per experiment), so every experiment
carries every algorithm's constants and state; each rule only reads and writes its own
fields. Rates are float64 bits per second, windows float64 bytes, times int64 ps.
Defaults and their sources are in ``batch.py`` (``CcConfig``) and the README.
"""

from __future__ import annotations

import chex
from flax import struct

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
