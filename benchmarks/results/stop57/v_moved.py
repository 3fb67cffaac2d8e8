"""Stop 57: the kept order's moved-packet check skipped without a hybrid experiment (new) or not (old)."""
import jax.numpy as jnp
from multiverse_jax.ops import queues
from multiverse_jax.ops.packets import queued


def old_moved(params, pkts, kept, view):
    at = jnp.minimum(kept.order_slot, params.static.n_slots - 1)
    unmoved = queued(pkts)[at] & (pkts.pkt_time_ps[at] == kept.order_time_ps) & (queues._queue_of(params, pkts, at) == view.queue)
    return view.is_kept & ~unmoved


VARIANTS = {"new": {}, "old": {"__patch__": {(queues, "_moved"): old_moved}}}
