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


def _parse(path: str) -> tuple[int, list[_Op]]:
    text = read_text(path, "GOAL file")

    num_ranks: int | None = None
    num_ranks_line = 0
    ops: list[_Op] = []
    rank: int | None = None  # inside this rank's block
    rank_line = 0
    blocks: dict[int, int] = {}
    labels: dict[str, int] = {}
    deps: list[tuple[str, str, str, int]] = []  # open block: ("requires" | "irequires", label, label, line)

    def close_block() -> None:
        """Resolve the block's dependencies: labels may be used before they are defined."""
        for kind, a, b, dep_line in deps:
            for name in (a, b):
                if name not in labels:
                    raise InputError(
                        f"{kind}: label {name!r} is not defined in rank {rank}'s block", source=path, line=dep_line
                    )
            if a == b:
                raise InputError(f"{kind}: label {a!r} depends on itself", source=path, line=dep_line)
            getattr(ops[labels[a]], kind).append(labels[b])
        deps.clear()
        labels.clear()

    lines = _strip_comments(text, path)
    for number, line in enumerate(lines, start=1):
        tokens = _TOKEN.findall(line)
        while tokens:
            head = tokens[0]
            if rank is None:
                if head == "num_ranks":
                    if num_ranks is not None:
                        raise InputError(
                            f"num_ranks given twice (first on line {num_ranks_line})", source=path, line=number
                        )
                    num_ranks, num_ranks_line = _int(tokens, 1, "num_ranks", path, number, minimum=1), number
                    tokens = tokens[2:]
                elif head == "rank":
                    if num_ranks is None:
                        raise InputError(
                            "'num_ranks <N>' must come before the first rank block", source=path, line=number
                        )
                    r = _int(tokens, 1, "rank", path, number)
                    if r >= num_ranks:
                        raise InputError(
                            f"rank {r} out of range (num_ranks {num_ranks}: ranks 0..{num_ranks - 1})",
                            source=path,
                            line=number,
                        )
                    if r in blocks:
                        raise InputError(
                            f"rank {r} has a second block (first on line {blocks[r]})", source=path, line=number
                        )
                    if len(tokens) < 3 or tokens[2] != "{":
                        raise InputError(f"expected '{{' after 'rank {r}'", source=path, line=number)
                    rank, rank_line, blocks[r] = r, number, number
                    tokens = tokens[3:]
                else:
                    raise InputError(
                        f"unexpected {head!r}: expected 'num_ranks <N>' or 'rank <r> {{'", source=path, line=number
                    )
                continue
            if head == "}":
                close_block()
                rank, tokens = None, tokens[1:]
                continue
            label = None
            if (
                _IDENT.match(head)
                and head not in _KEYWORDS
                and len(tokens) > 1
                and tokens[1] in (":", "requires", "irequires")
            ):
                if tokens[1] != ":":
                    if len(tokens) != 3 or not _IDENT.match(tokens[2]):
                        raise InputError(f"expected '<label> {tokens[1]} <label>'", source=path, line=number)
                    deps.append((tokens[1], head, tokens[2], number))
                    tokens = []
                    continue
                label, tokens = head, tokens[2:]
                if label in labels:
                    raise InputError(
                        f"label {label!r} defined twice in rank {rank}'s block "
                        f"(first on line {ops[labels[label]].line})",
                        source=path,
                        line=number,
                    )
                if not tokens:
                    raise InputError(
                        f"label {label!r} has no operation: expected {_OPS_HELP}", source=path, line=number
                    )
            op = _parse_op(tokens, rank, label, path, number)
            if op.kind != "calc":
                if op.peer >= num_ranks:
                    raise InputError(
                        f"{op.kind}: rank {op.peer} out of range (ranks 0..{num_ranks - 1})", source=path, line=number
                    )
                if op.peer == rank:
                    raise InputError(
                        f"{op.kind}: rank {rank} cannot {op.kind} to/from itself", source=path, line=number
                    )
            if label is not None:
                labels[label] = len(ops)
            ops.append(op)
            tokens = []
    if rank is not None:
        last = max((k for k, text_line in enumerate(lines, start=1) if text_line.strip()), default=rank_line)
        raise InputError(
            f"the file ends inside rank {rank}'s block (opened on line {rank_line}): expected '}}'; truncated?",
            source=path,
            line=last,
        )
    if num_ranks is None:
        raise InputError("missing 'num_ranks <N>'", source=path, line=1)
    return num_ranks, ops


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


def load_goal(path) -> TaskGraph:
    """A GOAL schedule as a task graph (see the module doc)."""
    source = os.fspath(path)
    num_ranks, ops = _parse(source)
    if not ops:
        raise InputError("the schedule has no operations", source=source)
    match = _match(ops, source)

    # start set of an op: the ops whose finish its start waits for (requires + irequires' start sets)
    start: dict[int, list[int]] = {}

    def start_set(i: int, trail: tuple = ()) -> list[int]:
        if i in start:
            return start[i]
        if i in trail:
            names = " -> ".join(ops[j].label or str(j) for j in (*trail[trail.index(i) :], i))
            raise InputError(f"irequires cycle: {names}", source=source, line=ops[i].line)
        out = list(ops[i].requires)
        for j in ops[i].irequires:
            out.extend(start_set(j, (*trail, i)))
        start[i] = list(dict.fromkeys(out))
        return start[i]

    for i in range(len(ops)):
        start_set(i)

    # topological order over finish dependencies (+ recv after its send); cycles are reported
    preds = [start[i] + ([match[i]] if i in match else []) for i in range(len(ops))]
    users: list[list[int]] = [[] for _ in ops]
    missing = [len(p) for p in preds]
    for i, p in enumerate(preds):
        for j in p:
            users[j].append(i)
    order = [i for i in range(len(ops)) if missing[i] == 0]
    for i in order:  # grows while iterating
        for u in users[i]:
            missing[u] -= 1
            if missing[u] == 0:
                order.append(u)
    if len(order) < len(ops):
        stuck = next(i for i in range(len(ops)) if missing[i] > 0)
        op = ops[stuck]
        raise InputError(
            f"{op.kind} {op.label or ''} on rank {op.rank} can never start: "
            "its dependencies (with send/recv matching) form a cycle",
            source=source,
            line=op.line,
        )

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
