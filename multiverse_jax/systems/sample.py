"""Sample: record the time series (``components/samples.py``) at the end of a window that
reaches the next sample time. Sample times are due on the grid of multiples of the
interval: the next one is the first grid time after this window's end, so there is at
most one sample per interval, and samples are taken at window ends (up to one window
after their grid time). An idle jump of the clock takes no samples (nothing changes
while the network is idle)."""

from __future__ import annotations

import jax.numpy as jnp

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops import lockstep
from multiverse_jax.ops.packets import port_queue_bytes
from multiverse_jax.ops.steady import steady_rates


def sample(params: Params, state: State, window_end_ps) -> State:
    # Most windows take no sample (none at all where sampling is off): the record, with its
    # pass over the pool for the queues, runs only in a window where one is due (under vmap,
    # where some experiment's is; the others' writes are dropped).
    due = window_end_ps >= state.samples.next_sample_ps
    samples = lockstep.when_any(due, _record, state.samples, (params, state, window_end_ps))
    return state.replace(samples=samples)


def _record(consts, smp):
    """The time series after this window: a sample at each index where one is due."""
    params, state, window_end_ps = consts
    due = window_end_ps >= smp.next_sample_ps
    n_ring = params.static.n_samples
    # Not due: write to an index past the ring (dropped), so nothing changes.
    at = jnp.where(due, smp.sample_count % n_ring, n_ring)
    queue_bytes = port_queue_bytes(params, state.packets)
    steady_now = state.steady.frozen
    if params.static.steady_window > 1:  # some experiment of the batch is hybrid
        steady_now = steady_now | steady_rates(params, state)[0]
    # A packet is created when the NIC starts it on the wire: sent packets are full ones,
    # but for the last.
    sent_bytes = state.flows.flow_sent_packets.astype(jnp.int64) * params.payload_bytes
    tx_bytes = jnp.minimum(sent_bytes, params.flows.flow_size_bytes)
    interval = params.sample_interval_ps
    following = smp.next_sample_ps + interval * ((window_end_ps - smp.next_sample_ps) // interval + 1)
    smp = smp.replace(
        sample_count=smp.sample_count + due,
        next_sample_ps=jnp.where(due, following, smp.next_sample_ps),
        sample_time_ps=smp.sample_time_ps.at[at].set(window_end_ps, mode="drop"),
        sample_flow_rate_bps=smp.sample_flow_rate_bps.at[at].set(state.cc.flow_rate_bps, mode="drop"),
        sample_flow_window_bytes=smp.sample_flow_window_bytes.at[at].set(state.cc.flow_window_bytes, mode="drop"),
        sample_flow_tx_bytes=smp.sample_flow_tx_bytes.at[at].set(tx_bytes, mode="drop"),
        sample_flow_rx_bytes=smp.sample_flow_rx_bytes.at[at].set(state.flows.flow_rx_bytes, mode="drop"),
        sample_port_queue_bytes=smp.sample_port_queue_bytes.at[at].set(queue_bytes, mode="drop"),
        sample_flow_steady=smp.sample_flow_steady.at[at].set(steady_now & params.steady.hybrid, mode="drop"),
    )
    return smp

