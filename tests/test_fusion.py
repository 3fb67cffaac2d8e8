"""``ops/fusion.computed_once``: the same mask, under ``jit`` and under ``vmap`` (where the
conditional becomes a select of both branches). That it is computed once in ``receive``'s
program was checked on the compiled HLO and timed (``benchmarks/HISTORY.md``, stop 52).
"""

import jax
import jax.numpy as jnp
import numpy as np

from multiverse_jax.ops.fusion import computed_once


def _two_writes(times_ps, a, b, window_end_ps):
    """A mask of two comparisons, read by two column writes (as ``receive``'s is by eleven)."""
    mask = computed_once((times_ps < window_end_ps) & (times_ps % 7 != 3), window_end_ps)
    return jnp.where(mask, 0, a), jnp.where(mask, -1, b)


def test_the_mask_is_the_same_under_jit_and_vmap():
    times_ps = jnp.arange(64, dtype=jnp.int64) * 1000
    a, b = jnp.arange(64), jnp.arange(64) * 2
    want = (times_ps < 40_000) & (times_ps % 7 != 3)
    got = jax.jit(_two_writes)(times_ps, a, b, jnp.int64(40_000))
    np.testing.assert_array_equal(got[0], np.where(want, 0, a))
    np.testing.assert_array_equal(got[1], np.where(want, -1, b))
    # A batched predicate (a select of both branches); a window ending at or before 0 ps takes the other branch.
    ends = jnp.array([10_000, 40_000, 0, -5_000], jnp.int64)
    batched = jax.jit(jax.vmap(_two_writes, in_axes=(None, None, None, 0)))(times_ps, a, b, ends)
    for row, end in enumerate(np.asarray(ends)):
        want = (times_ps < end) & (times_ps % 7 != 3)
        np.testing.assert_array_equal(batched[0][row], np.where(want, 0, a))
        np.testing.assert_array_equal(batched[1][row], np.where(want, -1, b))
    # Unbatched, the other branch alone: the mask of a window that ends before its arrivals.
    got = jax.jit(_two_writes)(times_ps, a, b, jnp.int64(-5_000))
    np.testing.assert_array_equal(got[0], a)
    np.testing.assert_array_equal(got[1], b)
