"""Stop 61: the htsim sweep's point (one experiment, k=8, 4 MB flows, 512 slots a host) run to its end on one core,
sim.fifo_pass=never (the rounds alone) against always (the pass and the NIC view), alternating in one process;
the FCTs checked equal.  python benchmarks/results/stop61/ab_point.py 5"""
import sys, time, os
sys.path.insert(0, "benchmarks")
from ab_window import on_one_core
on_one_core()
import jax, numpy as np
from kernel_profile import sweep_point
from multiverse_jax import engine
batches = {fp: sweep_point(8, 4_000_000, 512, fifo_pass=fp) for fp in ("never", "always")}
def run(b):
    st = b.state
    t = time.perf_counter()
    while not bool(np.asarray(st.done).all()):
        st = engine.advance(b.params, st, 256)
    jax.block_until_ready(st)
    return time.perf_counter() - t, st
fct = {}
for fp, b in batches.items():
    t = time.perf_counter(); _, st = run(b); fct[fp] = np.asarray(st.flows.flow_finish_ps); print(fp, "first", time.perf_counter() - t, flush=True)
assert np.array_equal(fct["never"], fct["always"])
walls = {fp: [] for fp in batches}
for r in range(int(sys.argv[1])):
    for fp, b in batches.items():
        w, st = run(b); walls[fp].append(w); print(r, fp, round(w, 3), int(np.asarray(st.n_windows)[0]), flush=True)
a, b = np.array(walls["never"]), np.array(walls["always"])
print("never/always paired median", np.median(a / b), "min", a.min(), b.min(), "min ratio", a.min() / b.min())
