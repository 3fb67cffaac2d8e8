"""GOAL schedules (LogGOPSim / ATLAHS text format) -> task graphs.

``load_goal(path)`` returns a :class:`TaskGraph` on ``num_ranks`` GPUs. Every malformed
line is an :class:`InputError` naming ``file:line`` and what would be valid.

Grammar (LogGOPSim ``src/LogGOPSim/txt2bin.re``, spcl/LogGOPSim)::

    num_ranks <N>
    rank <r> {
      [<label>:] send <bytes>[b] to <rank> [tag <t>] [cpu <c>] [nic <n>]
      [<label>:] recv <bytes>[b] from <rank> [tag <t>] [cpu <c>] [nic <n>]
      [<label>:] calc <time> [cpu <c>] [nic <n>]
      <label> requires <label>
      <label> irequires <label>
    }

one statement per line; comments ``// ...`` and ``/* ... */`` (may span lines); labels
``[a-zA-Z][a-zA-Z0-9_]*`` are local to their rank block; ``tag`` defaults to 0. Also
accepted, beyond txt2bin: a size without the ``b`` suffix, ``nic`` on ``calc``, and
dependencies that name a label defined later in the same block. ``num_ranks`` must come
before the first ``rank`` block.

Semantics:

* ``calc t`` takes t nanoseconds (LogGOPSim's time unit: its README reports host end times
  in ns for the default L=2500, o=1500, g=1000, G=6 parameters, all in ns).
* ``a requires b``: a starts after b has finished. ``a irequires b``: a starts once b has
  started; b starts when its own dependencies are done, so a gets b's dependencies.
* send/recv: the k-th ``send`` from s to d with tag t (in s's block order) and the k-th
  ``recv`` at d ``from s tag t`` (in d's block order) are one flow task, as MPI matches
  them in order. The flow starts when the send's dependencies are done (eager protocol);
  its bytes are the send's (a 0-byte message is sent as 1 byte, the network needs a
  packet). A send "finishes" when the receiver has the last byte (LogGOPSim completes an
  eager send locally, earlier). The recv finishes when the flow is delivered and its own
  dependencies are done. Wildcards (``from -1``, ``tag -1``) are rejected: static matching
  cannot resolve them.
* ``cpu`` and ``nic`` are parsed and checked but not modelled: ops run when their
  dependencies allow (no per-CPU serialisation of calcs, no LogGP o/g overheads); the
  network model replaces L/G.
"""

from __future__ import annotations

import dataclasses
import graphlib
import os
import re
from collections import defaultdict, deque

from multiverse_jax.errors import InputError
from multiverse_jax.textfile import parse_int, read_text
from multiverse_jax.units import PS_PER_NS
from multiverse_jax.workload.tasks import NO_STREAM, TaskGraph, TaskGraphBuilder

_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_]*|-?\d+|[{}:]|\S")
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_KEYWORDS = {
    "send",
    "recv",
    "calc",
    "requires",
    "irequires",
    "rank",
    "num_ranks",
    "tag",
    "cpu",
    "nic",
    "to",
    "from",
    "b",
}
_OPS_HELP = (
    "'[label:] send <bytes>b to <rank> [tag <t>] [cpu <c>] [nic <n>]', "
    "'[label:] recv <bytes>b from <rank> [tag <t>] ...', '[label:] calc <ns> [cpu <c>]', "
    "'<label> requires <label>', '<label> irequires <label>' or '}'"
)


@dataclasses.dataclass
class _Op:
    rank: int
    kind: str  # "send" | "recv" | "calc"
    size: int  # bytes, or ns for calc
    peer: int
    tag: int
    line: int
    label: str | None
    requires: list = dataclasses.field(default_factory=list)  # op indices
    irequires: list = dataclasses.field(default_factory=list)


