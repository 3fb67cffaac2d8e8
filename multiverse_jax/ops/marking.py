"""Switch egress marking: RED/ECN marks and in-band telemetry, as a data packet leaves a
switch port.

Both happen when the packet is dequeued, as in the HPCC ns-3 code (``SwitchNotifyDequeue``),
from the queue the packet leaves behind: the port's exact queue at that instant
(``systems/transmit.py`` computes it). NIC egress ports neither mark nor record.

RED: mark with probability 0 below Kmin, Pmax (q - Kmin) / (Kmax - Kmin) between, 1 above
Kmax (Kmin = Kmax gives DCTCP's step marking at K). The coin is a hash of the packet's
flow, sequence number and hop, so runs are deterministic and a batch equals its
experiments run alone.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
from multiverse_jax.components.packets import PacketState
from multiverse_jax.ops.hashing import mix32


def red_probability(queue_bytes, kmin_bytes, kmax_bytes, pmax):
    """Marking probability of RED on the instantaneous queue."""
    span = jnp.maximum(kmax_bytes - kmin_bytes, 1).astype(jnp.float64)
    ramp = pmax * (queue_bytes - kmin_bytes).astype(jnp.float64) / span
    return jnp.where(queue_bytes <= kmin_bytes, 0.0, jnp.where(queue_bytes > kmax_bytes, 1.0, ramp))


def ecn_mark(params: Params, queue_bytes, flow, seq, hop):
    """(P,) whether the packet leaving each port (of ``flow``, ``seq``, ``hop``, (P,) each)
    gets a CE mark at queue ``queue_bytes``."""
    cp = params.cc
    key = mix32(params.flows.flow_hash[flow] ^ mix32(seq.astype(jnp.uint32) * jnp.uint32(64) + hop.astype(jnp.uint32)))
    coin = key.astype(jnp.float64) / 4294967296.0  # uniform in [0, 1)
    return coin < red_probability(queue_bytes, cp.ecn_kmin_bytes, cp.ecn_kmax_bytes, cp.ecn_pmax)


def record_telemetry(params: Params, pkts: PacketState, record, slot, pkt_hop, start_ps, tx_bytes, queue_bytes, port=None) -> PacketState:
    """Write one INT entry for each departure in ``record`` (N,): the hop of the packet in
    ``slot`` (whose ``pkt_hop`` (N,) is the index of the link it leaves by) at ``port``
    (N,) (None: one departure per port, (P,) arrays).

    Switch hop i is the packet's (i + 1)-th link (link 0 leaves the sender's NIC).
    """
    n_slots, n_hops = params.static.n_slots, params.static.int_hops
    if n_hops == 0:  # no experiment of the batch runs HPCC: nothing reads telemetry
        return pkts
    hop = pkt_hop - 1
    port = jnp.arange(params.static.n_ports, dtype=jnp.int32) if port is None else port
    row = jnp.where(record & (hop >= 0) & (hop < n_hops), slot, n_slots)
    col = jnp.clip(hop, 0, n_hops - 1)
    return pkts.replace(
        pkt_int_port=pkts.pkt_int_port.at[row, col].set(port, mode="drop"),
        pkt_int_ts_ps=pkts.pkt_int_ts_ps.at[row, col].set(start_ps, mode="drop"),
        pkt_int_tx_bytes=pkts.pkt_int_tx_bytes.at[row, col].set(tx_bytes, mode="drop"),
        pkt_int_qlen_bytes=pkts.pkt_int_qlen_bytes.at[row, col].set(queue_bytes, mode="drop"),
    )
