"""Exact PFC: the pause is decided at the instant of the arrival that takes an ingress above
XOFF, and reaches the upstream port exactly one link delay later, whatever the window."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import SMALL, chain
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.conf.schema import SimConfig, SwitchConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops import pfc as pfc_ops
from multiverse_jax.ops.pfc import release_ps
from multiverse_jax.workload.flows import make_flows

WIRE = 4096 + 64  # a full data packet on the wire
XOFF, XON = 20_000, 10_000
N_PACKETS = 40


def crossing_ps(fast_gbps: int, slow_gbps: int, delay_ps: int, release: str = "dequeue") -> int:
    """The instant the switch's ingress from h0 first holds more than XOFF (a plain-Python
    reference): h0 sends back to back at the fast rate, the switch forwards at the slow
    rate; a packet counts from its arrival (last bit) until it starts leaving (``dequeue``)
    or until its last bit has left (``sent``); on ties the arrival comes first."""
    t_fast = WIRE * 8 * 10**12 // (fast_gbps * 10**9)
    t_slow = WIRE * 8 * 10**12 // (slow_gbps * 10**9)
    arrivals = [(i + 1) * t_fast + delay_ps for i in range(N_PACKETS)]
    starts = []
    for a in arrivals:
        starts.append(max(a, starts[-1] + t_slow) if starts else a)
    released = [s + (t_slow if release == "sent" else 0) for s in starts]
    events = sorted([(r, 1, -WIRE) for r in released] + [(a, 0, WIRE) for a in arrivals])
    held = 0
    for time, _, change in events:
        held += change
        if held > XOFF:
            return time
    raise AssertionError("the reference never crosses XOFF")


def step_until_paused(exp):
    """Windows of the one experiment until h0's uplink has a pause decision: the params
    and state then (unbatched)."""
    batch = build_batch([exp], static=SMALL, slots_per_host=SMALL.slots_per_host)
    params, state = jax.tree.map(lambda x: x[0], (batch.params, batch.state))
    step = jax.jit(engine.step)
    for _ in range(400):
        state = step(params, state)
        if bool(np.any(np.asarray(state.links.pfc_paused[0]))):
            return params, state
    raise AssertionError("no pause within 400 windows")


@pytest.mark.parametrize(
    "delay_us, release", [(0.4, "dequeue"), (1.0, "dequeue"), (2.5, "dequeue"), (1.0, "sent"), (2.5, "sent")]
)  # the window is the link delay
def test_pause_reaches_upstream_one_delay_after_the_crossing(delay_us, release):
    delay_ps = round(delay_us * 1_000_000)
    topo = chain([100, 10], [delay_us, delay_us])  # h0 -> s0 at 100 Gb/s, s0 -> h1 at 10 Gb/s
    flows = make_flows([0], [1], [N_PACKETS * 4096], [0])
    switch = SwitchConfig(pfc_xoff_bytes=XOFF, pfc_xon_bytes=XON, pfc_release=release)
    exp = Experiment(topo, flows, switch=switch, sim=SimConfig(sample_interval_us=0))
    params, state = step_until_paused(exp)
    expected = crossing_ps(100, 10, delay_ps, release)
    uplink = 0  # h0's NIC port: the link into s0 whose ingress crosses XOFF
    history = np.asarray(state.links.pfc_decided_ps[uplink])
    paused = np.asarray(state.links.pfc_paused[uplink])
    assert history[np.argmax(paused)] == expected  # the first pause: decided at the crossing arrival
    # The upstream port may still start a data packet until the frame arrives, one link
    # delay later, and not from then on (the resume is decided later, if at all).
    earliest = np.full(params.links.link_delay_ps.shape, expected + delay_ps - 1, np.int64)
    just_before = release_ps(params, state, earliest)
    at_arrival = release_ps(params, state, earliest + 1)
    assert int(just_before[uplink]) == expected + delay_ps - 1
    assert int(at_arrival[uplink]) > expected + delay_ps
    # A round's releases from what its window's start saw (transmit's path) are the same,
    # before the pause, at it, and past its resume.
    seen = pfc_ops.seen_from(params, state.links, expected)
    for offset in (-1, 0, 1, 3 * delay_ps, 40 * delay_ps):
        instant = earliest + offset
        np.testing.assert_array_equal(pfc_ops.release_seen(params, state.links, seen, instant), release_ps(params, state, instant))


def test_events_past_the_compact_buffer_take_the_full_sort(monkeypatch):
    """The PFC replay of a large pool sorts only the events of links near a threshold,
    compacted into a few places per link; a window with more takes the full sort (a small
    pool, as here, always sorts every event). The compacted replay, one with a single
    place (every window with two events or more on the full sort), and the full sort with
    the event index as a sort operand (keys too wide to pack it) decide the same as sorting
    every event, window by window, while the ingress toggles between XOFF and XON."""
    from multiverse_jax.systems import pfc as pfc_system

    topo = chain([100, 10], [1.0, 1.0])
    flows = make_flows([0], [1], [N_PACKETS * 4096], [0])
    exp = Experiment(topo, flows, switch=SwitchConfig(pfc_xoff_bytes=XOFF, pfc_xon_bytes=XON), sim=SimConfig(sample_interval_us=0))
    batch = build_batch([exp], static=SMALL, slots_per_host=SMALL.slots_per_host)
    params, state = jax.tree.map(lambda x: x[0], (batch.params, batch.state))
    step = jax.jit(engine.step)

    @jax.jit
    def before_pfc(p, s):  # the window's systems up to PFC's replay
        return engine.systems_before("pfc", p, s, s.time_ps + p.window_ps)

    full = jax.jit(lambda p, s: pfc_system.pfc(p, s, s.time_ps + p.window_ps))
    full(params, state)  # traced as the small test pool runs: every event sorted
    monkeypatch.setattr(pfc_system, "KEY_BITS", 0)
    operand = jax.jit(lambda p, s: pfc_system.pfc(p, s, s.time_ps + p.window_ps))
    operand(params, state)  # every event sorted, its index an operand (as when link, time and index need > 63 bits)
    monkeypatch.setattr(pfc_system, "KEY_BITS", 63)
    monkeypatch.setattr(pfc_system, "PFC_COMPACT_ABOVE", 0)
    compact = jax.jit(lambda p, s: pfc_system.pfc(p, s, s.time_ps + p.window_ps))
    compact(params, state)  # traced with the shipped buffer (two places per link)
    monkeypatch.setattr(pfc_system, "PFC_EVENTS_PER_LINK", 0)
    overflowing_buffer = jax.jit(lambda p, s: pfc_system.pfc(p, s, s.time_ps + p.window_ps))
    overflowing_buffer(params, state)  # one place: every window with two events or more takes the full sort

    @jax.jit
    def n_events(p, s):
        end = s.time_ps + p.window_ps
        traffic = pfc_system._window_traffic(p, s, end)
        near, layout, n = pfc_system._near_threshold(p, s, traffic), pfc_system._key_layout(p), p.static.n_slots
        every_slot, everywhere = jnp.arange(n, dtype=jnp.int32), jnp.ones(n, bool)
        keys, _ = pfc_system._event_keys(p, s, end, traffic, near, layout, every_slot, everywhere)
        return jnp.sum(keys != layout.none)

    overflowing = 0
    for _ in range(120):
        window = before_pfc(params, state)
        reference = full(params, window).links
        for variant in (compact, overflowing_buffer, operand):
            for x, y in zip(jax.tree.leaves(variant(params, window).links), jax.tree.leaves(reference)):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        overflowing += int(n_events(params, window)) >= 2
        state = step(params, state)
    assert int(state.links.pfc_pause_count[0]) >= 2  # it paused (and resumed) more than once
    assert overflowing >= 3  # the full sort decided those windows (4 of the 120)
