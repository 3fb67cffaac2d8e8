"""What a congestion-control rule sees when an ACK reaches the sender."""

from __future__ import annotations

from typing import NamedTuple

import chex


class AckEvent(NamedTuple):
    """One ACK per flow (flows without one are masked out by the caller). Arrays (F,)
    unless noted; Hi = Static.int_hops."""

    time_ps: chex.Array  # int64 arrival at the sender
    ece: chex.Array  # bool the data packet was ECN-marked (echoed)
    cnp: chex.Array  # bool the receiver attached a DCQCN congestion notification
    acked_packets: chex.Array  # int32 packets acknowledged, this ACK included ("ack seq")
    sent_packets: chex.Array  # int32 packets sent so far ("snd_nxt")
    data_sent_ps: chex.Array  # int64 when the acknowledged data packet left the sender
    line_rate_bps: chex.Array  # float64 the sender NIC's rate
    mss_bytes: chex.Array  # () float64 payload of a full packet
    int_port: chex.Array  # (F, Hi) int32 in-band telemetry of the data packet, per switch hop (-1: none)
    int_ts_ps: chex.Array  # (F, Hi) int64 when the hop's egress port sent it
    int_tx_bytes: chex.Array  # (F, Hi) int64 bytes that port had sent, this packet included
    int_qlen_bytes: chex.Array  # (F, Hi) int64 the port's queue as it left
    int_rate_bps: chex.Array  # (F, Hi) float64 that port's link rate
