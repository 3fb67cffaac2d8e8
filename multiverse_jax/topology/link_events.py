"""Timed link events: at a given time a cable goes down, comes back up, or changes rate.

``topology.link_events`` is a list of events, each a map::

    {at_us: 50, link: agg0-core0, action: down}       # no longer routed over from 50 µs
    {at_us: 80, link: agg0-core0, action: up}         # routed again, at its configured rate
    {at_us: 20, link: tor0-h1, action: rate, gbps: 25}  # runs at 25 Gb/s from 20 µs

A cable is named as in ``topology.links_down`` (``topology/failures.py``: ``a-b`` by node
names or ids, both directions). ``up`` ends a failure or a degradation: the cable carries
traffic again at its configured rate (``link.rate_gbps``, or ``topology.link_rates_gbps``).

The events cut the run into epochs: epoch 0 is the configured fabric (with its static
failures), and each distinct event time starts the next epoch, whose fabric is the previous
one with the events at that time applied in list order (``link_epochs``). Each epoch has
its own ECMP tables, built on the host like the static ones; the step uses the tables and
link rates of the epoch its window starts in, and ends a window at every event time
(``ops/link_events.py``), so an event applies at its exact picosecond:

* a forwarding decision taken after the event uses the new tables; a packet already
  queued at (or serialising onto) a link that went down still leaves over it: we model no
  loss and no retransmission, so a failure reroutes traffic but never drops it;
* a rate change applies to the next packet that starts on the link; one serialising at
  the event finishes at the old rate.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.topology.failures import EVENTS_KEY, _rate_bps, cable_ports
from multiverse_jax.topology.graph import Topology
from multiverse_jax.units import PS_PER_US

ACTIONS = ("down", "up", "rate")
EXAMPLE = "{at_us: 50, link: agg0-core0, action: down}"


@dataclasses.dataclass(frozen=True)
class LinkEvent:
    """One timed event on a cable (see the module docstring)."""

    at_us: float  # when it happens, µs of simulated time (>= 0)
    link: str  # the cable, 'a-b'
    action: str  # down | up | rate
    gbps: float | None = None  # the new rate (action rate only)

    @property
    def at_ps(self) -> int:
        return int(round(self.at_us * PS_PER_US))

    def label(self) -> str:
        """Compact, for plot axes: ``agg0-core0 down@50µs``, ``tor0-h1 25G@20µs``."""
        what = f"{self.gbps:g}G" if self.action == "rate" else self.action
        return f"{self.link} {what}@{self.at_us:g}µs"

    def describe(self) -> str:
        """``agg0-core0 down at 50 µs``, ``tor0-h1 at 25 Gb/s at 20 µs``."""
        what = f"at {self.gbps:g} Gb/s" if self.action == "rate" else self.action
        return f"{self.link} {what} at {self.at_us:g} µs"


@dataclasses.dataclass(frozen=True)
class LinkEpoch:
    """The fabric from ``start_ps`` until the next epoch starts."""

    start_ps: int
    topology: Topology  # link_up and link_rate_bps as they are in this epoch
    events: tuple[LinkEvent, ...]  # the events that started it (none for epoch 0)


def _number(key: str, value, minimum: float = 0.0) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value >= minimum
    if not ok:
        raise InputError(f"{key} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


def as_link_events(raw) -> tuple[LinkEvent, ...]:
    """``topology.link_events`` (None, or a list of maps or ``LinkEvent``s) as LinkEvents;
    an InputError naming the key of the first bad field."""
    if raw is None:
        return ()
    if isinstance(raw, (str, bytes)) or not isinstance(raw, (list, tuple)):
        raise InputError(f"{EVENTS_KEY} must be a list of events like [{EXAMPLE}], got {raw!r}")
    events = []
    for i, item in enumerate(raw):
        key = f"{EVENTS_KEY}[{i}]"
        if isinstance(item, LinkEvent):
            events.append(item)
            continue
        if not hasattr(item, "items"):
            raise InputError(f"{key} must be a map like {EXAMPLE}, got {item!r}")
        item = dict(item)
        unknown = sorted(set(item) - {"at_us", "link", "action", "gbps"})
        if unknown:
            raise InputError(f"{key}: unknown field(s) {', '.join(unknown)} (valid: at_us, link, action, gbps)")
        for field in ("at_us", "link", "action"):
            if field not in item:
                raise InputError(f"{key}.{field} is missing (an event is like {EXAMPLE})")
        action = str(item["action"])
        if action not in ACTIONS:
            raise InputError(f"{key}.action must be one of {', '.join(ACTIONS)}, got {item['action']!r}")
        gbps = item.get("gbps")
        if action == "rate":
            if gbps is None:
                raise InputError(f"{key}.gbps is missing: a rate event gives the new rate in Gb/s")
            _rate_bps(f"{key}.gbps", gbps)
            gbps = float(gbps)
        elif gbps is not None:
            raise InputError(f"{key}.gbps is only for action rate (action {action} takes none)")
        events.append(LinkEvent(_number(f"{key}.at_us", item["at_us"]), str(item["link"]), action, gbps))
    return tuple(events)


def link_epochs(topology: Topology, events) -> tuple[LinkEpoch, ...]:
    """The epochs of ``topology`` (the configured fabric) under ``events``: epoch 0 is
    ``topology`` itself, then one per distinct event time, in time order (events at the
    same time apply in list order). A cable that fails while down, or changes rate while
    down, is an InputError naming the event."""
    events = as_link_events(events)
    epochs = [LinkEpoch(0, topology, ())]
    link_up, rate_bps = topology.link_up.copy(), topology.link_rate_bps.copy()
    order = sorted(range(len(events)), key=lambda i: events[i].at_ps)
    for n, i in enumerate(order):
        event, key = events[i], f"{EVENTS_KEY}[{i}]"
        ports = cable_ports(topology, event.link, f"{key}.link")
        if event.action == "down":
            if not link_up[ports].any():
                raise InputError(f"{key}: {event.describe()}, but the cable is already down then")
            link_up[ports] = False
        elif event.action == "up":
            link_up[ports] = True
            rate_bps[ports] = topology.link_rate_bps[ports]
        else:
            if not link_up[ports].all():
                raise InputError(f"{key}: {event.describe()}, but the cable is down then (bring it up first)")
            rate_bps[ports] = _rate_bps(f"{key}.gbps", event.gbps)
        last_at_time = n + 1 == len(order) or events[order[n + 1]].at_ps != event.at_ps
        if last_at_time:
            changed = dataclasses.replace(topology, link_up=link_up.copy(), link_rate_bps=rate_bps.copy())
            at_time = tuple(events[j] for j in order if events[j].at_ps == event.at_ps)
            epochs.append(LinkEpoch(event.at_ps, changed, at_time))
    return tuple(epochs)


def changed_ports(before: Topology, after: Topology) -> np.ndarray:
    """(L,) bool the directed links whose state (up, rate) differs between two epochs."""
    return (before.link_up != after.link_up) | (before.link_rate_bps != after.link_rate_bps)
