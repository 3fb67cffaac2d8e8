"""Queue restoration on re-entry (``hybrid.restore``; HyGra §IV-C).

A frozen partition keeps its queues as they were when it froze. When it thaws, each of its
ports is rebuilt to a depth chosen by the policy from the port's sampled depth history
(``restored_depth``, the interface a learned restorer plugs into):

* ``freeze``: as it was when the phase began (nothing moves);
* ``empty``: drained;
* ``last``: the depth of the last rate sample before the phase. A partition freezes right
  after a sample, so this is the frozen depth too;
* ``mean``: the mean depth of the last l samples (the steady window), which averages a
  sawtooth queue instead of keeping the instant it froze at;
* ``transformer``: the learned restorer's prediction at the phase's end, from the port's
  depth history before the phase, its context and the phase's length
  (``restorer/inference.py``; HyGra Alg. 2).

A queue above its target is drained: the packets taken off its tail are delivered at
re-entry, credited to their flows as received and acknowledged, so every byte is still
delivered exactly once; a link that PFC paused and whose ingress now holds less than XON
resumes at the re-entry (``resume_drained_links``). Only the learned restorer grows a
queue below its target (``grow_queues``): with packets of the flows crossing the port,
taken from what they were just credited with as delivered, so those bytes are delivered
once, later, when the packets reach their receivers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import LB_SPRAY, Params, State
from multiverse_jax.ops.packets import by_host, port_queue_bytes, slot_host
from multiverse_jax.ops.pfc import counted_until_ps
from multiverse_jax.ops.segments import count_by
from multiverse_jax.ops.steady import newest_first

RESTORE_FREEZE, RESTORE_EMPTY, RESTORE_LAST, RESTORE_MEAN, RESTORE_TRANSFORMER = 0, 1, 2, 3, 4


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
    # ``transformer`` is decided at the thaw (restorer/inference.py); this mean stands until then.
    depth = jnp.where(choice == RESTORE_EMPTY, 0, jnp.where(choice == RESTORE_LAST, last, mean))
    return jnp.where(choice == RESTORE_FREEZE, current, depth)


def frozen_history(params: Params, history, n_history):
    """(P, Hr) int64 the newest Hr = ``Static.restorer_history`` of the depth samples in
    ``history`` (P, L), newest first (a ring shorter than Hr repeats its oldest sample):
    what the learned restorer reads when the port's phase ends."""
    samples = newest_first(history, n_history)
    index = jnp.minimum(jnp.arange(params.static.restorer_history), samples.shape[1] - 1)
    return samples[:, index]


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
    steady = state.steady
    return state.replace(
        steady=steady.replace(restore_drained_packets=steady.restore_drained_packets + jnp.sum(drained)),
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


def grow_queues(params: Params, state: State, port_mask, target_bytes, now_ps, credited) -> State:
    """Put packets back into the queues of the ports of ``port_mask`` (P,) that hold less
    than ``target_bytes`` (P,), arriving at ``now_ps`` (P,): full packets of the flows whose
    data path crosses the port, shared in proportion to their steady rates (the mix of a
    FIFO fed at those rates). They come out of ``credited`` (F,) int32, the packets each
    flow was just credited with as delivered: those stay sent but are no longer delivered
    nor acknowledged, so every byte is still delivered exactly once (when the packet
    arrives). Each takes a free slot of its sender's share of the pool; a flow or host
    without enough gives fewer."""
    fp, pkts, n_ports = params.flows, state.packets, params.static.n_ports
    wire = (params.payload_bytes + params.header_bytes).astype(jnp.int64)
    path = fp.flow_data_path  # (F, Hp)
    hop = jnp.broadcast_to(jnp.arange(path.shape[1]), path.shape)
    port = jnp.where(path >= 0, path, n_ports)
    short = jnp.where(port_mask, jnp.maximum(target_bytes - port_queue_bytes(params, pkts), 0) // wire, 0)  # (P,) packets
    deficit = jnp.concatenate([short, jnp.zeros(1, jnp.int64)])  # a spare row for padded hops
    entry = (deficit[port] > 0) & (credited > 0)[:, None] & (hop >= 1)  # (F, Hp): flow f refills port path[f, j]
    weight = jnp.where(entry, jnp.maximum(state.steady.steady_rate, 1e-12)[:, None], 0.0)  # no rates yet: equal shares
    total = jax.ops.segment_sum(weight.reshape(-1), port.reshape(-1), n_ports + 1)
    want = jnp.floor(deficit[port] * weight / jnp.maximum(total[port], 1e-30)).astype(jnp.int32)  # (F, Hp)
    # Caps: a flow gives at most what it was credited; a host at most its free slots.
    before_flow = jnp.cumsum(want, axis=1) - want
    count = jnp.clip(credited[:, None] - before_flow, 0, want)
    host = jnp.broadcast_to(fp.flow_src[:, None], path.shape).reshape(-1)
    count, first_rank = _take_free_slots(params, pkts, host, count.reshape(-1))
    new, e = _assign_slots(params, pkts, host, count, first_rank)
    flow, at_hop = e // path.shape[1], e % path.shape[1]
    return _place(params, state, new, flow, at_hop, now_ps, count.reshape(path.shape).sum(axis=1))


def _assign_slots(params: Params, pkts, host, count, first_rank):
    """(S,) bool the free slots that get a new packet and (S,) int32 the entry each serves:
    the r-th free slot of a host goes to that host's entry whose ranks
    [first_rank, first_rank + count) (``host``, ``count``, ``first_rank`` (E,)) cover r."""
    n_slots, static = params.static.n_slots, params.static
    free = ~pkts.pkt_valid
    rank = (jnp.cumsum(free.reshape(static.slots_per_host, static.n_hosts), axis=0) - 1).reshape(-1)  # within its host
    host_of_slot = slot_host(static)
    key = jnp.where(count > 0, host.astype(jnp.int64) * n_slots + first_rank, jnp.iinfo(jnp.int64).max)
    order = jnp.argsort(key)
    slot_key = host_of_slot.astype(jnp.int64) * n_slots + rank
    e = order[jnp.clip(jnp.searchsorted(key[order], slot_key, side="right") - 1, 0, order.shape[0] - 1)]
    new = free & (host[e] == host_of_slot) & (rank >= first_rank[e]) & (rank < first_rank[e] + count[e])
    return new, e


def _take_free_slots(params: Params, pkts, host, count):
    """Cap ``count`` (E,) per entry so that each host's entries (``host`` (E,)) together
    take at most its free slots, in entry order; returns the capped counts and (E,) each
    entry's first free-slot rank within its host (entries take consecutive ranks)."""
    n_hosts = params.static.n_hosts
    free = jnp.sum(by_host(params.static, ~pkts.pkt_valid), axis=1)
    order = jnp.argsort(host, stable=True)  # each host's entries together, in entry order
    sorted_host = host[order]

    def before_in_host(values):  # (E,) sum of the values of the host's earlier entries
        exclusive = jnp.cumsum(values) - values
        return exclusive - jax.ops.segment_min(exclusive, sorted_host, n_hosts)[sorted_host]

    wanted = count[order]
    capped = jnp.clip(free[sorted_host] - before_in_host(wanted), 0, wanted)
    unsort = jnp.argsort(order)
    return capped[unsort], before_in_host(capped)[unsort]


def _place(params: Params, state: State, new, flow, at_hop, now_ps, given) -> State:
    """Write the packets of ``new`` (S,) slots: flow ``flow`` (S,), queued at hop ``at_hop``
    (S,) of its data path since ``now_ps`` of that port; ``given`` (F,) packets each flow gave."""
    fp, pkts, flows, hpcc = params.flows, state.packets, state.flows, state.cc.hpcc
    path = fp.flow_data_path
    port = path[flow, at_hop]
    arrival = now_ps[jnp.maximum(port, 0)]
    seq = flows.flow_sent_packets[flow] - 1  # any: sequence numbers only seed hashes
    salt = jnp.where(params.lb_kind == LB_SPRAY, (seq + 1).astype(jnp.uint32), jnp.uint32(0))

    def put(column, value):
        return jnp.where(new.reshape(new.shape + (1,) * (column.ndim - 1)), jnp.asarray(value).astype(column.dtype), column)

    # HPCC: the flow's own telemetry of its path, so its ACK does not look like a new path
    # (the hops it crosses from here on are overwritten as it leaves them).
    pkts = pkts.replace(
        pkt_valid=pkts.pkt_valid | new,
        pkt_is_ack=put(pkts.pkt_is_ack, False),
        pkt_flow=put(pkts.pkt_flow, flow),
        pkt_seq=put(pkts.pkt_seq, seq),
        pkt_bytes=put(pkts.pkt_bytes, params.payload_bytes + params.header_bytes),
        pkt_port=put(pkts.pkt_port, port),
        pkt_in_flight=put(pkts.pkt_in_flight, False),
        pkt_time_ps=put(pkts.pkt_time_ps, arrival),
        pkt_scheduled_ps=put(pkts.pkt_scheduled_ps, arrival),
        pkt_prior_ps=put(pkts.pkt_prior_ps, arrival),
        pkt_rank=put(pkts.pkt_rank, flow),
        pkt_ingress=put(pkts.pkt_ingress, path[flow, jnp.maximum(at_hop - 1, 0)]),
        pkt_ingress_ps=put(pkts.pkt_ingress_ps, arrival),
        pkt_hop=put(pkts.pkt_hop, at_hop),
        pkt_path_salt=put(pkts.pkt_path_salt, salt),
        pkt_ecn=put(pkts.pkt_ecn, False),
        pkt_cnp=put(pkts.pkt_cnp, False),
        pkt_sent_ps=put(pkts.pkt_sent_ps, arrival),
        pkt_int_port=put(pkts.pkt_int_port, hpcc.flow_int_port[flow]),
        pkt_int_ts_ps=put(pkts.pkt_int_ts_ps, hpcc.flow_int_ts_ps[flow]),
        pkt_int_tx_bytes=put(pkts.pkt_int_tx_bytes, hpcc.flow_int_tx_bytes[flow]),
        pkt_int_qlen_bytes=put(pkts.pkt_int_qlen_bytes, hpcc.flow_int_qlen_bytes[flow]),
    )
    payload = params.payload_bytes.astype(jnp.int64)
    given = given.astype(flows.flow_rx_packets.dtype)
    flows = flows.replace(
        flow_rx_packets=flows.flow_rx_packets - given,
        flow_rx_bytes=flows.flow_rx_bytes - given.astype(jnp.int64) * payload,
        flow_acked_packets=flows.flow_acked_packets - given,
    )
    steady = state.steady
    added = steady.restore_added_packets + jnp.sum(new)
    return state.replace(packets=pkts, flows=flows, steady=steady.replace(restore_added_packets=added))
