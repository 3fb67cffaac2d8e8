"""Padding host arrays to the batch's shapes (``Static``): every builder of a component uses it."""

from __future__ import annotations

import numpy as np


def pad(array: np.ndarray, shape: tuple[int, ...], fill) -> np.ndarray:
    """``array`` in the top-left corner of a ``shape`` array filled with ``fill`` (same dtype)."""
    out = np.full(shape, fill, dtype=array.dtype)
    out[tuple(slice(0, n) for n in array.shape)] = array
    return out