def _strip_comments(text: str, path: str) -> list[str]:
    """Lines with comments blanked out (line numbers kept)."""
    i, n = 0, len(text)
    chunks = []
    while i < n:
        j = min((k for k in (text.find("//", i), text.find("/*", i)) if k >= 0), default=-1)
        if j < 0:
            chunks.append(text[i:])
            break
        chunks.append(text[i:j])
        if text.startswith("//", j):
            end = text.find("\n", j)
            i = n if end < 0 else end
        else:
            end = text.find("*/", j + 2)
            if end < 0:
                raise InputError("unterminated '/*' comment", source=path, line=text.count("\n", 0, j) + 1)
            chunks.append("\n" * text.count("\n", j, end))
            i = end + 2
    return "".join(chunks).split("\n")


def _int(tokens: list[str], i: int, what: str, path: str, line: int, *, minimum: int = 0) -> int:
    """Token i as an integer (the tokenizer splits numbers as ``-?digits``)."""
    if i >= len(tokens):
        raise InputError(f"{what}: expected an integer, the line ends", source=path, line=line)
    if tokens[i] == "-1" and what in ("source rank", "tag"):
        raise InputError(f"{what} -1 (any) is not supported: the matching must be static", source=path, line=line)
    return parse_int(tokens[i], what, path, line, minimum=minimum)


def _parse_op(tokens: list[str], rank: int, label: str | None, path: str, line: int) -> _Op:
    kind = tokens[0]
    if kind not in ("send", "recv", "calc"):
        raise InputError(f"unknown operation {kind!r}: expected {_OPS_HELP}", source=path, line=line)
    size = _int(tokens, 1, "calc time (ns)" if kind == "calc" else "size (bytes)", path, line)
    i = 2
    peer, tag = -1, 0
    if kind != "calc":
        if i < len(tokens) and tokens[i] == "b":
            i += 1
        word = "to" if kind == "send" else "from"
        if i >= len(tokens) or tokens[i] != word:
            got = repr(tokens[i]) if i < len(tokens) else "the end of the line"
            raise InputError(f"{kind}: expected '{word} <rank>' after the size, got {got}", source=path, line=line)
        peer = _int(tokens, i + 1, "destination rank" if kind == "send" else "source rank", path, line)
        i += 2
    options = ("tag", "cpu", "nic") if kind != "calc" else ("cpu", "nic")
    seen = set()
    while i < len(tokens):
        key = tokens[i]
        if key not in options or key in seen:
            why = "given twice" if key in seen else f"expected one of {', '.join(options)} or the end of the line"
            raise InputError(f"{kind}: unexpected {key!r} ({why})", source=path, line=line)
        seen.add(key)
        value = _int(tokens, i + 1, key, path, line)
        if key == "tag":
            tag = value
        i += 2
    return _Op(rank, kind, size, peer, tag, line, label)


