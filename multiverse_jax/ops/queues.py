"""The window's class queues in service order, built once per window, so that a transmit
round reads each queue's head and its queued bytes in O(queues), not O(pool).

Nothing joins a queue while ports transmit: ``forward`` has queued every packet that
reaches a switch before the window ends, ``receive`` every ACK, and what ports send
lands in later windows (every link delay is at least the window). A queue only loses its
head. So one sort at the start of the window puts each class queue's packets in the order
its FIFO serves them, and a round only moves a per-queue pointer: the head is the packet
under the pointer, and the bytes queued at an instant are those between the pointer and
the first packet arriving later (a binary search: the packets of a queue are sorted by
arrival).

Queue ``(1 + C) p + k`` is port p's class k: class 0 control (ACKs, unless
``packet.ack_class=data``), 1 + k data priority k. Without rival classes
(``Static.rival_classes`` off: every experiment queues ACKs with data at one priority,
htsim's configuration) class 0 is never used and a port has one queue, its data FIFO:
queue p (``Static.class_queues``, ``first_queued_class``), so every per-queue array is
half as long. FIFO order is arrival time, then the
tie-breaks of ``PacketState.pkt_scheduled_ps`` and ``pkt_rank``, then the slot first in
host order (``ops.packets.in_host_order``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
from multiverse_jax.components.order import OrderState
from multiverse_jax.components.packets import PacketState
from multiverse_jax.ops.lockstep import switch_largest
from multiverse_jax.ops.packets import in_host_order, queued, slots_in_host_order
from multiverse_jax.ops.segments import compact, prefix_sum
from multiverse_jax.units import NEVER


class QueuedPacket(NamedTuple):
    """What a transmit round reads of a queued packet, copied out of the pool in service
    order (so a round never reads the pool arrays it writes, which would make XLA copy
    them whole every round): arrays (S,) over positions, or (P,) for each port's choice."""

    is_ack: jnp.ndarray  # bool
    wire_bytes: jnp.ndarray  # int32
    rank: jnp.ndarray  # int32 (PacketState.pkt_rank)
    flow: jnp.ndarray  # int32
    seq: jnp.ndarray  # int32
    hop: jnp.ndarray  # int32


class ServiceOrder(NamedTuple):
    """Every class queue's packets in service order, queue after queue (Q = P (1 + C)
    queues; packets not queued come last)."""

    slot: jnp.ndarray  # (S,) int32 pool slot at each position
    time_ps: jnp.ndarray  # (S,) int64 arrival at its port of the packet at each position (NEVER past the queues)
    bytes_before: jnp.ndarray  # (S + 1,) int64 wire bytes of the packets at the positions before each one
    queue_end: jnp.ndarray  # (Q,) int32 one past each queue's last position (its first: the previous queue's end)
    packet: QueuedPacket  # (S,) each the packet at each position
    # (Q,) int32 one past each queue's packets known to have arrived before the window: those
    # kept from the last window (``_merged``), the queue's first position where not known. Every
    # instant a round searches is at or after the window start, so it is where the searches start.
    arrived_before: jnp.ndarray | None = None


def rank_limit(static) -> int:
    """Ranks are below this: a flow index, or with ``Static.switch_serial`` also
    (k, place) < (ports + 1, ports + 1) (``systems.forward.pipeline_ranks``)."""
    return max(static.n_flows, (static.n_ports + 1) ** 2 if static.switch_serial else 0)


def packet_class(params: Params, pkts: PacketState):
    """(S,) int32 each packet's class at its port: 0 control, 1 + its flow's priority."""
    control = pkts.pkt_is_ack & ~params.ack_in_data_class
    return jnp.where(control, 0, 1 + params.flows.flow_priority[pkts.pkt_flow]).astype(jnp.int32)


def sort_by(key, order, index_bits: int):
    """``order`` (n,) int32 stably re-sorted by ``key[order]`` (n,) int64 (non-negative,
    below ``2**(63 - index_bits)``): one sort of a single packed key (key, then position),
    unpacked; sorting with an operand, or on several keys, costs ~5-20x more on a CPU."""
    position = jnp.arange(order.shape[0], dtype=jnp.int64)
    packed = jax.lax.sort((key[order] << index_bits) | position, is_stable=False)  # keys are unique
    return order[(packed & ((1 << index_bits) - 1)).astype(jnp.int32)]


