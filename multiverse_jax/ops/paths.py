"""Each flow's whole path, hop by hop, as the packet engine would route it, and its
latency on an idle path: for flow-level rates (``sim.mode=flow``) and for partitions of
flows that share ports."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
from multiverse_jax.ops.packets import serialization_ps
from multiverse_jax.ops.routing import route


def flow_paths(params: Params):
    """(data_ports, ack_ports): each (F, Hp) int32, the egress ports a flow's data packets
    take from its source NIC to its destination host, and its ACKs take back, -1 padded
    (Hp = ``params.static.path_len``; padded flows: all -1).

    Exactly the engine's routing with path salt 0: the first port is the sender's NIC
    (``params.nics.nic_port``), then ``ops.routing.route`` at each switch, so pinned
    paths and per-flow ECMP give the path every packet of the flow takes under
    ``lb=ecmp`` (spraying and flowlets vary the salt, so their packets may take others).
    Pure and static-shaped: usable inside a jitted step.
    """
    fp = params.flows
    data = _walk(params, fp.flow_src, fp.flow_dst, is_ack=False)
    ack = _walk(params, fp.flow_dst, fp.flow_src, is_ack=True)
    valid = fp.flow_valid[:, None]
    return jnp.where(valid, data, -1), jnp.where(valid, ack, -1)


def _walk(params: Params, src, dst, is_ack: bool):
    """(F, Hp) int32 ports from host ``src`` (F,) to host ``dst`` (F,), -1 after arrival."""
    flow = jnp.arange(params.static.n_flows)
    first = params.nics.nic_port[src].astype(jnp.int32)

    def next_port(port, hop):
        node = params.links.link_dst_node[jnp.maximum(port, 0)]
        arrived = (port < 0) | params.nodes.node_is_host[node]  # the far end is the destination host
        egress = route(params, node, dst, flow, is_ack, hop, jnp.uint32(0))
        egress = jnp.where(arrived, -1, egress).astype(jnp.int32)
        return egress, egress

    hops = jnp.arange(1, params.static.path_len, dtype=jnp.int32)
    _, rest = jax.lax.scan(next_port, first, hops)  # (Hp - 1, F)
    return jnp.concatenate([first[:, None], rest.T], axis=1)


def data_tail_ps(params: Params, data_ports):
    """(F,) int64 from the last byte leaving the sender's NIC to the receiver having it, at
    flow level (``systems/fluid.py``): every link's delay, and the largest packet's
    serialisation on every link but the first (the store-and-forward pipeline's fill)."""
    fp = params.flows
    largest_wire = jnp.minimum(fp.flow_size_bytes, params.payload_bytes) + params.header_bytes
    not_first = jnp.arange(data_ports.shape[1]) >= 1
    return path_ps(params, data_ports, jnp.where(not_first, largest_wire[:, None], 0))


def ack_path_ps(params: Params, ack_ports):
    """(F,) int64 an ACK's time from the receiver to the sender on an idle path."""
    return path_ps(params, ack_ports, jnp.broadcast_to(params.ack_bytes, ack_ports.shape))


def path_ps(params: Params, ports, wire_bytes):
    """(F,) int64 the sum over each path's links (``ports`` (F, Hp), -1 padded) of the link
    delay and the serialisation of ``wire_bytes`` (F, Hp) at the link's rate."""
    on_path = ports >= 0
    port = jnp.maximum(ports, 0)
    link_ps = params.links.link_delay_ps[port] + serialization_ps(wire_bytes, params.links.link_rate_bps[port])
    return jnp.sum(jnp.where(on_path, link_ps, 0), axis=1)
