"""Chakra execution traces -> task graphs.

``load_et(prefix_or_dir)`` reads one trace per rank, ``<prefix>.<rank>.et`` (protobuf) or
``<prefix>.<rank>.json`` (the JSON the Chakra C++ JSON feeder reads), for ranks
0..R-1, and returns one :class:`TaskGraph` on R GPUs. Every malformed input is an
:class:`InputError` naming the file and where in it.

``.et`` files are a stream of varint-length-delimited protobuf messages: a
``GlobalMetadata``, then one ``Node`` per message. Field numbers are those of
``schema/protobuf/et_def.proto`` in mlcommons/chakra (commit
6dc63e147b9d115286626cc122459e44d9d08401)::

    Node: 1 id (uint64), 2 name, 3 type (NodeType), 4 ctrl_deps (repeated uint64),
          5 data_deps (repeated uint64), 6 start_time_micros, 7 duration_micros,
          8 inputs, 9 outputs (IOInfo), 10 attr (repeated AttributeProto), 11 storage
    AttributeProto: 1 name, 2 doc_string, oneof value 3..32 (double, float, int32, int64,
          uint32, uint64, sint32, sint64, fixed32, fixed64, sfixed32, sfixed64, bool,
          string, bytes -- each followed by its *List message, ``repeated values = 1``)
    GlobalMetadata: 1 version, 2 attr

The decoder here handles all four wire types in use (varint, 64-bit, length-delimited,
32-bit), packed and unpacked repeated scalars, zig-zag ``sint`` values, skips unknown
fields, and treats absent fields as proto3 defaults (node id 0, type INVALID_NODE). In
errors about ``.et`` files the "line" is the record number: record 1 is the
``GlobalMetadata``, record k+1 the k-th ``Node``; the byte offset is given too.

Node types:

* ``COMP_NODE``: a delay of ``duration_micros`` microseconds (or the ``runtime``
  attribute when the field is absent; ASTRA-sim turns Chakra microseconds into ns x 1000).
  GPU ops run on ``STREAM_COMPUTE``, ops with ``is_cpu_op`` true on a CPU stream, so each
  runs one op at a time, like ASTRA-sim's ``HardwareResource``.
* ``COMM_COLL_NODE``: a collective over all ranks (``comm_type``: ALL_REDUCE, ALL_GATHER,
  REDUCE_SCATTER[_BLOCK], ALL_TO_ALL, BROADCAST; ``comm_size`` bytes, passed on in NCCL's
  conventions). The k-th collective each rank reaches is one collective, as ASTRA-sim
  matches them by issue order; all ranks must agree on its type and size. Size 0: no-op.
  Communicator groups (``pg_name``, ``involved_dim``) are not modelled: every collective
  spans all ranks.
* ``COMM_SEND_NODE`` / ``COMM_RECV_NODE``: attributes ``comm_dst`` / ``comm_src``,
  ``comm_tag`` (default 0), ``comm_size``. The k-th send from s to d with tag t (in file
  order) and the k-th recv at d from s with tag t are one flow task, which starts when the
  send's dependencies are done; the recv is done when the flow is and the recv's own
  dependencies are (a zero-length join when it has any). A 0-byte message is sent as 1 byte.
* ``MEM_LOAD_NODE``, ``MEM_STORE_NODE``, ``METADATA_NODE``, ``INVALID_NODE`` and the
  others: zero-length tasks that keep the dependencies.

Dependencies: ``data_deps`` and ``ctrl_deps`` (``.et``), ``data_deps`` only (JSON: the C++
JSON feeder ignores ``ctrlDeps``, which in the JSON files point outside the file), within
the rank; every dependency must name a node of the same file.

JSON traces (``{"workload_graph": [...], "ngpus": N, ...}``): node keys ``Id``, ``Name``,
``NodeType`` (the numbers above), ``data_deps``, ``runtime`` (microseconds), ``is_cpu_op``,
and for communication nodes ``comm_type``, ``comm_size``, ``comm_src``, ``comm_dst``,
``comm_tag`` (keys of mlcommons/chakra ``src/feeder/json_node.cpp``). Errors give the line
of the node's ``"Id"`` key. ``ngpus`` is informational: the graph has one GPU per rank file.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import os
import re
import struct
from collections import defaultdict, deque

from multiverse_jax.errors import InputError
from multiverse_jax.textfile import read_bytes, read_text
from multiverse_jax.units import PS_PER_US
from multiverse_jax.workload import collectives
from multiverse_jax.workload.collectives import CommConfig
from multiverse_jax.workload.tasks import NO_STREAM, STREAM_COMM, STREAM_COMPUTE, TaskGraph, TaskGraphBuilder

STREAM_CPU = 2  # COMP nodes with is_cpu_op

# NodeType
INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE = 0, 1, 2, 3, 4
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7
# CollectiveCommType -> collectives.COLLECTIVES
_COLL_KINDS = {
    0: "all_reduce",
    2: "all_gather",
    5: "broadcast",
    6: "all_to_all",
    7: "reduce_scatter",
    8: "reduce_scatter",
}
_COLL_NAMES = {
    0: "ALL_REDUCE", 1: "REDUCE", 2: "ALL_GATHER", 3: "GATHER", 4: "SCATTER", 5: "BROADCAST",
    6: "ALL_TO_ALL", 7: "REDUCE_SCATTER", 8: "REDUCE_SCATTER_BLOCK", 9: "BARRIER",
}  # fmt: skip


# ----------------------------------------------------------------------------- protobuf wire format


class _WireError(Exception):
    """Malformed protobuf at a byte offset (turned into an InputError by the caller)."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _WireError("truncated varint", start)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _WireError("varint longer than 10 bytes", start)


