"""The pool's live prefix (``ops/pool.py``): windows run on the first columns of every
host compute what the whole pool computes, bit for bit, in both batching modes, and a
window that fills its prefix is run again on the whole pool."""

import dataclasses

import jax
import numpy as np
import pytest

from conftest import SMALL
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.ops import pool
from test_engine import _mixed_experiments

PREFIXES = (8, 32)  # columns of SMALL's 128: the mixed experiments use 0 to ~40 (so both, and the whole pool)


def _leaves_differing(a, b) -> list[str]:
    return [
        jax.tree_util.keystr(path)
        for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b))
        if not np.array_equal(np.asarray(x), np.asarray(y))
    ]


@pytest.mark.parametrize("batching", ["map", "vmap"])
def test_windows_on_live_prefixes_equal_the_whole_pool(batching):
    exps = _mixed_experiments()
    final = {}
    for prefixes in ((), PREFIXES):
        static = dataclasses.replace(SMALL, prefix_columns=prefixes)
        batch = build_batch(exps, static=static, slots_per_host=static.slots_per_host, batch_size=len(exps))
        final[prefixes], _ = engine.run(batch.params, batch.state, batching=batching)
    assert np.all(final[()].done) and not np.any(final[()].error)
    assert _leaves_differing(final[()], final[PREFIXES]) == []


def _first(tree):
    return jax.tree.map(lambda x: x[0], tree)


@jax.jit
def _whole_step(params, state):
    return engine.step(params, state)


@jax.jit
def _in_use(params, state):
    return pool.columns_in_use(params, state.packets)


def test_a_window_that_fills_its_prefix_runs_again_on_the_whole_pool():
    batch = build_batch(_mixed_experiments()[:1], static=SMALL, slots_per_host=SMALL.slots_per_host)
    params, state = _first(batch.params), _first(batch.state)
    # A window in which some host takes a column it did not use before.
    while True:
        after = _whole_step(params, state)
        before_columns, after_columns = int(_in_use(params, state)), int(_in_use(params, after))
        if 2 <= before_columns < after_columns:
            break
        assert not bool(after.done)
        state = after
    tight = before_columns + 1  # the smallest prefix the window may start on: its top column free
    for columns, fills in ((tight, True), (64, False)):
        assert bool(pool.fits(columns, before_columns))
        small_params, small = pool.shrink(params, state, columns)
        assert bool(pool.filled(small_params, small, jax.jit(engine.step)(small_params, small))) == fills
        with_prefix = params.replace(static=dataclasses.replace(SMALL, prefix_columns=(columns,)))
        assert _leaves_differing(after, _whole_step(with_prefix, state)) == []


def test_default_prefixes_only_for_large_pools():
    assert pool.default_prefix_columns(16, 256) == ()  # the quick start's pool: 4,096 slots
    assert pool.default_prefix_columns(128, 512) == (256,)
