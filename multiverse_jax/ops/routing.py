"""Routing: the egress port a packet of a flow takes at a node (pinned path or ECMP)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from multiverse_jax.components.experiment import Params
from multiverse_jax.ops.hashing import mix32

ACK_SALT = 0x5BD1E995  # ACKs hash independently of their data packets


def route(params: Params, node, dst_host, flow, is_ack, hop, path_salt):
    """Egress port at ``node`` for a packet of ``flow`` whose next link is number ``hop``.

    A pinned path (data or ACK) wins; otherwise ECMP: a hash of the flow's seeded hash,
    the packet's path salt and the switch picks one of the equal-cost next hops. With
    salt 0 a flow keeps one path (per-flow ECMP); spraying and flowlets vary the salt.
    """
    flows, nodes = params.flows, params.nodes
    pinned_len = params.static.pinned_len
    hop_c = jnp.minimum(hop, pinned_len - 1)
    pinned = jnp.where(is_ack, flows.flow_pinned_ack[flow, hop_c], flows.flow_pinned_data[flow, hop_c])
    pinned = jnp.where(hop < pinned_len, pinned, -1)
    n_next = jnp.maximum(nodes.route_n_next[node, dst_host], 1)
    salt = jnp.where(is_ack, jnp.uint32(ACK_SALT), jnp.uint32(0)) + mix32(path_salt)
    choice = ecmp_choice(flows.flow_hash[flow], node, salt, n_next)
    ecmp = nodes.route_next_port[node, dst_host, choice.astype(jnp.int32)]
    return jnp.where(pinned >= 0, pinned, ecmp)


def ecmp_choice(flow_hash, node, salt, n_next):
    """Which of the ``n_next`` (>= 1) equal-cost ports at ``node`` a packet of a flow with
    ``flow_hash`` and path salt hash ``salt`` takes: JAX arrays in the step, NumPy arrays
    on the host (``report/paths.py``), the same choice."""
    return mix32(flow_hash ^ mix32(node.astype(np.uint32) + salt)) % n_next.astype(np.uint32)
