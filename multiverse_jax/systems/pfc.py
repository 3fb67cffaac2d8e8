"""PFC (802.1Qbb-style, one lossless class): per-ingress pause and resume at exact instants.

A switch counts, per ingress link, the bytes of the paused class it holds that arrived
over that link: data, plus ACKs when they travel in their flow's data class
(``packet.ack_class=data``, as htsim; as control packets they are neither counted nor
paused). A packet counts from the instant it arrives (its last bit) until it starts
leaving its egress port (dequeue, as the HPCC authors' ns-3 code removes it from ingress
admission; htsim waits for the end of its serialisation). The pause is decided at the
instant an arrival takes the count above XOFF, the resume at the instant a departure takes
it below XON (hysteresis: in between nothing changes); the frame reaches the upstream
port one link delay later, and from then on that port starts no packet of a data class
(one it is sending finishes). No packet is ever dropped.

Every link delay is at least the window, so a decision taken in this window takes effect
in a later one: the system replays the window's arrivals and departures per ingress link,
in time order, after ``transmit`` has made them, and appends the first
``PFC_ENTRIES_PER_WINDOW`` decisions with their instants to the link's history (more in one
window is ``ERROR_PFC_TOGGLES``: it needs an XOFF - XON gap below a window of traffic).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import ERROR_PFC_TOGGLES, Params, State
from multiverse_jax.components.links import PFC_ENTRIES_PER_WINDOW
from multiverse_jax.ops import freeze
from multiverse_jax.ops.lockstep import at_most_once
from multiverse_jax.ops.pfc import counted_until_ps
from multiverse_jax.ops.queues import sort_sizes
from multiverse_jax.ops.segments import compact, count_by, prefix_max, prefix_sum

PFC_EVENTS_PER_LINK = 2  # room per link for the window's events of links near a threshold (more: a larger sort)
KEY_BITS = 63  # bits of a sort key; events whose link, time and index do not fit sort the index as an operand
PFC_COMPACT_ABOVE = 8192  # a pool with at most this many events (2 per slot) always takes the full sort: one path to compile


def event_sort_sizes(n_keys: int, n_ports: int) -> list[int]:
    """Place counts a window's PFC events are sorted in, smallest first: a few per link,
    then the service order's sizes above that (``queues.sort_sizes``), then every key."""
    first = max(1, min(n_keys, PFC_EVENTS_PER_LINK * n_ports))
    return [first] + [n for n in sort_sizes(n_keys) if n > first] + ([n_keys] if first < n_keys else [])


class _Traffic(NamedTuple):
    """What the window does to each ingress's count (counted packets only)."""

    left_now: jnp.ndarray  # (S,) bool the packet stopped counting this window (left its switch)
    came_now: jnp.ndarray  # (S,) bool it started counting this window (reached its switch)
    left_ps: jnp.ndarray  # (S,) int64 when it stops counting (``ops.pfc.counted_until_ps``)
    size: jnp.ndarray  # (S,) int64 its bytes
    held_start: jnp.ndarray  # (P,) int64 the bytes each ingress held at the window start
    came_bytes: jnp.ndarray  # (P,) int64 the bytes that reached each ingress this window
    left_bytes: jnp.ndarray  # (P,) int64 the bytes that left each ingress this window


