"""Units and the "never" time, one definition each.

Simulated time is an int64 count of picoseconds everywhere; results show it in µs as
float64 too. ``PS_PER_US`` is an int: ``ps / PS_PER_US`` on an int64 array is the same
float64 division as ``ps / 1e6``, and ``round(us * PS_PER_US)`` the same product.
"""

from __future__ import annotations

import numpy as np

PS_PER_NS = 1_000  # picoseconds per nanosecond
PS_PER_US = 1_000_000  # picoseconds per microsecond
BPS_PER_GBPS = 1_000_000_000  # bits per second per Gbit/s
NEVER = int(np.iinfo(np.int64).max)  # a time that never comes (int64 ps)
NOT_YET_PS = -1  # result columns in integer ps: the event never happened (NEVER on the device)


def ps_from_us(us: float) -> np.int64:
    """A config time in µs as int64 ps, rounded to the nearest picosecond."""
    return np.int64(round(us * PS_PER_US))


def us_from_ps(ps: np.ndarray) -> np.ndarray:
    """float64 µs of int64 ps times; NaN where the time is ``NEVER``."""
    return np.where(ps == NEVER, np.nan, ps / PS_PER_US)


def ps_or_not_yet(ps: np.ndarray) -> np.ndarray:
    """int64 ps times with ``NEVER`` shown as ``NOT_YET_PS`` (-1)."""
    ps = np.asarray(ps, np.int64)
    return np.where(ps == NEVER, np.int64(NOT_YET_PS), ps)
