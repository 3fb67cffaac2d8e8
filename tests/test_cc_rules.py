"""Congestion-control update rules against plain-Python references of the papers' equations.

Each rule of ``multiverse_jax.cc`` (DCQCN, DCTCP, HPCC, TIMELY) and a reference written
here from the equations summarised in the module docstrings -- Python floats and ints,
if/else, one flow at a time, no JAX -- are fed the same scripted ACK / CNP / timer /
send sequences, and every state field the rule owns must agree after every event (floats
to 1e-9 relative, integers and flags exactly). A few explicit cases also pin the numbers
by hand, so the references themselves are checked against the equations.

Every call uses the same shapes (F flows = F scenarios side by side, HI INT hops), so
each jitted rule compiles once for the whole file.
"""

from __future__ import annotations

import dataclasses
import math
import random
from types import SimpleNamespace

import jax
import numpy as np
import pytest

import multiverse_jax  # noqa: F401  (switches on 64-bit JAX)
from multiverse_jax.cc import dcqcn, dctcp, hpcc, timely
from multiverse_jax.cc.events import AckEvent
from multiverse_jax.components.cc import (
    GATE_ENTRIES,
    CcParams,
    CcState,
    DcqcnState,
    DctcpState,
    HpccState,
    TimelyState,
)

F = 6  # flows per call: scenarios run side by side as the flow axis
HI = 3  # INT hops per packet
NEVER = 2**63 - 1  # int64 max: a timer that is not armed
US = 1_000_000  # ps per µs
PS_PER_S = 1e12
LINE = 100e9  # sender NIC rate, b/s
MSS = 4096.0
REL = 1e-9

# --------------------------------------------------------------------------------------
# Building CcParams / CcState / AckEvent directly (engine units: ps, b/s, bytes)
# --------------------------------------------------------------------------------------

# name: (default, dtype) -- the defaults of cc/config.py in engine units.
PARAM_DEFAULTS = {
    "ecn_kmin_bytes": (5_000, np.int64),
    "ecn_kmax_bytes": (200_000, np.int64),
    "ecn_pmax": (0.01, np.float64),
    "dcqcn_g": (1 / 256, np.float64),
    "dcqcn_alpha_timer_ps": (1 * US, np.int64),
    "dcqcn_decrease_interval_ps": (4 * US, np.int64),
    "dcqcn_increase_timer_ps": (300 * US, np.int64),
    "dcqcn_byte_counter_bytes": (10_000_000, np.int64),
    "dcqcn_fast_recovery_steps": (1, np.int32),
    "dcqcn_rate_ai_bps": (20e6, np.float64),
    "dcqcn_rate_hai_bps": (200e6, np.float64),
    "dcqcn_min_rate_bps": (1e9, np.float64),
    "dcqcn_cnp_interval_ps": (4 * US, np.int64),
    "dcqcn_rate_on_first_cnp": (1.0, np.float64),
    "dctcp_g": (1 / 16, np.float64),
    "dctcp_init_window_bytes": (10 * MSS, np.float64),
    "dctcp_min_window_bytes": (MSS, np.float64),
    "hpcc_eta": (0.95, np.float64),
    "hpcc_max_stage": (5, np.int32),
    "hpcc_w_ai_bytes": (40e6 * 10e-6 / 8, np.float64),
    "hpcc_base_rtt_ps": (10 * US, np.int64),
    "hpcc_min_rate_bps": (1e9, np.float64),
    "hpcc_window_per_ack": (False, np.bool_),
    "hpcc_int_first": (False, np.bool_),
    "hpcc_u_whole_rtt": (False, np.bool_),
    "hpcc_first_update": (False, np.bool_),
    "hpcc_int_queue_with_packet": (False, np.bool_),
    "hpcc_window_capped": (True, np.bool_),
    "hpcc_gate_whole_packet": (False, np.bool_),
    "hpcc_pacing_ticks": (False, np.bool_),
    "timely_alpha": (0.875, np.float64),
    "timely_beta": (0.8, np.float64),
    "timely_t_low_ps": (50 * US, np.int64),
    "timely_t_high_ps": (500 * US, np.int64),
    "timely_min_rtt_ps": (20 * US, np.int64),
    "timely_rate_ai_bps": (100e6, np.float64),
    "timely_rate_hai_bps": (500e6, np.float64),
    "timely_hai_after": (5, np.int32),
    "timely_min_rate_bps": (1e9, np.float64),
}

# Per-flow state of one lane: name: (default, dtype). The fields every algorithm shares
# (CcState.flow_*) ...
SHARED_DEFAULTS = {
    "flow_rate_bps": (LINE, np.float64),
    "flow_window_bytes": (0.0, np.float64),
    "flow_ecn_marked_packets": (0, np.int32),
}
GATE_FIELDS = {"flow_gate_allow_bytes", "flow_gate_ps"}  # (F, GATE_ENTRIES), not per lane
# ... and each algorithm's own (CcState.<algorithm>.flow_*).
ALGO_DEFAULTS = {
    "dcqcn": {
        "flow_target_rate_bps": (LINE, np.float64),
        "flow_alpha": (1.0, np.float64),
        "flow_cnp_seen_alpha": (False, np.bool_),
        "flow_cnp_seen_decrease": (False, np.bool_),
        "flow_rate_limited": (False, np.bool_),
        "flow_timer_stage": (0, np.int32),
        "flow_byte_stage": (0, np.int32),
        "flow_bytes_counted": (0, np.int64),
        "flow_alpha_timer_ps": (NEVER, np.int64),
        "flow_decrease_timer_ps": (NEVER, np.int64),
        "flow_increase_timer_ps": (NEVER, np.int64),
        "flow_byte_event_ps": (NEVER, np.int64),
        "flow_last_cnp_ps": (-(1 << 60), np.int64),
        "flow_cnps_sent": (0, np.int32),
    },
    "dctcp": {
        "flow_alpha": (1.0, np.float64),
        "flow_ssthresh_bytes": (math.inf, np.float64),
        "flow_in_cwr": (False, np.bool_),
        "flow_cwr_high_seq": (0, np.int32),
        "flow_acks_in_round": (0, np.int32),
        "flow_marks_in_round": (0, np.int32),
        "flow_round_end_seq": (0, np.int32),
        "flow_started": (False, np.bool_),
    },
    "hpcc": {
        "flow_inflight_u": (0.0, np.float64),
        "flow_ref_window_bytes": (0.0, np.float64),
        "flow_inc_stage": (0, np.int32),
        "flow_round_end_seq": (0, np.int32),
        "flow_has_int": (False, np.bool_),
    },
    "timely": {
        "flow_prev_rtt_ps": (0, np.int64),
        "flow_rtt_diff_ps": (0.0, np.float64),
        "flow_increases": (0, np.int32),
        "flow_round_end_seq": (0, np.int32),
        "flow_has_rtt": (False, np.bool_),
    },
}
HOP_DEFAULTS = {  # HPCC's last INT per hop: (F, HI), one value per hop
    "flow_int_port": (-1, np.int32),
    "flow_int_ts_ps": (0, np.int64),
    "flow_int_tx_bytes": (0, np.int64),
    "flow_int_qlen_bytes": (0, np.int64),
}
STATE_CLASSES = {"dcqcn": DcqcnState, "dctcp": DctcpState, "hpcc": HpccState, "timely": TimelyState}


def make_params(**overrides):
    """(CcParams of () arrays, the same constants as Python numbers for the references)."""
    unknown = set(overrides) - set(PARAM_DEFAULTS)
    assert not unknown, unknown
    arrays, plain = {}, {}
    for name, (default, dtype) in PARAM_DEFAULTS.items():
        value = overrides.get(name, default)
        arrays[name] = np.asarray(value, dtype)
        plain[name] = int(value) if np.issubdtype(dtype, np.integer) else float(value)
    return CcParams(**arrays), SimpleNamespace(**plain)


def own_defaults(algo):
    """name: (default, dtype) of the fields of ``algo``'s own state; hop fields hold HI values."""
    hops = {name: ([default] * HI, dtype) for name, (default, dtype) in HOP_DEFAULTS.items()}
    return {**ALGO_DEFAULTS[algo], **(hops if algo == "hpcc" else {})}


def columns(defaults, lanes):
    """{name: array over the lanes}: each lane's value if it sets one, else the default."""
    return {
        name: np.array([lane.get(name, default) for lane in lanes], dtype)
        for name, (default, dtype) in defaults.items()
    }


def make_state(lanes=(), algo=None):
    """CcState of F flows at the defaults; lane i takes values from ``lanes[i]`` (a dict of
    shared fields and fields of the state of ``algo``)."""
    lanes = list(lanes) + [{}] * (F - len(lanes))
    known = set(SHARED_DEFAULTS) | (set(own_defaults(algo)) if algo else set())
    assert all(set(lane) <= known for lane in lanes), [set(lane) - known for lane in lanes]
    states = {
        name: cls(**columns(own_defaults(name), lanes if name == algo else [{}] * F))
        for name, cls in STATE_CLASSES.items()
    }
    return CcState(
        **columns(SHARED_DEFAULTS, lanes),
        flow_gate_allow_bytes=np.full((F, GATE_ENTRIES), np.inf),
        flow_gate_ps=np.full((F, GATE_ENTRIES), NEVER, np.int64),
        **states,
    )


