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
lowest free column, so its new packets land below in-use + created. So no window on the
prefix is ever held back by it: there is nothing to check or run again after it,
and the engine runs a stretch of windows on one copy of the prefix, copied out of the
pool before the stretch and back after it (``engine._steps_until_stopped``).

A prefix is a smaller pool, and it may have a prefix of its own, and that one its own again
(``Static.prefix_inner_columns``, the levels inside the first, given to each prefix's pool
by ``shrink``): the engine then runs the windows on the whole pool or on the smallest
prefix that holds the next window (``engine._steps_until_stopped`` nests once per level). Each prefix compiles the window once more, so a batch has one
only where the pool is large enough to pay for it.

With ``Static.prefix_per_host`` the prefix holds c H places that are each host's own
columns in use and what it may create, not the first c columns of every host (see "The
per-host prefix" below): one host with hundreds of packets then costs its own columns,
not everyone's. It is the CPU's default (``default_prefix_columns``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.components.order import initial_order_state
from multiverse_jax.components.packets import PoolLayout
from multiverse_jax.components.static import Static
from multiverse_jax.ops.packets import by_host, serialization_ps
from multiverse_jax.ops.queues import sort_sizes
from multiverse_jax.ops.segments import compact, count_by
from multiverse_jax.units import NEVER

PREFIX_MIN_SLOTS = 16384  # pools at least this large run on a prefix of their columns when they can (default_prefix_columns)


def default_prefix_columns(n_hosts: int, slots_per_host: int, on_cpu: bool = True, layout: str = "auto") -> tuple[int, tuple[int, ...], bool]:
    """The prefixes a pool runs on (``Static.prefix_columns``, ``prefix_inner_columns``,
    ``prefix_per_host``) for ``sim.live_prefix``'s ``layout``:
    ``per_host``, per-host prefixes of half the pool's places, a quarter inside that and an
    eighth inside that; ``columns``, the first
    half of every host's columns, one level; ``none``, none (0). ``auto`` chooses
    ``per_host`` on a CPU and ``columns`` elsewhere, for pools of at least
    ``PREFIX_MIN_SLOTS`` slots (smaller ones would compile longer than they would save).

    Per host because one host with hundreds of packets held behind PFC makes the first
    c columns of every host hold nothing less than its own: the htsim sweep's point (k=8,
    512 slots a host) held 398-407 of 512 columns for its last thousand windows while its
    live packets fell from 23 k to 700, and every one of them ran on the whole pool; on
    per-host prefixes of 256 and 64 columns' places the whole run took 4.0-5.2 s against
    5.3-6.1 s (``benchmarks/HISTORY.md``, stop 42). Several levels because the packets a
    busy run holds vary tenfold over it: its windows needing 10-15 k places (a fifth of
    the run) ran on half the pool's while a quarter's held them; with the quarter between the
    half and the eighth the run took 6.5-8.2 % less, and the 8-point sweep 1.15x (stop 46;
    20-35 s more to compile, one more copy of the window; a fourth level, a sixteenth, ran
    slower). They pay most on a CPU, where a pass costs its places. On
    a GPU, where a window is bound by its kernels' latency, they (two levels then) ran the 32-point htsim sweep
    1.3x faster than one level of the first columns, but the 256-point one only 1.00-1.04x,
    and they compile 23-28 s longer (README, Performance: "On one GPU"), so ``auto`` keeps the
    first columns there."""
    if layout == "auto":
        if n_hosts * slots_per_host < PREFIX_MIN_SLOTS:
            return 0, (), False
        layout = "per_host" if on_cpu else "columns"
    if layout == "per_host":
        return slots_per_host // 2, (slots_per_host // 4, slots_per_host // 8), True
    if layout == "columns":
        return slots_per_host // 2, (), False
    if layout == "none":
        return 0, (), False
    raise ValueError(f"sim.live_prefix must be auto, per_host, columns or none, got {layout!r}")


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
    The smaller pool's own prefixes are ``Static.prefix_inner_columns`` (``_prefix_params``)."""
    n = columns * params.static.n_hosts
    small = _prefix_params(params, columns)
    order = state.order
    order_slot = order.order_slot[:n]
    order = order.replace(order_slot=jnp.where(order_slot >= n, n, order_slot), order_time_ps=order.order_time_ps[:n])
    return small, state.replace(packets=jax.tree.map(lambda column: column[:n], state.packets), order=order)


def _prefix_params(params: Params, columns: int, layout: PoolLayout | None = None) -> Params:
    """The params of a prefix of ``columns`` columns (per host: places over H), laid out
    by ``layout`` (None: the first columns). Its own prefix is the first of
    ``Static.prefix_inner_columns`` smaller than it, with the rest inside that one."""
    inner = tuple(level for level in params.static.prefix_inner_columns if level < columns)
    static = dataclasses.replace(
        params.static, slots_per_host=columns, prefix_columns=inner[0] if inner else 0, prefix_inner_columns=inner[1:]
    )  # fmt: skip
    return params.replace(static=static, pool_layout=layout)


def _grown_order(static: Static, state: State, small: State, parent_slot):
    """The kept service order after windows on a prefix (``small``), in the parent pool's
    slots (``parent_slot(order_slot)``: the prefix's slot, its size past every queue, to
    the parent's, ``static.n_slots`` past every queue). See ``grow``."""
    n, n_slots = small.packets.pkt_valid.shape[0], static.n_slots
    if not sort_sizes(n):
        order = jax.tree.map(jnp.asarray, initial_order_state(static))
    else:
        order = small.order
        order_slot = jnp.concatenate([parent_slot(order.order_slot), jnp.full(n_slots - n, n_slots, jnp.int32)])
        order_time_ps = jnp.concatenate([order.order_time_ps, jnp.full(n_slots - n, NEVER, jnp.int64)])
        order = order.replace(order_slot=order_slot, order_time_ps=order_time_ps)
    ran = (small.n_windows != state.n_windows) | (small.done != state.done)  # an experiment's last window counts none
    return jax.tree.map(lambda grown, whole: jnp.where(ran, grown, whole), order, state.order)


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
    order = _grown_order(static, state, small, lambda slot: jnp.where(slot >= n, n_slots, slot))
    return small.replace(packets=packets, order=order)


# --- The per-host prefix (``Static.prefix_per_host``) --------------------------------------
#
# The first c columns of every host hold a window only while no host holds a packet in
# column c or above: one host with hundreds of packets queued behind PFC makes every
# host's columns up to its own part of every window (the htsim sweep's point: 398-407 of
# 512 columns for its last thousand windows, while its live packets fell from 23 k to 700;
# ``benchmarks/pool_occupancy.py``). A per-host prefix holds each host's own columns in
# use, plus what it may create, in c H places: the whole pool's slots {c' H + h : c' <
# m_h}, in the whole pool's slot order (so every tie-break by slot, index or host order is
# the whole pool's: the same window, bit for bit), then padding that never holds a packet.
# A host's places in host order are its columns in order, so its n-th free place is its
# n-th free column (``nic.free_slots``).


def host_columns_in_use(params: Params, pkts) -> jax.Array:
    """(H,) int32 one past each host's highest column holding a packet (0: none), on the
    whole pool or a per-host prefix."""
    if params.pool_layout is None:  # a reduction over each host's row: no scatter (every window of the whole pool)
        column = jnp.arange(1, params.static.slots_per_host + 1, dtype=jnp.int32)
        return jnp.max(jnp.where(by_host(params.static, pkts.pkt_valid), column, 0), axis=1)
    layout = params.pool_layout
    in_use = jnp.where(pkts.pkt_valid, layout.place_column + 1, 0)
    host = jnp.where(pkts.pkt_valid, layout.place_host, params.static.n_hosts)
    return jnp.zeros(params.static.n_hosts, jnp.int32).at[host].max(in_use, mode="drop")


def _hosts_and_columns(params: Params):
    """(S_total,) int32 each slot's host (H: padding) and its column among that host's slots."""
    if params.pool_layout is not None:
        return params.pool_layout.place_host, params.pool_layout.place_column
    slot = jnp.arange(params.static.n_slots, dtype=jnp.int32)
    return slot % params.static.n_hosts, slot // params.static.n_hosts


def _host_capacity(params: Params):
    """(H,) int32 the columns each host has in this pool."""
    if params.pool_layout is not None:
        return params.pool_layout.host_columns
    return jnp.full(params.static.n_hosts, params.static.slots_per_host, jnp.int32)


def _host_needs(params: Params, state: State):
    """(H,) int32 the columns each host needs for its next window (in use, plus the most
    packets a host can create in it), and () that most."""
    creatable = creatable_packets(params, state)
    return host_columns_in_use(params, state.packets) + creatable, creatable


def per_host_fits(params: Params, state: State, columns: int, inside: bool) -> jax.Array:
    """() bool: ``inside`` a per-host prefix of ``columns`` H places (``Params.pool_layout``;
    or one nested in it), each host's places hold its next window; else, from this pool, such a
    prefix would hold every host's next window. Never while a partition is frozen (``prefix_fits``)."""
    needed, creatable = _host_needs(params, state)
    fits = jnp.all(needed <= _host_capacity(params))
    if not inside:
        fits = fits & (jnp.sum(needed) <= columns * params.static.n_hosts)
    return fits & (creatable <= columns) & ~jnp.any(state.steady.frozen)  # a window lists at most `columns` free places a host


def shrink_per_host(params: Params, state: State, columns: int) -> tuple[Params, State]:
    """The experiment on a per-host prefix of N = ``columns`` H places: each host's needed
    columns (``_host_needs``) and an even share of the places left (up to the columns it
    has here), gathered in slot order. Where they do not fit, the places hold what fits and
    no window runs on them (``per_host_fits``), so ``grow_per_host`` changes nothing. The
    prefix's own per-host prefixes are ``Static.prefix_inner_columns`` (``_prefix_params``)."""
    static = params.static
    n_hosts, n_parent, n_places = static.n_hosts, static.n_slots, columns * static.n_hosts
    needed, _ = _host_needs(params, state)
    spare = jnp.maximum(n_places - jnp.sum(needed), 0)
    host_columns = jnp.minimum(needed + spare // n_hosts, _host_capacity(params)).astype(jnp.int32)
    host, column = _hosts_and_columns(params)
    held = (host < n_hosts) & (column < host_columns[jnp.minimum(host, n_hosts - 1)])
    (parent_place, place_host, place_column), _ = compact(
        held, n_places, (jnp.arange(n_parent, dtype=jnp.int32), n_parent), (host, n_hosts), (column, 0)
    )  # fmt: skip
    host_start = (jnp.cumsum(host_columns) - host_columns).astype(jnp.int32)
    place = jnp.arange(n_places, dtype=jnp.int32)
    padding = place_host == n_hosts
    in_order = jnp.where(padding, n_places, host_start[jnp.minimum(place_host, n_hosts - 1)] + place_column)  # its index in host order
    host_order = jnp.where(padding, place, 0).at[in_order].set(place, mode="drop")  # the padding last, in place order
    order_host = jnp.full(n_places, n_hosts, jnp.int32).at[in_order].set(place_host, mode="drop")
    layout = PoolLayout(parent_place, place_host, place_column, host_order, order_host, host_columns, host_start)
    small = _prefix_params(params, columns, layout)
    at = jnp.minimum(parent_place, n_parent - 1)
    packets = jax.tree.map(lambda whole: whole[at], state.packets)
    packets = packets.replace(pkt_valid=packets.pkt_valid & ~padding)
    place_of = jnp.full(n_parent + 1, n_places, jnp.int32).at[parent_place].set(place, mode="drop")  # parent slot -> place
    order = state.order
    order_slot = place_of[jnp.minimum(order.order_slot[:n_places], n_parent)]
    order = order.replace(order_slot=order_slot, order_time_ps=order.order_time_ps[:n_places])
    return small, state.replace(packets=packets, order=order)


def grow_per_host(static: Static, state: State, small_params: Params, small: State) -> State:
    """``state`` (its pool's ``static``) with what windows on a per-host prefix of it
    (``small_params``, ``small``) left written back: its places' packets to their slots,
    its kept order in the parent's slots (``grow``'s rules otherwise)."""
    n_parent, parent_place = static.n_slots, small_params.pool_layout.parent_place
    n_places = parent_place.shape[0]
    packets = jax.tree.map(lambda whole, part: whole.at[parent_place].set(part, mode="drop"), state.packets, small.packets)

    def parent_slot(slot):  # a place's slot in the parent pool (the padding's: past every queue)
        return jnp.where(slot < n_places, parent_place[jnp.minimum(slot, n_places - 1)], n_parent)

    return small.replace(packets=packets, order=_grown_order(static, state, small, parent_slot))
