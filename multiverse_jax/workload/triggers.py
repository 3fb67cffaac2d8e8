"""Trigger semantics shared by every FlowSet (from files or built in Python).

``check_triggers`` rejects trigger set-ups that can never complete; ``trigger_tables``
builds the dense tables the engine uses: flow f (waiting on trigger t) starts at the
``waiter_rank[f]``-th smallest activation time of t, where the activations of t are the
completions listed in ``activator_flow[t]`` (receiver's last byte where
``activator_is_recv``, sender's last ACK otherwise).
"""

from __future__ import annotations

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.workload.flows import (
    NO_TRIGGER,
    TRIGGER_BARRIER,
    TRIGGER_KINDS,
    TRIGGER_MULTISHOT,
    TRIGGER_ONESHOT,
    FlowSet,
)

_KIND_NAMES = {v: k for k, v in TRIGGER_KINDS.items()}


def _trigger_where(flows: FlowSet, t: int) -> dict:
    line = int(flows.triggers.line[t]) if len(flows.triggers) else 0
    return {"source": flows.source, "line": line if line > 0 else None}


def _activations(flows: FlowSet) -> list[list[tuple[int, bool]]]:
    """Per trigger: the (flow, is_recv) completions that activate it, in input order."""
    acts: list[list[tuple[int, bool]]] = [[] for _ in range(len(flows.triggers))]
    for f in range(len(flows)):
        s = int(flows.send_done_trigger[f])
        r = int(flows.recv_done_trigger[f])
        if s >= 0:
            acts[s].append((f, False))
        if r >= 0:
            acts[r].append((f, True))
    return acts


def _waiters(flows: FlowSet) -> list[list[int]]:
    waits: list[list[int]] = [[] for _ in range(len(flows.triggers))]
    for f in range(len(flows)):
        t = int(flows.trigger[f])
        if t >= 0:
            waits[t].append(f)
    return waits


def _check_ranges(flows: FlowSet) -> None:
    n_trig = len(flows.triggers)
    for f in range(len(flows)):
        for name in ("trigger", "send_done_trigger", "recv_done_trigger"):
            t = int(getattr(flows, name)[f])
            if not (t == NO_TRIGGER or 0 <= t < n_trig):
                raise InputError(
                    f"flow {flows.flow_id[f]}: {name} index {t} is out of range (there are {n_trig} triggers)",
                    **flows.where(f),
                )
        if flows.trigger[f] == NO_TRIGGER and flows.start_ps[f] < 0:
            raise InputError(
                f"flow {flows.flow_id[f]}: has neither a start time (start_ps >= 0) nor a trigger",
                **flows.where(f),
            )
    for t in range(n_trig):
        kind = int(flows.triggers.kind[t])
        if kind not in _KIND_NAMES:
            raise InputError(f"trigger {flows.triggers.trigger_id[t]}: unknown kind {kind}", **_trigger_where(flows, t))
        if kind == TRIGGER_BARRIER and flows.triggers.count[t] < 1:
            raise InputError(
                f"barrier trigger {flows.triggers.trigger_id[t]}: count must be >= 1, got {flows.triggers.count[t]}",
                **_trigger_where(flows, t),
            )


def _ids(flows: FlowSet, fs) -> str:
    return ", ".join(str(int(flows.flow_id[f])) for f in fs)