def _window_traffic(params: Params, state: State, window_end_ps) -> _Traffic:
    """The window's ``_Traffic``. Its per-ingress sums are one segment sum over the pool of
    three byte counts per packet (held at the start, came, left), not three sums: the same
    speed in a one-core A/B (stop 53), one scatter to read."""
    pkts = state.packets
    window_start_ps = window_end_ps - params.window_ps
    counted, left_ps = counted_until_ps(params, pkts)
    counted = counted & ~freeze.frozen_packets(params, state)  # a frozen partition's links hold their state
    size = pkts.pkt_bytes.astype(jnp.int64)
    left_now = counted & pkts.pkt_in_flight & (left_ps >= window_start_ps) & (left_ps < window_end_ps)
    not_yet_left = ~pkts.pkt_in_flight | (left_ps >= window_start_ps)
    came_now = counted & (pkts.pkt_ingress_ps >= window_start_ps) & not_yet_left
    held_before = counted & (pkts.pkt_ingress_ps < window_start_ps) & not_yet_left
    n_ports = params.static.n_ports
    bytes_of = jnp.stack([jnp.where(mask, size, 0) for mask in (held_before, came_now, left_now)], axis=1)  # (S, 3)
    per_ingress = jax.ops.segment_sum(bytes_of, jnp.where(counted, pkts.pkt_ingress, n_ports), n_ports)  # (P, 3)
    return _Traffic(left_now, came_now, left_ps, size, *(per_ingress[:, i] for i in range(3)))


def _near_threshold(params: Params, state: State, traffic: _Traffic):
    """(P,) bool the links that might change state this window: a running link only if all
    its arrivals could take it above XOFF, a paused one only if all its departures could
    take it below XON (bounds of its count, which never leaves them). Only their events
    are replayed."""
    highest = traffic.held_start + traffic.came_bytes
    lowest = traffic.held_start - traffic.left_bytes
    paused = state.links.pfc_paused[:, -1]
    could = jnp.where(paused, lowest < params.links.link_pfc_xon_bytes, highest > params.links.link_pfc_xoff_bytes)
    return could & params.links.link_into_switch


class _KeyLayout(NamedTuple):
    """How a window's PFC event is packed into one int64 key: link, time since the window
    start, departure after arrival on ties (as htsim's and ns-3's switches count an
    arrival, and decide, before a departure at the same instant is processed), and, in
    the low bits when they fit in 63, the event index (e < S: slot e left; e >= S: slot
    e - S came): a single-key sort costs ~5x less than a sort with an operand on a CPU."""

    time_bits: int
    index_bits: int  # 0: the index is not packed (sorted as an operand)
    none: int  # the key of no event, above every event's


def _key_layout(params: Params) -> _KeyLayout:
    n_ports, n_slots = params.static.n_ports, params.static.n_slots
    time_bits = max(1, params.static.window_bits)
    index_bits = max(1, (2 * n_slots - 1).bit_length())
    if n_ports.bit_length() + time_bits + 1 + index_bits > KEY_BITS:
        index_bits = 0
    return _KeyLayout(time_bits, index_bits, n_ports << (time_bits + 1 + index_bits))


def _event_keys(params: Params, state: State, window_end_ps, traffic, near, layout: _KeyLayout, at, valid):
    """The keys of the window's events of the slots ``at`` (n,) int32 where ``valid`` (n,)
    bool, at links near a threshold (``near`` (P,)): (2 n,) int64, each slot's departure
    then each slot's arrival (``layout.none`` where it has none), and (2 n,) int32 their
    event indices (``at``, then ``at`` + S)."""
    left_now, came_now, left_ps = traffic.left_now, traffic.came_now, traffic.left_ps
    pkts, n_slots = state.packets, params.static.n_slots
    window_start_ps = window_end_ps - params.window_ps
    ingress = jnp.maximum(pkts.pkt_ingress[at], 0)
    link = jnp.concatenate([ingress, ingress]).astype(jnp.int64)
    is_event = jnp.concatenate([left_now[at] & valid, came_now[at] & valid]) & near[link]
    time = jnp.concatenate([left_ps[at], pkts.pkt_ingress_ps[at]]) - window_start_ps  # in [0, window)
    is_departure = jnp.concatenate([jnp.ones_like(valid), jnp.zeros_like(valid)]).astype(jnp.int64)
    index = jnp.concatenate([at, at + n_slots])
    key = (((link << layout.time_bits) | jnp.clip(time, 0, (1 << layout.time_bits) - 1)) << 1 | is_departure) << layout.index_bits
    key = key | index.astype(jnp.int64) if layout.index_bits else key
    return jnp.where(is_event, key, layout.none), index


