"""Stop 61: the htsim sweep's point run to its end 100 windows a call, each call's ms a window, packet-hops a window
and the pool's live and queued packets after it (FP=always|never|auto: sim.fifo_pass).  FP=never python benchmarks/results/stop61/timeline.py"""
import sys, time
sys.path.insert(0, "benchmarks")
import jax, numpy as np
from kernel_profile import sweep_point
from multiverse_jax import engine
import os
batch = sweep_point(8, 4_000_000, 512, fifo_pass=os.environ.get("FP","auto"))
print("static prefix", batch.params.static.prefix_columns, batch.params.static.prefix_inner_columns, batch.params.static.prefix_per_host, batch.params.static.n_slots)
st = batch.state
t = time.perf_counter(); st = jax.block_until_ready(engine.advance(batch.params, st, 1)); print("compile+1", time.perf_counter() - t)
rows = []
total = 0
while not bool(np.asarray(st.done).all()):
    w0 = int(np.asarray(st.n_windows)[0]); h0 = int(np.asarray(st.n_packet_hops)[0])
    t = time.perf_counter(); st = jax.block_until_ready(engine.advance(batch.params, st, 100)); dt = time.perf_counter() - t
    total += dt
    w1 = int(np.asarray(st.n_windows)[0]); h1 = int(np.asarray(st.n_packet_hops)[0])
    live = int(np.asarray(st.packets.pkt_valid).sum()); q = int((np.asarray(st.packets.pkt_valid) & ~np.asarray(st.packets.pkt_in_flight)).sum())
    print(f"windows {w0:5d}-{w1:5d} t_us {int(np.asarray(st.time_ps)[0])/1e6:8.1f} {dt*1e3/(w1-w0):6.2f} ms/window hops/window {(h1-h0)/(w1-w0):6.0f} live {live} queued {q}", flush=True)
print("total", total, "hops", int(np.asarray(st.n_packet_hops)[0]))
