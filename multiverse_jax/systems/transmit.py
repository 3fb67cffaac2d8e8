"""Transmit: every egress port serialises packets at line rate through the window.

A port is a non-preemptive strict-priority server with 1 + C classes: control (ACKs)
first, then the data classes by flow priority (0 highest). When it falls free, it starts
the earliest-queued packet of the highest class that has one waiting (at a NIC: the
packet its NIC offers for that class); PFC pauses every data class. If none has arrived,
it starts whichever arrives first. Start times are exact:
start = max(port free, packet arrival, PFC release); the last bit reaches the far end
``serialisation + link delay`` later, which is past the window because every link delay
is at least the window. Each round, all ports of all experiments start at most one
packet; rounds repeat until no port can start another packet inside the window.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import ERROR_BUFFER_OVERFLOW, ERROR_POOL_FULL, Params, State
from multiverse_jax.ops import marking, nic, pfc
from multiverse_jax.ops.packets import serialization_ps
from multiverse_jax.ops.segments import count_by, fifo_head


def _serve_once(params: Params, state: State, window_end_ps):
    pkts, ports = state.packets, state.ports
    n_ports, n_slots = params.static.n_ports, params.static.n_slots
    window_start_ps = window_end_ps - params.window_ps
    queued = pkts.pkt_valid & ~pkts.pkt_in_flight
    # Heads of every class queue of every port in one pass: queue (1 + C) p + k is port
    # p's class k: 0 control, 1 + priority for data.
    n_data_classes = params.static.n_data_classes
    n_classes = 1 + n_data_classes
    klass = jnp.where(pkts.pkt_is_ack, 0, 1 + params.flows.flow_priority[pkts.pkt_flow])
    queue = n_classes * pkts.pkt_port + klass
    head_ps, head_slot = fifo_head(queued, pkts.pkt_time_ps, queue, n_classes * n_ports, window_start_ps)
    head_ps, head_slot = head_ps.reshape(n_ports, n_classes), head_slot.reshape(n_ports, n_classes)

    # At a NIC, each data class is offered by the NIC's flows of that priority.
    offer = nic.offer(params, state, window_start_ps)  # (H, C)
    host = jnp.maximum(params.ports.port_host, 0)
    is_nic = params.ports.port_host >= 0
    data_ps = jnp.where(is_nic[:, None], offer.ready_ps[host], head_ps[:, 1:])
    data_slot = jnp.where(is_nic[:, None], offer.slot[host][:, None], head_slot[:, 1:])

    ctrl_start = jnp.maximum(ports.port_free_ps, head_ps[:, 0])
    # A data packet that could have started before the window would have started in the
    # previous one, unless PFC held it: its start is at least the window start, which
    # is also as far back as the PFC history must reach. PFC pauses every data class.
    data_start = [
        pfc.release_ps(params, state, jnp.maximum(jnp.maximum(ports.port_free_ps, data_ps[:, c]), window_start_ps))
        for c in range(n_data_classes)
    ]
    # Non-preemptive strict priority: the class that can start first; among classes that
    # can start at the same time (all waiting when the port falls free), the highest.
    class_start = jnp.stack([ctrl_start] + data_start, axis=1)  # (P, 1 + C)
    chosen = jnp.argmin(class_start, axis=1)  # ties go to the lowest class: control, then priority 0
    start = jnp.min(class_start, axis=1)
    use_ctrl = chosen == 0
    data_class = jnp.maximum(chosen - 1, 0)
    sends = start < window_end_ps
    creates = sends & ~use_ctrl & is_nic  # a NIC puts a new data packet on the wire
    pool_full = creates & ~offer.has_slot[host]
    sends, creates = sends & ~pool_full, creates & ~pool_full

    slot = jnp.where(use_ctrl, head_slot[:, 0], jnp.take_along_axis(data_slot, data_class[:, None], axis=1)[:, 0])
    offer_wire = offer.wire_bytes[host, data_class]
    wire_bytes = jnp.where(creates, offer_wire, pkts.pkt_bytes[jnp.minimum(slot, n_slots - 1)])
    ser_ps = serialization_ps(wire_bytes, params.links.link_rate_bps)
    arrival_ps = start + ser_ps + params.links.link_delay_ps

    # Queue just before the departure: everything queued at the port that has arrived by
    # then, the departing packet included. Between departures a queue only grows, so
    # these samples (and the one at the window end) give its exact maximum.
    queue_bytes = count_by(
        queued & (pkts.pkt_time_ps <= start[pkts.pkt_port]), pkts.pkt_port, n_ports, pkts.pkt_bytes.astype(jnp.int64)
    )
    overflow = sends & (queue_bytes > params.ports.port_buffer_bytes)

    # The packet each port starts goes on the wire: one write per port, to a slot no
    # other port touches (a port only ever starts a packet queued at it), so the scatter
    # has no conflicts. Ports that start nothing, or create a new packet, write nowhere.
    leaving = jnp.where(sends & ~creates, slot, n_slots)
    tx_bytes = ports.port_tx_bytes + jnp.where(sends, wire_bytes, 0)
    # A data packet leaving a switch is ECN-marked (RED on the queue it leaves behind) and
    # records its in-band telemetry for this hop.
    at_switch = sends & ~use_ctrl & ~is_nic
    left_behind = queue_bytes - wire_bytes
    marked = at_switch & marking.ecn_mark(params, left_behind, pkts, slot)
    packets = marking.record_telemetry(
        params,
        pkts.replace(
            pkt_in_flight=pkts.pkt_in_flight.at[leaving].set(True, mode="drop"),
            pkt_time_ps=pkts.pkt_time_ps.at[leaving].set(arrival_ps, mode="drop"),
            pkt_ecn=pkts.pkt_ecn.at[jnp.where(marked, slot, n_slots)].set(True, mode="drop"),
        ),
        at_switch,
        slot,
        start,
        tx_bytes,
        left_behind,
    )
    state = state.replace(
        packets=packets,
        ports=ports.replace(
            port_free_ps=jnp.where(sends, start + ser_ps, ports.port_free_ps),
            port_max_queue_bytes=jnp.where(sends, jnp.maximum(ports.port_max_queue_bytes, queue_bytes), ports.port_max_queue_bytes),
            port_tx_bytes=tx_bytes,
        ),
        error=state.error
        | jnp.where(jnp.any(pool_full), ERROR_POOL_FULL, 0)
        | jnp.where(jnp.any(overflow), ERROR_BUFFER_OVERFLOW, 0),
        n_packet_hops=state.n_packet_hops + jnp.sum(sends),
    )
    nic_port = params.nics.nic_port
    host_creates = creates[nic_port] & (params.ports.port_host[nic_port] == jnp.arange(params.static.n_hosts))
    host_offer = nic.of_class(offer, data_class[nic_port])
    state = nic.emit(params, state, host_offer, host_creates, start[nic_port], ser_ps[nic_port], arrival_ps[nic_port])
    return state, jnp.any(sends)


def transmit(params: Params, state: State, window_end_ps) -> State:
    with jax.named_scope("transmit"):
        state, _ = jax.lax.while_loop(
            lambda carry: carry[1],
            lambda carry: _serve_once(params, carry[0], window_end_ps),
            (state, jnp.bool_(True)),
        )
        # The queue at the window's end closes the exact maximum (see _serve_once).
        pkts, ports = state.packets, state.ports
        n_ports = params.static.n_ports
        queued = pkts.pkt_valid & ~pkts.pkt_in_flight
        queue_bytes = count_by(queued, pkts.pkt_port, n_ports, pkts.pkt_bytes.astype(jnp.int64))
        overflow = jnp.any(queue_bytes > params.ports.port_buffer_bytes)
        return state.replace(
            ports=ports.replace(port_max_queue_bytes=jnp.maximum(ports.port_max_queue_bytes, queue_bytes)),
            error=state.error | jnp.where(overflow, ERROR_BUFFER_OVERFLOW, 0),
        )