def _sorted_events(params: Params, window_end_ps, traffic, layout: _KeyLayout, event_keys, event_index):
    """Sort event keys (n,) (their indices ``event_index`` (n,) int32 when not packed) and
    unpack: (n,) int32 link (n_ports for none), (n,) int64 time, (n,) int64 byte change."""
    size = traffic.size
    n_slots = params.static.n_slots
    window_start_ps = window_end_ps - params.window_ps
    if layout.index_bits:
        rest = jax.lax.sort(event_keys)
        index = (rest & ((1 << layout.index_bits) - 1)).astype(jnp.int32)
        rest = rest >> layout.index_bits
    else:
        rest, index = jax.lax.sort((event_keys, event_index), num_keys=1)
    link = (rest >> (layout.time_bits + 1)).astype(jnp.int32)
    time_ps = window_start_ps + ((rest >> 1) & ((1 << layout.time_bits) - 1))
    slot = jnp.minimum(jnp.where(index >= n_slots, index - n_slots, index), n_slots - 1)
    delta = jnp.where(index >= n_slots, size[slot], -size[slot])
    return link, time_ps, jnp.where(link < params.static.n_ports, delta, 0)


def _latch(params: Params, state: State, link, delta, held_start):
    """The pause state after each sorted event (n,) bool and whether it changed there.

    The ingress count after an event is the count at the window start plus the events of
    its link so far (a segmented prefix sum). Above XOFF sets the latch, below XON resets
    it, else it holds: the state after an event is that of the last event that set or
    reset it, or the link's state at the window start.
    """
    n_ports, n_events = params.static.n_ports, link.shape[0]
    index = jnp.arange(n_events)
    first = jax.ops.segment_min(index, link, n_ports + 1)  # (P + 1,) first event of each link
    total = prefix_sum(delta)
    base = (total - delta)[jnp.minimum(first, n_events - 1)]
    row = jnp.minimum(link, n_ports - 1)
    count = held_start[row] + total - base[link]
    sets, resets = count > params.links.link_pfc_xoff_bytes[row], count < params.links.link_pfc_xon_bytes[row]
    deciding = (link < n_ports) & (sets | resets)
    last = prefix_max(jnp.where(deciding, index, -1))
    start_state = state.links.pfc_paused[row, -1]
    paused = jnp.where(last >= first[link], sets[jnp.maximum(last, 0)], start_state)
    before = jnp.where(index > first[link], jnp.roll(paused, 1), start_state)
    changed = (link < n_ports) & (paused != before) & params.links.link_into_switch[row]
    return paused, changed


def _decisions(params: Params, state: State, window_end_ps, traffic, events):
    """Per link, its first ``PFC_ENTRIES_PER_WINDOW`` decisions this window (instants and
    states, (P, K) each; the state at the window end where there are fewer), its pauses
    (P,) and its number of changes (P,), from the window's sorted ``events``."""
    links, n_ports = state.links, params.static.n_ports
    link, time_ps, delta = events
    paused, changed = _latch(params, state, link, delta, traffic.held_start)
    index = jnp.arange(link.shape[0])
    segment = jnp.where(changed, link, n_ports)
    n_changes = count_by(changed, segment, n_ports)
    end_state = links.pfc_paused[:, -1] ^ (n_changes % 2 == 1)
    decided, states, taken = [], [], jnp.zeros_like(changed)
    for _ in range(PFC_ENTRIES_PER_WINDOW):  # the link's next change, or the state at the window end
        at = jax.ops.segment_min(jnp.where(changed & ~taken, index, link.shape[0]), segment, n_ports + 1)[:n_ports]
        found = at < link.shape[0]
        at = jnp.minimum(at, link.shape[0] - 1)
        decided.append(jnp.where(found, time_ps[at], window_end_ps))
        states.append(jnp.where(found, paused[at], end_state))
        taken = taken | (changed & (index == at[jnp.minimum(link, n_ports - 1)]))
    return jnp.stack(decided, 1), jnp.stack(states, 1), count_by(changed & paused, segment, n_ports), n_changes