def _fields(buf: bytes, pos: int, end: int):
    """Yield (field number, wire type, value, offset): value is an int, or (start, end) for LEN."""
    while pos < end:
        offset = pos
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _WireError("field number 0 is not valid", offset)
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire == 1 or wire == 5:
            width = 8 if wire == 1 else 4
            if pos + width > end:
                raise _WireError(f"truncated {width * 8}-bit field {field}", offset)
            value, pos = int.from_bytes(buf[pos : pos + width], "little"), pos + width
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise _WireError(f"field {field}: length {length} runs past the end of its message", offset)
            value, pos = (pos, pos + length), pos + length
        else:
            raise _WireError(f"field {field}: unsupported wire type {wire} (groups are not used by Chakra)", offset)
        yield field, wire, value, offset


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


# scalar decoders by protobuf type: (wire type, int -> value)
_SCALARS = {
    "double": (1, lambda v: struct.unpack("<d", v.to_bytes(8, "little"))[0]),
    "float": (5, lambda v: struct.unpack("<f", v.to_bytes(4, "little"))[0]),
    "int32": (0, lambda v: _signed(v, 32)),
    "int64": (0, lambda v: _signed(v, 64)),
    "uint32": (0, lambda v: v & 0xFFFFFFFF),
    "uint64": (0, lambda v: v & 0xFFFFFFFFFFFFFFFF),
    "sint32": (0, _zigzag),
    "sint64": (0, _zigzag),
    "fixed32": (5, lambda v: v),
    "fixed64": (1, lambda v: v),
    "sfixed32": (5, lambda v: _signed(v, 32)),
    "sfixed64": (1, lambda v: _signed(v, 64)),
    "bool": (0, bool),
}
_ATTR_TYPES = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
               "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes")  # fmt: skip
# AttributeProto oneof: field 3 + 2k is the scalar of _ATTR_TYPES[k], field 4 + 2k its list
_ATTR_FIELDS = {3 + 2 * k: (t, False) for k, t in enumerate(_ATTR_TYPES)} | {
    4 + 2 * k: (t, True) for k, t in enumerate(_ATTR_TYPES)
}


