"""The pool's live prefix: a window's work follows the packets, not the pool's size.

Host h owns slots h, h + H, h + 2H, ... and takes its lowest free column first
(``components/packets.py``), so while no host holds a packet in column c or above, every
packet lives in the pool's first c H slots. A step on those slots alone, with
``Static.slots_per_host = c``, is the same simulator with a smaller pool: slot numbers,
hosts and tie-breaks (``packets.in_host_order``) are those of the whole pool, so it
computes the same window, bit for bit, as long as no host runs out of its c columns
during it. Its pool-sized passes (forward, receive, PFC's replay, the service order,
the free-slot lists) then cost c H slots, not H S: doubling ``sim.packets_per_host``
with the same traffic leaves them as they were.

``Static.prefix_columns`` lists the prefixes a batch may run on (none: the whole pool
always; ``default_prefix_columns``). Each window takes the smallest that leaves a
margin above the highest column in use (``PREFIX_MARGIN``); a window that fills its
prefix (a packet in its top column at the end, or a NIC found no free slot in it) is run
again on the whole pool from the state it started with, so no result depends on the
prefix. One filled at the end but not constrained (its host needed exactly the last
column) is run again too: a window's only cost. In a lockstep batch (vmap) the prefix
is the largest any experiment needs, and a window is run again for the batch if any
experiment filled its prefix (``lockstep.switch_largest``, ``lockstep.at_most_once``).

Each prefix compiles the step once more (the whole pool is the last of them), so a
batch has prefixes only where the pool is large enough to pay for it.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from multiverse_jax.components.experiment import ERROR_POOL_FULL, Params, State
from multiverse_jax.components.order import initial_order_state
from multiverse_jax.components.static import Static
from multiverse_jax.ops.lockstep import at_most_once, switch_largest
from multiverse_jax.ops.queues import sort_sizes
from multiverse_jax.units import NEVER

PREFIX_MARGIN = 8  # a prefix of c columns runs a window only while the top c // 8 (and at least 1) are free
PREFIX_MIN_SLOTS = 16384  # pools at least this large run on half their columns when they can (see default_prefix_columns)


def default_prefix_columns(n_hosts: int, slots_per_host: int) -> tuple[int, ...]:
    """The prefixes a pool runs on by default: half its columns, for pools of at least
    ``PREFIX_MIN_SLOTS`` slots (smaller ones compile faster than they would run faster)."""
    half = slots_per_host // 2
    return (half,) if n_hosts * slots_per_host >= PREFIX_MIN_SLOTS and half >= 1 else ()


def columns_in_use(params: Params, pkts) -> jax.Array:
    """() int32 one past the highest column holding a packet, over every host (0: none)."""
    column = jnp.arange(params.static.n_slots, dtype=jnp.int32) // params.static.n_hosts
    return jnp.max(jnp.where(pkts.pkt_valid, column + 1, 0))


def fits(columns: int, in_use) -> jax.Array:
    """() bool a prefix of ``columns`` runs a window that starts with ``in_use`` columns
    taken: its top ``columns // PREFIX_MARGIN`` (at least one) are free."""
    return in_use <= columns - max(1, columns // PREFIX_MARGIN)


def shrink(params: Params, state: State, columns: int) -> tuple[Params, State]:
    """The experiment on its pool's first ``columns`` columns: the packets of those slots,
    the kept service order (every kept packet is live, so in them) with its sentinel moved."""
    n = columns * params.static.n_hosts
    small = params.replace(static=dataclasses.replace(params.static, slots_per_host=columns))
    order = state.order
    order_slot = order.order_slot[:n]
    order = order.replace(order_slot=jnp.where(order_slot >= n, n, order_slot), order_time_ps=order.order_time_ps[:n])
    return small, state.replace(packets=jax.tree.map(lambda column: column[:n], state.packets), order=order)


def grow(static: Static, state: State, small: State, columns: int) -> State:
    """``state`` with what the step on its first ``columns`` columns left (``small``)
    written back. Positions of the kept order past the prefix's are past every queue. A
    prefix too small to keep its order (``queues.sort_sizes``: it sorts every window)
    leaves none kept, where the whole pool would keep one: the next window on the whole
    pool sorts (or merges) from nothing kept, to the same order."""
    n, n_slots = columns * static.n_hosts, static.n_slots
    packets = jax.tree.map(lambda whole, part: jax.lax.dynamic_update_slice_in_dim(whole, part, 0, 0), state.packets, small.packets)
    if not sort_sizes(n):  # built by operations: a custom_vmap function may not close over an array constant
        nothing_kept = jax.tree.map(lambda x: jnp.full(np.shape(x), np.ravel(x)[0], x.dtype), initial_order_state(static))
        return small.replace(packets=packets, order=nothing_kept)
    order = small.order
    order_slot = jnp.concatenate([jnp.where(order.order_slot >= n, n_slots, order.order_slot), jnp.full(n_slots - n, n_slots, jnp.int32)])
    order_time_ps = jnp.concatenate([order.order_time_ps, jnp.full(n_slots - n, NEVER, jnp.int64)])
    order = order.replace(order_slot=order_slot, order_time_ps=order_time_ps)
    return small.replace(packets=packets, order=order)


def filled(params: Params, before: State, after: State) -> jax.Array:
    """() bool a window on ``params``' prefix may have been held back by its size: a packet
    in its top column at the end (a host took its last free slot of it), or a NIC found
    no free slot where it had none before."""
    n_hosts, n_slots = params.static.n_hosts, params.static.n_slots
    top = jnp.any(after.packets.pkt_valid[n_slots - n_hosts :])
    newly_full = ((after.error & ~before.error) & ERROR_POOL_FULL) != 0
    return top | newly_full


def step_on_live_prefix(step, params: Params, state: State) -> State:
    """``step(params, state)``, run on the smallest of ``Static.prefix_columns`` the
    window fits in, or on the whole pool (see the module docstring)."""
    sizes = params.static.prefix_columns
    if not sizes:
        return step(params, state)

    def needs(params, state):
        """() int32 the index of the smallest prefix the window fits in (len: none)."""
        in_use = columns_in_use(params, state.packets)
        return sum((~fits(c, in_use)).astype(jnp.int32) for c in sizes)

    def on_prefix(columns: int):
        def run(params, state):  # closes over no array: a custom_vmap function may not
            small_params, small = shrink(params, state, columns)
            after = step(small_params, small)
            return grow(params.static, state, after, columns), ~filled(small_params, small, after)

        return run

    def whole_pool_later(params, state):
        return state, jnp.bool_(False)

    out, done = switch_largest(needs, [on_prefix(c) for c in sizes] + [whole_pool_later], params, state)

    def on_whole_pool(go, _):
        # The step's work depends on the flag (True whenever it runs), so XLA keeps it in the loop.
        return step(params, state.replace(time_ps=jnp.where(go, state.time_ps, NEVER)))

    return at_most_once(~done, on_whole_pool, out)
