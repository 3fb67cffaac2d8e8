"""Partitions (Wormhole §3.1.1, App. A–B): flows that share an egress port, directly or
through other flows, are one partition — the connected components of the flow–port
graph, found by label propagation with static shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def partition_labels(ports, member, n_ports: int):
    """(F,) int32 each member flow's partition, named by its lowest member flow index (-1 for
    non-members).

    ``ports``: (F, K) int32 ports each flow crosses (-1 padded, ids < ``n_ports``);
    ``member``: (F,) bool the flows to partition. Each round gives every port the lowest label of the flows crossing
    it and every flow the lowest label of its ports, then jumps labels through the flow
    they name (pointer jumping, so long chains take few rounds); it stops when nothing
    changes (at most F rounds).
    """
    n_flows = ports.shape[0]
    crossing = member[:, None] & (ports >= 0)  # (F, K)
    port_or_none = jnp.where(crossing, ports, n_ports)  # n_ports: a spare segment for the rest
    flow = jnp.arange(n_flows, dtype=jnp.int32)
    no_label = jnp.int32(n_flows)

    def spread(label):
        per_entry = jnp.broadcast_to(label[:, None], ports.shape)
        port_label = jax.ops.segment_min(per_entry.reshape(-1), port_or_none.reshape(-1), n_ports + 1)
        seen = jnp.where(crossing, port_label[port_or_none], no_label)
        new = jnp.minimum(label, jnp.min(seen, axis=1))
        new = jnp.where(member, jnp.minimum(new, new[jnp.minimum(new, n_flows - 1)]), no_label)
        return new

    def body(carry):
        label, _, rounds = carry
        new = spread(label)
        return new, jnp.any(new != label), rounds + 1

    start = jnp.where(member, flow, no_label)
    label, _, _ = jax.lax.while_loop(lambda c: c[1] & (c[2] < n_flows), body, (start, jnp.bool_(True), 0))
    return jnp.where(member, label, -1)