def _scalar(buf: bytes, ptype: str, wire: int, value, offset: int):
    if ptype in ("string", "bytes"):
        if wire != 2:
            raise _WireError(f"{ptype} value with wire type {wire}", offset)
        raw = buf[value[0] : value[1]]
        if ptype == "bytes":
            return raw
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _WireError("string value is not valid UTF-8", offset) from None
    expected, convert = _SCALARS[ptype]
    if wire != expected:
        raise _WireError(f"{ptype} value with wire type {wire} (expected {expected})", offset)
    return convert(value)


def _repeated(buf: bytes, ptype: str, wire: int, value, offset: int) -> list:
    """One occurrence of a repeated scalar field: packed (LEN) or a single unpacked value."""
    expected = 2 if ptype in ("string", "bytes") else _SCALARS[ptype][0]
    if wire == 2 and expected != 2:  # packed
        start, end = value
        out = []
        pos = start
        width = {1: 8, 5: 4}.get(expected)
        while pos < end:
            if width:
                if pos + width > end:
                    raise _WireError(f"packed {ptype} list has a partial element", pos)
                raw, pos = int.from_bytes(buf[pos : pos + width], "little"), pos + width
            else:
                raw, pos = _varint(buf, pos, end)
            out.append(_SCALARS[ptype][1](raw))
        return out
    return [_scalar(buf, ptype, wire, value, offset)]


def _attribute(buf: bytes, start: int, end: int) -> tuple[str, object]:
    name, val = "", None
    for field, wire, value, offset in _fields(buf, start, end):
        if field == 1:
            name = _scalar(buf, "string", wire, value, offset)
        elif field in _ATTR_FIELDS:
            ptype, is_list = _ATTR_FIELDS[field]
            if not is_list:
                val = _scalar(buf, ptype, wire, value, offset)
            else:
                if wire != 2:
                    raise _WireError(f"attribute {name!r}: list value with wire type {wire}", offset)
                val = []
                for f2, w2, v2, o2 in _fields(buf, *value):
                    if f2 == 1:
                        val.extend(_repeated(buf, ptype, w2, v2, o2))
    return name, val


@dataclasses.dataclass
class _Node:
    node_id: int = 0
    name: str = ""
    node_type: int = INVALID_NODE
    deps: list = dataclasses.field(default_factory=list)
    duration_us: int = 0
    attrs: dict = dataclasses.field(default_factory=dict)
    line: int = 0  # record number (.et) or line of "Id" (JSON)
    where: str = ""  # "record 5 (byte offset 123)" / "node 3"


def _decode_node(buf: bytes, start: int, end: int) -> _Node:
    node = _Node()
    for field, wire, value, offset in _fields(buf, start, end):
        if field == 1:
            node.node_id = _scalar(buf, "uint64", wire, value, offset)
        elif field == 2:
            node.name = _scalar(buf, "string", wire, value, offset)
        elif field == 3:
            node.node_type = _scalar(buf, "int32", wire, value, offset)
        elif field in (4, 5):  # ctrl_deps, data_deps
            node.deps.extend(_repeated(buf, "uint64", wire, value, offset))
        elif field == 7:
            node.duration_us = _scalar(buf, "uint64", wire, value, offset)
        elif field == 10:
            if wire != 2:
                raise _WireError(f"attr with wire type {wire}", offset)
            key, val = _attribute(buf, *value)
            node.attrs[key] = val
    if not node.duration_us and node.attrs.get("runtime"):
        node.duration_us = node.attrs["runtime"]
    return node


def _read_et(path: str) -> list[_Node]:
    buf = read_bytes(path, "trace file")
    if not buf:
        raise InputError("empty file: expected a GlobalMetadata record", source=path, line=1)
    nodes: list[_Node] = []
    pos, record = 0, 0
    while pos < len(buf):
        record += 1
        where = f"record {record} (byte offset {pos})"
        try:
            length, body = _varint(buf, pos, len(buf))
            if body + length > len(buf):
                raise _WireError(
                    f"truncated: the length prefix says {length} bytes but only {len(buf) - body} remain", pos
                )
            if record == 1:
                for field, wire, value, offset in _fields(buf, body, body + length):
                    if field == 1:
                        _scalar(buf, "string", wire, value, offset)  # version
                    elif field == 2:
                        if wire != 2:
                            raise _WireError(f"attr with wire type {wire}", offset)
                        _attribute(buf, *value)
            else:
                node = _decode_node(buf, body, body + length)
                node.line, node.where = record, where
                nodes.append(node)
        except _WireError as exc:
            what = "GlobalMetadata" if record == 1 else "Node"
            raise InputError(
                f"{where}: malformed {what}: {exc} (at byte {exc.offset})", source=path, line=record
            ) from None
        pos = body + length
    return nodes


