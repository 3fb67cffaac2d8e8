"""Stop 61: per transmit round, whether a NIC creates a packet, how many NIC ports and switch ports send, over 20
windows at 440, 860 and 1,300 of the htsim sweep's point (FP=always|auto: sim.fifo_pass).  FP=always python benchmarks/results/stop61/count_rounds.py"""
import sys, collections
sys.path.insert(0, "benchmarks")
import jax, jax.numpy as jnp, numpy as np
from kernel_profile import sweep_point
from multiverse_jax import engine
from multiverse_jax.systems import transmit
log = []
orig = transmit.serve_round
def serve_round(params, serving, *a):
    f = serving.front
    host, is_nic = transmit._nic_host(params)
    jax.debug.callback(lambda c, n, s: log.append((int(c), int(n), int(s))), jnp.sum(f.creates), jnp.sum(f.sends & is_nic), jnp.sum(f.sends & ~is_nic))
    return orig(params, serving, *a)
transmit.serve_round = serve_round
import os; batch = sweep_point(8, 4_000_000, 512, fifo_pass=os.environ.get("FP", "auto"))
st = batch.state
for at, n in ((440, 20), (860, 20), (1300, 20)):
    st = jax.block_until_ready(engine.advance(batch.params, st, at - int(np.asarray(st.n_windows)[0])))
    log.clear()
    st = jax.block_until_ready(engine.advance(batch.params, st, n))
    a = np.array(log)
    print(at, "rounds", len(a), "with creates", (a[:, 0] > 0).sum(), "with NIC sends", (a[:, 1] > 0).sum(), "NIC only", ((a[:, 1] > 0) & (a[:, 2] == 0)).sum(), "switch only", ((a[:, 1] == 0) & (a[:, 2] > 0)).sum())