def make_ack(**fields):
    """AckEvent of F flows: defaults, overridden by (F,) / (F, HI) lists or arrays."""
    default = {
        "time_ps": np.zeros(F, np.int64),
        "ece": np.zeros(F, bool),
        "cnp": np.zeros(F, bool),
        "acked_packets": np.zeros(F, np.int32),
        "sent_packets": np.zeros(F, np.int32),
        "data_sent_ps": np.zeros(F, np.int64),
        "line_rate_bps": np.full(F, LINE),
        "mss_bytes": np.float64(MSS),
        "int_port": np.full((F, HI), -1, np.int32),
        "int_ts_ps": np.zeros((F, HI), np.int64),
        "int_tx_bytes": np.zeros((F, HI), np.int64),
        "int_qlen_bytes": np.zeros((F, HI), np.int64),
        "int_rate_bps": np.full((F, HI), LINE),
    }
    for name, value in fields.items():
        default[name] = np.asarray(value, default[name].dtype).reshape(default[name].shape)
    return AckEvent(**default)


def pad(values, fill):
    """A list of per-lane values padded to F lanes."""
    return list(values) + [fill] * (F - len(values))


class Lane:
    """A reference flow of algorithm ALGO: attributes named as the fields it models, the
    shared ones (``CcState.flow_*``) and its own (``CcState.<ALGO>.flow_*``)."""

    ALGO = ""
    FIELDS: tuple = ()

    def __init__(self, **init):
        defaults = {**SHARED_DEFAULTS, **own_defaults(self.ALGO)}
        assert set(init) <= set(defaults), set(init) - set(defaults)
        for name, (default, _) in defaults.items():
            value = init.get(name, default)
            setattr(self, name, list(value) if name in HOP_DEFAULTS else value)
        self.log = []  # which branches this flow's updates took (coverage checks)


def check_lane(host, lane, ref, names, context="", rel=REL):
    """Library state (host copy) of ``lane`` equals the reference on ``names``."""
    own = getattr(host, ref.ALGO)
    for name in names:
        got = np.asarray(getattr(host if name in SHARED_DEFAULTS else own, name))[lane]
        want = getattr(ref, name)
        if isinstance(want, list):
            ok = [int(x) for x in got] == want
        elif isinstance(want, bool):
            ok = bool(got) == want
        elif isinstance(want, int):
            ok = int(got) == want
        else:
            ok = math.isclose(float(got), want, rel_tol=rel, abs_tol=1e-12)
        assert ok, f"{context} lane {lane} {name}: library {got!r}, reference {want!r}"


def check_lanes(state, refs, context="", rel=REL):
    host = jax.device_get(state)
    for lane, ref in enumerate(refs):
        check_lane(host, lane, ref, ref.FIELDS, context, rel)
    return host


def test_helpers_cover_every_field():
    """The builders above set every field of CcParams and CcState (each algorithm's state
    included)."""

    def names(cls):
        return {f.name for f in dataclasses.fields(cls)}

    assert set(PARAM_DEFAULTS) == names(CcParams)
    assert set(SHARED_DEFAULTS) | GATE_FIELDS | set(STATE_CLASSES) == names(CcState)
    for algo, cls in STATE_CLASSES.items():
        assert set(own_defaults(algo)) == names(cls), algo


# One compilation per rule for the whole file.
dcqcn_on_ack = jax.jit(dcqcn.on_ack)
dcqcn_on_timer = jax.jit(dcqcn.on_timer)
dcqcn_on_send = jax.jit(dcqcn.on_send)
dcqcn_next_timer = jax.jit(dcqcn.next_timer)
dctcp_on_ack = jax.jit(dctcp.on_ack)
hpcc_hop_utilisation = jax.jit(hpcc.hop_utilisation)
hpcc_measure_inflight = jax.jit(hpcc.measure_inflight)
hpcc_compute_window = jax.jit(hpcc.compute_window)
hpcc_on_ack = jax.jit(hpcc.on_ack)
timely_new_rate = jax.jit(timely.new_rate)
timely_on_ack = jax.jit(timely.on_ack)

# ======================================================================================
# DCQCN
# ======================================================================================

ALPHA, DECREASE, INCREASE, BYTES = dcqcn.TIMER_ALPHA, dcqcn.TIMER_DECREASE, dcqcn.TIMER_INCREASE, dcqcn.TIMER_BYTES
NO_TIMER = -1  # ``which`` of a flow whose timer does not fire in this call


class RefDcqcn(Lane):
    """The DCQCN reaction point of one flow (Zhu et al. 2015; Mellanox timers)."""

    ALGO = "dcqcn"
    FIELDS = (
        "flow_rate_bps",
        "flow_target_rate_bps",
        "flow_alpha",
        "flow_cnp_seen_alpha",
        "flow_cnp_seen_decrease",
        "flow_rate_limited",
        "flow_timer_stage",
        "flow_byte_stage",
        "flow_bytes_counted",
        "flow_alpha_timer_ps",
        "flow_decrease_timer_ps",
        "flow_increase_timer_ps",
        "flow_byte_event_ps",
    )

    def ack(self, p, t, cnp):
        if not cnp:
            return  # DCQCN only reads the CNP flag
        if not self.flow_rate_limited:  # first CNP
            self.flow_rate_limited = True
            self.flow_rate_bps = self.flow_rate_bps * p.dcqcn_rate_on_first_cnp
            self.flow_target_rate_bps = self.flow_rate_bps
            self.flow_alpha = 1.0
            self.flow_cnp_seen_alpha = False  # alpha starts at 1: this CNP is already in it
            self.flow_cnp_seen_decrease = True  # the first decrease check cuts
            self.flow_alpha_timer_ps = t + p.dcqcn_alpha_timer_ps
            self.flow_decrease_timer_ps = t + p.dcqcn_decrease_interval_ps
            self.log.append("first")
        else:
            self.flow_cnp_seen_alpha = True
            self.flow_cnp_seen_decrease = True

    def next_timer(self):
        """(time, which) of the next timer; ties: alpha, decrease, increase, bytes."""
        best_t, best_w = NEVER, ALPHA
        for t, w in (
            (self.flow_alpha_timer_ps, ALPHA),
            (self.flow_decrease_timer_ps, DECREASE),
            (self.flow_increase_timer_ps, INCREASE),
            (self.flow_byte_event_ps, BYTES),
        ):
            if t < best_t:
                best_t, best_w = t, w
        return best_t, best_w

    def _increase(self, p, line):
        f = p.dcqcn_fast_recovery_steps
        t_stage, b_stage = self.flow_timer_stage, self.flow_byte_stage
        if t_stage < f and b_stage < f:
            self.log.append("fr")  # fast recovery: target unchanged
        elif t_stage > f and b_stage > f:
            self.flow_target_rate_bps += p.dcqcn_rate_hai_bps
            self.log.append("hai")
        else:
            self.flow_target_rate_bps += p.dcqcn_rate_ai_bps
            self.log.append("ai")
        if self.flow_target_rate_bps > line:
            self.flow_target_rate_bps = line
            self.log.append("cap")
        self.flow_rate_bps = (self.flow_rate_bps + self.flow_target_rate_bps) / 2

    def timer(self, p, t, which, line):
        if which == ALPHA:
            g = p.dcqcn_g
            self.flow_alpha = (1 - g) * self.flow_alpha + (g if self.flow_cnp_seen_alpha else 0.0)
            self.flow_cnp_seen_alpha = False
            self.flow_alpha_timer_ps = t + p.dcqcn_alpha_timer_ps
        elif which == DECREASE:
            self.flow_decrease_timer_ps = t + p.dcqcn_decrease_interval_ps
            if self.flow_cnp_seen_decrease:
                if self.flow_timer_stage != 0 or self.flow_byte_stage != 0:  # an increase since the last cut
                    self.flow_target_rate_bps = self.flow_rate_bps
                    self.log.append("clamp")
                self.flow_rate_bps = self.flow_rate_bps * (1 - self.flow_alpha / 2)
                if self.flow_rate_bps < p.dcqcn_min_rate_bps:
                    self.flow_rate_bps = p.dcqcn_min_rate_bps
                    self.log.append("min")
                self.flow_timer_stage = self.flow_byte_stage = 0
                self.flow_bytes_counted = 0
                self.flow_byte_event_ps = NEVER
                self.flow_increase_timer_ps = t + p.dcqcn_increase_timer_ps
                self.log.append("cut")
            self.flow_cnp_seen_decrease = False
        elif which == INCREASE:
            self._increase(p, line)
            self.flow_timer_stage += 1
            self.flow_increase_timer_ps = t + p.dcqcn_increase_timer_ps
        elif which == BYTES:
            self._increase(p, line)
            self.flow_byte_stage += 1
            self.flow_byte_event_ps = NEVER

    def send(self, p, t, wire_bytes):
        if not self.flow_rate_limited:
            return
        self.flow_bytes_counted += wire_bytes
        if self.flow_bytes_counted >= p.dcqcn_byte_counter_bytes:
            self.flow_bytes_counted -= p.dcqcn_byte_counter_bytes
            self.flow_byte_event_ps = min(self.flow_byte_event_ps, t)


def dcqcn_setup(lanes, **param_overrides):
    cp, p = make_params(**param_overrides)
    return cp, p, make_state(lanes, "dcqcn"), [RefDcqcn(**lane) for lane in pad(lanes, {})]


