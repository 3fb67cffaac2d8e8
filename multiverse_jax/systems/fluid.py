"""Fluid: the flow-level step (``sim.mode=flow``). No packets: every active flow sends at
its max-min fair rate until the next event, when the rates are computed anew.

At the current time ``t``, the active flows are those that have begun and still have
bytes to send. Their rates are the max-min fair shares of the link capacities along their
data paths (``ops.maxmin``: strict priority classes, class 0 first; equal weights within a
class), on the path per-flow ECMP or a pinned route gives them (``ops.paths``; congestion
control, load balancing other than per-flow ECMP, queues, PFC and ECN are not modelled).
The next event is the earliest of: an active flow sending its last byte at its rate, a
flow beginning (at a known time: by time, trigger or task), a timed link event (the step
then runs on the new epoch's rates and paths: ``ops/link_events.py``). Every active flow advances to
it, and the rates change only there. Task finishes are not events of their own: the
``schedule`` system has already turned each known finish into the exact start times of
the flows that wait on it, and those are. ``flow_clock`` fails an experiment whose clock
passes ``sim.max_time_us``, as the packet clock does.

Bytes and times. A flow sends its wire bytes (payload plus one header per packet, as the
packet engine puts on the wire) as a fluid from its NIC; the instant it has sent them
(rounded up to the picosecond) its last packet has left the NIC. The receiver has the last
byte (``flow_rx_finish_ps``) once the data has crossed the path store-and-forward at
each link's full rate: the propagation delays of every link, plus the serialisation of the
flow's largest packet on every link after the first (the pipeline's fill: each switch
holds a packet until its last bit is in; the first link's serialisation is inside the
fluid drain). On links of equal rates this is exactly the packet pipeline's closed form,
(all packets + (hops - 1) largest packets) x 8 / rate + delays. The
sender has the last ACK (``flow_finish_ps``) one ACK path later: each link's ACK
serialisation and delay. So a flow alone on a path of equal rates finishes exactly as in
the packet engine (the store-and-forward closed form); under contention the fluid ignores
queueing and the packet-level interleaving. FCT = ``flow_finish_ps - flow_begin_ps``.

The paths and their idle-path times (``FlowParams.flow_data_path``, ``flow_ack_path``,
``flow_data_tail_ps``, ``flow_ack_path_ps``: ``ops.paths``) depend only on the
parameters, so ``batch.build_batch`` computes them once per batch, not per event.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import ERROR_STALLED, Params, State
from multiverse_jax.ops.link_events import next_event_ps
from multiverse_jax.ops.maxmin import maxmin_rates
from multiverse_jax.ops.packets import PS_BITS_PER_BYTE
from multiverse_jax.units import NEVER

# Float rounding can put a whole number of ps a hair above itself (4160 bytes at 100 Gb/s:
# 332800.00000000006 ps); taking this relative slack off before rounding up keeps it whole.
# 1e-13 is ~450 ulp, and under 1 ps up to 10 s of simulated time.
DRAIN_SLACK = 1e-13
LONGEST_DRAIN_PS = 1 << 61  # a drain this far away (a starved or near-starved flow) counts as never


def fluid(params: Params, state: State, window_end_ps) -> State:
    """Advance every active flow to the next event (``window_end_ps`` unused: no windows).
    A finished experiment is left as it is; one with no next event stalls."""
    return jax.lax.cond(state.done, lambda: state, lambda: to_next_event(params, state))


def to_next_event(params: Params, state: State) -> State:
    """Rates at the current time, the next event, every active flow advanced to it."""
    fp, fs, now = params.flows, state.flows, state.time_ps
    active = fp.flow_valid & (fs.flow_begin_ps <= now) & (fs.flow_rx_finish_ps == NEVER)
    rate_bps = maxmin_rates(fp.flow_data_path, active, fp.flow_priority, params.links.link_rate_bps.astype(jnp.float64))
    drain_ps = drain_time_ps(fs.flow_unsent_bytes, rate_bps, active)  # (F,) from now; NEVER: not draining
    first_drain = jnp.min(drain_ps)
    next_begin = jnp.min(jnp.where(fp.flow_valid & (fs.flow_begin_ps > now), fs.flow_begin_ps, NEVER))
    event = jnp.minimum(next_begin, jnp.where(first_drain == NEVER, NEVER, now + first_drain))
    if params.static.n_link_epochs > 1:  # a link event changes rates and paths: the rates change there
        event = jnp.minimum(event, next_event_ps(params, now))
    stalled = event == NEVER  # nothing sending, nothing to begin, yet not done
    at_ps = jnp.where(stalled, now, event)
    drained = active & (drain_ps <= at_ps - now)
    unsent = fs.flow_unsent_bytes - rate_bps * (at_ps - now) / PS_BITS_PER_BYTE
    unsent = jnp.where(drained, 0.0, jnp.where(active, jnp.maximum(unsent, 0.0), fs.flow_unsent_bytes))
    state = state.replace(flows=fs.replace(flow_unsent_bytes=unsent))
    state = finish_drained(params, state, drained, at_ps)
    return state.replace(time_ps=at_ps, error=state.error | jnp.where(stalled, ERROR_STALLED, 0))


def finish_drained(params: Params, state: State, drained, at_ps) -> State:
    """Flows ``drained`` (F,) sent their last byte at ``at_ps``: their receiver and sender
    finish times, their packet counters as the packet engine ends them, their bytes on
    the ports they crossed."""
    fp, fs = params.flows, state.flows
    rx_finish = at_ps + fp.flow_data_tail_ps
    finish = rx_finish + fp.flow_ack_path_ps
    n_packets = fp.flow_n_packets
    flows = fs.replace(
        flow_rx_finish_ps=jnp.where(drained, rx_finish, fs.flow_rx_finish_ps),
        flow_finish_ps=jnp.where(drained, finish, fs.flow_finish_ps),
        flow_sent_packets=jnp.where(drained, n_packets, fs.flow_sent_packets),
        flow_rx_packets=jnp.where(drained, n_packets, fs.flow_rx_packets),
        flow_acked_packets=jnp.where(drained, n_packets, fs.flow_acked_packets),
        flow_rx_bytes=jnp.where(drained, fp.flow_size_bytes, fs.flow_rx_bytes),
    )
    tx_bytes = wire_bytes_sent(params, drained)
    return state.replace(flows=flows, ports=state.ports.replace(port_tx_bytes=state.ports.port_tx_bytes + tx_bytes))


def drain_time_ps(unsent_bytes, rate_bps, active):
    """(F,) int64 ps until each active flow has sent ``unsent_bytes`` at ``rate_bps``,
    rounded up; NEVER for flows not sending (inactive, or starved by a higher class)."""
    sending = active & (rate_bps > 0)
    exact_ps = unsent_bytes * PS_BITS_PER_BYTE / jnp.where(sending, rate_bps, 1.0)
    exact_ps = jnp.minimum(exact_ps, LONGEST_DRAIN_PS)
    ps = jnp.ceil(exact_ps - exact_ps * DRAIN_SLACK).astype(jnp.int64)
    return jnp.where(sending & (ps < LONGEST_DRAIN_PS), ps, NEVER)


def wire_bytes_sent(params: Params, drained):
    """(P,) int64 wire bytes the flows drained now put on each port: their data on the
    data path, one ACK per packet on the ACK path (as the packet engine counts them)."""
    fp = params.flows
    data_ports, ack_ports = fp.flow_data_path, fp.flow_ack_path
    data = fp.flow_size_bytes + fp.flow_n_packets.astype(jnp.int64) * params.header_bytes
    acks = fp.flow_n_packets.astype(jnp.int64) * params.ack_bytes
    n_ports = params.static.n_ports
    ports = jnp.concatenate([data_ports, ack_ports], axis=1)
    per_hop = jnp.concatenate(
        [jnp.broadcast_to(data[:, None], data_ports.shape), jnp.broadcast_to(acks[:, None], ack_ports.shape)], axis=1
    )
    counted = drained[:, None] & (ports >= 0)
    return jnp.zeros(n_ports, jnp.int64).at[jnp.where(counted, ports, n_ports)].add(per_hop, mode="drop")
