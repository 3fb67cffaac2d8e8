"""The integer hash behind ECMP choices, per-flow hashes and RED's coin."""

from __future__ import annotations

import jax.numpy as jnp


def mix32(x):
    """A 32-bit integer hash (murmur3's finaliser): flow and node ids -> ECMP choice."""
    x = x.astype(jnp.uint32)
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)