def test_dcqcn_first_cnp():
    cp, p, st, refs = dcqcn_setup(
        [
            {"flow_rate_bps": 80e9, "flow_target_rate_bps": 80e9, "flow_alpha": 0.25},  # first CNP
            {  # already rate limited: a CNP only sets the flags
                "flow_rate_bps": 40e9,
                "flow_target_rate_bps": 60e9,
                "flow_alpha": 0.3,
                "flow_rate_limited": True,
                "flow_alpha_timer_ps": 5 * US,
                "flow_decrease_timer_ps": 6 * US,
                "flow_increase_timer_ps": 9 * US,
            },
            {"flow_rate_bps": 70e9},  # an ACK without CNP: nothing
        ],
        dcqcn_rate_on_first_cnp=0.5,
        dcqcn_alpha_timer_ps=7 * US,
        dcqcn_decrease_interval_ps=11 * US,
    )
    t = 3 * US
    cnp = pad([True, True, False], False)
    st = dcqcn_on_ack(cp, st, make_ack(time_ps=[t] * F, cnp=cnp))
    for ref, c in zip(refs, cnp):
        ref.ack(p, t, c)
    host = check_lanes(st, refs, "first CNP")
    # by hand
    assert host.flow_rate_bps[0] == host.dcqcn.flow_target_rate_bps[0] == 40e9
    assert host.dcqcn.flow_alpha[0] == 1.0 and host.dcqcn.flow_rate_limited[0]
    assert host.dcqcn.flow_alpha_timer_ps[0] == 10 * US and host.dcqcn.flow_decrease_timer_ps[0] == 14 * US
    assert host.dcqcn.flow_increase_timer_ps[0] == NEVER and host.dcqcn.flow_byte_event_ps[0] == NEVER
    assert not host.dcqcn.flow_cnp_seen_alpha[0] and host.dcqcn.flow_cnp_seen_decrease[0]
    assert (host.flow_rate_bps[1], host.dcqcn.flow_target_rate_bps[1], host.dcqcn.flow_alpha[1]) == (40e9, 60e9, 0.3)
    assert host.dcqcn.flow_cnp_seen_alpha[1] and host.dcqcn.flow_cnp_seen_decrease[1]
    assert (host.dcqcn.flow_alpha_timer_ps[1], host.dcqcn.flow_decrease_timer_ps[1]) == (5 * US, 6 * US)
    assert host.flow_rate_bps[2] == 70e9 and not host.dcqcn.flow_rate_limited[2]
    assert host.dcqcn.flow_alpha_timer_ps[2] == NEVER


def _fire(cp, p, st, refs, t, which, line=LINE):
    """Fire timer ``which[i]`` of lane i at ``t[i]`` in the library and the references."""
    st = dcqcn_on_timer(cp, st, np.asarray(t, np.int64), np.asarray(which, np.int32), np.full(F, line))
    for ref, ti, w in zip(refs, t, which):
        if w != NO_TIMER:
            ref.timer(p, int(ti), int(w), line)
    return st


def test_dcqcn_alpha_timer():
    limited = {"flow_rate_limited": True, "flow_rate_bps": 30e9, "flow_target_rate_bps": 50e9, "flow_alpha": 0.5}
    cp, p, st, refs = dcqcn_setup(
        [
            {**limited, "flow_cnp_seen_alpha": True},
            {**limited, "flow_cnp_seen_alpha": False},
            {**limited, "flow_cnp_seen_alpha": False, "flow_cnp_seen_decrease": True},  # no cut from the alpha timer
            {**limited, "flow_cnp_seen_alpha": True},  # its alpha timer does not fire
        ],
        dcqcn_g=1 / 16,
        dcqcn_alpha_timer_ps=2 * US,
    )
    t = pad([10 * US] * 4, 0)
    st = _fire(cp, p, st, refs, t, pad([ALPHA, ALPHA, ALPHA, NO_TIMER], NO_TIMER))
    host = check_lanes(st, refs, "alpha timer")
    assert host.dcqcn.flow_alpha[0] == pytest.approx(15 / 16 * 0.5 + 1 / 16, rel=REL)
    assert host.dcqcn.flow_alpha[1] == pytest.approx(15 / 16 * 0.5, rel=REL)
    assert host.dcqcn.flow_alpha[2] == pytest.approx(15 / 16 * 0.5, rel=REL) and host.flow_rate_bps[2] == 30e9
    assert host.dcqcn.flow_cnp_seen_decrease[2]
    assert host.dcqcn.flow_alpha[3] == 0.5 and host.dcqcn.flow_cnp_seen_alpha[3]
    assert list(host.dcqcn.flow_alpha_timer_ps[:4]) == [12 * US, 12 * US, 12 * US, NEVER]
    assert not host.dcqcn.flow_cnp_seen_alpha[0]


def test_dcqcn_decrease_check():
    base = {"flow_rate_limited": True, "flow_rate_bps": 40e9, "flow_target_rate_bps": 90e9, "flow_alpha": 0.5}
    cp, p, st, refs = dcqcn_setup(
        [
            {**base, "flow_cnp_seen_decrease": True},  # cut, no clamp right after a cut
            {**base, "flow_cnp_seen_decrease": True, "flow_timer_stage": 2, "flow_byte_stage": 1},  # clamp target
            {**base, "flow_cnp_seen_decrease": True, "flow_byte_stage": 1},  # a byte event also clamps
            {  # no CNP
                **base,
                "flow_cnp_seen_decrease": False,
                "flow_timer_stage": 3,
                "flow_increase_timer_ps": 50 * US,
            },
            {**base, "flow_cnp_seen_decrease": True, "flow_alpha": 1.0, "flow_rate_bps": 1.5e9},  # floor at min rate
            {  # a cut clears the byte counter and a pending byte event, restarts the increase timer
                **base,
                "flow_cnp_seen_decrease": True,
                "flow_bytes_counted": 123,
                "flow_byte_event_ps": 19 * US,
                "flow_increase_timer_ps": 21 * US,
                "flow_cnp_seen_alpha": True,
            },
        ],
        dcqcn_decrease_interval_ps=4 * US,
        dcqcn_increase_timer_ps=30 * US,
        dcqcn_min_rate_bps=1e9,
    )
    t = [20 * US] * F
    st = _fire(cp, p, st, refs, t, [DECREASE] * F)
    host = check_lanes(st, refs, "decrease check")
    cut = 40e9 * 0.75
    assert list(host.flow_rate_bps) == pytest.approx([cut, cut, cut, 40e9, 1e9, cut], rel=REL)
    assert list(host.dcqcn.flow_target_rate_bps) == pytest.approx([90e9, 40e9, 40e9, 90e9, 90e9, 90e9], rel=REL)
    assert list(host.dcqcn.flow_timer_stage) == [0, 0, 0, 3, 0, 0] and list(host.dcqcn.flow_byte_stage) == [0] * F
    assert list(host.dcqcn.flow_decrease_timer_ps) == [24 * US] * F
    assert list(host.dcqcn.flow_increase_timer_ps) == [50 * US, 50 * US, 50 * US, 50 * US, 50 * US, 50 * US]
    assert host.dcqcn.flow_bytes_counted[5] == 0 and host.dcqcn.flow_byte_event_ps[5] == NEVER
    assert not host.dcqcn.flow_cnp_seen_decrease.any() and host.dcqcn.flow_cnp_seen_alpha[5]


def test_dcqcn_increase_phases():
    """Fast recovery while both stages < F, hyper increase once both > F, else additive."""
    base = {"flow_rate_limited": True, "flow_rate_bps": 20e9, "flow_target_rate_bps": 60e9}
    lanes = [
        ({**base, "flow_timer_stage": 0, "flow_byte_stage": 0}, INCREASE),  # fast recovery
        ({**base, "flow_timer_stage": 2, "flow_byte_stage": 0}, INCREASE),  # timer at F: additive
        ({**base, "flow_timer_stage": 3, "flow_byte_stage": 1}, BYTES),  # one above F: additive
        ({**base, "flow_timer_stage": 3, "flow_byte_stage": 3}, INCREASE),  # both above F: hyper
        ({**base, "flow_timer_stage": 3, "flow_byte_stage": 2}, BYTES),  # byte stage at F: additive
        ({**base, "flow_timer_stage": 5, "flow_byte_stage": 4, "flow_target_rate_bps": 95e9}, INCREASE),  # capped
    ]
    cp, p, st, refs = dcqcn_setup(
        [lane for lane, _ in lanes],
        dcqcn_fast_recovery_steps=2,
        dcqcn_rate_ai_bps=5e9,
        dcqcn_rate_hai_bps=20e9,
        dcqcn_increase_timer_ps=30 * US,
    )
    st = _fire(cp, p, st, refs, [100 * US] * F, [w for _, w in lanes])
    host = check_lanes(st, refs, "increase")
    targets = [60e9, 65e9, 65e9, 80e9, 65e9, LINE]
    assert list(host.dcqcn.flow_target_rate_bps) == pytest.approx(targets, rel=REL)
    assert list(host.flow_rate_bps) == pytest.approx([(20e9 + x) / 2 for x in targets], rel=REL)
    assert list(host.dcqcn.flow_timer_stage) == [1, 3, 3, 4, 3, 6]
    assert list(host.dcqcn.flow_byte_stage) == [0, 0, 2, 3, 3, 4]
    assert list(host.dcqcn.flow_increase_timer_ps) == [130 * US, 130 * US, NEVER, 130 * US, NEVER, 130 * US]


