"""Each flow's whole path, hop by hop, as the packet engine would route it: for flow-level
rates (``sim.mode=flow``) and for partitions of flows that share ports."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
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
