"""Work that only some experiments of a lockstep (vmap) batch need."""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


def at_most_once(needed, fn, value):
    """``fn(True, value)`` where ``needed`` (() bool), else ``value``.

    Alone, or in a ``lax.map`` over experiments, a while loop of at most one trip (``fn``
    must make its work depend on the flag it is given, always True inside, or XLA hoists
    work that depends only on values from outside the loop out of it, and runs it every
    time). Under vmap a ``lax.cond`` on a per-experiment flag runs both branches for every
    experiment, and a loop with a per-experiment condition copies and selects its carry;
    here the batch runs ``fn`` (vmapped, flag per experiment) in a ``lax.cond`` on whether
    any experiment needs it, and only then selects the results of those that do.
    """
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(needed, value)  # what fn closes over -> consts
    treedef = jax.tree.structure(out_shape)

    def run(consts, go, value):
        evaluate = jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(closed.jaxpr, consts))
        return jax.tree.unflatten(treedef, evaluate(go, *jax.tree.leaves(value)))

    @custom_vmap
    def once(needed, value, consts):
        body = lambda c: (jnp.bool_(False), run(consts, c[0], c[1]))  # noqa: E731
        return jax.lax.while_loop(lambda c: c[0], body, (needed, value))[1]

    @once.def_vmap
    def once_batched(axis_size, in_batched, needed, value, consts):
        needed_batched, value_batched, consts_batched = in_batched
        needed, value = _all_batched(axis_size, (needed_batched, value_batched), (needed, value))
        consts_axes = [0 if batched else None for batched in consts_batched]

        def taken(needed, value, consts):
            new = jax.vmap(run, in_axes=(consts_axes, 0, 0))(consts, needed, value)
            return jax.tree.map(lambda n, o: jnp.where(needed.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, value)

        out = jax.lax.cond(jnp.any(needed), taken, lambda needed, value, consts: value, needed, value, consts)
        return out, jax.tree.map(lambda _: True, out)

    return once(needed, value, list(closed.consts))


def while_any(cond, body, init, consts):
    """``lax.while_loop`` of ``cond(consts, carry)`` / ``body(consts, carry)`` from ``init``
    (``consts``: what the loop reads but never changes; pass every array the functions use
    here, not in a closure).

    Alone, or in a ``lax.map`` over experiments, it is that loop. Under vmap, JAX would run
    a loop with a per-experiment condition as long as any experiment needs it, and after
    every trip select, element by element, between the new carry and the old for each
    experiment: a copy and a select of every carry array per trip (for a carry that holds
    the packet pool, work that grows with the pool, not the packets). Here the batched loop
    runs its vmapped body while ``cond`` holds for any experiment and keeps no old carry:
    so ``body`` must leave a carry for which ``cond`` is False exactly as it is (a fixed
    point; e.g. a transmit round in which no port can send changes nothing). Results are
    then the same, bit for bit, batched or alone.
    """

    @custom_vmap
    def loop(init, consts):
        return jax.lax.while_loop(lambda c: cond(consts, c), lambda c: body(consts, c), init)

    @loop.def_vmap
    def loop_batched(axis_size, in_batched, init, consts):
        init, consts = _all_batched(axis_size, in_batched, (init, consts))
        run = jax.vmap(cond)
        step = jax.vmap(body)
        out = jax.lax.while_loop(lambda c: jnp.any(run(consts, c)), lambda c: step(consts, c), init)
        return out, jax.tree.map(lambda _: True, out)

    return loop(init, consts)


def when_any(needed, fn, idle, consts):
    """``fn(consts, idle)`` where ``needed`` (() bool), else ``idle`` (a pytree like its
    result; pass what ``fn`` updates in place, such as the packet pool, there and only
    there, so that XLA need not copy it).

    Alone, or in a ``lax.map`` over experiments, a ``lax.cond``. Under vmap, where a cond
    on a per-experiment flag would run both branches and select, the batch runs ``fn``
    (vmapped) if any experiment needs it, else gives ``idle``: so for an experiment that
    does not need it, ``fn``'s result must act as ``idle`` does wherever it is used (e.g.
    transmit runs where no port runs: every write masked off). Pass every array ``fn``
    reads in ``consts`` or ``idle``, not in a closure.
    """

    @custom_vmap
    def branch(needed, idle, consts):
        return jax.lax.cond(needed, lambda idle, consts: fn(consts, idle), lambda idle, consts: idle, idle, consts)

    @branch.def_vmap
    def branch_batched(axis_size, in_batched, needed, idle, consts):
        needed, idle, consts = _all_batched(axis_size, in_batched, (needed, idle, consts))
        out = jax.lax.cond(
            jnp.any(needed), lambda idle, consts: jax.vmap(fn)(consts, idle), lambda idle, consts: idle, idle, consts
        )
        return out, jax.tree.map(lambda _: True, out)

    return branch(needed, idle, consts)


def _all_batched(axis_size: int, in_batched, values):
    """``values`` with every leaf that is not batched broadcast along a new leading axis."""
    return jax.tree.map(
        lambda x, batched: x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x)), values, tuple(in_batched)
    )


