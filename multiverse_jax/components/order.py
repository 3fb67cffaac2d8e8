"""The service order a window leaves behind: its order of every class queue and each
queue's pointer after its transmit (the packets from the pointer on are still queued, in
the order their queues serve them), so that the next window sorts only its new arrivals
(``ops/queues.py``)."""

from __future__ import annotations

import chex
from flax import struct
import numpy as np

from multiverse_jax.components.static import Static


@struct.dataclass
class OrderState:
    order_slot: chex.Array  # (S_total,) int32 pool slot at each position of the window's service order,
    #   queue after queue (n_slots past them)
    order_time_ps: chex.Array  # (S_total,) int64 its arrival at its port then (a packet whose arrival has
    #   moved since, frozen or thawed by the hybrid mode, voids the kept order)
    order_queue_end: chex.Array  # (Q,) int32 one past each class queue's last position
    order_head: chex.Array  # (Q,) int32 each queue's pointer after transmit: the packets from it to the
    #   queue's end are still queued (those before it were sent)
    order_end_ps: chex.Array  # () int64 end of the window that kept them: every packet queued since
    #   arrived at or after it, so it joins its queue behind them


def initial_order_state(s: Static) -> OrderState:
    """Nothing kept: no packet is queued before the first window."""
    n_queues = s.n_queues
    return OrderState(
        order_slot=np.full(s.n_slots, s.n_slots, np.int32),
        order_time_ps=np.zeros(s.n_slots, np.int64),
        order_queue_end=np.zeros(n_queues, np.int32),
        order_head=np.zeros(n_queues, np.int32),
        order_end_ps=np.int64(0),
    )