SMALLEST_SORT = 4096  # the service order sorts the queued packets in 4096, 4 x 4096, ... places, or the whole pool


def merge_sizes(smallest_sort: int) -> list[int]:
    """The place counts a window's new arrivals, merged into the order the last window
    kept, are sorted in: a quarter, a half and all of the smallest sort (1024, 2048, 4096)."""
    return sorted({max(1, smallest_sort // 4), max(1, smallest_sort // 2), smallest_sort})


def sort_sizes(n_total: int) -> list[int]:
    """The place counts below ``n_total`` a compacted subset of it is sorted (or routed) in:
    ``SMALLEST_SORT``, 4 times that, ... (the whole ``n_total`` is the last resort)."""
    return [SMALLEST_SORT * 4**i for i in range(n_total.bit_length()) if SMALLEST_SORT * 4**i < n_total]


def arrival_sizes(n_total: int) -> list[int]:
    """The place counts a window's arrivals at switches are compacted (and routed, and
    ranked) in: a quarter of ``SMALLEST_SORT`` (1,024), then ``sort_sizes``; none below a
    pool that small. A busy window brings few next to the pool: 100-1,100 on the htsim
    sweep's point (k=8, 65,536 slots), where a sort of 1,024 costs ~27 us against ~96 us
    for 4,096, and switch.pipeline=serial sorts them four times."""
    sizes = sort_sizes(n_total)
    return [max(1, SMALLEST_SORT // 4)] + sizes if sizes else []


def size_index(count, sizes: list[int]):
    """() int32 how many of ``sizes`` are too small for ``count`` entries (len: none holds them)."""
    return sum((count > n).astype(jnp.int32) for n in sizes)


def service_order(params: Params, pkts: PacketState, window_end_ps, kept: OrderState) -> ServiceOrder:
    """Every class queue's packets in service order, for the window.

    The order the last window left (``kept``, see ``keep``) still holds for the packets in
    it: they have not moved, and every packet queued since arrived after all of them, so
    it joins its queue behind them. When the new arrivals fit in fewer places (of
    ``merge_sizes``) than the queued packets would be sorted in, only they are sorted and
    merged in, queue by queue (``_merged``: a few passes over the pool and a sort of a
    window's arrivals, not of every queued packet: the work follows the packets that
    move). Otherwise (fewer queued, the first window, more new arrivals than
    that, or the hybrid mode moved a kept packet's arrival) the queued packets are
    compacted (a cumsum) and sorted in the smallest of 4096, 16,384, ... places that
    holds them (below the pool's size; else the whole pool). None of this runs when
    nothing is queued or kept. One way runs (``lockstep.switch_largest``; in a lockstep
    batch, ``join`` picks the one that serves every experiment: each gives an
    experiment the same order). The arrays are the pool's size either way (past the
    queues: no packet).
    """
    n_slots = params.static.n_slots
    sizes = sort_sizes(n_slots)
    if not sizes:
        return _order_of(params, pkts, window_end_ps, slots_in_host_order(params))
    view = _kept_view(kept)
    counts, new = _kept_and_new(params, pkts, kept, view)
    merging = merge_sizes(sizes[0])
    first_sort = 1 + len(merging)  # branches: none, a merge per size, a sort per size (the whole pool last)

    def needs(params, pkts, window_end_ps, kept, view, new, counts):
        """(4,): 0 nothing queued or kept, 1 the kept order and the new arrivals would do,
        2 a sort is needed; the branch that sorts the queued packets in the smallest size
        that holds them; the branch that merges the new arrivals, sorted in the smallest
        of ``merge_sizes`` that holds them; whether that merge sorts fewer places than that
        sort (the passes over the pool are alike)."""
        n_queued, n_new, n_kept = counts[0], counts[1], jnp.sum(view.count)
        can_merge = _kept_order_holds(counts, view) & (n_new <= merging[-1])
        way = jnp.where((n_queued == 0) & (n_kept == 0), 0, jnp.where(can_merge, 1, 2))
        sort_index, merge_index = size_index(n_queued, sizes), size_index(n_new, merging)
        sort_places = sum(jnp.where(sort_index == i, n, 0) for i, n in enumerate(sizes + [n_slots]))
        merge_places = sum(jnp.where(merge_index == i, n, 0) for i, n in enumerate(merging))
        cheaper = (merge_places < sort_places).astype(jnp.int32)
        return jnp.stack([way, first_sort + sort_index, 1 + jnp.minimum(merge_index, len(merging) - 1), cheaper])

    def join(needs):
        """The batch sorts if any experiment must (in the size its largest queues need: a
        merge is no use to an experiment whose kept order does not hold); else it merges
        (in the size its most new arrivals need) if that is cheaper for any, all of them
        able to; else it sorts (or, with nothing queued anywhere, does nothing)."""
        way, sort, merge_in, cheaper = needs[:, 0], needs[:, 1], needs[:, 2], needs[:, 3]
        merge = jnp.any((cheaper == 1) & (way == 1))
        sorts = jnp.any(way == 2) | (~merge & jnp.any(way == 1))
        return jnp.where(sorts, jnp.max(sort), jnp.where(merge, jnp.max(jnp.where(way == 1, merge_in, 0)), 0))

    def sorted_in(n_places: int):
        def order(params, pkts, window_end_ps, *_):  # closes over no array: a custom_vmap function may not
            every_slot = slots_in_host_order(params)
            if n_places >= n_slots:  # the whole pool
                return _order_of(params, pkts, window_end_ps, every_slot)
            (members,), _ = compact(in_host_order(params, queued(pkts)), n_places, (every_slot, n_slots))
            return _padded(_order_of(params, pkts, window_end_ps, members), n_slots)

        return order

    def merged_in(n_places: int):
        def merged(params, pkts, window_end_ps, kept, view, new, _):
            return _merged(params, pkts, window_end_ps, kept, view, new, n_places)

        return merged

    branches = [lambda params, *_: _no_queues(params)] + [merged_in(n) for n in merging]
    branches += [sorted_in(n) for n in sizes + [n_slots]]
    return switch_largest(needs, branches, params, pkts, window_end_ps, kept, view, new, counts, join=join)


def queue_of_position(queue_end, n_positions: int):
    """(n_positions,) int32 the queue each position of an order belongs to (Q past the
    queues), from ``queue_end`` (Q,): the number of queues that end at or before it."""
    ends = jnp.zeros(n_positions + 1, jnp.int32).at[queue_end].add(1)
    return prefix_sum(ends[:n_positions], dtype=jnp.int32)


def queue_of_class(static, port, class_):
    """The class queue of class ``class_`` at ``port`` (arrays alike, broadcasting): queue
    ``Static.class_queues`` port + class - ``first_queued_class`` (``Static.n_queues``)."""
    return static.class_queues * port + class_ - static.first_queued_class


def port_queues(static, ports):
    """(K, class queues) int the class queues of ``ports`` (K,), lowest class first, and
    (class queues,) the class of each column."""
    classes = static.first_queued_class + jnp.arange(static.class_queues)
    return queue_of_class(static, ports[:, None], classes), classes


def _queue_of(params: Params, pkts: PacketState, at):
    """The class queue of the packets in slots ``at`` (``queue_of_class``)."""
    return queue_of_class(params.static, pkts.pkt_port[at], packet_class(params, pkts)[at])


class KeptView(NamedTuple):
    """The order the last window left (``OrderState``) as this window reads it."""

    queue: jnp.ndarray  # (S,) int32 the queue of each position (Q past the queues)
    is_kept: jnp.ndarray  # (S,) bool the packet there was still queued (at or past its queue's pointer)
    count: jnp.ndarray  # (Q,) int32 the packets kept in each queue


def _kept_view(kept: OrderState) -> KeptView:
    """Which positions of the kept order still hold a queued packet: those at or past
    their queue's pointer (one pass over the positions, once per window)."""
    n_positions, n_queues = kept.order_slot.shape[0], kept.order_queue_end.shape[0]
    queue = queue_of_position(kept.order_queue_end, n_positions)
    pointer = kept.order_head[jnp.minimum(queue, n_queues - 1)]
    is_kept = (queue < n_queues) & (jnp.arange(n_positions, dtype=jnp.int32) >= pointer)
    return KeptView(queue, is_kept, kept.order_queue_end - kept.order_head)


def _kept_and_new(params: Params, pkts: PacketState, kept: OrderState, view: KeptView):
    """(4,) int32 the window's counts, and (S,) bool the new arrivals: the packets queued
    that arrived at or after the window that kept the order. The counts are of the queued
    packets, the new arrivals, the queued packets that arrived before (``n_earlier``), and
    the kept order's packets that are no longer queued in the queue it put them in, with the
    arrival it sorted them by (``n_moved``). The kept order still holds where none moved and
    it holds every earlier arrival (``n_earlier`` = its count): then the kept are exactly
    the queued packets that arrived before. One reduction over a (4, S) stack: XLA fused separate ones into the
    4-entry kernel that reads them (``service_order``'s ``needs``), whose loop evaluated
    them over the pool for each entry it wrote (92-147 µs a busy window of the htsim
    sweep's point, against ~70 µs for this one; ``benchmarks/HISTORY.md``, stop 52)."""
    is_queued = queued(pkts)
    earlier = is_queued & (pkts.pkt_time_ps < kept.order_end_ps)
    new = is_queued & ~earlier
    counts = jnp.sum(jnp.stack([is_queued, new, earlier, _moved(params, pkts, kept, view)]), axis=1, dtype=jnp.int32)
    return counts, new


def _moved(params: Params, pkts: PacketState, kept: OrderState, view: KeptView):
    """(S,) bool the kept order's packets no longer queued in the queue it put them in, with
    the arrival it sorted them by; () False where no experiment of the batch is hybrid
    (``Static.steady_window`` 1). Only the hybrid mode moves a queued packet (a frozen
    partition's packets leave the pool, ``ops/freeze.py``, and come back with new arrivals,
    ``ops/restore.py``); otherwise a queued packet stays where it is until its port sends it,
    which moves its queue's pointer past it. So a packet-level batch skips three gathers
    over the pool a window: 0.958 of the time of a busy window of the htsim sweep's point
    (stop 57, ``benchmarks/HISTORY.md``)."""
    if params.static.steady_window == 1:
        return jnp.zeros_like(view.is_kept)
    at = jnp.minimum(kept.order_slot, params.static.n_slots - 1)
    unmoved = queued(pkts)[at] & (pkts.pkt_time_ps[at] == kept.order_time_ps) & (_queue_of(params, pkts, at) == view.queue)
    return view.is_kept & ~unmoved


def _kept_order_holds(counts, view: KeptView):
    """() bool the kept order still holds (``_kept_and_new``'s ``counts``): none of its
    packets moved, and the queued packets that arrived before are exactly its own."""
    return (counts[3] == 0) & (counts[2] == jnp.sum(view.count))


def _merged(
    params: Params, pkts: PacketState, window_end_ps, kept: OrderState, view: KeptView, new, n_places: int
) -> ServiceOrder:
    """The kept order with the ``new`` (S,) arrivals, sorted in ``n_places`` places, behind
    the kept packets of their queues: a kept packet moves by the kept and new packets of
    the queues before its own, less the packets its queue sent before it; a new one
    behind the kept packets of its queue and those before."""
    n_slots = params.static.n_slots
    every_slot = slots_in_host_order(params)
    (members,), _ = compact(in_host_order(params, new), n_places, (every_slot, n_slots))
    arrivals = _order_of(params, pkts, window_end_ps, members)  # over n_places positions
    n_queues = kept.order_queue_end.shape[0]
    kept_end = jnp.cumsum(view.count, dtype=jnp.int32)  # (Q,) one past each queue's kept packets, merged
    kept_shift = kept_end - view.count + queue_start(arrivals) - kept.order_head  # (Q,)
    to = jnp.arange(n_slots, dtype=jnp.int32) + kept_shift[jnp.minimum(view.queue, n_queues - 1)]
    arrival_queue = queue_of_position(arrivals.queue_end, n_places)
    arrival_to = jnp.arange(n_places, dtype=jnp.int32) + kept_end[jnp.minimum(arrival_queue, n_queues - 1)]
    slot = jnp.full(n_slots, n_slots, jnp.int32)
    slot = slot.at[jnp.where(view.is_kept, to, n_slots)].set(kept.order_slot, mode="drop")
    slot = slot.at[jnp.where(arrival_queue < n_queues, arrival_to, n_slots)].set(arrivals.slot, mode="drop")
    # Each queue's kept packets come first: they arrived before the window that kept them ended.
    return _columns(params, pkts, slot, slot < n_slots, kept_end + arrivals.queue_end, kept_end + queue_start(arrivals))


def keep(order: ServiceOrder, head, window_end_ps) -> OrderState:
    """What the window leaves for the next (``service_order``): its ``order`` and each
    queue's pointer ``head`` (Q,) after transmit (the packets from it on are still
    queued). Nothing is compacted: the next window reads them in place (``_kept_view``)."""
    return OrderState(order.slot, order.time_ps, order.queue_end, head, window_end_ps)


def _no_queues(params: Params) -> ServiceOrder:
    """The service order of a window with nothing queued."""
    n_slots, n_queues = params.static.n_slots, params.static.n_queues
    zeros = jnp.zeros(n_slots, jnp.int32)
    return ServiceOrder(
        jnp.full(n_slots, n_slots, jnp.int32), jnp.full(n_slots, NEVER, jnp.int64), jnp.zeros(n_slots + 1, jnp.int64),
        jnp.zeros(n_queues, jnp.int32),
        QueuedPacket(jnp.zeros(n_slots, bool), zeros, zeros, zeros, zeros, zeros), jnp.zeros(n_queues, jnp.int32),
    )  # fmt: skip


def fifo_order(params: Params, time_ps, scheduled_ps, prior_ps, rank, window_end_ps):
    """(n,) int32 the positions 0..n-1 of n packets in FIFO order: by arrival ``time_ps``,
    then the earlier ``scheduled_ps`` (``PacketState.pkt_scheduled_ps``), then
    (switch.pipeline=serial) the earlier ``prior_ps``, then the lower ``rank``, then the
    lower position; (n,) each (``prior_ps`` None unless ``Static.switch_serial``).

    Stable sorts of one packed 64-bit key each, least significant first. Arrivals are
    taken relative to the window's end over ``2**(62 - index bits)`` ps (1.1 hours for
    65,536 positions); the scheduling tie-breaks (at most a link delay before the arrival)
    are clipped to the bits the ranks leave (``2**(61 - index bits - rank bits)`` ps: 17 ms
    for 65,536 positions and 1,000 flows). With ``Static.switch_serial`` the tie-breaks
    take two sorts: the rank after ``prior_ps``, then ``scheduled_ps``.
    """
    n = time_ps.shape[0]
    index_bits = max(1, n.bit_length())
    rank_bits = (rank_limit(params.static) + 2).bit_length()
    half = 1 << (62 - index_bits - rank_bits - 1)

    def offset(t_ps):  # an instant at or before the arrival, relative to it, in the bits left
        return jnp.clip(t_ps - time_ps + half, 0, 2 * half - 1)

    rank = jnp.clip(rank.astype(jnp.int64) + 1, 0, (1 << rank_bits) - 1)
    order = jnp.arange(n, dtype=jnp.int32)
    if params.static.switch_serial:
        prior = jnp.where(params.switch_serial, offset(prior_ps), 0)
        order = sort_by((prior << rank_bits) | rank, order, index_bits)
        order = sort_by(offset(scheduled_ps), order, index_bits)
    else:
        order = sort_by((offset(scheduled_ps) << rank_bits) | rank, order, index_bits)
    span = 1 << (62 - index_bits)
    return sort_by(jnp.clip(time_ps - (window_end_ps - span // 2), 0, span - 1), order, index_bits)


def _order_of(params: Params, pkts: PacketState, window_end_ps, members) -> ServiceOrder:
    """The service order of the pool slots ``members`` (n,) int32 (in host order,
    ``packets.in_host_order``; ``n_slots``: none), over n positions.

    The FIFO order (``fifo_order``), then one more stable sort by queue.
    """
    n_slots, n_queues, n = params.static.n_slots, params.static.n_queues, members.shape[0]
    index_bits = max(1, n.bit_length())
    at = jnp.minimum(members, n_slots - 1)
    time_ps = pkts.pkt_time_ps[at]
    prior_ps = pkts.pkt_prior_ps[at] if params.static.switch_serial else None
    order = fifo_order(params, time_ps, pkts.pkt_scheduled_ps[at], prior_ps, pkts.pkt_rank[at], window_end_ps)
    is_queued = (members < n_slots) & queued(pkts)[at]
    queue = jnp.where(is_queued, _queue_of(params, pkts, at), n_queues)
    position = sort_by(queue.astype(jnp.int64), order, index_bits)
    sorted_queue, slot = queue[position], members[position]
    queue_end = jnp.searchsorted(sorted_queue, jnp.arange(n_queues, dtype=jnp.int32), side="right").astype(jnp.int32)
    return _columns(params, pkts, slot, sorted_queue < n_queues, queue_end)


def _columns(params: Params, pkts: PacketState, slot, in_queue, queue_end, arrived_before=None) -> ServiceOrder:
    """The service order whose position i holds pool slot ``slot[i]``, a queued packet
    where ``in_queue[i]`` ((n,) each; the queues one after another, ending at
    ``queue_end`` (Q,)): what a round reads of each packet, copied out of the pool
    (``arrived_before``: see ``ServiceOrder``; None: each queue's start)."""
    n_slots = params.static.n_slots
    at = jnp.minimum(slot, n_slots - 1)
    wire_bytes = jnp.where(in_queue, pkts.pkt_bytes[at].astype(jnp.int64), 0)
    bytes_before = jnp.concatenate([jnp.zeros(1, jnp.int64), prefix_sum(wire_bytes)])
    # Past the queues: no slot, no packet, whatever the number of positions (as ``_padded``).
    fields = (pkts.pkt_is_ack, pkts.pkt_bytes, pkts.pkt_rank, pkts.pkt_flow, pkts.pkt_seq, pkts.pkt_hop)
    packet = QueuedPacket(*(jnp.where(in_queue, field[at], jnp.zeros((), field.dtype)) for field in fields))
    slot = jnp.where(in_queue, slot, n_slots)
    order = ServiceOrder(slot, jnp.where(in_queue, pkts.pkt_time_ps[at], NEVER), bytes_before, queue_end, packet)
    return order._replace(arrived_before=queue_start(order) if arrived_before is None else arrived_before)


def _padded(order: ServiceOrder, n_positions: int) -> ServiceOrder:
    """``order`` over ``n_positions`` (past its own: no packet, nothing queued)."""
    extra = n_positions - order.slot.shape[0]

    def pad(column, value):
        return jnp.concatenate([column, jnp.full(extra, value, column.dtype)])

    return ServiceOrder(
        pad(order.slot, n_positions), pad(order.time_ps, NEVER), pad(order.bytes_before, order.bytes_before[-1]),
        order.queue_end, QueuedPacket(*(pad(column, 0) for column in order.packet)), order.arrived_before,
    )  # fmt: skip


def queue_start(order: ServiceOrder):
    """(Q,) int32 each queue's first position: where its pointer starts the window."""
    return jnp.concatenate([jnp.zeros(1, jnp.int32), order.queue_end[:-1]])


def heads(order: ServiceOrder, head, n_slots: int):
    """Each queue's next packet, from its pointer ``head`` (Q,): (Q,) int64 its arrival
    (NEVER for an empty queue) and (Q,) int32 its slot (``n_slots`` for none)."""
    has = head < order.queue_end
    at = jnp.minimum(head, order.slot.shape[0] - 1)
    return jnp.where(has, order.time_ps[at], NEVER), jnp.where(has, order.slot[at], n_slots)


def at_head(order: ServiceOrder, head, queue) -> QueuedPacket:
    """The packet at the head of ``queue`` (P,) (its pointer in ``head`` (Q,)): (P,) each."""
    at = jnp.minimum(head[queue], order.slot.shape[0] - 1)
    return QueuedPacket(*(column[at] for column in order.packet))


# Positions a hinted search (``arrived_by``) reads at once from its hint, in one gather:
# between two departures of a port, its queues mostly gain fewer packets than this, and
# each step of the search past them is a loop iteration of several kernels. On the
# htsim-sweep point: 887 -> 528 kernels per window, the same time on a 2-core CPU
# (``benchmarks/ab_window.py``; 3 probes: no faster either).
PROBES = 8


def arrived_by(order: ServiceOrder, head, at_ps, hint=None):
    """(Q,) int32 one past the last position of each queue, from its pointer ``head`` on,
    whose packet has arrived by ``at_ps`` (Q,), as a queue is sorted by arrival.

    Without ``hint``: a binary search, which stops once every search has ended, after
    log2 of the longest queue's length steps (not of the pool's: every transmit round
    runs it). With ``hint`` (Q,), a guess of the answer from below (the last round's: a
    port's next departure starts no earlier than its last): the ``PROBES`` positions
    from it are read at once, and only where all of them have arrived does an
    exponential search go on past them (1 + 2 log2(packets arrived since) steps). A hint
    past the answer is detected and dropped (the search starts from ``head``), so the
    answer never depends on it.
    """
    n_positions = order.slot.shape[0]
    end = jnp.maximum(order.queue_end, head)

    def time_at(position):
        return order.time_ps[jnp.minimum(position, n_positions - 1)]

    if hint is None:
        low, high, step = head, end, jnp.zeros_like(head)
    else:
        hint = jnp.clip(hint, head, end)
        low = jnp.where((hint == head) | (time_at(hint - 1) <= at_ps), hint, head)
        # A queue sorted by arrival: what has arrived from ``low`` on is a prefix.
        probe = low[:, None] + jnp.arange(PROBES, dtype=low.dtype)  # (Q, PROBES)
        seen = (probe < end[:, None]) & (time_at(probe) <= at_ps[:, None])
        low = low + jnp.sum(seen, axis=1, dtype=low.dtype)
        more = seen[:, -1]  # every probe had arrived: the answer may lie further on
        high, step = jnp.where(more, end, low), more.astype(low.dtype)

    def narrow(bounds):
        # step > 0: galloping, the answer is in [low, high) and at least low; probe
        # low + step - 1 and double the step while it has arrived. step == 0: halving.
        low, high, step = bounds
        galloping = step > 0
        probe = jnp.where(galloping, low + step - 1, (low + high) // 2)
        inside = probe < high
        arrived = inside & (time_at(probe) <= at_ps)
        searching = low < high
        new_low = jnp.where(searching & arrived, probe + 1, low)
        gallop_high = jnp.where(arrived | ~inside, high, probe)
        halve_high = jnp.where(searching & ~arrived, probe, high)
        new_high = jnp.where(galloping, gallop_high, halve_high)
        return new_low, new_high, jnp.where(galloping & arrived, 2 * step, 0)

    def searching(bounds):
        low, high, step = bounds
        return jnp.any(low < high)

    return jax.lax.while_loop(searching, narrow, (low, high, step))[0]


def _bytes_per_port(order: ServiceOrder, head, end, n_ports: int):
    """(P,) int64 bytes at the positions [head, end) of each queue (Q,), every class summed."""
    per_queue = order.bytes_before[end] - order.bytes_before[head]
    return per_queue.reshape(n_ports, head.shape[0] // n_ports).sum(axis=1)


def queued_bytes(order: ServiceOrder, head, n_ports: int):
    """(P,) int64 bytes queued at each port, every class: those not yet sent (from each
    queue's pointer ``head`` (Q,) on)."""
    return _bytes_per_port(order, head, jnp.maximum(order.queue_end, head), n_ports)


def arrived_bytes(order: ServiceOrder, head, n_ports: int, at_ps, hint=None):
    """(P,) int64 the bytes of ``queued_bytes`` that have arrived by ``at_ps[port]`` (P,)
    (as ``ops.packets.port_queue_bytes``), and (Q,) one past each queue's last such
    position (``arrived_by``, ``hint`` passed on: the next search's hint)."""
    end = arrived_by(order, head, jnp.repeat(at_ps, head.shape[0] // n_ports), hint)
    return _bytes_per_port(order, head, end, n_ports), end
