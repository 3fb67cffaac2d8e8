"""Queue restoration on re-entry (``hybrid.restore``; HyGra §IV-C).

A frozen partition keeps its queues as they were when it froze. When it thaws, each of its
ports is rebuilt to a depth chosen by the policy from the port's sampled depth history
(``restored_depth``, the interface a learned restorer plugs into):

* ``freeze``: as it was when the phase began (nothing moves);
* ``empty``: drained;
* ``last``: the depth of the last rate sample before the phase. A partition freezes right
  after a sample, so this is the frozen depth too;
* ``mean``: the mean depth of the last l samples (the steady window), which averages a
  sawtooth queue instead of keeping the instant it froze at.

A queue is only ever drained, never grown: the packets taken off its tail are delivered
at re-entry, credited to their flows as received and acknowledged, so every byte is still
delivered exactly once; a link that PFC paused and whose ingress now holds less than XON
resumes at the re-entry (``resume_drained_links``) (a restorer that grows a queue must take the packets from its
flows' unsent bytes: the next issue's learned restorer).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops.pfc import counted_until_ps
from multiverse_jax.ops.segments import count_by
from multiverse_jax.ops.steady import newest_first

RESTORE_FREEZE, RESTORE_EMPTY, RESTORE_LAST, RESTORE_MEAN = 0, 1, 2, 3


def restored_depth(params: Params, history, n_history, current):
    """(P,) int64 the depth each port is rebuilt to: from ``history`` (P, L) depths in bytes,
    sampled every hybrid.sample_interval_us (``n_history`` () samples taken; the newest at
    ``(n_history - 1) % L``), and ``current`` (P,) the frozen depths."""
    size = params.static.steady_window
    back = jnp.arange(size)
    samples = newest_first(history, n_history)
    window = jnp.minimum(params.steady.window, jnp.maximum(n_history, 1))
    used = back < window
    mean = jnp.sum(jnp.where(used, samples, 0), axis=1) // window
    last = jnp.where(n_history > 0, samples[:, 0], current)
    choice = params.steady.restore
    depth = jnp.where(choice == RESTORE_EMPTY, 0, jnp.where(choice == RESTORE_LAST, last, mean))
    return jnp.where(choice == RESTORE_FREEZE, current, depth)


def drain_queues(params: Params, state: State, port_mask, target_bytes) -> State:
    """Deliver, at once, the packets queued at the ports of ``port_mask`` (P,) beyond their
    first ``target_bytes`` (P,) bytes in FIFO order (arrival time, then slot)."""
    pkts, flows = state.packets, state.flows
    n_ports, n_flows, n_slots = params.static.n_ports, params.static.n_flows, params.static.n_slots
    queued = pkts.pkt_valid & ~pkts.pkt_in_flight & port_mask[pkts.pkt_port]
    port = jnp.where(queued, pkts.pkt_port, n_ports)
    size = jnp.where(queued, pkts.pkt_bytes.astype(jnp.int64), 0)
    slot = jnp.arange(n_slots)
    port_s, _, slot_s, size_s = jax.lax.sort((port, pkts.pkt_time_ps, slot, size), num_keys=3)
    total = jnp.cumsum(size_s)
    first = jax.ops.segment_min(jnp.arange(n_slots), port_s, n_ports + 1)
    ahead = total - (total - size_s)[jnp.minimum(first, n_slots - 1)][port_s]  # bytes up to and including it
    over_s = (port_s < n_ports) & (ahead > target_bytes[jnp.minimum(port_s, n_ports - 1)])
    drained = jnp.zeros(n_slots, bool).at[slot_s].set(over_s)
    data = drained & ~pkts.pkt_is_ack
    payload = pkts.pkt_bytes.astype(jnp.int64) - params.header_bytes
    return state.replace(
        packets=pkts.replace(pkt_valid=pkts.pkt_valid & ~drained),
        flows=flows.replace(
            flow_rx_packets=flows.flow_rx_packets + count_by(data, pkts.pkt_flow, n_flows),
            flow_rx_bytes=flows.flow_rx_bytes + count_by(data, pkts.pkt_flow, n_flows, payload),
            flow_acked_packets=flows.flow_acked_packets + count_by(drained, pkts.pkt_flow, n_flows),
        ),
    )


def resume_drained_links(params: Params, state: State, link_mask, now_ps) -> State:
    """Resume, at ``now_ps`` (P,), each link of ``link_mask`` (P,) that PFC holds paused while
    its ingress count is below XON: draining took the count down without the departure
    events that would have resumed it."""
    pkts, links, n_ports = state.packets, state.links, params.static.n_ports
    counted, until_ps = counted_until_ps(params, pkts)
    ingress = jnp.maximum(pkts.pkt_ingress, 0)
    held = counted & (~pkts.pkt_in_flight | (until_ps > now_ps[ingress]))
    held_bytes = count_by(held, ingress, n_ports, pkts.pkt_bytes.astype(jnp.int64))
    resume = link_mask & links.pfc_paused[:, -1] & (held_bytes < params.links.link_pfc_xon_bytes)
    decided = jnp.concatenate([links.pfc_decided_ps[:, 1:], now_ps[:, None]], axis=1)
    paused = jnp.concatenate([links.pfc_paused[:, 1:], jnp.zeros((n_ports, 1), bool)], axis=1)
    return state.replace(
        links=links.replace(
            pfc_decided_ps=jnp.where(resume[:, None], decided, links.pfc_decided_ps),
            pfc_paused=jnp.where(resume[:, None], paused, links.pfc_paused),
        )
    )
