"""Reader for htsim connection matrices (``.cm``), see shared/formats/htsim-cm.md.

``load_cm(path)`` returns a validated :class:`FlowSet`; ``read_cm(path)`` also returns
the file's link failures. Every error is an :class:`InputError` that names the file and
the 1-based line (``path:LINE: message``).

A failure line, ``failure switch_type AGG switch_id <i> link_id <j>``, removes (from the
start) the cable between agg switch i and one of its cores, as htsim's fat-tree does
(``topology.failures.htsim_failed_cable`` says which); as in htsim, ``Failures <F>`` must
count the failure lines, and only AGG switches can fail links.

Differences from htsim, on purpose: ``start`` is parsed exactly (decimal, then rounded to
whole picoseconds), not through a 32-bit float, so ``start 123456789`` really starts at
123456789 ps; what htsim asserts or reads past (a failure with a missing value, a
non-AGG switch) is an error naming the line.
"""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class CmFailure:
    """A ``failure`` line: agg switch ``switch_id``'s uplink ``link_id`` is down."""

    switch_id: int
    link_id: int
    line: int  # 1-based line in the file


@dataclasses.dataclass(frozen=True)
class CmFile:
    """A connection matrix: its flows and its link failures (in file order)."""

    flows: FlowSet
    failures: tuple[CmFailure, ...]


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
    value = value.to_integral_value(rounding=decimal.ROUND_HALF_EVEN)
    if value > INT64_MAX:  # before int(): 1e999999999 would be a huge int
        raise _error(f"start: {text} ps does not fit in 64 bits (at most {INT64_MAX})", path, line)
    return int(value)


def _parse_endpoints(token: str, path: str, line: int) -> tuple[int, int]:
    parts = token.split("->")
    if len(parts) != 2 or not all(p.isdecimal() for p in parts):
        raise _error(
            f"malformed flow endpoints {token!r}: expected <src>-><dst> with host numbers, e.g. 0->15",
            path,
            line,
        )
    return int(parts[0]), int(parts[1])


class _Reader:
    """The lines of a connection matrix, in order: headers, then flow and trigger lines."""

    def __init__(self, source: str):
        self.source = source
        self.headers: dict[str, tuple[int, int]] = {}  # name -> (value, line)
        self.body_line: int | None = None  # the first flow / trigger / failure line
        self.flows: list[dict] = []  # _parse_flow's records
        self.triggers: list[tuple[int, int, int, int]] = []  # (trigger id, kind, count, line)
        self.trigger_lines: dict[int, int] = {}  # trigger id -> line
        self.failures: list[CmFailure] = []

    def read(self, tokens: list[str], number: int) -> None:
        head = tokens[0]
        if head in _HEADERS:
            self.header(tokens, number)
            return
        self.start_body(number)
        if head == "failure":
            self.failures.append(_parse_failure(tokens, self.source, number))
        elif head == "trigger":
            self.triggers.append(_parse_trigger(tokens, self.source, number, self.trigger_lines))
        elif "->" in head:
            self.flows.append(_parse_flow(tokens, self.source, number, len(self.flows) + 1))
        else:
            raise _error(
                f"unknown line starting with {head!r}: expected a header ({', '.join(_HEADERS)}), "
                "a flow '<src>-><dst> ...', 'trigger id ...', 'failure ...' or a comment '# ...'",
                self.source,
                number,
            )

    def header(self, tokens: list[str], number: int) -> None:
        head = tokens[0]
        if self.body_line is not None:
            where = f"the first flow/trigger/failure line (line {self.body_line})"
            raise _error(f"header {head!r} must come before {where}", self.source, number)
        if head in self.headers:
            raise _error(f"duplicate header {head!r} (first on line {self.headers[head][1]})", self.source, number)
        if len(tokens) != 2:
            raise _error(f"header {head!r} takes exactly one integer value, e.g. '{head} 4'", self.source, number)
        value = parse_int(tokens[1], head, self.source, number, minimum=1 if head == "Nodes" else 0)
        self.headers[head] = (value, number)

    def start_body(self, number: int) -> None:
        if self.body_line is None:
            self.body_line = number
            self.require_headers("before the first flow/trigger/failure line", number)

    def require_headers(self, where: str, number: int | None) -> None:
        for required in ("Nodes", "Connections"):
            if required not in self.headers:
                raise _error(f"missing header {required!r} {where}", self.source, number)

    def check_counts(self) -> None:
        """The file has as many flow, trigger and failure lines as its headers announce
        (htsim: a failure line without a ``Failures`` header is one too many)."""
        self.require_headers("(every connection matrix starts with 'Nodes <N>' and 'Connections <M>')", None)
        counts = (
            ("Connections", "flow", len(self.flows)),
            ("Triggers", "trigger", len(self.triggers)),
            ("Failures", "failure", len(self.failures)),
        )
        for name, what, found in counts:
            if name in self.headers and self.headers[name][0] != found:
                value, line = self.headers[name]
                raise _error(f"{name} {value} but the file has {found} {what} lines", self.source, line)
        if self.failures and "Failures" not in self.headers:
            message = f"a failure line needs a 'Failures <F>' header counting them (here Failures {len(self.failures)})"
            raise _error(message, self.source, self.failures[0].line)


