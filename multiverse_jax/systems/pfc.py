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


def _events(params: Params, state: State, window_end_ps):
    """The window's PFC events, sorted by ingress link then time (departures first on ties):
    (2 S,) int32 link (n_ports for none), (2 S,) int64 time, (2 S,) int64 byte change; and
    (P,) int64 the bytes each ingress held at the window start."""
    pkts = state.packets
    window_start_ps = window_end_ps - params.window_ps
    counted, left_ps = counted_until_ps(params, pkts)
    size = pkts.pkt_bytes.astype(jnp.int64)
    left_now = counted & pkts.pkt_in_flight & (left_ps >= window_start_ps) & (left_ps < window_end_ps)
    not_yet_left = ~pkts.pkt_in_flight | (left_ps >= window_start_ps)
    came_now = counted & (pkts.pkt_ingress_ps >= window_start_ps) & not_yet_left
    held_before = counted & (pkts.pkt_ingress_ps < window_start_ps) & not_yet_left
    n_ports = params.static.n_ports
    held_start = count_by(held_before, pkts.pkt_ingress, n_ports, size)
    link = jnp.concatenate([jnp.where(left_now, pkts.pkt_ingress, n_ports), jnp.where(came_now, pkts.pkt_ingress, n_ports)])
    time = jnp.concatenate([left_ps, pkts.pkt_ingress_ps]) - window_start_ps
    is_arrival = jnp.concatenate([jnp.zeros_like(left_now), jnp.ones_like(came_now)])
    key = (link.astype(jnp.int64) << (TIME_BITS + 1)) | (jnp.clip(time, 0, (1 << TIME_BITS) - 1) << 1) | is_arrival
    key, delta = jax.lax.sort((key, jnp.concatenate([-size, size])), num_keys=1)
    link = (key >> (TIME_BITS + 1)).astype(jnp.int32)
    return link, window_start_ps + ((key >> 1) & ((1 << TIME_BITS) - 1)), delta, held_start


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


def pfc(params: Params, state: State, window_end_ps) -> State:
    links, n_ports = state.links, params.static.n_ports
    link, time_ps, delta, held_start = _events(params, state, window_end_ps)
    paused, changed = _latch(params, state, link, delta, held_start)
    index = jnp.arange(link.shape[0])
    segment = jnp.where(changed, link, n_ports)
    end_state = links.pfc_paused[:, -1] ^ (count_by(changed, segment, n_ports) % 2 == 1)
    decided, states, taken = [], [], jnp.zeros_like(changed)
    for _ in range(PFC_ENTRIES_PER_WINDOW):  # the link's next change, or the state at the window end
        at = jax.ops.segment_min(jnp.where(changed & ~taken, index, link.shape[0]), segment, n_ports + 1)[:n_ports]
        found = at < link.shape[0]
        at = jnp.minimum(at, link.shape[0] - 1)
        decided.append(jnp.where(found, time_ps[at], window_end_ps))
        states.append(jnp.where(found, paused[at], end_state))
        taken = taken | (changed & (index == at[jnp.minimum(link, n_ports - 1)]))
    n_changes = count_by(changed, segment, n_ports)
    pauses = count_by(changed & paused, segment, n_ports)
    return state.replace(
        links=links.replace(
            pfc_decided_ps=jnp.concatenate([links.pfc_decided_ps[:, PFC_ENTRIES_PER_WINDOW:], jnp.stack(decided, 1)], axis=1),
            pfc_paused=jnp.concatenate([links.pfc_paused[:, PFC_ENTRIES_PER_WINDOW:], jnp.stack(states, 1)], axis=1),
            pfc_pause_count=links.pfc_pause_count + pauses.astype(jnp.int32),
        ),
        error=state.error | jnp.where(jnp.any(n_changes > PFC_ENTRIES_PER_WINDOW), ERROR_PFC_TOGGLES, 0),
    )
