"""Stop 61 micro-benchmark (not kept): jnp.cumsum against a blocked cumsum (rows of 32) at 300-4,096 entries, one core."""
import time, jax, jax.numpy as jnp, numpy as np
BLOCK = 32
def blocked(values):
    n = values.shape[0]
    v = jnp.pad(values, (0, (-n) % BLOCK)).reshape(-1, BLOCK)
    inner = jnp.cumsum(v, axis=1)
    carry = jnp.cumsum(inner[:, -1])
    out = inner + jnp.concatenate([jnp.zeros(1, values.dtype), carry[:-1]])[:, None]
    return out.reshape(-1)[:n]
for n in (300, 768, 1024, 1536, 4096):
    x0 = jnp.array(np.random.randint(0, 9000, n).astype(np.int64))
    assert np.array_equal(np.asarray(blocked(x0)), np.cumsum(np.asarray(x0)))
    for name, f in (("cumsum", jnp.cumsum), ("blocked", blocked)):
        def body(i, acc, f=f):
            return acc + f(x0 + acc[0] % 3)
        g = jax.jit(lambda acc: jax.lax.fori_loop(0, 2000, body, acc))
        acc = jnp.zeros(n, jnp.int64); g(acc).block_until_ready()
        t = time.perf_counter(); g(acc).block_until_ready(); dt = time.perf_counter() - t
        print(n, name, f"{dt / 2000 * 1e6:.2f} us")
