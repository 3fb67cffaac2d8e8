"""The integer hash behind ECMP choices, per-flow hashes and RED's coin."""

from __future__ import annotations

import numpy as np


def mix32(x):
    """A 32-bit integer hash (murmur3's finaliser): flow and node ids -> ECMP choice.

    ``x``: a JAX array (inside the step) or a NumPy array (on the host, the same bits:
    ``report/paths.py`` routes flows with it); products wrap modulo 2^32 in both."""
    x = x.astype(np.uint32)
    x = x ^ (x >> 16)
    x = x * np.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * np.uint32(0xC2B2AE35)
    return x ^ (x >> 16)
