"""Clock: move an experiment to its next window, jumping over time where nothing happens.

The next window starts at the window end, or later if the experiment's next event (a
packet arrival, a flow allowed to send, a flow start, a poll of a sender whose window is
open) is later than that: an idle
network jumps straight to its next event. In hybrid mode a frozen partition's events lie
far in the future (``ops/freeze.py``) and its planned thaw is an event: an experiment whose
active flows are all frozen jumps to the earliest thaw or flow start. A finished (or failed) experiment's clock stops.
"""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import ERROR_STALLED, ERROR_TIME_LIMIT, Params, State
from multiverse_jax.ops import cc, freeze, nic, pfc, polls
from multiverse_jax.units import NEVER
from multiverse_jax.ops.packets import in_flight, queued


def clock(params: Params, state: State, window_end_ps) -> State:
    pkts = state.packets
    next_arrival = jnp.min(jnp.where(in_flight(pkts), pkts.pkt_time_ps, NEVER))
    frozen = freeze.frozen_packets(params, state)  # hybrid mode: a frozen partition's queues wait for its thaw
    anything_queued = jnp.any(queued(pkts) & ~frozen)
    sendable, ready_ps = nic.sendable_and_ready(params, state)
    next_send = jnp.min(jnp.where(sendable, ready_ps, NEVER))
    next_event = jnp.minimum(jnp.minimum(next_arrival, next_send), jnp.where(anything_queued, window_end_ps, NEVER))
    next_event = jnp.minimum(next_event, cc.next_timer_ps(params, state))
    next_event = jnp.minimum(next_event, polls.open_due_ps(params, state))  # a poll that can hand a packet over
    next_event = jnp.minimum(next_event, pfc.next_release_ps(params, state, window_end_ps))
    next_event = jnp.minimum(next_event, jnp.min(jnp.where(state.steady.frozen, state.steady.thaw_at_ps, NEVER)))
    stalled = ~state.done & (next_event == NEVER)
    stopped = state.done | stalled | (state.error != 0)  # a failed experiment stops where it failed
    next_time = jnp.where(stopped, state.time_ps, jnp.maximum(window_end_ps, next_event))
    # A finished experiment's clock ends at its last event: the last ACK of its last flow, or its last task.
    last_finish = jnp.max(jnp.where(params.flows.flow_valid, state.flows.flow_finish_ps, 0))
    last_finish = jnp.maximum(last_finish, last_finish_ps(params, state))  # a task may end last
    next_time = jnp.where(state.done, jnp.maximum(state.time_ps, last_finish), next_time)
    over_time = ~state.done & (next_time > params.max_time_ps)
    return state.replace(
        time_ps=next_time,
        n_windows=state.n_windows + jnp.where(state.done, 0, 1),
        error=state.error | jnp.where(stalled, ERROR_STALLED, 0) | jnp.where(over_time, ERROR_TIME_LIMIT, 0),
    )


def last_finish_ps(params: Params, state: State):
    """() the latest known task finish (0 without tasks)."""
    finish = state.tasks.task_finish_ps
    return jnp.max(jnp.where(params.tasks.task_valid & (finish != NEVER), finish, 0))
