"""Per-segment reductions over the packet pool (or any masked array): the earliest entry,
a count or sum, the latest time. A segment is a port, a class queue, a flow or a host."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.units import NEVER


def fifo_head(mask, time_ps, segment, n_segments, now_ps, tie=None):
    """Per segment, the earliest masked entry: (its time, its index); (NEVER, n) if none.

    Ties in time go to the smallest ``tie`` (when given: one (n,) int64 array, or a tuple
    of them applied in turn, each of magnitude below ``2**(60 - index_bits)``), then to
    the lowest index, so the choice is deterministic. Each pass is one segment_min over a
    packed key: a time relative to ``now_ps`` in the high bits, the index in the low bits.
    Times more than ``2**(61 - index_bits)`` ps from ``now_ps`` (17 s for 65,536 entries,
    2 s for a million) are clipped: among such entries the lowest index wins.
    The returned time is the entry's own, never clipped.
    """
    n_items = mask.shape[0]
    head = _earliest(mask, time_ps, segment, n_segments, now_ps)
    head_ps = jnp.where(head < n_items, time_ps[jnp.minimum(head, n_items - 1)], NEVER)
    keys = (time_ps,) + (() if tie is None else tie if isinstance(tie, tuple) else (tie,))
    for tied_on, key in zip(keys, keys[1:]):
        best = jnp.where(head < n_items, tied_on[jnp.minimum(head, n_items - 1)], NEVER)
        mask = mask & (tied_on == best[jnp.minimum(segment, n_segments - 1)])
        head = _earliest(mask, key, segment, n_segments, 0)
    return head_ps, head


def _earliest(mask, time_ps, segment, n_segments, now_ps):
    """(n_segments,) int32: per segment, the index of the masked entry of earliest
    ``time_ps`` (lowest index on ties), ``len(mask)`` if none."""
    n_items = mask.shape[0]
    index_bits = max(1, int(n_items).bit_length())
    span = 1 << (62 - index_bits)
    relative = jnp.clip(time_ps - (now_ps - span // 2), 0, span - 1)
    index = jnp.arange(n_items, dtype=jnp.int64)
    key = jnp.where(mask, (relative << index_bits) | index, NEVER)
    head = jax.ops.segment_min(key, jnp.where(mask, segment, n_segments), n_segments)
    return jnp.where(head != NEVER, head & ((1 << index_bits) - 1), n_items).astype(jnp.int32)


def count_by(mask, segment, n_segments, values=None):
    """Per segment, the sum of ``values`` (default 1) over masked entries."""
    values = jnp.ones_like(segment) if values is None else values
    return jax.ops.segment_sum(jnp.where(mask, values, 0), jnp.where(mask, segment, n_segments), n_segments)


def latest_by(mask, segment, n_segments, time_ps):
    """Per segment, the largest masked time (-1 if none)."""
    return jax.ops.segment_max(jnp.where(mask, time_ps, -1), jnp.where(mask, segment, n_segments), n_segments)


SCAN_FROM = 8192  # prefix sums over at least this many entries (all rows together: XLA's cost is
# per entry) go by associative scan (fewer: the gain is some microseconds, and the scan's longer
# program compiles slower: 0.7-2 s more per engine program)


def prefix_sum(values, axis: int = -1, dtype=None):
    """``jnp.cumsum(values, axis, dtype)``, integers only (so the order of the additions
    does not matter: the same bits). Long ones go by ``lax.associative_scan``: XLA's CPU
    backend computes ``cumsum`` as a reduce-window, 2 to 2.5 times slower over the
    65,536 slots of a pool (370-500 us against 150-200 us; 67 against 20 us at 8,192,
    measured on the 2-core CPU; each host's free slots, (128, 512), 2-3 % of a window
    faster by scan)."""
    values = values.astype(dtype or values.dtype)
    if not jnp.issubdtype(values.dtype, jnp.integer):
        raise TypeError(f"prefix_sum adds integers only (floats would round in another order), got {values.dtype}")
    if values.size < SCAN_FROM:
        return jnp.cumsum(values, axis=axis)
    return jax.lax.associative_scan(jnp.add, values, axis=axis)


def prefix_max(values):
    """``lax.cummax(values)`` of a 1-D array, by associative scan when long (as ``prefix_sum``)."""
    if values.shape[0] < SCAN_FROM:
        return jax.lax.cummax(values)
    return jax.lax.associative_scan(jnp.maximum, values)


def compact(mask, capacity: int, *columns):
    """The masked entries of each column, in order, packed into ``capacity`` places (stream
    compaction: one cumsum, one scatter per column). ``columns``: (values (n,), fill)
    pairs; returns the packed columns (capacity,) (``fill`` past the entries) and () bool
    whether the entries did not all fit (those past ``capacity`` are left out)."""
    position = jnp.where(mask, prefix_sum(mask, dtype=jnp.int32) - 1, capacity)
    packed = [jnp.full(capacity, fill, values.dtype).at[position].set(values, mode="drop") for values, fill in columns]
    return packed, jnp.sum(mask, dtype=jnp.int32) > capacity
