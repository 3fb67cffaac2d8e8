"""Flows and triggers on the host side (NumPy): what the Python API and importers produce.

A flow moves ``size_bytes`` from host ``src`` to host ``dst``. It starts at ``start_ps``,
or, when ``trigger >= 0``, when that trigger fires (htsim's connection-matrix semantics):

* ``oneshot``: fires on its first activation and starts every flow waiting on it;
* ``multishot``: activation number r starts the r-th waiting flow (in input order);
* ``barrier``: fires on its ``count``-th activation and starts every waiting flow.

A flow activates ``send_done_trigger`` when its sender has the last ACK and
``recv_done_trigger`` when its receiver has the last byte.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.topology.routing import UNREACHABLE

TRIGGER_ONESHOT, TRIGGER_MULTISHOT, TRIGGER_BARRIER = 0, 1, 2
TRIGGER_KINDS = {"oneshot": TRIGGER_ONESHOT, "multishot": TRIGGER_MULTISHOT, "barrier": TRIGGER_BARRIER}
NO_TRIGGER = -1


@dataclasses.dataclass(frozen=True)
class Triggers:
    """Trigger table (T triggers)."""

    trigger_id: np.ndarray  # (T,) int64 the input's trigger id
    kind: np.ndarray  # (T,) int8 TRIGGER_ONESHOT | TRIGGER_MULTISHOT | TRIGGER_BARRIER
    count: np.ndarray  # (T,) int32 activations a barrier needs (1 for the others)
    line: np.ndarray  # (T,) int32 input line of the trigger (0 when built in Python)

    @staticmethod
    def empty() -> "Triggers":
        return Triggers(np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.int32), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return int(self.trigger_id.shape[0])


@dataclasses.dataclass(frozen=True)
class FlowSet:
    """F flows between hosts, with optional trigger chaining."""

    flow_id: np.ndarray  # (F,) int64 the input's flow id (reported in outputs)
    src: np.ndarray  # (F,) int32 sending host
    dst: np.ndarray  # (F,) int32 receiving host
    size_bytes: np.ndarray  # (F,) int64 bytes to move (> 0)
    start_ps: np.ndarray  # (F,) int64 start time; -1 where the flow waits on a trigger
    prio: np.ndarray  # (F,) int32 priority class (0 = default)
    trigger: np.ndarray  # (F,) int32 index into ``triggers`` the flow waits on, or -1
    send_done_trigger: np.ndarray  # (F,) int32 trigger activated at sender completion, or -1
    recv_done_trigger: np.ndarray  # (F,) int32 trigger activated at receiver completion, or -1
    triggers: Triggers
    source: str = "<python>"  # where the flows came from, for error messages
    line: np.ndarray | None = None  # (F,) int32 input line of each flow, if from a file
    n_hosts: int | None = None  # hosts the input declares (htsim's ``Nodes``), if it does

    def __len__(self) -> int:
        return int(self.src.shape[0])

    def where(self, f: int) -> dict:
        """Keyword arguments for an InputError about flow ``f``."""
        line = int(self.line[f]) if self.line is not None else None
        return {"source": self.source, "line": line}


def make_flows(
    src,
    dst,
    size_bytes,
    start_ps=0,
    *,
    flow_id=None,
    prio=0,
) -> FlowSet:
    """The Python API: flows from array-likes (scalars broadcast). Validated on the way in."""
    src = np.asarray(src, np.int64).reshape(-1)
    n = src.shape[0]

    def column(value, dtype):
        return np.broadcast_to(np.asarray(value, dtype), (n,)).copy()

    flows = FlowSet(
        flow_id=column(np.arange(n) if flow_id is None else flow_id, np.int64),
        src=src.astype(np.int32),
        dst=column(dst, np.int32),
        size_bytes=column(size_bytes, np.int64),
        start_ps=column(start_ps, np.int64),
        prio=column(prio, np.int32),
        trigger=np.full(n, NO_TRIGGER, np.int32),
        send_done_trigger=np.full(n, NO_TRIGGER, np.int32),
        recv_done_trigger=np.full(n, NO_TRIGGER, np.int32),
        triggers=Triggers.empty(),
    )
    for f in range(n):
        if flows.size_bytes[f] <= 0:
            raise InputError(f"flow {flows.flow_id[f]}: size_bytes must be > 0, got {flows.size_bytes[f]}", **flows.where(f))
        if flows.start_ps[f] < 0:
            raise InputError(f"flow {flows.flow_id[f]}: start_ps must be >= 0, got {flows.start_ps[f]}", **flows.where(f))
    return flows


def check_hosts(flows: FlowSet, n_hosts: int, hops: np.ndarray, node_names=None, links_down=()) -> None:
    """Every flow joins two different, existing, mutually reachable hosts.

    ``hops`` is the routing table's (N, H) hop-count matrix (``UNREACHABLE`` where there is
    no path); ``node_names`` name the hosts in errors (default ``h{i}``), and an
    unreachable destination's error names the cables ``links_down``.
    """
    for f in range(len(flows)):
        for role, host in (("src", flows.src[f]), ("dst", flows.dst[f])):
            if not 0 <= host < n_hosts:
                raise InputError(
                    f"flow {flows.flow_id[f]}: unknown host {role}={host} (valid hosts: 0..{n_hosts - 1})",
                    **flows.where(f),
                )
        if flows.src[f] == flows.dst[f]:
            raise InputError(f"flow {flows.flow_id[f]}: src and dst are both host {flows.src[f]}", **flows.where(f))
        if hops[flows.src[f], flows.dst[f]] >= UNREACHABLE:
            src, dst = (node_names[h] if node_names else f"h{h}" for h in (flows.src[f], flows.dst[f]))
            down = f" with the links down ({', '.join(links_down)})" if links_down else ""
            raise InputError(
                f"flow {flows.flow_id[f]} ({src}->{dst}): destination {dst} is unreachable from {src}{down}",
                **flows.where(f),
            )