def pfc(params: Params, state: State, window_end_ps) -> State:
    links = state.links
    n_keys = 2 * params.static.n_slots  # an event key per slot's departure and per slot's arrival

    def sorted_in(n_places: int, go):
        """The decisions from the window's events sorted in ``n_places`` places (a small
        pool: every key), and the places its events need (two for each slot with one: its
        departure and arrival keys are packed together). Computed from the state here,
        not passed in: a larger sort runs rarely, and what it would read otherwise would be
        kept in memory every window."""
        traffic = _window_traffic(params, state, window_end_ps)
        near = _near_threshold(params, state, traffic)
        layout = _key_layout(params)
        n_slots = params.static.n_slots
        left_now, came_now = traffic.left_now, traffic.came_now
        with_event = (left_now | came_now) & near[jnp.maximum(state.packets.pkt_ingress, 0)]  # (S,)
        places_needed = 2 * jnp.sum(with_event, dtype=jnp.int32)
        if n_keys <= PFC_COMPACT_ABOVE:
            at, valid = jnp.arange(n_slots, dtype=jnp.int32), jnp.broadcast_to(go, (n_slots,))
        else:
            # The slots with an event, compacted (a pass over S), then the keys of both events of each.
            (slot,), _ = compact(with_event & go, max(1, n_places // 2), (jnp.arange(n_slots, dtype=jnp.int32), n_slots))
            at, valid = jnp.minimum(slot, n_slots - 1), slot < n_slots
        keys, index = _event_keys(params, state, window_end_ps, traffic, near, layout, at, valid)
        events = _sorted_events(params, window_end_ps, traffic, layout, keys, index)
        return _decisions(params, state, window_end_ps, traffic, events), places_needed

    if n_keys <= PFC_COMPACT_ABOVE:  # a small pool sorts all its events (fewer programs to compile)
        decided, states, pauses, n_changes = sorted_in(n_keys, True)[0]
    else:
        # The events of links near a threshold, compacted and sorted: a few per link per
        # window. When more come at once, the smallest place count that holds them runs (at
        # most once per size; in a lockstep batch, the sizes some experiment needs): a window
        # sorts about as many places as it has events near a threshold, not the pool's size.
        sizes = event_sort_sizes(n_keys, params.static.n_ports)
        decisions, needed = sorted_in(sizes[0], True)
        for fewer, n_places in zip(sizes, sizes[1:]):
            holds = (needed > fewer) & ((needed <= n_places) | (n_places == n_keys))
            decisions = at_most_once(holds, lambda go, _, n_places=n_places: sorted_in(n_places, go)[0], decisions)
        decided, states, pauses, n_changes = decisions
    # A frozen partition's links (hybrid mode) keep their history as it was: it moves with their thaw.
    frozen = (state.steady.port_frozen_label >= 0)[:, None]
    decided_ps = jnp.concatenate([links.pfc_decided_ps[:, PFC_ENTRIES_PER_WINDOW:], decided], axis=1)
    paused = jnp.concatenate([links.pfc_paused[:, PFC_ENTRIES_PER_WINDOW:], states], axis=1)
    return state.replace(
        links=links.replace(
            pfc_decided_ps=jnp.where(frozen, links.pfc_decided_ps, decided_ps),
            pfc_paused=jnp.where(frozen, links.pfc_paused, paused),
            pfc_pause_count=links.pfc_pause_count + pauses.astype(jnp.int32),
        ),
        error=state.error | jnp.where(jnp.any(n_changes > PFC_ENTRIES_PER_WINDOW), ERROR_PFC_TOGGLES, 0),
    )
