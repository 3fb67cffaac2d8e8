"""Time series: fixed-size ring buffers of per-flow and per-port samples.

Every ``sample_interval`` of simulated time the ``sample`` system records, at the end of
the window that reaches the next sample time, each flow's congestion-control rate and
window, its sent and delivered bytes, and each port's queue. The ring holds the last R samples
(R = Static.n_samples); the host drains it after every compiled call (R is at least the
windows per call, so nothing is overwritten before it is read).
"""

from __future__ import annotations

import chex
from flax import struct
import numpy as np

from multiverse_jax.components.static import Static
from multiverse_jax.experiment import Experiment
from multiverse_jax.units import NEVER, PS_PER_US


@struct.dataclass
class SampleState:
    sample_count: chex.Array  # () int64 samples taken so far (the next goes to index count % R)
    next_sample_ps: chex.Array  # () int64 time of the next sample (NEVER: sampling off)
    sample_time_ps: chex.Array  # (R,) int64 when each sample was taken (a window end)
    sample_flow_rate_bps: chex.Array  # (R, F) float64 congestion-control sending rate
    sample_flow_window_bytes: chex.Array  # (R, F) float64 congestion window (0 without one)
    sample_flow_tx_bytes: chex.Array  # (R, F) int64 payload bytes put on the wire by the sender's NIC so far
    sample_flow_rx_bytes: chex.Array  # (R, F) int64 payload bytes delivered so far
    sample_port_queue_bytes: chex.Array  # (R, P) int64 bytes queued at each egress port
    sample_flow_steady: chex.Array  # (R, F) bool steady or frozen (sim.mode=hybrid; always False otherwise)


def initial_sample_state(exp: Experiment, s: Static) -> SampleState:
    """Empty rings; the first sample one ``sim.sample_interval_us`` in (never when it is 0)."""
    interval_us = exp.sim.sample_interval_us
    return SampleState(
        sample_count=np.int64(0),
        next_sample_ps=np.int64(round(interval_us * PS_PER_US)) if interval_us > 0 else NEVER,
        sample_time_ps=np.zeros(s.n_samples, np.int64),
        sample_flow_rate_bps=np.zeros((s.n_samples, s.n_flows)),
        sample_flow_window_bytes=np.zeros((s.n_samples, s.n_flows)),
        sample_flow_tx_bytes=np.zeros((s.n_samples, s.n_flows), np.int64),
        sample_flow_rx_bytes=np.zeros((s.n_samples, s.n_flows), np.int64),
        sample_port_queue_bytes=np.zeros((s.n_samples, s.n_ports), np.int64),
        sample_flow_steady=np.zeros((s.n_samples, s.n_flows), bool),
    )
