"""Stop 57 (record): compile ``queues.arrived_by`` alone (768 queues, 32,768 positions) and count the
copies and fusions in its while body: 3 copies and 4 fusions as main has it; with the bounds packed in
one (3, Q) carry (tried, v_copies.py: not kept) 1 and 1. Run from the repository root."""
import jax, jax.numpy as jnp, numpy as np, re, sys
jax.config.update("jax_enable_x64", True)
from multiverse_jax.ops import queues
Q, S = 768, 32768
rng = np.random.default_rng(0)
time_ps = np.sort(rng.integers(0, 10**6, S)).astype(np.int64)
queue_end = np.sort(rng.integers(0, S, Q)).astype(np.int32); queue_end[-1] = S
order = queues.ServiceOrder(jnp.arange(S, dtype=jnp.int32), jnp.asarray(time_ps), jnp.zeros(S+1, jnp.int64), jnp.asarray(queue_end), None)
head = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.asarray(queue_end[:-1])])
f = jax.jit(lambda o, h, t, hint: queues.arrived_by(o, h, t, hint))
at = jnp.asarray(rng.integers(0, 10**6, Q).astype(np.int64))
txt = f.lower(order, head, at, head).compile().as_text()
body = [m for m in re.findall(r"body=%([\w.\-]+)", txt)]
print("whiles", body)
for b in body:
    blk = re.search(r"\n%" + re.escape(b) + r" [^\n]*\{\n(.*?)\n\}", txt, re.S).group(1)
    print(b, "copies", blk.count(" copy("), "fusions", blk.count(" fusion("))
print(np.asarray(f(order, head, at, head))[:10])
