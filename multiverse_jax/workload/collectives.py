"""Collectives -> tasks, as NCCL runs them.

``collective(builder, kind, gpus, size_bytes, deps, cfg)`` expands one collective over the
GPUs ``gpus`` into tasks of a ``TaskGraphBuilder`` and returns, per GPU, the id of a task
that finishes when that GPU's part of the collective is done.

Sizes follow NCCL's conventions: ``all_reduce`` -- the buffer each rank reduces;
``all_gather`` -- the gathered output (each rank contributes size/n); ``reduce_scatter``
-- each rank's input (each ends with size/n); ``all_to_all`` -- the bytes each rank sends
in total (size/n to every rank); ``broadcast`` -- the buffer (from ``gpus[0]``).

How it expands (n GPUs, ring order = the order of ``gpus``, rank r sends to rank r+1 mod n):

* ``all_reduce``: ring, 2(n-1) steps (n-1 reduce-scatter, n-1 all-gather); at step k rank
  r sends chunk (r-k) mod n, S/n bytes per channel-slice. ``all_gather``: n-1 steps, rank r
  sends chunk (r-k) mod n (step 0: its own). ``reduce_scatter``: n-1 steps, chunk
  (r-k-1) mod n (rank r ends owning chunk r).
* Channels (``cfg.channels``, NCCL's parallel rings): channel c moves its share of the bytes
  (size split over channels) on an independent ring. Step k of rank r on channel c depends
  on the task that delivered step k-1 to rank r (rank r-1's step k-1 on channel c) and on
  rank r's own step k-1 on channel c (one chunk in flight per channel per rank); step 0
  depends on the GPU's start. Channels are clamped to ``size // n`` so chunks are >= 1 byte.
* ``broadcast``: a chunked pipeline along the ring from ``gpus[0]``: each channel's share is
  cut into K chunks, K = ceil(share / 64 KiB) clamped to [1, 4(n-1)] (small buffers are
  forwarded whole; big ones keep the pipeline fill under ~25%), and hop h (rank h -> h+1)
  sends chunk j after it received chunk j (hop h-1) and sent chunk j-1.
* ``all_to_all``: every rank sends size/n to every other rank, all at once (each send
  depends on its sender's start); no channels (one flow per pair). The per-GPU end waits
  for every send from and to that GPU.
* Byte counts that do not divide are split exactly (the first ``remainder`` pieces get one
  byte more); a piece of 0 bytes (only when size < n) is a zero-length delay, never a send.

Tasks, streams and dependencies:

* Per GPU a zero-length *start* task on ``stream`` with the GPU's input ``deps`` (so the
  collective waits for the previous task of that stream, as on an NCCL stream), and a
  zero-length *end* (join) task on ``stream`` -- the id returned -- that depends on the
  GPU's last step sent and received on every channel. Everything in between (flows,
  intra-server p2p delays) is on ``NO_STREAM`` with explicit dependencies: channels are
  independent and run in parallel, and nothing else on the GPU's streams interleaves with
  or is blocked by them (not one stream id per channel: the stream column is int8 and
  NCCL runs up to 32 channels). All tasks get ``category``, ``line`` and names
  ``name/...`` (``name`` defaults to the kind); hops are named ``.../c<channel>/s<step>/<src>-><dst>``.
* Joins with more than ``MAX_FANIN`` dependencies are built as a tree of zero-length
  delays, so no task has more than ``MAX_FANIN + 1`` dependencies (the task graph's
  dependency table is as wide as its widest task).
* ``deps``: one list for every GPU, or a mapping gpu -> list (GPUs missing from it have no
  input dependencies; keys that are not in ``gpus`` are ignored).
* A 1-GPU group, or size 0: only the per-GPU zero-length end task, on its input deps.

Servers (``cfg.gpus_per_server`` = s: GPU g is in server g // s):

* A hop between two GPUs of the same server is not a flow: it is a delay task on the
  sender priced by the intra-server model's ``p2p`` time (for s GPUs per server); the
  receiver's next step depends on it as it would on a flow. Each such hop pays the p2p
  row's alpha (a flat ring through a server pays it at every step; calibrate the p2p row,
  or use the hierarchical all-reduce, when that matters).
* All GPUs of the collective in one server: the collective is priced analytically: each
  GPU gets one delay task of ``alpha + size/beta`` (model row for the GPU type, n, kind)
  on ``stream``, after the start tasks of every GPU of the group (a collective is
  synchronous); that delay is the id returned.
* ``all_reduce`` with ``cfg.hierarchical``, s > 1 and a group spanning several servers with
  the same number g > 1 of its GPUs in each: intra-server reduce-scatter (analytical, per
  server), then for each local rank i an inter-server ring all-reduce of (its share of)
  size/g among the i-th GPUs (by id) of every server -- a rail, servers in order of first
  appearance in ``gpus`` -- then intra-server all-gather (analytical). Otherwise a flat ring.
* The model is ``cfg.intra``: an ``intra_server.IntraServerModel`` (priced for its
  ``gpu_type``), a GPU type name (the shipped model for that GPU), or None (the shipped
  model for H100).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from multiverse_jax.errors import InputError
from multiverse_jax.workload.tasks import NO_STREAM, STREAM_COMM, TaskGraphBuilder

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
MAX_FANIN = 16  # joins wider than this become a tree of zero-length delays
BROADCAST_MIN_CHUNK = 64 * 1024  # broadcast pipeline: chunks no smaller than this (unless the share is)
BROADCAST_MAX_CHUNKS_PER_HOP = 4  # ... and at most this many chunks per ring hop (K <= 4(n-1))


@dataclasses.dataclass(frozen=True)
class CommConfig:
    """How collectives are run."""

    channels: int = 1  # NCCL channels: parallel rings, each moving 1/channels of the data
    gpus_per_server: int = 1  # GPUs g*s .. g*s+s-1 share server g (NVLink); 1: one GPU per server
    hierarchical: bool = True  # multi-GPU servers: intra-server RS, inter-server ring per rail, intra AG
    intra: object | None = None  # the intra-server alpha-beta model (``intra_server.IntraServerModel``)


def split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` pieces that differ by at most 1 byte and sum to ``total``."""
    q, r = divmod(total, parts)
    return [q + 1 if i < r else q for i in range(parts)]


