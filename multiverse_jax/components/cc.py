"""Congestion control: the constants of every algorithm (``CcParams``) and the per-flow
state (``CcState``), and how both are built from an experiment's description.

``CcState`` holds what every algorithm shares -- the pacing rate and window the NIC obeys,
the window gate, the receiver's count of ECN marks -- and one state per algorithm
(``DcqcnState``, ``DctcpState``, ``HpccState``, ``TimelyState``) with exactly the fields
that algorithm's rules (``cc/*.py``) read and write, in that algorithm's meaning. One batch
may mix algorithms (``Params.cc_kind`` is per experiment), so every experiment carries
every algorithm's constants and state; only its own algorithm's rules touch them.
Rates are float64 bits per second, windows float64 bytes, times int64 ps. Defaults and
their sources are in ``cc/config.py`` and the README.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import chex
import numpy as np
from flax import struct

from multiverse_jax.components.static import Static
from multiverse_jax.conf.schema import (
    HpccFirstAck,
    HpccIntQueue,
    HpccIntReference,
    HpccPacing,
    HpccUUpdate,
    HpccWindowCap,
    HpccWindowGate,
    HpccWindowUpdate,
)
from multiverse_jax.experiment import Experiment
from multiverse_jax.units import NEVER, PS_PER_US, ps_from_us

if TYPE_CHECKING:
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
    # htsim's conventions (hpcc.window_update etc.; False: ns-3's)
    hpcc_window_per_ack: chex.Array  # () bool ComputeWind starts from the last ACK's window (whole bytes)
    hpcc_int_first: chex.Array  # () bool telemetry compared with the first ACK's on the path
    hpcc_u_whole_rtt: chex.Array  # () bool U's weight is floor(tau / T)
    hpcc_first_update: chex.Array  # () bool U starts at eta; ACKs without a sample run ComputeWind
    hpcc_int_queue_with_packet: chex.Array  # () bool switches record the queue with the departing packet
    hpcc_window_capped: chex.Array  # () bool the window is at most line rate times T
    hpcc_gate_whole_packet: chex.Array  # () bool send only if in flight + one payload <= window
    hpcc_pacing_ticks: chex.Array  # () bool the sender polls once per gap (hpcc.pacing=ticks)
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
class DcqcnState:
    """DCQCN (``cc/dcqcn.py``): the reaction point at the sender, the notification point at
    the receiver (``systems/receive.py``). All (F,)."""

    flow_target_rate_bps: chex.Array  # (F,) float64 R_T: the rate that increase events move towards
    flow_alpha: chex.Array  # (F,) float64 congestion estimate: a cut keeps 1 - alpha / 2 of the rate
    flow_cnp_seen_alpha: chex.Array  # (F,) bool a CNP arrived since the last alpha update
    flow_cnp_seen_decrease: chex.Array  # (F,) bool a CNP arrived since the last decrease check
    flow_rate_limited: chex.Array  # (F,) bool the first CNP has arrived (timers run)
    flow_timer_stage: chex.Array  # (F,) int32 increase-timer events since the last cut
    flow_byte_stage: chex.Array  # (F,) int32 byte-counter events since the last cut
    flow_bytes_counted: chex.Array  # (F,) int64 bytes sent since the last byte-counter event
    flow_alpha_timer_ps: chex.Array  # (F,) int64 next alpha update (NEVER: not armed)
    flow_decrease_timer_ps: chex.Array  # (F,) int64 next decrease check (NEVER: not armed)
    flow_increase_timer_ps: chex.Array  # (F,) int64 next rate-increase timer event (NEVER: not armed)
    flow_byte_event_ps: chex.Array  # (F,) int64 a byte-counter event pending since then (NEVER: none)
    flow_last_cnp_ps: chex.Array  # (F,) int64 receiver: when it last sent this flow a CNP
    flow_cnps_sent: chex.Array  # (F,) int32 receiver: CNPs sent to this flow


@struct.dataclass
class DctcpState:
    """DCTCP (``cc/dctcp.py``), a window-based sender driven by ECN echoes. All (F,)."""

    flow_alpha: chex.Array  # (F,) float64 estimated fraction of marked packets: a cut keeps 1 - alpha / 2
    flow_ssthresh_bytes: chex.Array  # (F,) float64 slow-start threshold (inf until the first cut)
    flow_in_cwr: chex.Array  # (F,) bool the window was already cut for this window of data
    flow_cwr_high_seq: chex.Array  # (F,) int32 CWR ends when the ACKs pass this packet count
    flow_acks_in_round: chex.Array  # (F,) int32 ACKs since the last alpha update
    flow_marks_in_round: chex.Array  # (F,) int32 ECN-echo ACKs since the last alpha update
    flow_round_end_seq: chex.Array  # (F,) int32 an ACK past this packet count ends alpha's round (a window of data)
    flow_started: chex.Array  # (F,) bool the first ACK has been seen (the first round only starts the count)


@struct.dataclass
class HpccState:
    """HPCC (``cc/hpcc.py``): window from in-band telemetry. (F,) unless noted; Hi = Static.int_hops."""

    flow_inflight_u: chex.Array  # (F,) float64 U: normalised inflight bytes, an EWMA over ACKs
    flow_ref_window_bytes: chex.Array  # (F,) float64 W_c: reference window the next windows start from
    flow_inc_stage: chex.Array  # (F,) int32 incStage: additive updates of W_c since the last multiplicative one
    flow_round_end_seq: chex.Array  # (F,) int32 lastUpdateSeq: an ACK past this packet count updates W_c (once per RTT)
    flow_has_int: chex.Array  # (F,) bool an earlier ACK's telemetry is stored (the first ACK only records it)
    flow_int_port: chex.Array  # (F, Hi) int32 last INT seen per hop: egress port (-1: none)
    flow_int_ts_ps: chex.Array  # (F, Hi) int64 its timestamp
    flow_int_tx_bytes: chex.Array  # (F, Hi) int64 its port's transmitted bytes
    flow_int_qlen_bytes: chex.Array  # (F, Hi) int64 its queue length


@struct.dataclass
class TimelyState:
    """TIMELY (``cc/timely.py``): rate from the RTT gradient, updated once per RTT. All (F,)."""

    flow_prev_rtt_ps: chex.Array  # (F,) int64 RTT sample of the last update
    flow_rtt_diff_ps: chex.Array  # (F,) float64 EWMA of the differences of successive RTT samples
    flow_increases: chex.Array  # (F,) int32 consecutive rate increases (hyper-active step from hai_after on)
    flow_round_end_seq: chex.Array  # (F,) int32 the next update comes when the ACKs pass this packet count
    flow_has_rtt: chex.Array  # (F,) bool an RTT sample is stored (the first sample only records it)


@struct.dataclass
class CcState:
    """Per-flow congestion-control state: what every algorithm shares, then each algorithm's
    own (only the experiment's ``cc_kind`` reads and writes it). G = GATE_ENTRIES."""

    flow_rate_bps: chex.Array  # (F,) float64 sending (pacing) rate; DCTCP keeps the line rate
    flow_window_bytes: chex.Array  # (F,) float64 congestion window of DCTCP and HPCC (0 for the others)
    flow_gate_allow_bytes: chex.Array  # (F, G) float64 bytes the flow may have sent from flow_gate_ps on (inf: none)
    flow_gate_ps: chex.Array  # (F, G) int64 when that allowance starts (NEVER: unused entry)
    flow_ecn_marked_packets: chex.Array  # (F,) int32 receiver: ECN-marked data packets delivered
    dcqcn: DcqcnState
    dctcp: DctcpState
    hpcc: HpccState
    timely: TimelyState


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

    def bps(mbps):
        return np.float64(mbps * 1e6)

    return CcParams(
        ecn_kmin_bytes=np.int64(sw.ecn_kmin_bytes),
        ecn_kmax_bytes=np.int64(sw.ecn_kmax_bytes),
        ecn_pmax=np.float64(sw.ecn_pmax),
        dcqcn_g=np.float64(d.g),
        dcqcn_alpha_timer_ps=ps_from_us(d.alpha_timer_us),
        dcqcn_decrease_interval_ps=ps_from_us(d.decrease_interval_us),
        dcqcn_increase_timer_ps=ps_from_us(d.increase_timer_us),
        dcqcn_byte_counter_bytes=np.int64(d.byte_counter_bytes),
        dcqcn_fast_recovery_steps=np.int32(d.fast_recovery_steps),
        dcqcn_rate_ai_bps=bps(d.rate_ai_mbps),
        dcqcn_rate_hai_bps=bps(d.rate_hai_mbps),
        dcqcn_min_rate_bps=bps(d.min_rate_mbps),
        dcqcn_cnp_interval_ps=ps_from_us(d.cnp_interval_us),
        dcqcn_rate_on_first_cnp=np.float64(d.rate_on_first_cnp),
        dctcp_g=np.float64(c.g),
        dctcp_init_window_bytes=np.float64(c.init_window_packets * exp.packet.payload_bytes),
        dctcp_min_window_bytes=np.float64(c.min_window_packets * exp.packet.payload_bytes),
        hpcc_eta=np.float64(h.eta),
        hpcc_max_stage=np.int32(h.max_stage),
        hpcc_w_ai_bytes=np.float64(h.rate_ai_mbps * 1e6 * rtt_ps / 1e12 / 8 if h.w_ai_bytes is None else h.w_ai_bytes),
        hpcc_base_rtt_ps=np.int64(rtt_ps),
        hpcc_min_rate_bps=bps(h.min_rate_mbps),
        hpcc_window_per_ack=np.bool_(h.window_update == HpccWindowUpdate.ack),
        hpcc_int_first=np.bool_(h.int_reference == HpccIntReference.first),
        hpcc_u_whole_rtt=np.bool_(h.u_update == HpccUUpdate.whole_rtt),
        hpcc_first_update=np.bool_(h.first_ack == HpccFirstAck.update),
        hpcc_int_queue_with_packet=np.bool_(h.int_queue == HpccIntQueue.with_packet),
        hpcc_window_capped=np.bool_(h.window_cap == HpccWindowCap.line_rate),
        hpcc_gate_whole_packet=np.bool_(h.window_gate == HpccWindowGate.whole_packet),
        hpcc_pacing_ticks=np.bool_(h.pacing == HpccPacing.ticks),
        timely_alpha=np.float64(t.alpha),
        timely_beta=np.float64(t.beta),
        timely_t_low_ps=ps_from_us(t.t_low_us),
        timely_t_high_ps=ps_from_us(t.t_high_us),
        timely_min_rtt_ps=ps_from_us(t.min_rtt_us),
        timely_rate_ai_bps=bps(t.rate_ai_mbps),
        timely_rate_hai_bps=bps(t.rate_hai_mbps),
        timely_hai_after=np.int32(t.hai_after),
        timely_min_rate_bps=bps(t.min_rate_mbps),
    )


def whole_packet_allowance(window_bytes, payload_bytes, xp=np):
    """The gate's allowance (bytes sent must stay below it) of a window that lets a packet go
    only if a full payload more fits (htsim: cwnd >= flight + mss): the smallest number above
    window - payload, so that sent < allowance iff sent + payload <= window."""
    return xp.nextafter(window_bytes - payload_bytes, xp.inf)


def initial_cc_state(exp: Experiment, cp: CcParams, line_rate_bps: np.ndarray, s: Static) -> CcState:
    """Initial state of ``s.n_flows`` flows (``line_rate_bps``: the real flows' NIC rates;
    padded flows get 1 b/s): line rate; DCTCP's initial window, HPCC's W = B T."""
    n = s.n_flows
    rate = np.ones(n)
    rate[: line_rate_bps.shape[0]] = line_rate_bps
    hpcc_window = rate * float(cp.hpcc_base_rtt_ps) / 1e12 / 8  # B x T
    if exp.hpcc.init_window_bytes is not None:
        hpcc_window = np.full(n, float(exp.hpcc.init_window_bytes))
    window = {"dctcp": np.full(n, float(cp.dctcp_init_window_bytes)), "hpcc": hpcc_window}.get(exp.cc, np.zeros(n))
    # The window gate starts open up to the initial window (no limit without one).
    gate_allow = np.full((n, GATE_ENTRIES), np.inf)
    gate_allow[:, 0] = window if exp.cc in ("dctcp", "hpcc") else np.inf
    if exp.cc == "hpcc" and exp.hpcc.window_gate == HpccWindowGate.whole_packet:
        gate_allow[:, 0] = whole_packet_allowance(window, exp.packet.payload_bytes)
    gate_ps = np.full((n, GATE_ENTRIES), NEVER, np.int64)
    gate_ps[:, 0] = 0
    return CcState(
        flow_rate_bps=rate,
        flow_window_bytes=window.astype(np.float64),
        flow_gate_allow_bytes=gate_allow,
        flow_gate_ps=gate_ps,
        flow_ecn_marked_packets=np.zeros(n, np.int32),
        dcqcn=_initial_dcqcn(rate, NEVER),
        dctcp=DctcpState(
            flow_alpha=np.ones(n),
            flow_ssthresh_bytes=np.full(n, np.inf),
            flow_in_cwr=np.zeros(n, bool),
            flow_cwr_high_seq=np.zeros(n, np.int32),
            flow_acks_in_round=np.zeros(n, np.int32),
            flow_marks_in_round=np.zeros(n, np.int32),
            flow_round_end_seq=np.zeros(n, np.int32),
            flow_started=np.zeros(n, bool),
        ),
        hpcc=_initial_hpcc(hpcc_window, s.int_hops),
        timely=TimelyState(
            flow_prev_rtt_ps=np.zeros(n, np.int64),
            flow_rtt_diff_ps=np.zeros(n, np.float64),
            flow_increases=np.zeros(n, np.int32),
            flow_round_end_seq=np.zeros(n, np.int32),
            flow_has_rtt=np.zeros(n, bool),
        ),
    )


def _initial_dcqcn(rate_bps: np.ndarray, never: int) -> DcqcnState:
    """Not rate limited: target = rate, alpha = 1, no timer armed, no CNP sent yet."""
    n = rate_bps.shape[0]
    return DcqcnState(
        flow_target_rate_bps=rate_bps.copy(),
        flow_alpha=np.ones(n),
        flow_cnp_seen_alpha=np.zeros(n, bool),
        flow_cnp_seen_decrease=np.zeros(n, bool),
        flow_rate_limited=np.zeros(n, bool),
        flow_timer_stage=np.zeros(n, np.int32),
        flow_byte_stage=np.zeros(n, np.int32),
        flow_bytes_counted=np.zeros(n, np.int64),
        flow_alpha_timer_ps=np.full(n, never, np.int64),
        flow_decrease_timer_ps=np.full(n, never, np.int64),
        flow_increase_timer_ps=np.full(n, never, np.int64),
        flow_byte_event_ps=np.full(n, never, np.int64),
        flow_last_cnp_ps=np.full(n, -(1 << 60), np.int64),  # long ago: the first marked packet gets a CNP
        flow_cnps_sent=np.zeros(n, np.int32),
    )


def _initial_hpcc(bdp_bytes: np.ndarray, int_hops: int) -> HpccState:
    """W_c = B T (the initial window), no telemetry seen yet."""
    n = bdp_bytes.shape[0]
    hops = (n, int_hops)
    return HpccState(
        flow_inflight_u=np.zeros(n, np.float64),
        flow_ref_window_bytes=bdp_bytes.astype(np.float64),
        flow_inc_stage=np.zeros(n, np.int32),
        flow_round_end_seq=np.zeros(n, np.int32),
        flow_has_int=np.zeros(n, bool),
        flow_int_port=np.full(hops, -1, np.int32),
        flow_int_ts_ps=np.zeros(hops, np.int64),
        flow_int_tx_bytes=np.zeros(hops, np.int64),
        flow_int_qlen_bytes=np.zeros(hops, np.int64),
    )