def check_triggers(flows: FlowSet) -> None:
    """Reject triggers that can never fire often enough, and dependency cycles.

    Checks, each an InputError naming the trigger's or flow's file line:

    * a trigger some flow waits on but no flow activates;
    * a barrier whose count exceeds its activations;
    * a multishot trigger with more waiting flows than activations;
    * a cycle: flows that can never start because every activation they need comes
      from flows that (transitively) wait on them. The flow ids of one such cycle are listed.
    """
    _check_ranges(flows)
    acts = _activations(flows)
    waits = _waiters(flows)
    ranks = _waiter_rank(flows, waits)
    for t in range(len(flows.triggers)):
        tid = int(flows.triggers.trigger_id[t])
        kind = int(flows.triggers.kind[t])
        n_act, n_wait = len(acts[t]), len(waits[t])
        if n_wait and not n_act:
            raise InputError(
                f"trigger {tid} is never fired: no flow has send_done_trigger {tid} or recv_done_trigger {tid} "
                f"(waiting flows: {_ids(flows, waits[t])})",
                **_trigger_where(flows, t),
            )
        if kind == TRIGGER_BARRIER and (n_wait or n_act) and flows.triggers.count[t] > n_act:
            raise InputError(
                f"barrier trigger {tid} needs count {flows.triggers.count[t]} activations but only {n_act} "
                f"completion(s) activate it (flows {_ids(flows, [f for f, _ in acts[t]]) or 'none'})",
                **_trigger_where(flows, t),
            )
        if kind == TRIGGER_MULTISHOT and n_wait > n_act:
            raise InputError(
                f"multishot trigger {tid} has {n_wait} waiting flows ({_ids(flows, waits[t])}) but only {n_act} "
                f"activation(s) (flows {_ids(flows, [f for f, _ in acts[t]])}); each activation starts one flow",
                **_trigger_where(flows, t),
            )

    # Which flows can ever start: fixpoint from the flows with a start time.
    n = len(flows)
    started = np.asarray(flows.trigger == NO_TRIGGER).copy()
    fired = np.zeros(len(flows.triggers), np.int64)  # activations from startable flows
    frontier = [f for f in range(n) if started[f]]
    while frontier:
        touched = set()
        for f in frontier:
            for t in (int(flows.send_done_trigger[f]), int(flows.recv_done_trigger[f])):
                if t >= 0:
                    fired[t] += 1
                    touched.add(t)
        frontier = []
        for t in touched:
            for w in waits[t]:
                if not started[w] and fired[t] >= ranks[w]:
                    started[w] = True
                    frontier.append(w)
    if started.all():
        return

    # Every stuck flow waits on a trigger with a stuck activator (the counts above are
    # sufficient, so a shortfall means a stuck activator): walk back until a flow repeats.
    f = int(np.nonzero(~started)[0][0])
    path: list[int] = []
    seen: dict[int, int] = {}
    while f not in seen:
        seen[f] = len(path)
        path.append(f)
        t = int(flows.trigger[f])
        f = next(a for a, _ in acts[t] if not started[a])
    cycle = path[seen[f] :][::-1]  # in activation order: each flow activates the next one's trigger
    first = cycle[0]
    chain = " -> ".join(
        f"flow {int(flows.flow_id[c])} -> trigger {int(flows.triggers.trigger_id[flows.trigger[nxt]])}"
        for c, nxt in zip(cycle, cycle[1:] + cycle[:1])
    )
    raise InputError(
        f"trigger cycle: flows {_ids(flows, cycle)} can never start, each waits (through a trigger) on the "
        f"completion of another: {chain} -> flow {int(flows.flow_id[first])}",
        **flows.where(first),
    )


def _waiter_rank(flows: FlowSet, waits: list[list[int]]) -> np.ndarray:
    rank = np.zeros(len(flows), np.int32)
    for t, ws in enumerate(waits):
        kind = int(flows.triggers.kind[t])
        for i, f in enumerate(ws):
            if kind == TRIGGER_ONESHOT:
                rank[f] = 1
            elif kind == TRIGGER_BARRIER:
                rank[f] = int(flows.triggers.count[t])
            elif kind == TRIGGER_MULTISHOT:
                rank[f] = i + 1
    return rank


def trigger_tables(flows: FlowSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense trigger tables for the engine.

    Returns ``(activator_flow, activator_is_recv, waiter_rank)``:

    * ``activator_flow`` (T, A) int32: the flows whose ``send_done_trigger`` or
      ``recv_done_trigger`` is t, in input order, -1 padded (a flow with both pointing at t
      appears twice, send completion first); A = max(1, most activations of any trigger);
    * ``activator_is_recv`` (T, A) bool: True where the receiver's last byte activates,
      False where the sender's last ACK does (and in padding);
    * ``waiter_rank`` (F,) int32: the activations of its trigger flow f needs before it
      starts (oneshot 1, barrier count, multishot 1 + earlier waiters; 0 without trigger).
    """
    _check_ranges(flows)
    acts = _activations(flows)
    n_trig = len(flows.triggers)
    width = max([1] + [len(a) for a in acts])
    activator_flow = np.full((n_trig, width), -1, np.int32)
    activator_is_recv = np.zeros((n_trig, width), bool)
    for t, entries in enumerate(acts):
        for j, (f, is_recv) in enumerate(entries):
            activator_flow[t, j] = f
            activator_is_recv[t, j] = is_recv
    return activator_flow, activator_is_recv, _waiter_rank(flows, _waiters(flows))
