"""Steering XLA's fusion where it repeats work: a value computed once, in a buffer of its own."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def computed_once(mask, window_end_ps):
    """``mask`` (any shape, bool), computed once into a buffer that the kernels reading it
    share.

    XLA's CPU fusion copies an elementwise mask's computation into every kernel that reads
    it. ``receive``'s mask of the packets delivered in the window (their arrival times, and
    four bool columns) was computed again in each of its 11 pool-wide selects (its column
    writes and its per-flow counts' updates), a pass over the pool's int64 times each. A
    conditional is a boundary that fusion does not cross, so its output is materialised.
    The predicate is one XLA cannot fold (the window ends after 0 ps: always), and both
    branches give the same int8 values.

    The branches differ because JAX forwards an operand a branch returns unchanged, which
    would remove the conditional. Under ``vmap`` the conditional becomes a select of both
    branches, with the same values; fusion may copy the mask again there (the lockstep path
    is a GPU's, where that is cheap).

    Not ``computed_apart`` of the int8 mask: the conversion inside the conditional writes the
    buffer directly, where an int8 mask passed in and returned was 1.5-2.7 % slower a busy
    window (stop 58, ``benchmarks/results/stop58/computed_once_ab.log``).
    """
    as_int8 = jax.lax.cond(
        window_end_ps > 0, lambda m: m.astype(jnp.int8), lambda m: jnp.where(m, 1, 0).astype(jnp.int8), mask
    )  # fmt: skip
    return as_int8 != 0


def computed_apart(values, window_end_ps):
    """``values`` (a small array, such as one entry a port) computed into a buffer of its
    own before a pass over the pool gathers from it.

    XLA fuses a gather from a computed array into the kernel that gathers, computing the
    gathered entry again for every element: ``receive``'s NIC at the far end of each
    packet's link (the link's far node, then that host's NIC) was two dependent gathers per
    slot of the pool, not one. The conditional is ``computed_once``'s boundary (never the
    zeros: the window ends after 0 ps)."""
    return jax.lax.cond(window_end_ps > 0, lambda v: v, jnp.zeros_like, values)
