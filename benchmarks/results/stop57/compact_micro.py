"""Stop 57 (a /tmp script, kept as a record): segments.compact (a scatter of every entry) against a
binary search per place (compact_search), in a compiled loop of 200 on one core. Not kept: in the
engine 1.008 (compact.log)."""
import os, time, jax, jax.numpy as jnp, numpy as np
os.sched_setaffinity(0, {0})
jax.config.update("jax_enable_x64", True)
from multiverse_jax.ops.segments import compact, prefix_sum
S, C = 32768, 1024
def compact_search(mask, capacity, *columns):
    through = prefix_sum(mask, dtype=jnp.int32)  # entries up to each, inclusive
    nth = jnp.arange(1, capacity + 1, dtype=jnp.int32)
    index = jnp.searchsorted(through, nth, side="left", method="scan_unrolled")
    found = nth <= through[-1]
    at = jnp.minimum(index, mask.shape[0] - 1)
    packed = [jnp.where(found, values[at], fill) for values, fill in columns]
    return packed, through[-1] > capacity
rng = np.random.default_rng(0)
for density in ():
    mask = jnp.asarray(rng.random(S) < density)
    vals = jnp.arange(S, dtype=jnp.int32); t64 = jnp.asarray(rng.integers(0, 10**9, S))
    fa = jax.jit(lambda m, v, t: compact(m, C, (v, S), (t, 0)))
    fb = jax.jit(lambda m, v, t: compact_search(m, C, (v, S), (t, 0)))
    a, b = fa(mask, vals, t64), fb(mask, vals, t64)
    assert all(np.array_equal(x, y) for x, y in zip(a[0], b[0])) and bool(a[1]) == bool(b[1])
    for f, name in ((fa, "scatter"), (fb, "search")):
        ts = []
        for _ in range(200):
            t = time.perf_counter(); jax.block_until_ready(f(mask, vals, t64)); ts.append(time.perf_counter() - t)
        print(density, name, "%.1f us" % (1e6 * np.median(ts)))
print("in a loop of 200")
for C, density in ((1024, 0.02), (4096, 0.02), (4096, 0.1), (16384, 0.3)):
    mask0 = jnp.asarray(rng.random(S) < density)
    vals = jnp.arange(S, dtype=jnp.int32); t64 = jnp.asarray(rng.integers(0, 10**9, S))
    def loop(fn):
        def body(i, acc):
            m = jnp.roll(mask0, i)
            (p, q), _ = fn(m, C, (vals, S), (t64, 0))
            return acc + p[i % C] + q[(i * 7) % C]
        return jax.jit(lambda: jax.lax.fori_loop(0, 200, body, jnp.int64(0)))
    for fn, name in ((compact, "scatter"), (compact_search, "search")):
        f = loop(fn); jax.block_until_ready(f())
        ts = []
        for _ in range(10):
            t = time.perf_counter(); jax.block_until_ready(f()); ts.append(time.perf_counter() - t)
        print(C, density, name, "%.1f us per compaction" % (1e6 * min(ts) / 200))