class _Expander:
    """Builds the tasks of one collective (shared context: builder, config, labels)."""

    def __init__(self, builder: TaskGraphBuilder, cfg: CommConfig, category: str, name: str, line: int, stream: int):
        self.b = builder
        self.cfg = cfg
        self.category = category
        self.name = name
        self.line = line
        self.stream = stream
        self._model = None

    # -- pieces ---------------------------------------------------------------------------

    @property
    def model(self):
        if self._model is None:
            self._model = _resolve_model(self.cfg.intra, self.b.source, self.line)
        return self._model

    def server(self, gpu: int) -> int:
        return gpu // self.cfg.gpus_per_server

    def delay(self, gpu: int, duration_ps: int, deps, label: str, stream: int = NO_STREAM) -> int:
        return self.b.delay(
            gpu, duration_ps, deps, stream=stream, category=self.category, name=f"{self.name}/{label}", line=self.line
        )

    def gather(self, gpu: int, ids: list[int], label: str) -> list[int]:
        """At most MAX_FANIN ids that finish only when all ``ids`` have (a tree of zero-length joins)."""
        ids = list(dict.fromkeys(ids))
        while len(ids) > MAX_FANIN:
            ids = [self.delay(gpu, 0, ids[i : i + MAX_FANIN], f"{label}/join") for i in range(0, len(ids), MAX_FANIN)]
        return ids

    def end(self, gpu: int, ids: list[int]) -> int:
        """The per-GPU end task (on the collective's stream) after all ``ids``."""
        return self.delay(gpu, 0, self.gather(gpu, ids, f"end@{gpu}"), f"end@{gpu}", stream=self.stream)

    def hop(self, src: int, dst: int, nbytes: int, deps: list[int], label: str) -> int:
        """``nbytes`` from src to dst: a flow, an intra-server p2p delay, or (0 bytes) a zero-length delay."""
        label = f"{label}/{src}->{dst}"
        if nbytes == 0:
            return self.delay(src, 0, deps, label)
        if self.cfg.gpus_per_server > 1 and self.server(src) == self.server(dst):
            return self.delay(src, self.model.time_ps("p2p", None, self.cfg.gpus_per_server, nbytes), deps, label)
        return self.b.send(
            src, dst, nbytes, deps, stream=NO_STREAM, category=self.category, name=f"{self.name}/{label}", line=self.line
        )

    # -- algorithms ------------------------------------------------------------------------

    def ring(self, kind: str, order: list[int], size: int, start: Mapping[int, list[int]], label: str = "") -> dict[int, list[int]]:
        """Ring all_reduce / all_gather / reduce_scatter over ``order``; per GPU the ids its end waits for."""
        n = len(order)
        steps = 2 * (n - 1) if kind == "all_reduce" else n - 1
        shift = 1 if kind == "reduce_scatter" else 0
        channels = max(1, min(self.cfg.channels, size // n))
        finals: dict[int, list[int]] = {g: [] for g in order}
        for c, share in enumerate(split(size, channels)):
            chunks = split(share, n)
            prev: list[int] | None = None  # prev[r]: rank r's task of the previous step
            for k in range(steps):
                cur = []
                for r in range(n):
                    deps = list(start[order[r]]) if prev is None else [prev[r], prev[r - 1]]
                    nbytes = chunks[(r - k - shift) % n]
                    cur.append(self.hop(order[r], order[(r + 1) % n], nbytes, deps, f"{label}c{c}/s{k}"))
                prev = cur
            for r in range(n):
                finals[order[r]] += [prev[r], prev[r - 1]]  # last step sent, last step received
        return finals

    def broadcast(self, order: list[int], size: int, start: Mapping[int, list[int]]) -> dict[int, list[int]]:
        n = len(order)
        channels = max(1, min(self.cfg.channels, size))
        finals: dict[int, list[int]] = {g: [] for g in order}
        for c, share in enumerate(split(size, channels)):
            k_chunks = max(1, min(math.ceil(share / BROADCAST_MIN_CHUNK), BROADCAST_MAX_CHUNKS_PER_HOP * (n - 1)))
            prev_hop: list[int] | None = None  # prev_hop[j]: hop h-1's task for chunk j
            for h in range(n - 1):
                cur = []
                for j, nbytes in enumerate(split(share, k_chunks)):
                    deps = [prev_hop[j]] if prev_hop is not None else []
                    deps += [cur[-1]] if j > 0 else list(start[order[h]])
                    cur.append(self.hop(order[h], order[h + 1], nbytes, deps, f"c{c}/h{h}/k{j}"))
                finals[order[h]].append(cur[-1])
                finals[order[h + 1]].append(cur[-1])
                prev_hop = cur
        return finals

    def all_to_all(self, order: list[int], size: int, start: Mapping[int, list[int]]) -> dict[int, list[int]]:
        n = len(order)
        parts = split(size, n)
        finals: dict[int, list[int]] = {g: [] for g in order}
        for r, src in enumerate(order):
            for j, dst in enumerate(order):
                if j != r and parts[j] > 0:
                    t = self.hop(src, dst, parts[j], list(start[src]), "a2a")
                    finals[src].append(t)
                    finals[dst].append(t)
        return finals

    def analytical(self, kind: str, gpus: list[int], size: int, start: Mapping[int, list[int]], stream: int, label: str) -> dict[int, int]:
        """One delay per GPU priced by the intra-server model, after every GPU of ``gpus`` started."""
        duration = self.model.time_ps(kind, None, len(gpus), size)
        together = self.gather(gpus[0], [t for g in gpus for t in start[g]], f"{label}/sync")
        return {g: self.delay(g, duration, together, f"{label}@{g}", stream=stream) for g in gpus}

    def hierarchical_all_reduce(self, servers: list[list[int]], size: int, entry: Mapping[int, int]) -> dict[int, list[int]]:
        g = len(servers[0])
        start = {gpu: [entry[gpu]] for gpu in entry}
        rs: dict[int, int] = {}
        for members in servers:
            rs.update(self.analytical("reduce_scatter", members, size, start, NO_STREAM, f"intra_rs/srv{self.server(members[0])}"))
        rail_done: dict[int, list[int]] = {gpu: [rs[gpu]] for gpu in rs}
        for i, share in enumerate(split(size, g)):
            if share == 0:
                continue
            rail = [members[i] for members in servers]
            rail_done.update(self.ring("all_reduce", rail, share, {gpu: [rs[gpu]] for gpu in rail}, f"rail{i}/"))
        ag: dict[int, list[int]] = {}
        for members in servers:
            done = self.analytical("all_gather", members, size, rail_done, NO_STREAM, f"intra_ag/srv{self.server(members[0])}")
            ag.update({gpu: [t] for gpu, t in done.items()})
        return ag


def _resolve_model(intra, source: str, line: int):
    from multiverse_jax.workload import intra_server

    if intra is None:
        return intra_server.default_model()
    if isinstance(intra, str):
        return intra_server.default_model(intra)
    if isinstance(intra, intra_server.IntraServerModel):
        return intra
    raise InputError(
        f"CommConfig.intra must be an intra_server.IntraServerModel, a GPU type name or None, got {type(intra).__name__}",
        source=source,
        line=line or None,
    )


def collective(
    builder: TaskGraphBuilder,
    kind: str,
    gpus: Sequence[int],
    size_bytes: int,
    deps: Mapping[int, Sequence[int]] | Sequence[int],
    cfg: CommConfig = CommConfig(),
    *,
    category: str = "comm",
    name: str = "",
    line: int = 0,
    stream: int = STREAM_COMM,
) -> dict[int, int]:
    """Tasks of one collective; returns {gpu: task id that ends its part}."""
    where = dict(source=builder.source, line=line or None)
    label = name or kind
    if kind not in COLLECTIVES:
        raise InputError(f"collective {label!r}: unknown kind {kind!r} (valid: {', '.join(COLLECTIVES)})", **where)
    try:
        order = [int(g) for g in gpus]
    except (TypeError, ValueError):
        raise InputError(f"collective {label!r}: GPUs must be integers, got {gpus!r}", **where) from None
    if not order:
        raise InputError(f"collective {label!r}: no GPUs", **where)
    if len(set(order)) != len(order):
        dup = sorted({g for g in order if order.count(g) > 1})
        raise InputError(f"collective {label!r}: GPU(s) {dup} appear more than once in {order}", **where)
    bad = [g for g in order if not 0 <= g < builder.n_gpus]
    if bad:
        raise InputError(f"collective {label!r}: GPU(s) {bad} do not exist (valid: 0..{builder.n_gpus - 1})", **where)
    try:
        whole = not isinstance(size_bytes, (bool, str)) and int(size_bytes) == size_bytes
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise InputError(f"collective {label!r}: size must be a whole number of bytes, got {size_bytes!r}", **where)
    size = int(size_bytes)
    if size < 0:
        raise InputError(f"collective {label!r}: size must be >= 0 bytes, got {size}", **where)
    if cfg.channels < 1:
        raise InputError(f"collective {label!r}: workload.channels must be >= 1, got {cfg.channels}", **where)
    if cfg.gpus_per_server < 1:
        raise InputError(f"collective {label!r}: workload.gpus_per_server must be >= 1, got {cfg.gpus_per_server}", **where)
    if isinstance(deps, Mapping):
        start = {g: [int(d) for d in deps.get(g, ())] for g in order}
    else:
        common = [int(d) for d in deps]
        start = {g: list(common) for g in order}

    x = _Expander(builder, cfg, category, label, line, stream)
    n = len(order)
    if n == 1 or size == 0:
        return {g: x.delay(g, 0, start[g], f"end@{g}", stream=stream) for g in order}

    entry = {g: x.delay(g, 0, start[g], f"start@{g}", stream=stream) for g in order}
    entry_deps = {g: [entry[g]] for g in order}
    servers: dict[int, list[int]] = {}
    for g in order:
        servers.setdefault(x.server(g), []).append(g)
    if cfg.gpus_per_server > 1 and len(servers) == 1:
        return x.analytical(kind, order, size, entry_deps, stream, "intra")

    per_server = [sorted(members) for members in servers.values()]
    sizes = {len(members) for members in per_server}
    if kind == "all_reduce" and cfg.hierarchical and cfg.gpus_per_server > 1 and sizes != {1} and len(sizes) == 1:
        finals = x.hierarchical_all_reduce(per_server, size, entry)
    elif kind in ("all_reduce", "all_gather", "reduce_scatter"):
        finals = x.ring(kind, order, size, entry_deps)
    elif kind == "broadcast":
        finals = x.broadcast(order, size, entry_deps)
    else:
        finals = x.all_to_all(order, size, entry_deps)
    return {g: x.end(g, [entry[g]] + finals[g]) for g in order}