def test_dcqcn_byte_counter():
    cp, p, st, refs = dcqcn_setup(
        [
            {"flow_rate_limited": False, "flow_bytes_counted": 0},  # not rate limited: nothing counted
            {"flow_rate_limited": True, "flow_bytes_counted": 1_000},  # below the counter
            {"flow_rate_limited": True, "flow_bytes_counted": 8_000},  # crosses it: event at the send
            {  # earlier event kept
                "flow_rate_limited": True,
                "flow_bytes_counted": 9_000,
                "flow_byte_event_ps": 3 * US,
            },
            {"flow_rate_limited": True, "flow_bytes_counted": 9_999},  # did not send
            {"flow_rate_limited": True, "flow_bytes_counted": 5_904},  # reaches it exactly
        ],
        dcqcn_byte_counter_bytes=10_000,
    )
    sent = [True, True, True, True, False, True]
    t, wire = [7 * US] * F, [4_096] * F
    counted = dcqcn_on_send(cp, st.dcqcn, np.asarray(sent), np.asarray(wire, np.int64), np.asarray(t, np.int64))
    st = st.replace(dcqcn=counted)
    for ref, s, ti, w in zip(refs, sent, t, wire):
        if s:
            ref.send(p, ti, w)
    host = check_lanes(st, refs, "byte counter")
    assert list(host.dcqcn.flow_bytes_counted) == [0, 5_096, 2_096, 3_096, 9_999, 0]
    assert list(host.dcqcn.flow_byte_event_ps) == [NEVER, NEVER, 7 * US, 3 * US, NEVER, 7 * US]


def test_dcqcn_next_timer_order():
    lanes = [
        {"flow_alpha_timer_ps": 5, "flow_decrease_timer_ps": 5, "flow_increase_timer_ps": 5, "flow_byte_event_ps": 5},
        {"flow_alpha_timer_ps": 7, "flow_decrease_timer_ps": 5, "flow_increase_timer_ps": 5, "flow_byte_event_ps": 5},
        {"flow_alpha_timer_ps": 7, "flow_decrease_timer_ps": 8, "flow_increase_timer_ps": 3, "flow_byte_event_ps": 3},
        {"flow_alpha_timer_ps": 7, "flow_decrease_timer_ps": 8, "flow_increase_timer_ps": 9, "flow_byte_event_ps": 2},
        {},  # nothing armed
        {"flow_alpha_timer_ps": 9, "flow_decrease_timer_ps": 4},
    ]
    t, which = jax.device_get(dcqcn_next_timer(make_state(lanes, "dcqcn").dcqcn))
    assert list(t) == [5, 5, 3, 2, NEVER, 4]
    assert list(which[:4]) == [ALPHA, DECREASE, INCREASE, BYTES] and which[5] == DECREASE
    for lane, ti, w in zip(lanes, t, which):
        ref_t, ref_w = RefDcqcn(**lane).next_timer()
        assert ref_t == ti and (ref_t == NEVER or ref_w == w)


def run_dcqcn_script(scripts, t_end_ps, **param_overrides):
    """Each lane: a time-sorted list of (t, "ack", cnp) / (t, "send", wire bytes); timers
    fire when due (an external event first at equal times, as the engine orders an ACK
    and a timer). Checks library == reference after every event; returns the references."""
    cp, p, st, refs = dcqcn_setup([], **param_overrides)
    scripts = [sorted(s) for s in pad(scripts, [])]
    pos = [0] * F
    line = np.full(F, LINE)
    for step in range(10_000):
        t_lib, which_lib = jax.device_get(dcqcn_next_timer(st.dcqcn))
        ack_t, cnp = np.zeros(F, np.int64), np.zeros(F, bool)
        timer_t, which = np.zeros(F, np.int64), np.full(F, NO_TIMER, np.int32)
        sent, wire, send_t = np.zeros(F, bool), np.zeros(F, np.int64), np.zeros(F, np.int64)
        busy = False
        for lane, ref in enumerate(refs):
            t_timer, w = ref.next_timer()
            assert t_lib[lane] == t_timer, f"step {step} lane {lane}: next timer"
            if t_timer != NEVER:
                assert which_lib[lane] == w, f"step {step} lane {lane}: which timer"
            t_ext = scripts[lane][pos[lane]][0] if pos[lane] < len(scripts[lane]) else NEVER
            if min(t_ext, t_timer) > t_end_ps:
                continue
            busy = True
            if t_ext <= t_timer:
                t, kind, value = scripts[lane][pos[lane]]
                pos[lane] += 1
                if kind == "ack":
                    ack_t[lane], cnp[lane] = t, value
                    ref.ack(p, t, value)
                else:
                    sent[lane], wire[lane], send_t[lane] = True, value, t
                    ref.send(p, t, value)
            else:
                timer_t[lane], which[lane] = t_timer, w
                ref.timer(p, t_timer, w, LINE)
        if not busy:
            return refs
        st = dcqcn_on_ack(cp, st, make_ack(time_ps=ack_t, cnp=cnp))
        st = dcqcn_on_timer(cp, st, timer_t, which, line)
        st = st.replace(dcqcn=dcqcn_on_send(cp, st.dcqcn, sent, wire, send_t))
        check_lanes(st, refs, f"step {step}")
    raise AssertionError("script did not end")


def test_dcqcn_scripted_run():
    """CNPs, alpha timers, decrease checks, increase timer and byte counter mixed: fast
    recovery -> additive -> hyper increase up to the line rate."""
    cnp = lambda *us: [(t * US, "ack", True) for t in us]  # noqa: E731
    ack = lambda *us: [(t * US, "ack", False) for t in us]  # noqa: E731
    send = lambda wire, us: [(t * US, "send", wire) for t in us]  # noqa: E731
    scripts = [
        # 0: CNPs and cuts, then sends drive the byte counter beside the increase timer
        cnp(2, 15, 33, 61) + ack(5, 100) + send(25_000, range(70, 251, 8)),
        # 1: a CNP after increase events (clamps the target)
        cnp(2, 100) + send(20_000, range(0, 251, 10)),
        # 2: one CNP, no sends: timer-only increases never reach hyper increase
        cnp(5),
        # 3: no CNP: no timers, sends not counted
        send(20_000, range(0, 251, 10)),
        # 4: CNPs all along: rate down to the minimum
        cnp(*range(1, 200, 3)),
        # 5: CNPs at the very times of timers (ACK first; alpha before decrease)
        cnp(0, 25, 50, 150) + send(30_000, [150, 160, 170, 180, 190, 200, 210]),
    ]
    refs = run_dcqcn_script(
        scripts,
        260 * US,
        dcqcn_g=1 / 16,
        dcqcn_alpha_timer_ps=10 * US,
        dcqcn_decrease_interval_ps=25 * US,
        dcqcn_increase_timer_ps=30 * US,
        dcqcn_byte_counter_bytes=60_000,
        dcqcn_fast_recovery_steps=2,
        dcqcn_rate_ai_bps=5e9,
        dcqcn_rate_hai_bps=20e9,
        dcqcn_min_rate_bps=1e9,
        dcqcn_rate_on_first_cnp=0.8,
    )
    # The scenarios reached what they are for.
    log = refs[0].log
    assert {"first", "cut", "fr", "ai", "hai", "cap"} <= set(log)
    assert log.index("fr") < log.index("ai") < log.index("hai")
    assert refs[0].flow_target_rate_bps == LINE and refs[0].flow_byte_stage > 2 and refs[0].flow_timer_stage > 2
    assert "clamp" in refs[1].log
    assert "ai" in refs[2].log and "hai" not in refs[2].log and refs[2].flow_byte_stage == 0
    assert refs[3].flow_rate_bps == LINE and refs[3].flow_bytes_counted == 0 and refs[3].flow_alpha_timer_ps == NEVER
    assert refs[4].log.count("min") >= 2 and refs[4].log[-1] == "fr"  # floored, then recovering
    assert refs[5].log.count("cut") >= 3 and "fr" in refs[5].log
    assert sum(len(r.log) for r in refs) > 30


# ======================================================================================
# DCTCP
# ======================================================================================


# F = marks / acks must be float64 (int32 / int32 is float32 in JAX even with 64-bit mode
# on); test_dctcp_mark_fraction_is_float64 pins it.
DCTCP_REL = REL


class RefDctcp(Lane):
    """A DCTCP sender (Alizadeh et al. 2010), per ACK."""

    ALGO = "dctcp"
    FIELDS = (
        "flow_alpha",
        "flow_window_bytes",
        "flow_ssthresh_bytes",
        "flow_in_cwr",
        "flow_cwr_high_seq",
        "flow_acks_in_round",
        "flow_marks_in_round",
        "flow_round_end_seq",
        "flow_started",
    )

    def ack(self, p, acked, sent, ece, mss):
        # 1. alpha once per window of data; the first window only starts the count
        self.flow_acks_in_round += 1
        self.flow_marks_in_round += 1 if ece else 0
        if acked > self.flow_round_end_seq:
            if self.flow_started:
                fraction = min(1.0, self.flow_marks_in_round / self.flow_acks_in_round)
                self.flow_alpha = (1 - p.dctcp_g) * self.flow_alpha + p.dctcp_g * fraction
                self.log.append("alpha")
            self.flow_acks_in_round = self.flow_marks_in_round = 0
            self.flow_round_end_seq = sent
        self.flow_started = True
        # 2. leave CWR once the ACKs pass what was sent at the cut
        if self.flow_in_cwr and acked > self.flow_cwr_high_seq:
            self.flow_in_cwr = False
        # 3. one cut per window of data
        if ece and not self.flow_in_cwr:
            self.flow_window_bytes = self.flow_window_bytes * (1 - self.flow_alpha / 2)
            if self.flow_window_bytes < p.dctcp_min_window_bytes:
                self.flow_window_bytes = p.dctcp_min_window_bytes
                self.log.append("min")
            self.flow_ssthresh_bytes = self.flow_window_bytes
            self.flow_in_cwr = True
            self.flow_cwr_high_seq = sent
            self.log.append("cut")
        # 4. TCP growth outside CWR
        elif not self.flow_in_cwr:
            if self.flow_window_bytes < self.flow_ssthresh_bytes:
                self.flow_window_bytes += mss
                self.log.append("ss")
            else:
                self.flow_window_bytes += mss * mss / self.flow_window_bytes
                self.log.append("ca")


