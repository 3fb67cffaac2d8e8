"""What the learned queue restorer sees (HyGra §IV-C, eq. 9): one port at one re-entry.

The same functions build the features for the dataset (``restorer/dataset.py``, NumPy
arrays from packet-mode time series) and inside the jitted step (``ops/restore.py``, jnp
arrays at a thaw), so the model is evaluated on exactly what it was trained on. Every
function here is written with ``jnp`` and accepts NumPy arrays too.

* ``history`` (N, N_HISTORY) float32: the port's queue depth at its last N_HISTORY
  samples before the steady phase began, newest first, as a share of its buffer
  (``switch.buffer_bytes``). Samples are ``hybrid.sample_interval_us`` apart (raised for
  DCQCN, ``components/steady.sample_interval_ps``), as the engine's depth ring takes them.
* ``context`` (N, N_CONTEXT) float32, columns ``CONTEXT_NAMES``:
  link rate and buffer (log2 of 100 Gb/s and of 1 MB units), the flows whose data path
  crosses the port (count / 8) and their load at their steady rates (wire bytes over the
  link's capacity), the phase length in samples (log2(1 + n)), the sample interval
  (µs / 100), and the experiment's congestion control (one-hot over CC_* codes).
* target (N,) float32: the depth at the phase's end, as a share of the buffer.
"""

from __future__ import annotations

import jax.numpy as jnp

N_HISTORY = 8  # depth samples the model reads (the default hybrid.window)
N_CC = 5  # CC_NONE .. CC_TIMELY (components/experiment.py)
CONTEXT_NAMES = (
    "log2_rate_100g",
    "log2_buffer_mb",
    "flows_over_8",
    "load",
    "log2_phase_samples",
    "sample_interval_100us",
    "cc_none",
    "cc_dcqcn",
    "cc_dctcp",
    "cc_hpcc",
    "cc_timely",
)
N_CONTEXT = len(CONTEXT_NAMES)


def history_features(depth_bytes_newest_first, buffer_bytes):
    """(N, N_HISTORY) float32 from ``depth_bytes_newest_first`` (N, K) depth samples,
    K >= 1, and ``buffer_bytes`` (N,): the newest N_HISTORY samples over the buffer; a
    shorter history repeats its oldest sample (a queue seen for less time is taken as
    having been there before)."""
    depth = jnp.asarray(depth_bytes_newest_first, jnp.float32)
    k = depth.shape[1]
    index = jnp.minimum(jnp.arange(N_HISTORY), k - 1)
    return depth[:, index] / jnp.maximum(jnp.asarray(buffer_bytes, jnp.float32), 1.0)[:, None]


def context_features(rate_bps, buffer_bytes, n_flows, load, phase_samples, sample_interval_us, cc_kind):
    """(N, N_CONTEXT) float32; every argument (N,) (or broadcastable): link rate in bits/s,
    buffer in bytes, flows crossing the port, their load (share of capacity), the phase's
    length in samples (float), the sample interval in µs, the CC code (int)."""
    f32 = jnp.float32
    n = jnp.broadcast_shapes(*(jnp.shape(a) for a in (rate_bps, buffer_bytes, n_flows, load, phase_samples, cc_kind)))
    columns = [
        jnp.log2(jnp.asarray(rate_bps, f32) / 100e9),
        jnp.log2(jnp.maximum(jnp.asarray(buffer_bytes, f32), 1.0) / 1e6),
        jnp.asarray(n_flows, f32) / 8.0,
        jnp.asarray(load, f32),
        jnp.log2(1.0 + jnp.maximum(jnp.asarray(phase_samples, f32), 0.0)),
        jnp.asarray(sample_interval_us, f32) / 100.0,
    ]
    columns = [jnp.broadcast_to(c, n) for c in columns]
    one_hot = (jnp.asarray(cc_kind)[..., None] == jnp.arange(N_CC)).astype(f32)
    return jnp.concatenate([jnp.stack(columns, axis=-1), jnp.broadcast_to(one_hot, n + (N_CC,))], axis=-1)
