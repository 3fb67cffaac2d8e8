"""Work that only some experiments of a lockstep (vmap) batch need."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def at_most_once(needed, fn, value):
    """``fn(True, value)`` where ``needed`` (() bool), else ``value``: a while loop of at
    most one trip. Under vmap a ``lax.cond`` on a per-experiment flag runs both branches
    for every experiment; this loop runs its body only when some experiment of the batch
    needs it (and keeps the others' values). ``fn`` must make its work depend on the flag
    it is given (always True inside), or XLA hoists work that depends only on values from
    outside the loop out of it, and runs it every time."""
    return jax.lax.while_loop(lambda c: c[0], lambda c: (jnp.bool_(False), fn(c[0], c[1])), (needed, value))[1]