class _Reader:
    """The statements of a GOAL file, in order: ``num_ranks``, rank blocks and their ops."""

    def __init__(self, path: str):
        self.path = path
        self.num_ranks: int | None = None
        self.num_ranks_line = 0
        self.ops: list[_Op] = []
        self.rank: int | None = None  # inside this rank's block
        self.rank_line = 0
        self.blocks: dict[int, int] = {}  # rank -> line of its block
        self.labels: dict[str, int] = {}  # open block: label -> op index
        self.deps: list[tuple[str, str, str, int]] = []  # open block: ("requires" | "irequires", label, label, line)

    def error(self, message: str, line: int) -> InputError:
        return InputError(message, source=self.path, line=line)

    def statement(self, tokens: list[str], line: int) -> list[str]:
        """Read the statement at the start of ``tokens``; the tokens after it."""
        if self.rank is None:
            return self.outside_block(tokens, line)
        if tokens[0] == "}":
            self.close_block()
            return tokens[1:]
        self.inside_block(tokens, line)
        return []

    def outside_block(self, tokens: list[str], line: int) -> list[str]:
        head = tokens[0]
        if head == "num_ranks":
            if self.num_ranks is not None:
                raise self.error(f"num_ranks given twice (first on line {self.num_ranks_line})", line)
            self.num_ranks, self.num_ranks_line = _int(tokens, 1, "num_ranks", self.path, line, minimum=1), line
            return tokens[2:]
        if head != "rank":
            raise self.error(f"unexpected {head!r}: expected 'num_ranks <N>' or 'rank <r> {{'", line)
        if self.num_ranks is None:
            raise self.error("'num_ranks <N>' must come before the first rank block", line)
        r = _int(tokens, 1, "rank", self.path, line)
        if r >= self.num_ranks:
            raise self.error(f"rank {r} out of range (num_ranks {self.num_ranks}: ranks 0..{self.num_ranks - 1})", line)
        if r in self.blocks:
            raise self.error(f"rank {r} has a second block (first on line {self.blocks[r]})", line)
        if len(tokens) < 3 or tokens[2] != "{":
            raise self.error(f"expected '{{' after 'rank {r}'", line)
        self.rank, self.rank_line, self.blocks[r] = r, line, line
        return tokens[3:]

    def inside_block(self, tokens: list[str], line: int) -> None:
        """A dependency line, or an operation with an optional label."""
        head, label = tokens[0], None
        labelled = len(tokens) > 1 and tokens[1] in (":", "requires", "irequires")
        if labelled and _IDENT.match(head) and head not in _KEYWORDS:
            if tokens[1] != ":":
                if len(tokens) != 3 or not _IDENT.match(tokens[2]):
                    raise self.error(f"expected '<label> {tokens[1]} <label>'", line)
                self.deps.append((tokens[1], head, tokens[2], line))
                return
            label, tokens = head, tokens[2:]
            if label in self.labels:
                first = f"first on line {self.ops[self.labels[label]].line}"
                raise self.error(f"label {label!r} defined twice in rank {self.rank}'s block ({first})", line)
            if not tokens:
                raise self.error(f"label {label!r} has no operation: expected {_OPS_HELP}", line)
        op = _parse_op(tokens, self.rank, label, self.path, line)
        if op.kind != "calc":
            if op.peer >= self.num_ranks:
                raise self.error(f"{op.kind}: rank {op.peer} out of range (ranks 0..{self.num_ranks - 1})", line)
            if op.peer == self.rank:
                raise self.error(f"{op.kind}: rank {self.rank} cannot {op.kind} to/from itself", line)
        if label is not None:
            self.labels[label] = len(self.ops)
        self.ops.append(op)

    def close_block(self) -> None:
        """Resolve the block's dependencies: labels may be used before they are defined."""
        for kind, a, b, line in self.deps:
            for name in (a, b):
                if name not in self.labels:
                    raise self.error(f"{kind}: label {name!r} is not defined in rank {self.rank}'s block", line)
            if a == b:
                raise self.error(f"{kind}: label {a!r} depends on itself", line)
            getattr(self.ops[self.labels[a]], kind).append(self.labels[b])
        self.deps.clear()
        self.labels.clear()
        self.rank = None

    def finish(self, lines: list[str]) -> tuple[int, list[_Op]]:
        if self.rank is not None:
            last = max((k for k, text in enumerate(lines, start=1) if text.strip()), default=self.rank_line)
            raise self.error(
                f"the file ends inside rank {self.rank}'s block (opened on line {self.rank_line}): expected '}}'; "
                "truncated?",
                last,
            )
        if self.num_ranks is None:
            raise self.error("missing 'num_ranks <N>'", 1)
        return self.num_ranks, self.ops


def _parse(path: str) -> tuple[int, list[_Op]]:
    lines = _strip_comments(read_text(path, "GOAL file"), path)
    reader = _Reader(path)
    for number, line in enumerate(lines, start=1):
        tokens = _TOKEN.findall(line)
        while tokens:
            tokens = reader.statement(tokens, number)
    return reader.finish(lines)


