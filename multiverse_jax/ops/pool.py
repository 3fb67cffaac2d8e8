"""The pool's live prefix: a window's work follows the packets, not the pool's size.

Host h owns slots h, h + H, h + 2H, ... and takes its lowest free column first
(``components/packets.py``), so while no host holds a packet in column c or above, every
packet lives in the pool's first c H slots. A window on those slots alone, with
``Static.slots_per_host = c``, is the same simulator with a smaller pool: slot numbers,
hosts and tie-breaks (``packets.in_host_order``) are those of the whole pool, so it
computes the same window, bit for bit, as long as no host needs a slot past column c
during it. Its pool-sized passes (forward, receive, PFC's replay, the service order,
the free-slot lists) then cost c H slots, not H S: doubling ``sim.packets_per_host``
with the same traffic leaves them as they were.

A batch with ``Static.prefix_columns`` = c (0: the whole pool always;
``default_prefix_columns``) runs its windows on the first c columns while the next
window cannot need more (``prefix_fits``): the columns in use, plus the most packets one
host's NIC can create in a window (``creatable_packets``: the only packets a window
creates, outside the hybrid mode's thaw, which runs on the whole pool). A host takes its
lowest free column, so its new packets land below in-use + created. So no window on
the prefix is ever held back by it: there is nothing to check or run again after it,
and the engine runs a stretch of windows on one copy of the prefix, copied out of the
pool before the stretch and back after it (``engine._steps_until_stopped``).

A prefix is a smaller pool, and it may have a prefix of its own (``Static.prefix_inner_columns``,
given to the prefix's pool by ``shrink``): the engine then runs the windows on the whole
pool, on the prefix or on the prefix's prefix, whichever is the smallest that holds the
next window (``engine._steps_until_stopped`` nests once). Each prefix compiles the window
once more, so a batch has one only where the pool is large enough to pay for it, and two
only on a CPU (``default_prefix_columns``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.components.order import initial_order_state
from multiverse_jax.components.static import Static
from multiverse_jax.ops.packets import serialization_ps
from multiverse_jax.ops.queues import sort_sizes
from multiverse_jax.ops.segments import count_by
from multiverse_jax.units import NEVER

PREFIX_MIN_SLOTS = 16384  # pools at least this large run on a prefix of their columns when they can (default_prefix_columns)


def default_prefix_columns(n_hosts: int, slots_per_host: int, two_levels: bool = True) -> tuple[int, int]:
    """The prefixes a pool runs on by default (``Static.prefix_columns``,
    ``prefix_inner_columns``), for pools of at least ``PREFIX_MIN_SLOTS`` slots (smaller
    ones would compile longer than they would save; 0: none): half its columns, or with
    ``two_levels`` three quarters of them and inside that half.

    Two levels because the columns a busy pool uses wander: the htsim sweep's point (k=8,
    512 slots a host) needed 215-342 columns over 120 windows (+3 a window may create), so
    half the pool held 38 % of its windows and three quarters all of them. They pay on a
    CPU, where a pass costs its columns (the sweep on two CPU devices 1.14–1.20x), and cost a
    third compiled window (``benchmarks/HISTORY.md``, stop 37); ``build_batch`` asks for them on a CPU only."""
    if n_hosts * slots_per_host < PREFIX_MIN_SLOTS:
        return 0, 0
    if not two_levels:
        return slots_per_host // 2, 0
    return 3 * slots_per_host // 4, slots_per_host // 2


def columns_in_use(params: Params, pkts) -> jax.Array:
    """() int32 one past the highest column holding a packet, over every host (0: none)."""
    column = jnp.arange(params.static.n_slots, dtype=jnp.int32) // params.static.n_hosts
    return jnp.max(jnp.where(pkts.pkt_valid, column + 1, 0))


def creatable_packets(params: Params, state: State) -> jax.Array:
    """() int32 at least the most data packets one host's NIC can create in a window.

    A NIC starts a packet only when its port is free, so the starts of k packets inside a
    window W are at least the serialisation times of the k - 1 before apart. Every packet
    of a flow but its last is full (payload + header), so a host creates at most
    1 + W // (a full packet's serialisation on its NIC) full packets, plus one last packet
    per flow of its that has packets left to send.
    """
    n_hosts = params.static.n_hosts
    full_ps = serialization_ps(params.payload_bytes + params.header_bytes, params.links.link_rate_bps[params.nics.nic_port])
    unsent = state.flows.flow_sent_packets < params.flows.flow_n_packets  # (F,)
    tails = count_by(unsent, params.flows.flow_src, n_hosts)  # (H,)
    return jnp.max(1 + params.window_ps // full_ps + tails).astype(jnp.int32)


def prefix_fits(params: Params, state: State, columns: int) -> jax.Array:
    """() bool the experiment's next window runs on its pool's first ``columns`` columns:
    they hold every packet it can have by the window's end, and no partition is frozen
    (the hybrid mode's thaw restores queues, many packets at once; ``systems/steady.py``)."""
    needed = columns_in_use(params, state.packets) + creatable_packets(params, state)
    return (needed <= columns) & ~jnp.any(state.steady.frozen)


def shrink(params: Params, state: State, columns: int) -> tuple[Params, State]:
    """The experiment on its pool's first ``columns`` columns: the packets of those slots,
    the kept service order (every kept packet is live, so in them) with its sentinel moved.
    The smaller pool's own prefix is ``Static.prefix_inner_columns`` (where it is smaller),
    and that one has none."""
    n = columns * params.static.n_hosts
    inner = params.static.prefix_inner_columns if params.static.prefix_inner_columns < columns else 0
    small = params.replace(
        static=dataclasses.replace(params.static, slots_per_host=columns, prefix_columns=inner, prefix_inner_columns=0)
    )
    order = state.order
    order_slot = order.order_slot[:n]
    order = order.replace(order_slot=jnp.where(order_slot >= n, n, order_slot), order_time_ps=order.order_time_ps[:n])
    return small, state.replace(packets=jax.tree.map(lambda column: column[:n], state.packets), order=order)


def grow(static: Static, state: State, small: State) -> State:
    """``state`` with what windows on its pool's first columns left (``small``) written
    back. Positions of the kept order past the prefix's are past every queue. A prefix
    too small to keep its order (``queues.sort_sizes``: it sorts every window) leaves none
    kept, where the whole pool would keep one: the next window on the whole pool sorts
    (or merges) from nothing kept, to the same order.

    Where no window ran on the prefix (a stretch of none: the engine's loop copies the
    prefix out and back all the same), the whole pool keeps its own order: ``shrink``
    marks a kept packet past the prefix as none, and that order would no longer hold, so
    the next window would sort every queued packet instead of merging its arrivals (k=8
    sweep point: one sort of 65,536 places at each call's first window)."""
    n, n_slots = small.packets.pkt_valid.shape[0], static.n_slots
    packets = jax.tree.map(lambda whole, part: jax.lax.dynamic_update_slice_in_dim(whole, part, 0, 0), state.packets, small.packets)
    if not sort_sizes(n):
        order = jax.tree.map(jnp.asarray, initial_order_state(static))
    else:
        order = small.order
        order_slot = jnp.concatenate([jnp.where(order.order_slot >= n, n_slots, order.order_slot), jnp.full(n_slots - n, n_slots, jnp.int32)])
        order_time_ps = jnp.concatenate([order.order_time_ps, jnp.full(n_slots - n, NEVER, jnp.int64)])
        order = order.replace(order_slot=order_slot, order_time_ps=order_time_ps)
    ran = (small.n_windows != state.n_windows) | (small.done != state.done)  # an experiment's last window counts none
    order = jax.tree.map(lambda grown, whole: jnp.where(ran, grown, whole), order, state.order)
    return small.replace(packets=packets, order=order)