def run_dctcp(lanes, acks, **param_overrides):
    """``acks[i]``: lane i's ACKs as (acked, sent, ece). Checks after every ACK."""
    cp, p = make_params(**param_overrides)
    st, refs = make_state(lanes, "dctcp"), [RefDctcp(**lane) for lane in pad(lanes, {})]
    acks = pad(acks, [])
    for step in range(max(len(a) for a in acks)):
        acked, sent, ece = np.zeros(F, np.int32), np.zeros(F, np.int32), np.zeros(F, bool)
        has = [step < len(a) for a in acks]
        for lane in range(F):
            if has[lane]:
                acked[lane], sent[lane], ece[lane] = acks[lane][step]
                refs[lane].ack(p, int(acked[lane]), int(sent[lane]), bool(ece[lane]), MSS)
        new = dctcp_on_ack(cp, st, make_ack(acked_packets=acked, sent_packets=sent, ece=ece))
        st = jax.tree.map(lambda n, o: np.where(np.reshape(has, (F,) + (1,) * (n.ndim - 1)), n, o), new, st)
        check_lanes(st, refs, f"ACK {step}", rel=DCTCP_REL)
    return jax.device_get(st), refs


def test_dctcp_alpha_once_per_window():
    """First window only starts the count; then alpha = (1-g) alpha + g marks/acks once
    the ACKs pass the sequence sent at the last update."""
    w = 10 * MSS
    lane = {"flow_alpha": 0.5, "flow_window_bytes": w}
    marks = {3, 7}
    # ACK 1 ends the first "round" (sent 10); ACKs 2..11 are the next window of data.
    acks = [(k, 10 if k <= 10 else 20, k in marks) for k in range(1, 12)]
    host, refs = run_dctcp([lane], [acks[:1]], dctcp_g=1 / 16)
    assert host.dctcp.flow_alpha[0] == 0.5 and host.dctcp.flow_round_end_seq[0] == 10 and host.dctcp.flow_started[0]
    assert host.dctcp.flow_acks_in_round[0] == 0 and host.dctcp.flow_marks_in_round[0] == 0
    host, refs = run_dctcp([lane], [acks[:10]], dctcp_g=1 / 16)
    assert host.dctcp.flow_alpha[0] == 0.5
    assert host.dctcp.flow_acks_in_round[0] == 9 and host.dctcp.flow_marks_in_round[0] == 2
    host, refs = run_dctcp([lane], [acks], dctcp_g=1 / 16)
    assert host.dctcp.flow_alpha[0] == pytest.approx(15 / 16 * 0.5 + 1 / 16 * 2 / 10, rel=REL)
    assert host.dctcp.flow_round_end_seq[0] == 20 and host.dctcp.flow_acks_in_round[0] == 0
    # slow start on ACKs 1-2, the mark of ACK 3 cut the window with alpha = 0.5 (once:
    # CWR holds it through ACK 10); ACK 11 passes the cut's snd_nxt and grows it (CA)
    cut = (w + 2 * MSS) * 0.75
    assert host.flow_window_bytes[0] == pytest.approx(cut + MSS * MSS / cut, rel=REL)
    assert host.dctcp.flow_ssthresh_bytes[0] == pytest.approx(cut, rel=REL)
    assert not host.dctcp.flow_in_cwr[0] and host.dctcp.flow_cwr_high_seq[0] == 10 and refs[0].log.count("cut") == 1


def test_dctcp_mark_fraction_is_float64():
    """alpha = (1 - g) alpha + g F with F = marks / acks, in float64 like the rest of the state."""
    cp, p = make_params(dctcp_g=0.5)
    base = {"flow_window_bytes": 10 * MSS, "flow_alpha": 0.0, "flow_started": True, "flow_round_end_seq": 5}
    lanes = [  # a round ends at this ACK: 1 mark in 3 ACKs, 6 in 11 (this unmarked one included)
        {**base, "flow_acks_in_round": 2, "flow_marks_in_round": 1},
        {**base, "flow_acks_in_round": 10, "flow_marks_in_round": 6},
    ]
    st, refs = make_state(lanes, "dctcp"), [RefDctcp(**lane) for lane in pad(lanes, {})]
    ev = make_ack(acked_packets=[6] * F, sent_packets=[12] * F)
    st = dctcp_on_ack(cp, st, ev)
    for ref in refs:
        ref.ack(p, 6, 12, False, MSS)
    host = check_lanes(st, refs, "DCTCP fraction")
    assert host.dctcp.flow_alpha[0] == pytest.approx(0.5 / 3, rel=REL)
    assert host.dctcp.flow_alpha[1] == pytest.approx(0.5 * 6 / 11, rel=REL)


def test_dctcp_cut_once_per_window_and_growth():
    w = 10 * MSS
    all_marked = [(k, 10 if k <= 10 else 20, True) for k in range(1, 12)]
    marked_then_clean = [(k, 10 if k <= 10 else 20, k == 1) for k in range(1, 12)]
    lanes = [
        {"flow_window_bytes": w},  # alpha 1: halves once per window
        {"flow_window_bytes": w},  # one mark, then CWR ends at ACK 11 and CA growth resumes
        {"flow_window_bytes": w},  # slow start: + MSS per ACK
        {"flow_window_bytes": w, "flow_ssthresh_bytes": 5 * MSS},  # congestion avoidance
        {"flow_window_bytes": 1.2 * MSS},  # the cut stops at the minimum window
    ]
    clean = [(k, 10, False) for k in range(1, 4)]
    host, refs = run_dctcp(
        lanes,
        [all_marked, marked_then_clean, clean, clean, [(1, 10, True)]],
        dctcp_g=1 / 16,
    )
    assert host.flow_window_bytes[0] == pytest.approx(w / 4, rel=REL) and refs[0].log.count("cut") == 2
    assert host.dctcp.flow_ssthresh_bytes[0] == pytest.approx(w / 4, rel=REL) and host.dctcp.flow_cwr_high_seq[0] == 20
    assert host.flow_window_bytes[1] == pytest.approx(w / 2 + MSS * MSS / (w / 2), rel=REL)
    assert not host.dctcp.flow_in_cwr[1]
    assert host.flow_window_bytes[2] == pytest.approx(w + 3 * MSS, rel=REL)
    ca = w
    for _ in range(3):
        ca += MSS * MSS / ca
    assert host.flow_window_bytes[3] == pytest.approx(ca, rel=REL)
    assert host.flow_window_bytes[4] == MSS and host.dctcp.flow_ssthresh_bytes[4] == MSS


