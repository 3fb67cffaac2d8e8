"""Flow paths: the egress ports each flow's data and ACKs leave by, as the packet engine
routes them (pinned paths, else per-flow ECMP with path salt 0)."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
from multiverse_jax.systems.forward import route


def _path(params: Params, src, dst, is_ack):
    """(F, Hp) int32 egress ports from each flow's ``src`` NIC to host ``dst`` (-1 past the end)."""
    n_flows, n_links = params.static.n_flows, params.static.path_len
    flow = jnp.arange(n_flows)
    port = params.nics.nic_port[src]
    ports = [port]
    for hop in range(1, n_links):
        node = params.links.link_dst_node[jnp.maximum(port, 0)]
        arrived = (port < 0) | params.nodes.node_is_host[node]
        port = jnp.where(arrived, -1, route(params, node, dst, flow, is_ack, hop, jnp.uint32(0)))
        ports.append(port)
    valid = params.flows.flow_valid[:, None]
    return jnp.where(valid, jnp.stack(ports, axis=1), -1).astype(jnp.int32)


def flow_ports(params: Params):
    """(F, 2 Hp) int32 every egress port a flow's packets cross: its data path (source NIC
    first) then its ACK path (destination NIC first), -1 padded. Exact under per-flow ECMP
    and pinned paths; with spraying or flowlets a flow's packets may take other paths."""
    fp = params.flows
    data = _path(params, fp.flow_src, fp.flow_dst, False)
    ack = _path(params, fp.flow_dst, fp.flow_src, True)
    return jnp.concatenate([data, ack], axis=1)
