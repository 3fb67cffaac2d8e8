"""Stop 57: at_host as one gather of the link's flag (new) or two, the far node then its kind (old)."""
from multiverse_jax.ops import packets
from multiverse_jax.systems import forward, receive, transmit


def old_at_host(params, pkts):
    return params.nodes.node_is_host[params.links.link_dst_node[pkts.pkt_port]]


OLD = {(m, "at_host"): old_at_host for m in (packets, forward, receive, transmit)}
VARIANTS = {"new": {}, "old": {"__patch__": OLD}}
