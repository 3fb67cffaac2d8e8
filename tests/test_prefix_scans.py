"""``ops.segments.prefix_sum`` and ``prefix_max``: NumPy's ``cumsum`` and
``maximum.accumulate``, bit for bit, below and above the number of entries where they
switch from XLA's cumulative ops to an associative scan."""

import jax
import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit JAX)
from multiverse_jax.ops.segments import SCAN_FROM, prefix_max, prefix_sum


def test_prefix_scans_are_numpys():
    rng = np.random.default_rng(2)
    for n in (7, SCAN_FROM - 1, 3 * SCAN_FROM + 5):
        mask = rng.random(n) < 0.3
        sizes = rng.integers(-9000, 9000, n).astype(np.int64) * 10**9  # int64 range, signed
        np.testing.assert_array_equal(jax.jit(prefix_sum, static_argnames="dtype")(mask, dtype=np.int32), np.cumsum(mask, dtype=np.int32))
        np.testing.assert_array_equal(jax.jit(prefix_sum)(sizes), np.cumsum(sizes))
        index = np.where(mask, np.arange(n), -1)
        np.testing.assert_array_equal(jax.jit(prefix_max)(index), np.maximum.accumulate(index))
    # Along a later axis, as nic.free_slots: rows shorter than SCAN_FROM, more entries than
    # it in all (the scan's side).
    free = rng.random((16, SCAN_FROM // 8 + 3)) < 0.5
    got = jax.jit(prefix_sum, static_argnames=("axis", "dtype"))(free, axis=1, dtype=np.int32)
    np.testing.assert_array_equal(got, np.cumsum(free, axis=1, dtype=np.int32))
