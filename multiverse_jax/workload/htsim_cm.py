"""Reader for htsim connection matrices (``.cm``), see shared/formats/htsim-cm.md.

``load_cm(path)`` returns a validated :class:`FlowSet`. Every error is an
:class:`InputError` that names the file and the 1-based line (``path:LINE: message``).

Differences from htsim, on purpose:

* ``start`` is parsed exactly (decimal, then rounded to whole picoseconds), not through a
  32-bit float, so ``start 123456789`` really starts at 123456789 ps;
* link failures (``Failures`` / ``failure`` lines) are rejected as not supported yet.
"""

from __future__ import annotations

import decimal
import os

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.textfile import INT64_MAX, parse_int, read_lines
from multiverse_jax.workload.flows import NO_TRIGGER, TRIGGER_BARRIER, TRIGGER_KINDS, FlowSet, Triggers
from multiverse_jax.workload.triggers import check_triggers

_HEADERS = ("Nodes", "Connections", "Triggers", "Failures")
_FLOW_KEYS_WITH_VALUE = ("id", "start", "size", "trigger", "send_done_trigger", "recv_done_trigger", "prio")
_FLOW_KEYS_NO_VALUE = ("addon",)


def _error(message: str, path: str, line: int | None) -> InputError:
    return InputError(message, source=path, line=line)


def _parse_start_ps(text: str, path: str, line: int) -> int:
    """``start`` in picoseconds: any decimal number (``1e6``, ``2.5e7``), rounded to whole ps."""
    try:
        value = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise _error(f"start: expected a number of picoseconds, got {text!r}", path, line) from None
    if not value.is_finite():
        raise _error(f"start: expected a number of picoseconds, got {text!r}", path, line)
    if value < 0:
        raise _error(f"start must be >= 0 picoseconds, got {text}", path, line)
    result = int(value.to_integral_value(rounding=decimal.ROUND_HALF_EVEN))
    if result > INT64_MAX:
        raise _error(f"start: {text} ps is too large", path, line)
    return result


def _parse_endpoints(token: str, path: str, line: int) -> tuple[int, int]:
    parts = token.split("->")
    if len(parts) != 2 or not all(p.isdecimal() for p in parts):
        raise _error(
            f"malformed flow endpoints {token!r}: expected <src>-><dst> with host numbers, e.g. 0->15",
            path,
            line,
        )
    return int(parts[0]), int(parts[1])


