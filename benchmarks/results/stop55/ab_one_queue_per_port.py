"""A/B: one class queue a port without rival classes (new) against the old layout (class 0 kept)."""
import sys, time, json
sys.path.insert(0, '/work/main/benchmarks')
from ab_window import on_one_core
on_one_core()
import jax, numpy as np
from kernel_profile import sweep_point
from multiverse_jax import engine
from multiverse_jax.components.static import Static
from multiverse_jax.components.order import initial_order_state

WARM, N, REPEATS = 450, 30, int(sys.argv[1]) if len(sys.argv) > 1 else 8
new_prop = Static.first_queued_class
old_prop = property(lambda self: 0)

def variant(prop):
    Static.first_queued_class = prop
    jax.clear_caches()
    batch = sweep_point(8, 4_000_000, 512)
    p, s = batch.params, batch.state
    s = s.replace(order=jax.tree.map(lambda x: np.broadcast_to(x, (1,) + np.shape(x)).copy(), initial_order_state(p.static)))
    prog = engine.lower_advance(p, s, WARM).compile()
    t = time.perf_counter(); warm = jax.block_until_ready(prog(p, s, WARM)); print("warm", time.perf_counter() - t, flush=True)
    Static.first_queued_class = new_prop
    return p, warm, prog

t0 = time.perf_counter()
A = variant(old_prop); print("old compiled", time.perf_counter() - t0, flush=True)
B = variant(new_prop); print("new compiled", time.perf_counter() - t0, flush=True)
print("old Q", A[1].order.order_head.shape, "new Q", B[1].order.order_head.shape)
times = {"old": [], "new": []}
finals = {}
for r in range(REPEATS):
    for name, (p, s, prog) in (("old", A), ("new", B)) if r % 2 == 0 else (("new", B), ("old", A)):
        t = time.perf_counter(); out = jax.block_until_ready(prog(p, s, N)); times[name].append((time.perf_counter() - t) / N * 1e3)
        finals[name] = out
same = all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves((finals["old"].packets, finals["old"].ports, finals["old"].flows, finals["old"].time_ps, finals["old"].n_packet_hops)), jax.tree.leaves((finals["new"].packets, finals["new"].ports, finals["new"].flows, finals["new"].time_ps, finals["new"].n_packet_hops))))
for k, v in times.items(): print(k, "ms/window min %.3f median %.3f" % (min(v), np.median(v)), [round(x, 2) for x in v])
print("new/old min %.3f median %.3f same %s" % (min(times["new"]) / min(times["old"]), np.median(times["new"]) / np.median(times["old"]), same))
json.dump({"times": times, "same": same}, open("/work/main/benchmarks/results/stop55/ab_one_queue_per_port.json", "w"), indent=1)
