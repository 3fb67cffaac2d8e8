"""Stop 60: transmit rounds a window over the htsim sweep's point's first 1,200 windows, with the FIFO
pass (PASS=1, forced on as sim.fifo_pass=always would) and without (PASS=0).

    PASS=1 python benchmarks/results/stop60/rounds_count.py; PASS=0 python benchmarks/results/stop60/rounds_count.py"""
import sys, os
sys.path.insert(0, "benchmarks")
import collections
import jax, jax.numpy as jnp, numpy as np
from kernel_profile import sweep_point
from multiverse_jax import engine
from multiverse_jax.ops import fifo_pass
from multiverse_jax.systems import transmit
on = os.environ.get("PASS", "1") == "1"
fifo_pass.applies = (lambda static: static.class_queues == 1 and not static.int_queue_with_packet) if on else (lambda static: False)
log = collections.defaultdict(list)
orig_round = transmit.serve_round
def serve_round(params, serving, *a):
    jax.debug.callback(lambda: log["round"].append(len(log["window"])))
    return orig_round(params, serving, *a)
transmit.serve_round = serve_round
orig_t = transmit.transmit
def tr(params, state, we):
    jax.debug.callback(lambda: log["window"].append(1))
    return orig_t(params, state, we)
import multiverse_jax.engine as E
E.SYSTEMS = tuple((n, tr if n == "transmit" else f) for n, f in E.SYSTEMS)
batch = sweep_point(8, 4_000_000, 512)
st = batch.state
for i in range(12):
    st = jax.block_until_ready(engine.advance(batch.params, st, 100))
    if bool(np.asarray(st.done).all()): break
n = len(log["window"]); r = np.bincount(np.array(log["round"]), minlength=n+1)[1:]
print("windows", n, "rounds", r.sum(), "per window by 100s:", [round(float(r[i:i+100].mean()),1) for i in range(0, n, 100)])
