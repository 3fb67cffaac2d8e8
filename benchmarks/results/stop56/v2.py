import jax.numpy as jnp
from multiverse_jax import engine
from multiverse_jax.systems import transmit as tx
from multiverse_jax.ops import queues

def identity(params, state, window_end_ps):
    return state

def start_only(params, state, window_end_ps):
    serving, order, free, upcoming = tx.window_start(params, state, window_end_ps)
    end_bytes = queues.queued_bytes(order, serving.head, params.static.n_ports)
    state = tx.watch_queues(params, serving.state, jnp.ones(params.static.n_ports, bool), window_end_ps, end_bytes, 0)
    return state.replace(order=queues.keep(order, serving.head, window_end_ps))

names = [n for n, _ in engine.SYSTEMS]
VARIANTS = {
    "full": {},
    "no_transmit": {"transmit": identity},
    "start_only": {"transmit": start_only},
    "clock_only": {n: identity for n in names if n != "clock"},
    "no_pfc": {"pfc": identity},
}