# FlowSet field <- _parse_flow record key, dtype
_FLOW_COLUMNS = (
    ("flow_id", "id", np.int64),
    ("src", "src", np.int32),
    ("dst", "dst", np.int32),
    ("size_bytes", "size", np.int64),
    ("start_ps", "start", np.int64),
    ("prio", "prio", np.int32),
    ("trigger", "trigger", np.int32),
    ("send_done_trigger", "send_done_trigger", np.int32),
    ("recv_done_trigger", "recv_done_trigger", np.int32),
    ("line", "line", np.int32),
)
# Triggers field <- position in a _parse_trigger record, dtype
_TRIGGER_COLUMNS = ((0, "trigger_id", np.int64), (1, "kind", np.int8), (2, "count", np.int32), (3, "line", np.int32))


def _resolved(records: list[dict], trigger_index: dict[int, int], n_nodes: int, source: str) -> list[dict]:
    """The flow records checked (ids unique, hosts in range, triggers defined) and completed:
    trigger ids become trigger indices (NO_TRIGGER when absent); a triggered flow starts at -1."""
    seen_ids: dict[int, int] = {}
    out = []
    for rec in records:
        number, fid = rec["line"], rec["id"]
        if fid in seen_ids:
            raise _error(f"duplicate flow id {fid} (first on line {seen_ids[fid]})", source, number)
        seen_ids[fid] = number
        for role in ("src", "dst"):
            if rec[role] >= n_nodes:
                valid = f"Nodes {n_nodes}: valid hosts are 0..{n_nodes - 1}"
                raise _error(f"flow {fid}: unknown host {role}={rec[role]} ({valid})", source, number)
        if rec["src"] == rec["dst"]:
            raise _error(f"flow {fid}: src and dst are both host {rec['src']}", source, number)
        full = {**rec, "start": rec.get("start", -1), "prio": rec.get("prio", 0)}
        for key in ("trigger", "send_done_trigger", "recv_done_trigger"):
            tid = rec.get(key)
            if tid is not None and tid not in trigger_index:
                message = f"flow {fid}: {key} {tid} refers to a trigger with no 'trigger id {tid} ...' line"
                raise _error(message, source, number)
            full[key] = NO_TRIGGER if tid is None else trigger_index[tid]
        out.append(full)
    return out


def load_cm(path) -> FlowSet:
    """Read an htsim connection matrix into a validated FlowSet (its flows only)."""
    return read_cm(path).flows


def read_cm(path) -> CmFile:
    """Read an htsim connection matrix: its validated flows and its link failures."""
    source = str(os.fspath(path))
    reader = _Reader(source)
    for number, text in enumerate(read_lines(source, "connection matrix file"), start=1):
        tokens = text.split()
        if tokens and not tokens[0].startswith("#"):
            reader.read(tokens, number)
    reader.check_counts()
    n_nodes = reader.headers["Nodes"][0]
    trigger_index = {tid: i for i, (tid, _, _, _) in enumerate(reader.triggers)}
    records = _resolved(reader.flows, trigger_index, n_nodes, source)
    trigger_columns = {name: np.asarray([t[k] for t in reader.triggers], dtype) for k, name, dtype in _TRIGGER_COLUMNS}
    flow_columns = {name: np.asarray([r[key] for r in records], dtype) for name, key, dtype in _FLOW_COLUMNS}
    flows = FlowSet(**flow_columns, triggers=Triggers(**trigger_columns), source=source, n_hosts=n_nodes)
    check_triggers(flows)
    return CmFile(flows=flows, failures=tuple(reader.failures))


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
            valid = ", ".join(_FLOW_KEYS_WITH_VALUE + _FLOW_KEYS_NO_VALUE)
            raise _error(f"unknown flow token {key!r} (valid: {valid})", path, line)
        if key in rec:
            raise _error(f"flow token {key!r} given twice", path, line)
        if i + 1 >= len(tokens):
            raise _error(f"flow token {key!r} is missing its value", path, line)
        value = tokens[i + 1]
        if key == "start":
            rec[key] = _parse_start_ps(value, path, line)
        else:  # id and size > 0; prio and trigger ids >= 0
            rec[key] = parse_int(value, key, path, line, minimum=1 if key in ("id", "size") else 0)
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


def _parse_failure(tokens: list[str], path: str, line: int) -> CmFailure:
    """``failure switch_type AGG switch_id <i> link_id <j>`` (attributes in any order)."""
    usage = "expected 'failure switch_type AGG switch_id <i> link_id <j>'"
    values: dict[str, str] = {}
    for i in range(1, len(tokens), 2):
        key = tokens[i]
        if key not in ("switch_type", "switch_id", "link_id"):
            raise _error(f"unknown failure attribute {key!r}: {usage}", path, line)
        if key in values:
            raise _error(f"failure attribute {key!r} given twice", path, line)
        if i + 1 >= len(tokens):
            raise _error(f"failure attribute {key!r} is missing its value: {usage}", path, line)
        values[key] = tokens[i + 1]
    for key in ("switch_type", "switch_id", "link_id"):
        if key not in values:
            raise _error(f"failure line has no {key!r}: {usage}", path, line)
    if values["switch_type"] != "AGG":
        kind = values["switch_type"]
        what = "htsim fails links of AGG switches only" if kind in ("TOR", "CORE") else "expected TOR, AGG or CORE"
        raise _error(f"failure switch_type {kind!r}: {what} (its uplinks to the cores)", path, line)
    switch_id = parse_int(values["switch_id"], "failure switch_id", path, line, minimum=0)
    link_id = parse_int(values["link_id"], "failure link_id", path, line, minimum=0)
    return CmFailure(switch_id=switch_id, link_id=link_id, line=line)