def _match(ops: list[_Op], path: str) -> dict[int, int]:
    """recv op -> send op (k-th send s->d tag t with the k-th recv at d from s tag t)."""
    sends: dict[tuple, deque] = defaultdict(deque)
    for i, op in enumerate(ops):
        if op.kind == "send":
            sends[(op.rank, op.peer, op.tag)].append(i)
    match = {}
    for i, op in enumerate(ops):
        if op.kind == "recv":
            queue = sends.get((op.peer, op.rank, op.tag))
            if not queue:
                raise InputError(
                    f"recv from rank {op.peer} tag {op.tag} on rank {op.rank} has no matching send",
                    source=path,
                    line=op.line,
                )
            match[i] = queue.popleft()
    for (src, dst, tag), queue in sends.items():
        if queue:
            raise InputError(
                f"send to rank {dst} tag {tag} on rank {src} has no matching recv", source=path, line=ops[queue[0]].line
            )
    return match


def _topological_order(preds: list[list[int]]) -> list[int]:
    """The ops in an order where each comes after its ``preds`` (graphlib's: the ready ops
    by index, then the ops each releases, first come first); CycleError names a cycle."""
    sorter = graphlib.TopologicalSorter()
    for i in range(len(preds)):
        sorter.add(i)
    for i, p in enumerate(preds):
        sorter.add(i, *p)
    return list(sorter.static_order())


def _names(ops: list[_Op], cycle: list[int]) -> str:
    return " -> ".join(f"rank{ops[j].rank}:{ops[j].label or ops[j].kind}" for j in cycle)


def _start_sets(ops: list[_Op], source: str) -> list[list[int]]:
    """Per op, the ops whose finish its start waits for: its ``requires``, plus the start
    sets of the ops it ``irequires`` (it starts when they start)."""
    try:
        order = _topological_order([op.irequires for op in ops])
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        raise InputError(
            f"irequires cycle: {_names(ops, cycle)} (each starts once the one before it has started)",
            source=source,
            line=ops[cycle[0]].line,
        ) from None
    start: list[list[int]] = [[] for _ in ops]
    for i in order:
        out = list(ops[i].requires)
        for j in ops[i].irequires:
            out.extend(start[j])
        start[i] = list(dict.fromkeys(out))
    return start


def load_goal(path) -> TaskGraph:
    """A GOAL schedule as a task graph (see the module doc)."""
    source = os.fspath(path)
    num_ranks, ops = _parse(source)
    if not ops:
        raise InputError("the schedule has no operations", source=source)
    match = _match(ops, source)
    start = _start_sets(ops, source)
    try:  # finish dependencies, and a recv after its send
        order = _topological_order([start[i] + ([match[i]] if i in match else []) for i in range(len(ops))])
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        raise InputError(
            f"these operations can never start: their dependencies (with send/recv matching) form a cycle: "
            f"{_names(ops, cycle)} (each waits for the one before it)",
            source=source,
            line=ops[cycle[0]].line,
        ) from None

    b = TaskGraphBuilder(num_ranks, source=source)
    task: dict[int, int] = {}
    for i in order:
        op = ops[i]
        deps = [task[j] for j in start[i]]
        name = f"rank{op.rank}:{op.label or op.kind}"
        if op.kind == "calc":
            task[i] = b.delay(
                op.rank, op.size * PS_PER_NS, deps, stream=NO_STREAM, category="compute", name=name, line=op.line
            )
        elif op.kind == "send":
            task[i] = b.send(
                op.rank, op.peer, max(op.size, 1), deps, stream=NO_STREAM, category="p2p", name=name, line=op.line
            )
        else:
            flow = task[match[i]]
            task[i] = (
                b.delay(op.rank, 0, [flow, *deps], stream=NO_STREAM, category="p2p", name=name, line=op.line)
                if deps
                else flow
            )
    return b.build()
