"""User-facing constants of each congestion-control algorithm, in the units users think in
(µs, Mb/s, bytes), with their defaults and where each comes from.

"ns-3" below is the HPCC authors' ns-3 code (alibaba-edu/High-Precision-Congestion-Control,
``simulation/run.py`` at 100 Gb/s NICs, and ``rdma-hw.cc`` defaults); the papers are the
algorithms' own. Each config's ``check(prefix)`` raises an InputError naming the key.
"""

from __future__ import annotations

import dataclasses
import math

from multiverse_jax.errors import InputError


def _check(prefix: str, key: str, value, *, low=None, high=None, low_open=False, integer=False):
    """``prefix.key`` must be a finite number in [low, high] ((low, high] if low_open)."""
    name = f"{prefix}.{key}"
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer:
        ok = value == int(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else f"<= {high}"
        bounds = " and ".join(b for b in (lo, hi) if b)
        kind = "an integer" if integer else "a finite number"
        raise InputError(f"{name} must be {kind}{' ' + bounds if bounds else ''}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class DcqcnConfig:
    g: float = 1 / 256  # alpha gain (paper, ns-3 EWMA_GAIN)
    alpha_timer_us: float = 1.0  # alpha update period (ns-3 ALPHA_RESUME_INTERVAL; paper 55)
    decrease_interval_us: float = 4.0  # at most one rate cut per interval (ns-3 RATE_DECREASE_INTERVAL)
    increase_timer_us: float = 300.0  # rate-increase timer (ns-3 RP_TIMER; paper 55)
    byte_counter_bytes: int = 10_000_000  # bytes per byte-counter increase event (paper B = 10 MB)
    fast_recovery_steps: int = 1  # F: increase events of fast recovery (ns-3 FAST_RECOVERY_TIMES; paper 5)
    rate_ai_mbps: float = 20.0  # additive increase (ns-3 RATE_AI = 5 Mb/s x 100/25)
    rate_hai_mbps: float = 200.0  # hyper increase (ns-3 RATE_HAI = 50 Mb/s x 100/25)
    min_rate_mbps: float = 1000.0  # (ns-3 MIN_RATE)
    cnp_interval_us: float = 4.0  # receiver: at most one CNP per flow per interval (Mellanox
    #   min_time_between_cnps; paper N = 50)
    rate_on_first_cnp: float = 1.0  # rate kept on the first CNP (ns-3 RateOnFirstCnp)

    def check(self, prefix: str = "dcqcn") -> None:
        _check(prefix, "g", self.g, low=0, high=1, low_open=True)
        for key in ("alpha_timer_us", "decrease_interval_us", "increase_timer_us"):
            _check(prefix, key, getattr(self, key), low=0, low_open=True)
        _check(prefix, "byte_counter_bytes", self.byte_counter_bytes, low=1, integer=True)
        _check(prefix, "fast_recovery_steps", self.fast_recovery_steps, low=0, integer=True)
        for key in ("rate_ai_mbps", "rate_hai_mbps", "min_rate_mbps"):
            _check(prefix, key, getattr(self, key), low=0, low_open=True)
        _check(prefix, "cnp_interval_us", self.cnp_interval_us, low=0)
        _check(prefix, "rate_on_first_cnp", self.rate_on_first_cnp, low=0, high=1, low_open=True)


@dataclasses.dataclass(frozen=True)
class DctcpConfig:
    g: float = 1 / 16  # alpha gain (paper)
    init_window_packets: float = 10.0  # initial window, in full packets (TCP IW10, RFC 6928)
    min_window_packets: float = 1.0  # the window never shrinks below this

    def check(self, prefix: str = "dctcp") -> None:
        _check(prefix, "g", self.g, low=0, high=1, low_open=True)
        _check(prefix, "init_window_packets", self.init_window_packets, low=0, low_open=True)
        _check(prefix, "min_window_packets", self.min_window_packets, low=0, low_open=True)
        if self.min_window_packets > self.init_window_packets:
            raise InputError(
                f"{prefix}.min_window_packets ({self.min_window_packets}) must not exceed "
                f"{prefix}.init_window_packets ({self.init_window_packets})"
            )


@dataclasses.dataclass(frozen=True)
class HpccConfig:
    eta: float = 0.95  # target utilisation (paper, ns-3 U_TARGET)
    max_stage: int = 5  # additive steps before a multiplicative one (paper maxStage)
    rate_ai_mbps: float = 40.0  # W_AI = rate_ai x T (ns-3 RATE_AI for HPCC = 10 Mb/s x 100/25)
    min_rate_mbps: float = 1000.0  # lowest window = min_rate x T (ns-3 MIN_RATE)
    base_rtt_us: float | None = None  # T; None: the largest unloaded RTT of the experiment's
    #   flows (ns-3 GLOBAL_T: one T for all flows)

    def check(self, prefix: str = "hpcc") -> None:
        _check(prefix, "eta", self.eta, low=0, high=1, low_open=True)
        _check(prefix, "max_stage", self.max_stage, low=0, integer=True)
        _check(prefix, "rate_ai_mbps", self.rate_ai_mbps, low=0)
        _check(prefix, "min_rate_mbps", self.min_rate_mbps, low=0, low_open=True)
        if self.base_rtt_us is not None:
            _check(prefix, "base_rtt_us", self.base_rtt_us, low=0, low_open=True)


@dataclasses.dataclass(frozen=True)
class TimelyConfig:
    alpha: float = 0.875  # EWMA weight of new RTT differences (ns-3 TimelyAlpha)
    beta: float = 0.8  # multiplicative decrease (paper, ns-3)
    t_low_us: float = 50.0  # (paper, ns-3)
    t_high_us: float = 500.0  # (paper, ns-3)
    min_rtt_us: float = 20.0  # normalises the gradient (paper, ns-3)
    rate_ai_mbps: float = 100.0  # delta (ns-3 RATE_AI = 10 Mb/s x 100/10)
    rate_hai_mbps: float = 500.0  # N x delta after hai_after increases (ns-3 RATE_HAI = 50 Mb/s x 100/10)
    hai_after: int = 5  # consecutive increases before hyper-active increase (paper N = 5)
    min_rate_mbps: float = 1000.0  # (ns-3 MIN_RATE)

    def check(self, prefix: str = "timely") -> None:
        _check(prefix, "alpha", self.alpha, low=0, high=1, low_open=True)
        _check(prefix, "beta", self.beta, low=0, high=1, low_open=True)
        for key in ("t_low_us", "t_high_us", "min_rtt_us", "rate_ai_mbps", "rate_hai_mbps", "min_rate_mbps"):
            _check(prefix, key, getattr(self, key), low=0, low_open=True)
        _check(prefix, "hai_after", self.hai_after, low=0, integer=True)
        if self.t_low_us >= self.t_high_us:
            raise InputError(f"{prefix}.t_low_us ({self.t_low_us}) must be below {prefix}.t_high_us ({self.t_high_us})")


@dataclasses.dataclass(frozen=True)
class EcnConfig:
    """RED/ECN marking at switch egress (config keys switch.ecn_*). Defaults: ns-3 run.py's
    KMIN/KMAX/PMAX maps at 25 Gb/s (100 KB, 400 KB, 0.2), below the default PFC XOFF plus
    headroom so ECN acts before PFC. The DCQCN paper used 5 KB, 200 KB, 1 % at 40 Gb/s; DCTCP's
    step marking at K is Kmin = Kmax = K, Pmax = 1."""

    kmin_bytes: int = 100_000
    kmax_bytes: int = 400_000
    pmax: float = 0.2

    def check(self, prefix: str = "switch") -> None:
        _check(prefix, "ecn_kmin_bytes", self.kmin_bytes, low=0, integer=True)
        _check(prefix, "ecn_kmax_bytes", self.kmax_bytes, low=0, integer=True)
        _check(prefix, "ecn_pmax", self.pmax, low=0, high=1)
        if self.kmin_bytes > self.kmax_bytes:
            raise InputError(
                f"{prefix}.ecn_kmin_bytes ({self.kmin_bytes}) must not exceed {prefix}.ecn_kmax_bytes ({self.kmax_bytes})"
            )
