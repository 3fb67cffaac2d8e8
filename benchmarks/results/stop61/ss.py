"""Stop 61 micro-benchmark (not kept): jnp.searchsorted by scan, scan_unrolled and sort, 768 queries into 1,024-32,768 sorted entries, one core."""
import time, jax, jax.numpy as jnp, numpy as np
from functools import partial
Q = 768
for n in (1024, 4096, 32768):
    a = jnp.array(np.sort(np.random.randint(0, Q + 1, n)).astype(np.int32))
    q = jnp.arange(Q, dtype=jnp.int32)
    for method in ("scan", "scan_unrolled", "sort"):
        def body(i, acc, method=method):
            return acc + jnp.searchsorted(a + (acc[0] % 2), q, side="right", method=method).astype(jnp.int32)
        f = jax.jit(lambda acc: jax.lax.fori_loop(0, 2000, body, acc))
        acc = jnp.zeros(Q, jnp.int32)
        r = f(acc).block_until_ready()
        t = time.perf_counter(); f(acc).block_until_ready(); dt = time.perf_counter() - t
        nk = f.lower(acc).compile().as_text().count(" fusion(")
        print(n, method, f"{dt / 2000 * 1e6:.2f} us", nk)