def switch_largest(index_fn, branches, *args, join=None):
    """``lax.switch(index_fn(*args), branches, *args)``: one branch runs.

    Under vmap, the branch of the largest index any experiment asks for runs for all of
    them (vmapped), with no per-experiment select: so a branch must give an experiment the
    same result as any smaller index it could ask for (e.g. a sort in more places than it
    needs). Without this, JAX would run every branch some experiment asks for and select.

    Where no single order of the branches has that property, ``index_fn`` returns a
    vector of what an experiment needs and ``join`` maps those of the batch, (E, k), to
    the one index that serves them all (alone: E = 1).
    """
    join = (lambda needs: jnp.max(needs)) if join is None else join

    @custom_vmap
    def switch(*args):
        return jax.lax.switch(join(jnp.asarray(index_fn(*args))[None]), branches, *args)

    @switch.def_vmap
    def switch_batched(axis_size, in_batched, *args):
        axes = [jax.tree.map(lambda batched: 0 if batched else None, b) for b in in_batched]
        needs = jax.vmap(index_fn, in_axes=axes, axis_size=axis_size)(*args)
        vmapped = [jax.vmap(branch, in_axes=axes, axis_size=axis_size) for branch in branches]
        out = jax.lax.switch(join(needs), vmapped, *args)
        return out, jax.tree.map(lambda _: True, out)

    return switch(*args)


def switch_in_place(index_fn, branches, carry, consts):
    """``switch_largest(index_fn, branches)`` for branches that update ``carry`` (a pytree,
    such as columns of the packet pool) in place: ``branches[index_fn(carry, consts)](True,
    carry, consts)``.

    Alone, or in a ``lax.map`` over experiments, a chain of ``at_most_once`` loops, one a
    branch: a loop updates its carry in place, where a ``lax.switch`` copied every carry
    array its branch writes, on the way in and out (7 copies of pool columns a window in
    ``forward``). A branch must make its work depend on the flag it is given (as for
    ``at_most_once``). Under vmap, as ``switch_largest``: the branch of the largest index any
    experiment asks for runs for all.
    """

    @custom_vmap
    def switch(carry, consts):
        index = index_fn(carry, consts)
        for k, branch in enumerate(branches):
            carry = at_most_once(index == k, lambda go, value, branch=branch: branch(go, value, consts), carry)
        return carry

    @switch.def_vmap
    def switch_batched(axis_size, in_batched, carry, consts):  # switch_largest's own rule, every branch going
        carry, consts = _all_batched(axis_size, in_batched, (carry, consts))
        going = [lambda c, k, b=b: b(jnp.bool_(True), c, k) for b in branches]
        out = jax.vmap(lambda c, k: switch_largest(index_fn, going, c, k))(carry, consts)
        return out, jax.tree.map(lambda _: True, out)

    return switch(carry, consts)
