"""Calls of 1-64 windows from window 450 of the htsim sweep's point, one core: a call's fixed cost (stop 57)."""
import sys, os, time
sys.path.insert(0, "benchmarks")
import jax, numpy as np
from kernel_profile import sweep_point
from multiverse_jax import engine
batch = sweep_point(8, 4_000_000, 512)
warm = jax.block_until_ready(engine.advance(batch.params, batch.state, 450))
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
res = {}
for rep in range(5):
    for n in (1, 2, 4, 8, 16, 32, 64):
        t = time.perf_counter(); jax.block_until_ready(engine.advance(batch.params, warm, n)); dt = time.perf_counter() - t
        res.setdefault(n, []).append(dt * 1e3)
for n, v in res.items(): print(n, "min %.2f ms  median %.2f ms  per window %.3f" % (min(v), np.median(v), min(v) / n))
