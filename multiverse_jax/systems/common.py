"""Small vectorised helpers the systems share."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import NEVER

PS_BITS_PER_BYTE = 8 * 10**12  # bits per byte times picoseconds per second


def serialization_ps(wire_bytes, rate_bps):
    """Time to put ``wire_bytes`` on a wire of ``rate_bps``, in ps, rounded up.

    Exact (no rounding) for every rate that divides 8e12 bits*ps/s, e.g. 25/40/50/100/200/400/800 Gb/s.
    """
    numerator = wire_bytes.astype(jnp.int64) * PS_BITS_PER_BYTE
    return (numerator + rate_bps - 1) // rate_bps


def fifo_head(mask, time_ps, segment, n_segments):
    """Per segment, the earliest masked entry: (its time, its index); (NEVER, n) if none.

    Ties in time go to the lowest index, so the choice is deterministic. Entries outside
    the mask are sent to segment ``n_segments``, which ``segment_min`` drops.
    """
    segment = jnp.where(mask, segment, n_segments)
    earliest = jax.ops.segment_min(jnp.where(mask, time_ps, NEVER), segment, n_segments)
    index = jnp.arange(mask.shape[0], dtype=jnp.int32)
    is_head = mask & (time_ps == earliest[jnp.minimum(segment, n_segments - 1)])
    first = jax.ops.segment_min(jnp.where(is_head, index, mask.shape[0]), segment, n_segments)
    first = jnp.minimum(first, mask.shape[0])  # empty segments give the dtype's max
    return earliest, first


def count_by(mask, segment, n_segments, values=None):
    """Per segment, the sum of ``values`` (default 1) over masked entries."""
    values = jnp.ones_like(segment) if values is None else values
    return jax.ops.segment_sum(jnp.where(mask, values, 0), jnp.where(mask, segment, n_segments), n_segments)


def latest_by(mask, segment, n_segments, time_ps):
    """Per segment, the largest masked time (-1 if none)."""
    return jax.ops.segment_max(jnp.where(mask, time_ps, -1), jnp.where(mask, segment, n_segments), n_segments)


def mix32(x):
    """A 32-bit integer hash (murmur3's finaliser): flow and node ids -> ECMP choice."""
    x = x.astype(jnp.uint32)
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)