def test_dctcp_scripted_acks():
    """~50 ACKs per flow, marks in various patterns; the sender's snd_nxt is acked plus
    the window in packets (from the reference), so rounds follow the window."""
    rng = random.Random(7)
    n = 50
    mark_patterns = [
        [False] * n,  # slow start only
        [k in (6, 7, 8, 30) for k in range(n)],  # a burst, then one more
        [True] * n,  # every packet marked: alpha -> 1, window -> minimum
        [rng.random() < 0.3 for _ in range(n)],
        [rng.random() < 0.1 for _ in range(n)],
        [(k // 10) % 2 == 1 for k in range(n)],  # alternating marked windows
    ]
    lanes = [{"flow_window_bytes": 10 * MSS, "flow_alpha": a} for a in (1.0, 0.0, 1.0, 0.5, 0.2, 0.0)]
    lanes[4]["flow_ssthresh_bytes"] = 14 * MSS
    cp, p = make_params(dctcp_g=1 / 16, dctcp_min_window_bytes=2 * MSS)
    st, refs = make_state(lanes, "dctcp"), [RefDctcp(**lane) for lane in lanes]
    for step in range(n):
        acked = np.full(F, step + 1, np.int32)
        sent = np.array([step + 1 + int(r.flow_window_bytes // MSS) for r in refs], np.int32)
        ece = np.array([m[step] for m in mark_patterns])
        for lane, ref in enumerate(refs):
            ref.ack(p, int(acked[lane]), int(sent[lane]), bool(ece[lane]), MSS)
        st = dctcp_on_ack(cp, st, make_ack(acked_packets=acked, sent_packets=sent, ece=ece))
        check_lanes(st, refs, f"ACK {step}", rel=DCTCP_REL)
    logs = [set(r.log) for r in refs]
    assert logs[0] == {"ss", "alpha"}  # no marks: no cut, alpha decays once per window
    assert refs[0].log.count("alpha") >= 2
    assert refs[0].flow_alpha == pytest.approx((15 / 16) ** refs[0].log.count("alpha"), rel=REL)
    assert {"cut", "alpha", "ca"} <= logs[1]
    assert "min" in logs[2]
    assert {"cut", "alpha", "ca"} <= logs[3] and {"ca"} <= logs[4]
    assert sum(r.log.count("alpha") for r in refs) >= 15


# ======================================================================================
# HPCC
# ======================================================================================


def ref_hop_utilisation(now, prev, base_rtt_ps):
    """u' of one hop (None if unusable) and its delta-ts. ``now``/``prev``:
    (port, ts_ps, tx_bytes, qlen_bytes[, rate_bps])."""
    port, ts, tx, qlen, rate = now
    p_port, p_ts, p_tx, p_qlen = prev[:4]
    dt = ts - p_ts
    if port < 0 or port != p_port or dt <= 0:
        return None, dt
    tx_rate = (tx - p_tx) * 8.0 / (dt / PS_PER_S)
    u = min(qlen, p_qlen) * 8.0 / (rate * base_rtt_ps / PS_PER_S) + tx_rate / rate
    return u, dt


def ref_measure_inflight(u_prev, now_hops, prev_hops, base_rtt_ps):
    """(new U, sampled): the most utilised usable hop, tau = its delta-ts capped at T."""
    best_u, best_tau = None, None
    for now, prev in zip(now_hops, prev_hops):
        u, dt = ref_hop_utilisation(now, prev, base_rtt_ps)
        if u is not None and (best_u is None or u > best_u):
            best_u, best_tau = u, dt
    if best_u is None:
        return u_prev, False
    tau = min(best_tau, base_rtt_ps)
    return (1 - tau / base_rtt_ps) * u_prev + tau / base_rtt_ps * best_u, True


def ref_compute_window(u, wc, stage, p):
    """(W, multiplicative): ComputeWind of Algorithm 1."""
    if u >= p.hpcc_eta or stage >= p.hpcc_max_stage:
        w = (wc / (u / p.hpcc_eta) if u > 0 else math.inf) + p.hpcc_w_ai_bytes
        return w, True
    return wc + p.hpcc_w_ai_bytes, False


class RefHpcc(Lane):
    """An HPCC sender (Li et al. 2019, Algorithm 1), per ACK."""

    ALGO = "hpcc"
    FIELDS = (
        "flow_inflight_u",
        "flow_window_bytes",
        "flow_rate_bps",
        "flow_ref_window_bytes",
        "flow_inc_stage",
        "flow_round_end_seq",
        "flow_has_int",
        "flow_int_port",
        "flow_int_ts_ps",
        "flow_int_tx_bytes",
        "flow_int_qlen_bytes",
    )

    def ack(self, p, acked, sent, line, hops):
        """``hops``: HI tuples (port, ts, tx, qlen, rate) echoed by this ACK."""
        t = p.hpcc_base_rtt_ps
        if not self.flow_has_int:  # the first ACK only records telemetry
            self.flow_has_int = True
            self.flow_round_end_seq = sent
            self.log.append("first")
        else:
            prev = list(zip(self.flow_int_port, self.flow_int_ts_ps, self.flow_int_tx_bytes, self.flow_int_qlen_bytes))
            u, sampled = ref_measure_inflight(self.flow_inflight_u, hops, prev, t)
            new_round = acked > self.flow_round_end_seq
            if sampled:
                self.flow_inflight_u = u
                w, multiplicative = ref_compute_window(u, self.flow_ref_window_bytes, self.flow_inc_stage, p)
                lowest = p.hpcc_min_rate_bps * t / PS_PER_S / 8
                highest = line * t / PS_PER_S / 8
                if w < lowest:
                    w = lowest
                    self.log.append("clip_low")
                if w > highest:
                    w = highest
                    self.log.append("clip_high")
                self.flow_window_bytes = w
                if new_round:  # reference window and stage: once per RTT
                    self.flow_ref_window_bytes = w
                    self.flow_inc_stage = 0 if multiplicative else self.flow_inc_stage + 1
                    self.log.append("mult" if multiplicative else "add")
                else:
                    self.log.append("fast")
            else:
                self.log.append("no_sample")
            if new_round:
                self.flow_round_end_seq = sent
        self.flow_rate_bps = self.flow_window_bytes * 8 / (t / PS_PER_S)
        self.flow_int_port = [h[0] for h in hops]
        self.flow_int_ts_ps = [h[1] for h in hops]
        self.flow_int_tx_bytes = [h[2] for h in hops]
        self.flow_int_qlen_bytes = [h[3] for h in hops]


def hops_ack(hops_per_lane, **fields):
    """AckEvent carrying per-lane hop tuples (port, ts, tx, qlen, rate)."""
    hops_per_lane = pad(hops_per_lane, [(-1, 0, 0, 0, LINE)] * HI)
    cols = list(zip(*[list(zip(*h)) for h in hops_per_lane]))  # 5 fields x F lanes x HI
    return make_ack(
        int_port=cols[0],
        int_ts_ps=cols[1],
        int_tx_bytes=cols[2],
        int_qlen_bytes=cols[3],
        int_rate_bps=cols[4],
        **fields,
    )


def prev_lane(hops):
    """HpccState fields remembering these hop tuples."""
    return {
        "flow_int_port": [h[0] for h in hops],
        "flow_int_ts_ps": [h[1] for h in hops],
        "flow_int_tx_bytes": [h[2] for h in hops],
        "flow_int_qlen_bytes": [h[3] for h in hops],
    }


T_HPCC = 10 * US
# (previous hops, current hops) per lane; a hop: (port, ts_ps, tx_bytes, qlen_bytes, rate_bps)
HOP_CASES = [
    (  # three usable hops; the 50 Gb/s one is the most utilised
        [(1, 0, 0, 10_000), (2, 0, 0, 50_000), (3, 0, 0, 0)],
        [(1, 1 * US, 10_000, 20_000, LINE), (2, 2 * US, 25_000, 40_000, LINE), (3, 1 * US, 12_500, 5_000, 50e9)],
    ),
    (  # hop 1 on another port, hop 2 without time advance: only hop 0
        [(1, 0, 0, 0), (2, 0, 0, 0), (3, 5 * US, 100, 0)],
        [(1, 4 * US, 30_000, 1_000, LINE), (7, 4 * US, 50_000, 0, LINE), (3, 5 * US, 200, 0, LINE)],
    ),
    (  # no telemetry at all
        [(-1, 0, 0, 0)] * 3,
        [(-1, 0, 0, 0, LINE)] * 3,
    ),
    (  # tau longer than T is capped at T: U = u
        [(4, 0, 0, 0), (5, 0, 0, 0), (-1, 0, 0, 0)],
        [(4, 25 * US, 200_000, 0, LINE), (5, 3 * US, 1_000, 0, LINE), (-1, 0, 0, 0, LINE)],
    ),
    (  # first sighting of a port, time going backwards: only hop 2
        [(-1, 0, 0, 0), (6, 9 * US, 0, 0), (8, 1 * US, 0, 0)],
        [(4, 10 * US, 5_000, 0, LINE), (6, 8 * US, 6_000, 0, LINE), (8, 3 * US, 9_000, 70_000, 25e9)],
    ),
    (  # queue term uses the smaller of the two queue samples
        [(2, 0, 0, 100_000), (3, 0, 0, 0), (4, 0, 0, 0)],
        [(2, 2 * US, 5_000, 30_000, LINE), (3, 2 * US, 2_000, 90_000, LINE), (-1, 0, 0, 0, LINE)],
    ),
]


def test_hpcc_hop_utilisation_and_inflight():
    cp, p = make_params(hpcc_base_rtt_ps=T_HPCC)
    u_prev = [0.5, 0.2, 0.7, 0.1, 0.0, 0.3]
    st = make_state([{**prev_lane(prev), "flow_inflight_u": u} for (prev, _), u in zip(HOP_CASES, u_prev)], "hpcc")
    ev = hops_ack([now for _, now in HOP_CASES])
    u_hop, dt = jax.device_get(hpcc_hop_utilisation(ev, st.hpcc, np.float64(T_HPCC / PS_PER_S)))
    u_new, sampled = jax.device_get(hpcc_measure_inflight(ev, st.hpcc, cp, st.hpcc.flow_inflight_u))
    for lane, (prev, now) in enumerate(HOP_CASES):
        for hop in range(HI):
            want, want_dt = ref_hop_utilisation(now[hop], prev[hop], T_HPCC)
            if want is None:
                assert u_hop[lane, hop] == -1.0, (lane, hop)
            else:
                assert math.isclose(u_hop[lane, hop], want, rel_tol=REL), (lane, hop, u_hop[lane, hop], want)
            assert dt[lane, hop] == want_dt
        want_u, want_sampled = ref_measure_inflight(u_prev[lane], now, prev, T_HPCC)
        assert bool(sampled[lane]) == want_sampled, lane
        assert math.isclose(u_new[lane], want_u, rel_tol=REL), (lane, u_new[lane], want_u)
    # by hand (B T = 125 kB at 100 Gb/s, 62.5 kB at 50 Gb/s)
    assert list(u_hop[0]) == pytest.approx([0.8 + 0.08, 1.0 + 0.32, 2.0 + 0.0], rel=REL)
    assert u_new[0] == pytest.approx(0.9 * 0.5 + 0.1 * 2.0, rel=REL)  # tau = 1 µs of hop 2
    assert list(u_hop[1, 1:]) == [-1.0, -1.0] and u_hop[1, 0] == pytest.approx(0.6, rel=REL)
    assert not sampled[2] and u_new[2] == 0.7
    assert u_new[3] == pytest.approx(u_hop[3, 0], rel=REL) == 0.64
    assert list(u_hop[4, :2]) == [-1.0, -1.0] and u_hop[4, 2] == pytest.approx(1.44 + 0.0, rel=REL)
    assert u_hop[5, 0] == pytest.approx(0.2 + 0.24, rel=REL)


def test_hpcc_compute_window_branches():
    cp, p = make_params(hpcc_eta=0.95, hpcc_max_stage=5, hpcc_w_ai_bytes=2_500.0)
    cases = [  # (U, W_c, incStage)
        (1.2, 100_000.0, 0),  # U >= eta: multiplicative
        (0.95, 100_000.0, 2),  # U == eta: multiplicative
        (0.5, 100_000.0, 5),  # stage == maxStage: multiplicative (grows)
        (0.5, 100_000.0, 4),  # additive
        (0.0, 100_000.0, 3),  # additive
        (0.94, 50_000.0, 0),  # additive just below eta
    ]
    u, wc, stage = (np.array(c, d) for c, d in zip(zip(*cases), (np.float64, np.float64, np.int32)))
    w, mult = jax.device_get(hpcc_compute_window(u, wc, stage, cp))
    for lane, case in enumerate(cases):
        want_w, want_mult = ref_compute_window(*case, p)
        assert bool(mult[lane]) == want_mult and math.isclose(w[lane], want_w, rel_tol=REL), (lane, w[lane], want_w)
    assert list(mult) == [True, True, True, False, False, False]
    assert list(w) == pytest.approx(
        [100_000 / (1.2 / 0.95) + 2_500, 102_500, 100_000 / (0.5 / 0.95) + 2_500, 102_500, 102_500, 52_500], rel=REL
    )


def test_hpcc_first_ack_and_reference_once_per_round():
    t = T_HPCC
    bdp = LINE * t / PS_PER_S / 8  # 125 kB
    cp, p = make_params(hpcc_base_rtt_ps=t, hpcc_w_ai_bytes=2_500.0, hpcc_max_stage=5)
    prev = [(1, 0, 0, 0), (-1, 0, 0, 0), (-1, 0, 0, 0)]
    now = [(1, 1 * US, 6_250, 0, LINE), (-1, 0, 0, 0, LINE), (-1, 0, 0, 0, LINE)]  # u = 0.5
    started = {
        **prev_lane(prev),
        "flow_has_int": True,
        "flow_inflight_u": 0.5,
        "flow_ref_window_bytes": 80_000.0,
        "flow_inc_stage": 2,
    }
    lanes = [
        {"flow_window_bytes": bdp, "flow_ref_window_bytes": bdp, "flow_rate_bps": LINE},  # first ACK: records only
        {**started, "flow_window_bytes": 90_000.0, "flow_round_end_seq": 10},  # ACK 5 <= 10: W from W_c, W_c kept
        {**started, "flow_window_bytes": 90_000.0, "flow_round_end_seq": 10},  # ACK 11 > 10: W_c = W, stage + 1
        # not started: records only, even with telemetry already stored
        {
            **started,
            "flow_has_int": False,
            "flow_window_bytes": 90_000.0,
            "flow_inflight_u": 0.2,
            "flow_round_end_seq": 10,
        },
    ]
    st = make_state(lanes, "hpcc")
    refs = [RefHpcc(**lane) for lane in pad(lanes, {})]
    acked, sent = pad([1, 5, 11, 1], 0), pad([8, 14, 19, 8], 0)
    ev = hops_ack([now] * 4, acked_packets=acked, sent_packets=sent)
    st = hpcc_on_ack(cp, st, ev)
    for lane, ref in enumerate(refs):
        ref.ack(p, acked[lane], sent[lane], LINE, now if lane < 4 else [(-1, 0, 0, 0, LINE)] * HI)
    host = check_lanes(st, refs, "HPCC")
    assert host.flow_window_bytes[0] == bdp and host.hpcc.flow_inflight_u[0] == 0.0
    assert host.hpcc.flow_round_end_seq[0] == 8
    assert host.hpcc.flow_has_int[0] and list(host.hpcc.flow_int_ts_ps[0]) == [1 * US, 0, 0]
    assert host.flow_rate_bps[0] == pytest.approx(LINE, rel=REL)
    assert host.flow_window_bytes[1] == host.flow_window_bytes[2] == pytest.approx(82_500, rel=REL)  # U = 0.5 < eta
    assert host.hpcc.flow_ref_window_bytes[1] == 80_000 and host.hpcc.flow_inc_stage[1] == 2
    assert host.hpcc.flow_round_end_seq[1] == 10
    assert host.hpcc.flow_ref_window_bytes[2] == pytest.approx(82_500, rel=REL) and host.hpcc.flow_inc_stage[2] == 3
    assert host.hpcc.flow_round_end_seq[2] == 19
    assert host.flow_rate_bps[2] == pytest.approx(82_500 * 8 / (t / PS_PER_S), rel=REL)
    assert host.flow_window_bytes[3] == 90_000 and host.hpcc.flow_inflight_u[3] == 0.2 and host.hpcc.flow_has_int[3]
    assert host.hpcc.flow_round_end_seq[3] == 8 and host.hpcc.flow_ref_window_bytes[3] == 80_000


def hpcc_script(seed, n, n_hops, util, qmax, dt_us=(0.5, 3.0), rates=None, port_flip=0, stall=0, gaps=0):
    """n ACKs' telemetry of one flow: per step, HI tuples (port, ts, tx, qlen, rate)."""
    rng = random.Random(seed)
    rates = rates or [LINE] * n_hops
    ports = [10 + i for i in range(n_hops)]
    ts, tx = [0] * n_hops, [0] * n_hops
    steps = []
    for k in range(n):
        hops = []
        for i in range(HI):
            if i >= n_hops or (gaps and k % 4 >= 2 and i == 0):
                hops.append((-1, 0, 0, 0, LINE))
                continue
            if port_flip and k % port_flip == 0 and i == 1:
                ports[i] = 30 - ports[i]  # another path through this hop
            dt = 0 if (stall and k % stall == 0 and i == 0) else int(rng.uniform(*dt_us) * US)
            ts[i] += dt
            tx[i] += int(rates[i] * rng.uniform(*util) * dt / PS_PER_S / 8)
            hops.append((ports[i], ts[i], tx[i], rng.randint(0, qmax), rates[i]))
        steps.append(hops)
    return steps


def test_hpcc_scripted_acks():
    n = 40
    t = T_HPCC
    # lowest window 6.25 kB (5 Gb/s x T), highest 125 kB (line x T)
    cp, p = make_params(
        hpcc_base_rtt_ps=t, hpcc_eta=0.95, hpcc_max_stage=5, hpcc_w_ai_bytes=2_500.0, hpcc_min_rate_bps=5e9
    )
    scripts = [
        hpcc_script(1, n, 3, (0.6, 1.0), 1_000_000),  # congested: multiplicative down to the minimum
        hpcc_script(2, n, 2, (0.2, 0.4), 0),  # idle: additive, then multiplicative up to the line
        hpcc_script(3, n, 3, (0.7, 1.1), 20_000, rates=[LINE, 25e9, LINE]),
        hpcc_script(4, n, 3, (0.8, 1.0), 5_000, port_flip=5, stall=3),  # path changes, stalled hop
        hpcc_script(5, n, 1, (0.85, 0.95), 2_000, gaps=True),  # telemetry missing on some ACKs
        hpcc_script(6, n, 2, (0.8, 1.0), 50_000, dt_us=(5.0, 25.0)),  # tau often capped at T
    ]
    per_round = [1, 0, 8, 3, 2, 0]  # sent = acked + this: reference updated every (this + 1) ACKs
    bdp = LINE * t / PS_PER_S / 8
    lanes = [{"flow_window_bytes": bdp, "flow_ref_window_bytes": bdp, "flow_rate_bps": LINE} for _ in range(F)]
    st, refs = make_state(lanes, "hpcc"), [RefHpcc(**lane) for lane in lanes]
    for step in range(n):
        acked = [step + 1] * F
        sent = [step + 1 + k for k in per_round]
        hops = [s[step] for s in scripts]
        for lane, ref in enumerate(refs):
            ref.ack(p, acked[lane], sent[lane], LINE, hops[lane])
        st = hpcc_on_ack(cp, st, hops_ack(hops, acked_packets=acked, sent_packets=sent))
        check_lanes(st, refs, f"ACK {step}")
    logs = [r.log for r in refs]
    every = [x for log in logs for x in log]
    for branch in ("first", "mult", "add", "fast", "no_sample", "clip_low", "clip_high"):
        assert branch in every, branch
    assert "clip_low" in logs[0] and "clip_high" in logs[1] and "no_sample" in logs[4]


# ======================================================================================
# TIMELY
# ======================================================================================


class RefTimely(Lane):
    """A TIMELY sender (Mittal et al. 2015, Algorithm 1), once per RTT."""

    ALGO = "timely"
    FIELDS = (
        "flow_rate_bps",
        "flow_increases",
        "flow_rtt_diff_ps",
        "flow_prev_rtt_ps",
        "flow_round_end_seq",
        "flow_has_rtt",
    )

    def rate_update(self, p, rtt, rtt_diff, line):
        """(new rate, increased) from this RTT sample and the smoothed difference."""
        gradient = rtt_diff / p.timely_min_rtt_ps
        if rtt < p.timely_t_low_ps:
            increase, branch = True, "low"
        elif rtt > p.timely_t_high_ps:
            increase, factor, branch = False, 1 - p.timely_beta * (1 - p.timely_t_high_ps / rtt), "high"
        elif gradient <= 0:
            increase, branch = True, "inc"
        else:
            increase, factor, branch = False, 1 - p.timely_beta * gradient, "dec"
            if factor < 0:
                factor, branch = 0.0, "clamp0"
        self.log.append(branch)
        if increase:
            hai = self.flow_increases >= p.timely_hai_after
            rate = self.flow_rate_bps + (p.timely_rate_hai_bps if hai else p.timely_rate_ai_bps)
            self.log.append("hai" if hai else "ai")
            if rate > line:
                rate = line
                self.log.append("cap")
            return rate, True
        rate = self.flow_rate_bps * factor
        if rate < p.timely_min_rate_bps:
            rate = p.timely_min_rate_bps
            self.log.append("min")
        return rate, False

    def ack(self, p, time_ps, data_sent_ps, acked, sent, line):
        rtt = time_ps - data_sent_ps
        if acked <= self.flow_round_end_seq:
            return  # not a new round
        if self.flow_has_rtt:
            rtt_diff = (1 - p.timely_alpha) * self.flow_rtt_diff_ps + p.timely_alpha * (rtt - self.flow_prev_rtt_ps)
            self.flow_rate_bps, increased = self.rate_update(p, rtt, rtt_diff, line)
            self.flow_increases = self.flow_increases + 1 if increased else 0
            self.flow_rtt_diff_ps = rtt_diff
        self.flow_has_rtt = True  # the first sample only sets prev_rtt
        self.flow_prev_rtt_ps = rtt
        self.flow_round_end_seq = sent


TIMELY_PARAMS = dict(
    timely_alpha=0.875,
    timely_beta=0.8,
    timely_t_low_ps=50 * US,
    timely_t_high_ps=500 * US,
    timely_min_rtt_ps=20 * US,
    timely_rate_ai_bps=2e9,
    timely_rate_hai_bps=10e9,
    timely_hai_after=3,
    timely_min_rate_bps=1e9,
)


TIMELY_CASE_DTYPES = (np.float64, np.int64, np.float64, np.int32)  # (rate, rtt, rtt_diff, increases)


def test_timely_new_rate_branches():
    cp, p = make_params(**TIMELY_PARAMS)
    cases = [  # (rate, rtt, rtt_diff, increases)
        (50e9, 30 * US, 5 * US, 0),  # below T_low: additive even with a rising RTT
        (50e9, 30 * US, 5 * US, 3),  # below T_low after hai_after increases: hyper-active step
        (50e9, 800 * US, -5 * US, 4),  # above T_high: 1 - beta (1 - T_high / rtt)
        (99e9, 200 * US, -1 * US, 7),  # gradient < 0: HAI, capped at the line rate
        (50e9, 200 * US, 4 * US, 2),  # gradient > 0: 1 - beta gradient
        (50e9, 200 * US, 40 * US, 0),  # 1 - beta gradient < 0: clamped at 0, then min rate
    ]
    rate, rtt, diff, increases = (np.array(c, d) for c, d in zip(zip(*cases), TIMELY_CASE_DTYPES))
    got_rate, got_inc = jax.device_get(timely_new_rate(cp, rate, rtt, diff, increases, np.full(F, LINE)))
    for lane, (r, rt, d, s) in enumerate(cases):
        want_rate, want_inc = RefTimely(flow_rate_bps=r, flow_increases=s).rate_update(p, rt, d, LINE)
        assert bool(got_inc[lane]) == want_inc and math.isclose(got_rate[lane], want_rate, rel_tol=REL), lane
    assert list(got_rate) == pytest.approx(
        [52e9, 60e9, 50e9 * (1 - 0.8 * (1 - 500 / 800)), LINE, 50e9 * (1 - 0.8 * 0.2), 1e9], rel=REL
    )
    assert list(got_inc) == [True, True, False, True, False, False]

    boundary = [  # (rate, rtt, rtt_diff, increases)
        (50e9, 50 * US, 4 * US, 0),  # rtt == T_low is not below it: gradient > 0 decreases
        (50e9, 500 * US, 4 * US, 0),  # rtt == T_high is not above it: 1 - beta gradient
        (50e9, 500 * US, 0.0, 0),  # gradient == 0 increases
        (50e9, 500 * US + 1, -4 * US, 0),  # just above T_high: decreases despite gradient < 0
        (50e9, 49 * US, 0.0, 2),  # hai_after - 1 increases: still additive
        (0.5e9, 49 * US, 0.0, 0),  # below the minimum rate: additive from there
    ]
    rate, rtt, diff, increases = (np.array(c, d) for c, d in zip(zip(*boundary), TIMELY_CASE_DTYPES))
    got_rate, got_inc = jax.device_get(timely_new_rate(cp, rate, rtt, diff, increases, np.full(F, LINE)))
    for lane, (r, rt, d, s) in enumerate(boundary):
        want_rate, want_inc = RefTimely(flow_rate_bps=r, flow_increases=s).rate_update(p, rt, d, LINE)
        assert bool(got_inc[lane]) == want_inc and math.isclose(got_rate[lane], want_rate, rel_tol=REL), lane
    assert list(got_inc) == [False, False, True, False, True, True]
    assert list(got_rate[[0, 1, 2, 4, 5]]) == pytest.approx([50e9 * 0.84, 50e9 * 0.84, 52e9, 52e9, 2.5e9], rel=REL)


def test_timely_first_sample_and_once_per_round():
    cp, p = make_params(**TIMELY_PARAMS)
    sampled = {
        "flow_rate_bps": 40e9,
        "flow_has_rtt": True,
        "flow_prev_rtt_ps": 100 * US,
        "flow_rtt_diff_ps": 2.0 * US,
        "flow_round_end_seq": 9,
    }
    lanes = [
        {"flow_rate_bps": 40e9},  # first ACK: only records the sample
        sampled,
        sampled,
    ]
    st, refs = make_state(lanes, "timely"), [RefTimely(**lane) for lane in pad(lanes, {})]
    time_ps, data_sent = [1_000 * US] * F, [1_000 * US - 102 * US] * F
    acked, sent = pad([1, 9, 10], 0), pad([6, 15, 17], 0)
    ev = make_ack(time_ps=time_ps, data_sent_ps=data_sent, acked_packets=acked, sent_packets=sent)
    st = timely_on_ack(cp, st, ev)
    for lane, ref in enumerate(refs):
        ref.ack(p, time_ps[lane], data_sent[lane], acked[lane], sent[lane], LINE)
    host = check_lanes(st, refs, "TIMELY")
    assert host.flow_rate_bps[0] == 40e9 and host.timely.flow_prev_rtt_ps[0] == 102 * US and host.timely.flow_has_rtt[0]
    assert host.timely.flow_rtt_diff_ps[0] == 0.0
    assert host.timely.flow_round_end_seq[0] == 6 and host.timely.flow_increases[0] == 0
    assert host.flow_rate_bps[1] == 40e9 and host.timely.flow_prev_rtt_ps[1] == 100 * US
    assert host.timely.flow_round_end_seq[1] == 9
    diff = 0.125 * 2 * US + 0.875 * 2 * US
    assert host.timely.flow_rtt_diff_ps[2] == pytest.approx(diff, rel=REL)
    assert host.flow_rate_bps[2] == pytest.approx(40e9 * (1 - 0.8 * diff / (20 * US)), rel=REL)
    assert host.timely.flow_prev_rtt_ps[2] == 102 * US and host.timely.flow_round_end_seq[2] == 17


def test_timely_scripted_acks():
    n = 40
    rng = random.Random(11)
    rtts_us = [
        [30] * n,  # below T_low: additive, then hyper-active, up to the line rate
        [520 + 10 * k for k in range(n)],  # above T_high
        [100 + 30 * k + (300 if k % 9 == 4 else 0) for k in range(n)],  # rising: gradient decreases, clamps
        [480 - 10 * k for k in range(n)],  # falling: gradient increases (HAI)
        [rng.choice([50, 500, rng.uniform(20, 700)]) for _ in range(n)],  # random, the thresholds exactly
        [rng.uniform(40, 200) for _ in range(n)],
    ]
    per_round = [0, 0, 0, 0, 2, 1]  # sent = acked + this
    init_rate = [60e9, 80e9, 80e9, 5e9, 50e9, 50e9]
    cp, p = make_params(**TIMELY_PARAMS)
    lanes = [{"flow_rate_bps": r} for r in init_rate]
    st, refs = make_state(lanes, "timely"), [RefTimely(**lane) for lane in lanes]
    for step in range(n):
        time_ps = [(step + 1) * 1_000 * US] * F
        data_sent = [t - int(r[step] * US) for t, r in zip(time_ps, rtts_us)]
        acked = [step + 1] * F
        sent = [step + 1 + k for k in per_round]
        for lane, ref in enumerate(refs):
            ref.ack(p, time_ps[lane], data_sent[lane], acked[lane], sent[lane], LINE)
        ev = make_ack(time_ps=time_ps, data_sent_ps=data_sent, acked_packets=acked, sent_packets=sent)
        st = timely_on_ack(cp, st, ev)
        check_lanes(st, refs, f"ACK {step}")
    every = {x for r in refs for x in r.log}
    assert {"low", "high", "inc", "dec", "clamp0", "ai", "hai", "cap", "min"} <= every
    assert refs[0].flow_rate_bps == LINE and "hai" in refs[0].log
    assert "hai" in refs[3].log
    # rounds: lane 4 updates once per 3 ACKs, lane 5 once per 2
    assert len([x for x in refs[4].log if x in ("low", "high", "inc", "dec", "clamp0")]) == (n - 1) // 3
    assert len([x for x in refs[5].log if x in ("low", "high", "inc", "dec", "clamp0")]) == (n - 1) // 2
