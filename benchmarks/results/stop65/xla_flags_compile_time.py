"""Time trace+lower and compile of the SMALL engine program (test_runs' EXPERIMENTS) with XLA_FLAGS from env."""
import sys, time, json, os
sys.path.insert(0, "/work/main/tests"); sys.path.insert(0, "/work/main")
import dataclasses
import jax
from conftest import SMALL, padded_size
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
import test_runs as tr
static = dataclasses.replace(SMALL, **tr.SHAPES)
batch = build_batch(tr.EXPERIMENTS, static=static, slots_per_host=static.slots_per_host, batch_size=padded_size(4))
t0 = time.perf_counter()
lowered = engine.lower_advance(batch.params, batch.state, 16)
t1 = time.perf_counter()
compiled = lowered.compile()
t2 = time.perf_counter()
out = compiled(batch.params, batch.state, 16); jax.block_until_ready(out)
t3 = time.perf_counter()
for _ in range(5): out = compiled(batch.params, out, 16)
jax.block_until_ready(out)
t4 = time.perf_counter()
leaf = jax.tree_util.tree_leaves(out)
import hashlib, numpy as np
h = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in leaf)).hexdigest()[:12]
print(json.dumps({"flags": os.environ.get("XLA_FLAGS",""), "lower_s": round(t1-t0,2), "compile_s": round(t2-t1,2), "run6_s": round(t4-t2,2), "digest": h}))