def load_cm(path) -> FlowSet:
    """Read an htsim connection matrix into a validated FlowSet."""
    path = os.fspath(path)
    source = str(path)
    lines = read_lines(source, "connection matrix file")

    headers: dict[str, tuple[int, int]] = {}  # name -> (value, line)
    body_started_at: int | None = None

    # Raw flow records: dicts with the parsed tokens, plus trigger records.
    flow_records: list[dict] = []
    trigger_records: list[tuple[int, int, int, int]] = []  # (trigger id, kind, count, line)
    trigger_line_by_id: dict[int, int] = {}

    for number, text in enumerate(lines, start=1):
        tokens = text.split()
        if not tokens or tokens[0].startswith("#"):
            continue
        head = tokens[0]

        if head in _HEADERS:
            if body_started_at is not None:
                raise _error(
                    f"header {head!r} must come before the first flow/trigger/failure line (line {body_started_at})",
                    source,
                    number,
                )
            if head in headers:
                raise _error(f"duplicate header {head!r} (first on line {headers[head][1]})", source, number)
            if len(tokens) != 2:
                raise _error(f"header {head!r} takes exactly one integer value, e.g. '{head} 4'", source, number)
            value = parse_int(tokens[1], head, source, number, minimum=1 if head == "Nodes" else 0)
            headers[head] = (value, number)
            continue

        if body_started_at is None:
            body_started_at = number
            for required in ("Nodes", "Connections"):
                if required not in headers:
                    raise _error(
                        f"missing header {required!r} before the first flow/trigger/failure line",
                        source,
                        number,
                    )

        if head == "failure" or head == "Failure":
            raise _error(
                "link failures are not supported yet (failure lines cannot be simulated; remove them)",
                source,
                number,
            )

        if head == "trigger":
            trigger_records.append(_parse_trigger(tokens, source, number, trigger_line_by_id))
            continue

        if "->" in head:
            flow_records.append(_parse_flow(tokens, source, number, len(flow_records) + 1))
            continue

        raise _error(
            f"unknown line starting with {head!r}: expected a header ({', '.join(_HEADERS)}), "
            "a flow '<src>-><dst> ...', 'trigger id ...' or a comment '# ...'",
            source,
            number,
        )

    for required in ("Nodes", "Connections"):
        if required not in headers:
            raise _error(f"missing header {required!r}", source, None)

    n_nodes, _ = headers["Nodes"]
    n_conn, conn_line = headers["Connections"]
    if len(flow_records) != n_conn:
        raise _error(f"Connections {n_conn} but the file has {len(flow_records)} flow lines", source, conn_line)
    if "Triggers" in headers:
        n_trig, trig_line = headers["Triggers"]
        if len(trigger_records) != n_trig:
            raise _error(
                f"Triggers {n_trig} but the file has {len(trigger_records)} trigger lines", source, trig_line
            )
    if "Failures" in headers:
        n_fail, fail_line = headers["Failures"]
        if n_fail != 0:
            raise _error(
                f"Failures {n_fail}: link failures are not supported yet (use 'Failures 0' or drop the header)",
                source,
                fail_line,
            )

    trigger_index = {tid: i for i, (tid, _, _, _) in enumerate(trigger_records)}

    n = len(flow_records)
    flow_id = np.zeros(n, np.int64)
    src = np.zeros(n, np.int32)
    dst = np.zeros(n, np.int32)
    size = np.zeros(n, np.int64)
    start = np.zeros(n, np.int64)
    prio = np.zeros(n, np.int32)
    trig = np.full(n, NO_TRIGGER, np.int32)
    send_done = np.full(n, NO_TRIGGER, np.int32)
    recv_done = np.full(n, NO_TRIGGER, np.int32)
    line = np.zeros(n, np.int32)
    seen_ids: dict[int, int] = {}

    for f, rec in enumerate(flow_records):
        number = rec["line"]
        fid = rec["id"]
        if fid in seen_ids:
            raise _error(f"duplicate flow id {fid} (first on line {seen_ids[fid]})", source, number)
        seen_ids[fid] = number
        for role in ("src", "dst"):
            host = rec[role]
            if host >= n_nodes:
                raise _error(
                    f"flow {fid}: unknown host {role}={host} (Nodes {n_nodes}: valid hosts are 0..{n_nodes - 1})",
                    source,
                    number,
                )
        if rec["src"] == rec["dst"]:
            raise _error(f"flow {fid}: src and dst are both host {rec['src']}", source, number)
        resolved = {}
        for key in ("trigger", "send_done_trigger", "recv_done_trigger"):
            tid = rec.get(key)
            if tid is None:
                resolved[key] = NO_TRIGGER
                continue
            if tid not in trigger_index:
                raise _error(
                    f"flow {fid}: {key} {tid} refers to a trigger with no 'trigger id {tid} ...' line",
                    source,
                    number,
                )
            resolved[key] = trigger_index[tid]
        flow_id[f] = fid
        src[f] = rec["src"]
        dst[f] = rec["dst"]
        size[f] = rec["size"]
        start[f] = rec["start"] if "start" in rec else -1
        prio[f] = rec.get("prio", 0)
        trig[f] = resolved["trigger"]
        send_done[f] = resolved["send_done_trigger"]
        recv_done[f] = resolved["recv_done_trigger"]
        line[f] = number

    triggers = Triggers(
        trigger_id=np.asarray([r[0] for r in trigger_records], np.int64).reshape(-1),
        kind=np.asarray([r[1] for r in trigger_records], np.int8).reshape(-1),
        count=np.asarray([r[2] for r in trigger_records], np.int32).reshape(-1),
        line=np.asarray([r[3] for r in trigger_records], np.int32).reshape(-1),
    )
    flows = FlowSet(
        flow_id=flow_id,
        src=src,
        dst=dst,
        size_bytes=size,
        start_ps=start,
        prio=prio,
        trigger=trig,
        send_done_trigger=send_done,
        recv_done_trigger=recv_done,
        triggers=triggers,
        source=source,
        line=line,
        n_hosts=n_nodes,
    )
    check_triggers(flows)
    return flows