def _read_json(path: str) -> list[_Node]:
    text = read_text(path, "trace file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", source=path, line=exc.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("workload_graph"), list):
        raise InputError('expected a JSON object with a "workload_graph" list of nodes', source=path, line=1)
    id_lines = [text.count("\n", 0, m.start()) + 1 for m in re.finditer(r'"Id"\s*:', text)]
    nodes = []
    for k, item in enumerate(data["workload_graph"]):
        line = id_lines[k] if k < len(id_lines) else None
        where = f"node {k}"
        if not isinstance(item, dict):
            raise InputError(f"{where}: expected an object", source=path, line=line)

        def get(key, default=None, *, kind=int, item=item, line=line, where=where):
            value = item.get(key)
            value = default if value is None else value
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is int):
                raise InputError(f"{where}: {key!r} must be {kind.__name__}, got {value!r}", source=path, line=line)
            return value

        node_id = get("Id")
        if node_id is None:
            raise InputError(f'{where}: missing "Id"', source=path, line=line)
        deps = get("data_deps", [], kind=list)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in deps):
            raise InputError(f"{where}: data_deps must be a list of node ids, got {deps!r}", source=path, line=line)
        attrs = {key: get(key) for key in ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag") if key in item}
        attrs["is_cpu_op"] = get("is_cpu_op", False, kind=bool)
        runtime = get("runtime", 0)
        if runtime < 0:
            raise InputError(f"{where}: runtime must be >= 0 microseconds, got {runtime}", source=path, line=line)
        nodes.append(
            _Node(
                node_id,
                get("Name", "", kind=str),
                get("NodeType", INVALID_NODE),
                list(deps),
                runtime,
                attrs,
                line or 0,
                where,
            )
        )
    return nodes


# ----------------------------------------------------------------------------- rank files


_RANK_FILE = re.compile(r"^(?P<prefix>.*)\.(?P<rank>\d+)\.(?P<ext>et|json)$")


def _rank_files(prefix_or_dir: str) -> tuple[str, list[str]]:
    """(prefix, [file of rank 0, 1, ...]) for a directory, a prefix, or one rank's file."""
    if os.path.isdir(prefix_or_dir):
        candidates = [os.path.join(prefix_or_dir, f) for f in sorted(os.listdir(prefix_or_dir))]
        matches = [m for m in map(_RANK_FILE.match, candidates) if m]
        sets = sorted({(m["prefix"], m["ext"]) for m in matches})
        if not sets:
            raise InputError(
                "no Chakra trace files <prefix>.<rank>.et (or .json) in this directory", source=prefix_or_dir
            )
        if len(sets) > 1:
            names = ", ".join(f"{os.path.basename(p)}.*.{e}" for p, e in sets)
            example = os.path.join(prefix_or_dir, os.path.basename(sets[0][0]))
            message = f"several trace sets in this directory ({names}): set workload.path to one prefix, e.g. {example}"
            raise InputError(message, source=prefix_or_dir)
        prefix, ext = sets[0]
    else:
        m = _RANK_FILE.match(prefix_or_dir)
        prefix = m["prefix"] if m and os.path.isfile(prefix_or_dir) else prefix_or_dir
        folder = os.path.dirname(prefix) or "."
        try:
            listing = sorted(os.listdir(folder))
        except OSError:
            raise InputError("no such directory for the trace prefix", source=prefix_or_dir) from None
        matches = [
            m
            for m in map(_RANK_FILE.match, (os.path.join(os.path.dirname(prefix), f) for f in listing))
            if m and m["prefix"] == prefix
        ]
        exts = sorted({m["ext"] for m in matches})
        if not exts:
            raise InputError(f"no trace files {prefix}.<rank>.et (or .json)", source=prefix_or_dir)
        if len(exts) > 1:
            raise InputError(f"both {prefix}.<rank>.et and .json files exist: keep one set", source=prefix_or_dir)
        ext = exts[0]
        matches = [m for m in matches if m["ext"] == ext]
    ranks = {int(m["rank"]): m.string for m in matches if m["prefix"] == prefix and m["ext"] == ext}
    missing = [r for r in range(max(ranks) + 1) if r not in ranks]
    if missing:
        raise InputError(
            f"missing the trace of rank {missing[0]} ({prefix}.{missing[0]}.{ext}); ranks must be 0..R-1",
            source=prefix_or_dir,
        )
    return prefix, [ranks[r] for r in range(len(ranks))]


# ----------------------------------------------------------------------------- scheduling


def _attr_int(node: _Node, key: str, path: str, *, default=None) -> int:
    value = node.attrs.get(key, default)
    if value is None:
        raise InputError(
            f"{node.where}: {node.name or 'node'} (type {node.node_type}) needs attribute {key!r}",
            source=path,
            line=node.line,
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(
            f"{node.where}: attribute {key!r} must be an integer, got {value!r}", source=path, line=node.line
        )
    return value


def load_et(prefix_or_dir, *, comm_cfg: CommConfig = CommConfig()) -> TaskGraph:
    """All ranks' Chakra traces (``<prefix>.<rank>.et`` or ``.json``) as one task graph."""
    prefix, files = _rank_files(os.fspath(prefix_or_dir))
    ranks = [(_read_json if f.endswith(".json") else _read_et)(f) for f in files]
    for nodes, path in zip(ranks, files, strict=True):
        _resolve_deps(nodes, path)
    scheduler = _Scheduler(
        ranks, files, _match_p2p(ranks, files), comm_cfg, f"{prefix}.*{os.path.splitext(files[0])[1]}"
    )
    return scheduler.run()


def _resolve_deps(nodes: list[_Node], path: str) -> None:
    """Node ids -> indices in the file (every dependency must be a node of the file)."""
    by_id: dict[int, int] = {}
    for k, node in enumerate(nodes):
        if node.node_id in by_id:
            first = nodes[by_id[node.node_id]]
            raise InputError(
                f"{node.where}: duplicate node id {node.node_id} (first at {first.where})", source=path, line=node.line
            )
        by_id[node.node_id] = k
    for node in nodes:
        for d in node.deps:
            if d not in by_id:
                raise InputError(
                    f"{node.where}: depends on node id {d}, which is not in this file", source=path, line=node.line
                )
        node.deps = list(dict.fromkeys(by_id[d] for d in node.deps))


def _peer(node: _Node, key: str, rank: int, n: int, path: str) -> int:
    peer = _attr_int(node, key, path)
    if not 0 <= peer < n or peer == rank:
        raise InputError(
            f"{node.where}: {key} {peer} is not another rank (ranks: 0..{n - 1})", source=path, line=node.line
        )
    return peer


def _match_p2p(ranks: list[list[_Node]], files: list[str]) -> dict[tuple[int, int], tuple[int, int]]:
    """(recv rank, index) -> (send rank, index): the k-th send s->d tag t with the k-th recv at d from s tag t."""
    n = len(ranks)
    sends: dict[tuple, deque] = defaultdict(deque)
    for r, nodes in enumerate(ranks):
        for k, node in enumerate(nodes):
            if node.node_type == COMM_SEND_NODE:
                dst = _peer(node, "comm_dst", r, n, files[r])
                sends[(r, dst, _attr_int(node, "comm_tag", files[r], default=0))].append(k)
    match = {}
    for r, nodes in enumerate(ranks):
        for k, node in enumerate(nodes):
            if node.node_type == COMM_RECV_NODE:
                src = _peer(node, "comm_src", r, n, files[r])
                tag = _attr_int(node, "comm_tag", files[r], default=0)
                queue = sends.get((src, r, tag))
                if not queue:
                    raise InputError(
                        f"{node.where}: recv from rank {src} tag {tag} has no matching send in {files[src]}",
                        source=files[r],
                        line=node.line,
                    )
                match[(r, k)] = (src, queue.popleft())
    for (src, dst, tag), queue in sends.items():
        if queue:
            node = ranks[src][queue[0]]
            raise InputError(
                f"{node.where}: send to rank {dst} tag {tag} has no matching recv in {files[dst]}",
                source=files[src],
                line=node.line,
            )
    return match


class _Scheduler:
    """Emits the nodes of all ranks in a global dependency order (ready nodes of a rank in file
    order), so every task is created after what it depends on and the per-GPU streams follow it.
    A recv waits for its matched send; the k-th collective of each rank waits for every rank's."""

    def __init__(self, ranks, files, match, cfg: CommConfig, source: str):
        self.ranks, self.files, self.match, self.cfg = ranks, files, match, cfg
        self.b = TaskGraphBuilder(len(ranks), source=source)
        self.done: list[dict[int, int]] = [{} for _ in ranks]  # rank -> node index -> task id that ends it
        self.waiting = [[len(node.deps) for node in nodes] for nodes in ranks]
        self.children: list[list[list[int]]] = [[[] for _ in nodes] for nodes in ranks]
        for r, nodes in enumerate(ranks):
            for k, node in enumerate(nodes):
                for d in node.deps:
                    self.children[r][d].append(k)
        self.ready = [[k for k, w in enumerate(wr) if w == 0] for wr in self.waiting]  # heaps of node indices
        self.coll_ready: list[deque] = [deque() for _ in ranks]
        self.parked: dict[tuple[int, int], tuple[int, int]] = {}  # send (rank, index) -> recv waiting for it

    def run(self) -> TaskGraph:
        progress = True
        while progress:
            progress = False
            for r in range(len(self.ranks)):
                while self.ready[r]:
                    self.emit(r, heapq.heappop(self.ready[r]))
                    progress = True
            if all(self.coll_ready):
                self.emit_collective([q.popleft() for q in self.coll_ready])
                progress = True
        for r, nodes in enumerate(self.ranks):
            if len(self.done[r]) < len(nodes):
                raise self.stall(r)
        if len(self.b) == 0:
            raise InputError("the traces have no nodes", source=self.b.source)
        return self.b.build()

    def finish(self, r: int, k: int, task: int) -> None:
        self.done[r][k] = task
        for c in self.children[r][k]:
            self.waiting[r][c] -= 1
            if self.waiting[r][c] == 0:
                heapq.heappush(self.ready[r], c)

    def deps_of(self, r: int, k: int) -> list[int]:
        return [self.done[r][d] for d in self.ranks[r][k].deps]

    def emit(self, r: int, k: int) -> None:
        node, path, t = self.ranks[r][k], self.files[r], self.ranks[r][k].node_type
        if t == COMM_COLL_NODE:
            self.coll_ready[r].append(k)
            return
        if t == COMM_RECV_NODE:
            s, j = self.match[(r, k)]
            if j in self.done[s]:
                self.emit_recv(r, k, self.done[s][j])
            else:
                self.parked[(s, j)] = (r, k)
            return
        deps, b = self.deps_of(r, k), self.b
        if t == COMP_NODE:
            stream = STREAM_CPU if node.attrs.get("is_cpu_op") else STREAM_COMPUTE
            task = b.delay(
                r,
                node.duration_us * PS_PER_US,
                deps,
                stream=stream,
                category="compute",
                name=node.name,
                line=node.line,
            )
        elif t == COMM_SEND_NODE:
            size = _attr_int(node, "comm_size", path)
            if size < 0:
                raise InputError(f"{node.where}: comm_size must be >= 0, got {size}", source=path, line=node.line)
            dst = node.attrs["comm_dst"]
            task = b.send(
                r, dst, max(size, 1), deps, stream=STREAM_COMM, category="p2p", name=node.name, line=node.line
            )
        else:  # memory, metadata, invalid and unknown nodes keep the dependencies only
            task = b.delay(r, 0, deps, stream=NO_STREAM, category="other", name=node.name, line=node.line)
        self.finish(r, k, task)
        if (r, k) in self.parked:
            self.emit_recv(*self.parked.pop((r, k)), task)

    def emit_recv(self, r: int, k: int, send_task: int) -> None:
        node, deps = self.ranks[r][k], self.deps_of(r, k)
        if deps:
            send_task = self.b.delay(
                r, 0, [send_task, *deps], stream=NO_STREAM, category="p2p", name=node.name, line=node.line
            )
        self.finish(r, k, send_task)

    def emit_collective(self, heads: list[int]) -> None:
        """The k-th collective of every rank, as one collective over all ranks."""
        ranks, files = self.ranks, self.files
        specs = []
        for r, k in enumerate(heads):
            node, path = ranks[r][k], files[r]
            code = _attr_int(node, "comm_type", path, default=0)
            size = _attr_int(node, "comm_size", path, default=0)
            if code not in _COLL_KINDS:
                name = _COLL_NAMES.get(code, str(code))
                valid = ", ".join(_COLL_NAMES[c] for c in _COLL_KINDS)
                raise InputError(
                    f"{node.where}: collective {name} is not supported (supported: {valid})",
                    source=path,
                    line=node.line,
                )
            if size < 0:
                raise InputError(f"{node.where}: comm_size must be >= 0, got {size}", source=path, line=node.line)
            specs.append((_COLL_KINDS[code], size))
        node0 = ranks[0][heads[0]]
        for r, spec in enumerate(specs):
            if spec != specs[0]:
                node = ranks[r][heads[r]]
                raise InputError(
                    f"{node.where}: this collective ({spec[0]}, {spec[1]} bytes) is matched with {files[0]} "
                    f"{node0.where} ({specs[0][0]}, {specs[0][1]} bytes): every rank must issue the same "
                    "collectives in the same order",
                    source=files[r],
                    line=node.line,
                )
        kind, size = specs[0]
        deps = {r: self.deps_of(r, k) for r, k in enumerate(heads)}
        if size == 0 or len(heads) == 1:
            joins = {
                r: self.b.delay(
                    r, 0, deps[r], stream=NO_STREAM, category="other", name=ranks[r][k].name, line=ranks[r][k].line
                )
                for r, k in enumerate(heads)
            }
        else:
            joins = collectives.collective(
                self.b, kind, list(range(len(heads))), size, deps, self.cfg,
                category="coll", name=node0.name, line=node0.line, stream=STREAM_COMM,
            )  # fmt: skip
        for r, k in enumerate(heads):
            self.finish(r, k, joins[r])

    def stall(self, r: int) -> InputError:
        """Why rank r cannot finish: a collective another rank never reaches, a recv whose send
        never runs, or a dependency cycle."""
        nodes, files = self.ranks[r], self.files
        if self.coll_ready[r]:
            node = nodes[self.coll_ready[r][0]]
            lacking = next(q for q in range(len(self.ranks)) if not self.coll_ready[q])
            return InputError(
                f"{node.where}: collective {node.name!r} waits for rank {lacking} ({files[lacking]}), "
                "which never reaches a matching collective",
                source=files[r],
                line=node.line,
            )
        for (s, j), (rr, k) in self.parked.items():
            if rr == r:
                node, send = nodes[k], self.ranks[s][j]
                return InputError(
                    f"{node.where}: recv waits for {files[s]} {send.where}, which can never run",
                    source=files[r],
                    line=node.line,
                )
        node = next(nodes[k] for k in range(len(nodes)) if k not in self.done[r])
        return InputError(
            f"{node.where}: node {node.node_id} ({node.name!r}) can never run: "
            "its dependencies form a cycle or wait on one",
            source=files[r],
            line=node.line,
        )
