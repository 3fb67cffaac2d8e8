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

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import ERROR_PFC_TOGGLES, Params, State
from multiverse_jax.components.links import PFC_ENTRIES_PER_WINDOW
from multiverse_jax.ops.pfc import counted_until_ps
from multiverse_jax.ops.segments import count_by

TIME_BITS = 40  # event times relative to the window start, in ps (1.1 s), in the sort key


def _window_traffic(params: Params, state: State, window_end_ps):
    """What the window does to each ingress's count: (S,) bool packets that left this window
    and (S,) bool that came this window (counted ones), (S,) int64 when each left, (S,)
    int64 their sizes, and (P,) int64 the bytes each ingress held at the window start."""
    pkts = state.packets
    window_start_ps = window_end_ps - params.window_ps
    counted, left_ps = counted_until_ps(params, pkts)
    counted = counted & ~state.steady.frozen[pkts.pkt_flow]  # a frozen partition's links hold their state
    size = pkts.pkt_bytes.astype(jnp.int64)
    left_now = counted & pkts.pkt_in_flight & (left_ps >= window_start_ps) & (left_ps < window_end_ps)
    not_yet_left = ~pkts.pkt_in_flight | (left_ps >= window_start_ps)
    came_now = counted & (pkts.pkt_ingress_ps >= window_start_ps) & not_yet_left
    held_before = counted & (pkts.pkt_ingress_ps < window_start_ps) & not_yet_left
    held_start = count_by(held_before, pkts.pkt_ingress, params.static.n_ports, size)
    return left_now, came_now, left_ps, size, held_start


def _could_change(params: Params, state: State, traffic):
    """() bool whether any link might change state this window: a running link only if all
    its arrivals could take it above XOFF, a paused one only if all its departures could
    take it below XON (bounds of its count, which never leaves them)."""
    left_now, came_now, _, size, held_start = traffic
    ingress, n_ports = state.packets.pkt_ingress, params.static.n_ports
    highest = held_start + count_by(came_now, ingress, n_ports, size)
    lowest = held_start - count_by(left_now, ingress, n_ports, size)
    paused = state.links.pfc_paused[:, -1]
    could = jnp.where(paused, lowest < params.links.link_pfc_xon_bytes, highest > params.links.link_pfc_xoff_bytes)
    return jnp.any(could & params.links.link_into_switch)


def _events(params: Params, state: State, window_end_ps, traffic):
    """The window's PFC events, sorted by ingress link then time, arrivals first on ties
    (as htsim's and ns-3's switches count an arrival, and decide, before a departure at
    the same instant is processed):
    (2 S,) int32 link (n_ports for none), (2 S,) int64 time, (2 S,) int64 byte change."""
    left_now, came_now, left_ps, size, _ = traffic
    pkts, n_ports = state.packets, params.static.n_ports
    window_start_ps = window_end_ps - params.window_ps
    link = jnp.concatenate([jnp.where(left_now, pkts.pkt_ingress, n_ports), jnp.where(came_now, pkts.pkt_ingress, n_ports)])
    time = jnp.concatenate([left_ps, pkts.pkt_ingress_ps]) - window_start_ps
    is_departure = jnp.concatenate([jnp.ones_like(left_now), jnp.zeros_like(came_now)])
    key = (link.astype(jnp.int64) << (TIME_BITS + 1)) | (jnp.clip(time, 0, (1 << TIME_BITS) - 1) << 1) | is_departure
    key, delta = jax.lax.sort((key, jnp.concatenate([-size, size])), num_keys=1)
    link = (key >> (TIME_BITS + 1)).astype(jnp.int32)
    return link, window_start_ps + ((key >> 1) & ((1 << TIME_BITS) - 1)), delta


def _latch(params: Params, state: State, link, delta, held_start):
    """The pause state after each sorted event (2 S,) bool and whether it changed there.

    The ingress count after an event is the count at the window start plus the events of
    its link so far (a segmented prefix sum). Above XOFF sets the latch, below XON resets
    it, else it holds: the state after an event is that of the last event that set or
    reset it, or the link's state at the window start.
    """
    n_ports, n_events = params.static.n_ports, link.shape[0]
    index = jnp.arange(n_events)
    first = jax.ops.segment_min(index, link, n_ports + 1)  # (P + 1,) first event of each link
    total = jnp.cumsum(delta)
    base = (total - delta)[jnp.minimum(first, n_events - 1)]
    row = jnp.minimum(link, n_ports - 1)
    count = held_start[row] + total - base[link]
    sets, resets = count > params.links.link_pfc_xoff_bytes[row], count < params.links.link_pfc_xon_bytes[row]
    deciding = (link < n_ports) & (sets | resets)
    last = jax.lax.cummax(jnp.where(deciding, index, -1))
    start_state = state.links.pfc_paused[row, -1]
    paused = jnp.where(last >= first[link], sets[jnp.maximum(last, 0)], start_state)
    before = jnp.where(index > first[link], jnp.roll(paused, 1), start_state)
    changed = (link < n_ports) & (paused != before) & params.links.link_into_switch[row]
    return paused, changed


def _decisions(params: Params, state: State, window_end_ps, traffic):
    """Per link, its first ``PFC_ENTRIES_PER_WINDOW`` decisions this window (instants and
    states, (P, K) each; the state at the window end where there are fewer), its pauses
    (P,) and its number of changes (P,)."""
    links, n_ports = state.links, params.static.n_ports
    link, time_ps, delta = _events(params, state, window_end_ps, traffic)
    paused, changed = _latch(params, state, link, delta, traffic[-1])
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


def _no_decisions(params: Params, state: State, window_end_ps, traffic):
    """``_decisions`` of a window in which no link can change: each keeps its state."""
    n_ports = params.static.n_ports
    decided = jnp.full((n_ports, PFC_ENTRIES_PER_WINDOW), window_end_ps, jnp.int64)
    states = jnp.broadcast_to(state.links.pfc_paused[:, -1:], (n_ports, PFC_ENTRIES_PER_WINDOW))
    none = jnp.zeros(n_ports, jnp.int32)
    return decided, states, none, none


def pfc(params: Params, state: State, window_end_ps) -> State:
    links = state.links
    traffic = _window_traffic(params, state, window_end_ps)
    # The sort and latch only in windows where some link is near a threshold (a select
    # under vmap, which runs both: the lockstep path pays the sort every window).
    decided, states, pauses, n_changes = jax.lax.cond(
        _could_change(params, state, traffic), _decisions, _no_decisions, params, state, window_end_ps, traffic
    )
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