def _parse_flow(tokens: list[str], path: str, line: int, position: int) -> dict:
    src, dst = _parse_endpoints(tokens[0], path, line)
    rec: dict = {"src": src, "dst": dst, "line": line}
    i = 1
    while i < len(tokens):
        key = tokens[i]
        if key in _FLOW_KEYS_NO_VALUE:
            i += 1
            continue
        if key not in _FLOW_KEYS_WITH_VALUE:
            raise _error(
                f"unknown flow token {key!r} (valid: {', '.join(_FLOW_KEYS_WITH_VALUE + _FLOW_KEYS_NO_VALUE)})",
                path,
                line,
            )
        if key in rec:
            raise _error(f"flow token {key!r} given twice", path, line)
        if i + 1 >= len(tokens):
            raise _error(f"flow token {key!r} is missing its value", path, line)
        value = tokens[i + 1]
        if key == "id":
            rec[key] = parse_int(value, "id", path, line, minimum=1)
        elif key == "start":
            rec[key] = _parse_start_ps(value, path, line)
        elif key == "size":
            rec[key] = parse_int(value, "size", path, line, minimum=1)
        elif key == "prio":
            rec[key] = parse_int(value, "prio", path, line, minimum=0)
        else:  # trigger ids
            rec[key] = parse_int(value, key, path, line, minimum=0)
        i += 2

    if "size" not in rec:
        raise _error("flow has no 'size <bytes>'", path, line)
    has_start, has_trigger = "start" in rec, "trigger" in rec
    if has_start == has_trigger:
        what = "both" if has_start else "neither"
        raise _error(f"a flow needs exactly one of 'start <ps>' or 'trigger <id>', this one has {what}", path, line)
    if "id" not in rec:
        if has_trigger:
            raise _error("a flow that waits on a 'trigger' needs an 'id'", path, line)
        rec["id"] = position
    return rec


def _parse_trigger(tokens: list[str], path: str, line: int, seen: dict[int, int]) -> tuple[int, int, int, int]:
    usage = "expected 'trigger id <T> oneshot|multishot|barrier [count <C>]'"
    if len(tokens) < 2 or tokens[1] != "id":
        raise _error(f"malformed trigger line: {usage}", path, line)
    if len(tokens) < 3:
        raise _error(f"trigger 'id' is missing its value: {usage}", path, line)
    tid = parse_int(tokens[2], "trigger id", path, line, minimum=0)
    if tid in seen:
        raise _error(f"duplicate trigger id {tid} (first on line {seen[tid]})", path, line)
    if len(tokens) < 4:
        raise _error(f"trigger {tid} has no type: {usage}", path, line)
    kind_name = tokens[3]
    if kind_name not in TRIGGER_KINDS:
        raise _error(f"trigger {tid}: unknown type {kind_name!r}: {usage}", path, line)
    kind = TRIGGER_KINDS[kind_name]
    rest = tokens[4:]
    count = None
    if rest:
        if rest[0] != "count":
            raise _error(f"trigger {tid}: unknown token {rest[0]!r}: {usage}", path, line)
        if len(rest) < 2:
            raise _error(f"trigger {tid}: 'count' is missing its value", path, line)
        if len(rest) > 2:
            raise _error(f"trigger {tid}: unexpected token {rest[2]!r} after the count", path, line)
        count = parse_int(rest[1], f"trigger {tid} count", path, line, minimum=1)
    if kind == TRIGGER_BARRIER:
        if count is None:
            raise _error(f"barrier trigger {tid} needs 'count <C>' (C >= 1)", path, line)
    elif count is not None:
        raise _error(f"trigger {tid}: 'count' only applies to barrier triggers, not {kind_name}", path, line)
    seen[tid] = line
    return tid, kind, 1 if count is None else count, line
