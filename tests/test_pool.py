"""The pool's live prefix (``ops/pool.py``): windows run on the first columns of every
host compute what the whole pool computes, bit for bit, in both batching modes; the
bound on the packets a window creates, which makes that so, holds window by window."""

import dataclasses
import functools

import jax
import numpy as np
import pytest

from conftest import SMALL
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.ops import pool
from test_engine import _mixed_experiments

# Columns of SMALL's 128. The mixed experiments hold up to 37 columns and can create up to
# 6 packets a window: their windows fit at first, then not, then again (checked below).
PREFIX = 32
# A prefix around that one (``Static.prefix_columns``, PREFIX inside it): some windows need
# more than PREFIX but fit in it, some need more than it (checked below).
OUTER = 40


def _leaves_differing(a, b) -> list[str]:
    return [
        jax.tree_util.keystr(path)
        for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b))
        if not np.array_equal(np.asarray(x), np.asarray(y))
    ]


def _mixed_final(batching: str, columns: int = 0, inner: int = 0):
    static = dataclasses.replace(SMALL, prefix_columns=columns, prefix_inner_columns=inner)
    batch = build_batch(_mixed_experiments(), static=static, slots_per_host=static.slots_per_host)
    return engine.run(batch.params, batch.state, batching=batching)[0]


@functools.cache
def _whole_pool_final():
    """The mixed experiments on the whole pool, once for both modes (``map`` and ``vmap``
    give the same results bit for bit: ``test_engine``)."""
    return _mixed_final("map")


# ``map`` with two prefixes, one inside the other (the default's form on a CPU): windows on
# the whole pool, on OUTER's columns and on PREFIX's, and every switch between them.
# ``vmap`` with one (the default's form on a GPU, where the lockstep path runs:
# ``build_batch``), each experiment's window fitting or not: 17 s to compile here, not 27.
@pytest.mark.parametrize("batching, columns, inner", [("map", OUTER, PREFIX), ("vmap", PREFIX, 0)])
def test_windows_on_the_live_prefix_equal_the_whole_pool(batching, columns, inner):
    whole = _whole_pool_final()
    assert np.all(whole.done) and not np.any(whole.error)
    assert _leaves_differing(whole, _mixed_final(batching, columns, inner)) == []


@jax.jit
def _columns_and_bound(params, state):
    fits = [jax.vmap(lambda p, s: pool.prefix_fits(p, s, columns))(params, state) for columns in (PREFIX, OUTER)]
    in_use = jax.vmap(lambda p, s: pool.columns_in_use(p, s.packets))(params, state)
    return in_use, jax.vmap(pool.creatable_packets)(params, state), fits[0].astype(int) + fits[1].astype(int)


def test_a_window_takes_no_column_past_the_bound():
    # What the prefix relies on: a window's packets end below the columns in use at its
    # start plus the packets one host can create in it (each host takes its lowest free
    # column). Window by window over the mixed experiments, which also cross the prefix.
    batch = build_batch(_mixed_experiments(), static=SMALL, slots_per_host=SMALL.slots_per_host)
    params, state = batch.params, batch.state
    seen_fit = set()
    while not np.all(state.done):
        in_use, bound, fits = map(np.asarray, _columns_and_bound(params, state))
        state = engine.advance(params, state, 1, batching="map")
        after, _, _ = map(np.asarray, _columns_and_bound(params, state))
        assert np.all(after <= in_use + bound), (in_use, bound, after)
        seen_fit.update(fits.tolist())
    assert seen_fit == {0, 1, 2}  # the prefix test's windows run on the whole pool, OUTER and PREFIX


def test_default_prefix_only_for_large_pools():
    assert pool.default_prefix_columns(16, 256) == (0, 0)  # the quick start's pool: 4,096 slots
    assert pool.default_prefix_columns(128, 512) == (384, 256)
    assert pool.default_prefix_columns(128, 512, two_levels=False) == (256, 0)


def test_the_prefix_of_a_prefix():
    """``shrink`` gives the prefix's pool its own prefix (``Static.prefix_inner_columns``),
    and that one none: the engine nests them once."""
    static = dataclasses.replace(SMALL, prefix_columns=OUTER, prefix_inner_columns=PREFIX)
    batch = build_batch(_mixed_experiments(), static=static, slots_per_host=SMALL.slots_per_host)
    params, state = jax.tree.map(lambda x: x[0], (batch.params, batch.state))
    small_params, _ = pool.shrink(params, state, OUTER)
    assert (small_params.static.slots_per_host, small_params.static.prefix_columns) == (OUTER, PREFIX)
    smaller_params, _ = pool.shrink(small_params, state, PREFIX)
    assert (smaller_params.static.slots_per_host, smaller_params.static.prefix_columns) == (PREFIX, 0)


def test_a_prefix_stretch_of_no_window_keeps_the_whole_pools_order():
    """The engine copies the prefix out and back even where no window runs on it. The
    whole pool's kept service order must come back as it was: ``shrink`` marks a kept
    packet past the prefix as none, and an order that no longer holds makes the next
    window sort every queued packet instead of merging its arrivals. Where a window ran
    (or the experiment's last, which counts none), the prefix's order comes back."""
    batch = build_batch(_mixed_experiments(), static=SMALL, slots_per_host=SMALL.slots_per_host)
    params, state = jax.tree.map(lambda x: x[0], (batch.params, batch.state))
    n_slots, n = SMALL.n_slots, PREFIX * SMALL.n_hosts
    slot = np.arange(n_slots, dtype=np.int32)[::-1].copy()  # a kept order naming slots past the prefix
    state = state.replace(order=state.order.replace(order_slot=slot, order_time_ps=np.arange(n_slots, dtype=np.int64)))
    _, small = pool.shrink(params, state, PREFIX)
    assert np.any(np.asarray(small.order.order_slot) == n)  # what shrink marks as none
    kept = pool.grow(SMALL, state, small)
    assert _leaves_differing(kept.order, state.order) == []
    for ran in (small.replace(n_windows=small.n_windows + 1), small.replace(done=~small.done)):
        grown = pool.grow(SMALL, state, ran)
        assert np.array_equal(grown.order.order_slot[:n], np.where(slot[:n] >= n, n_slots, slot[:n]))
