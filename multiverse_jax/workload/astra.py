"""ASTRA-sim 1.0 / SimAI / aicb text layer workloads -> task graphs.

``load_layers(path)`` parses the file into a :class:`LayerWorkload`; ``to_tasks(workload,
n_gpus, comm_cfg=...)`` expands it, per GPU, into the training loop ASTRA-sim runs. Every
malformed line is an :class:`InputError` naming ``file:line`` and what would be valid.

Format (``shared/workloads/README.md``): line 1 is the parallelism policy, optionally
followed by ``key: value`` tokens (``model_parallel_NPU_group:``, SimAI's ``ep: pp: vpp: ga:
all_gpus:``, ``pp_comm`` with or without a colon, count-prefixed lists ``checkpoints: 2 2 11``
and ``checkpoint_initiates: ...``; ``HYBRID_DLRM`` takes a bare integer, the last bottom
layer); line 2 the number of layers; then one line per layer with 12 whitespace-separated
fields (13 for ``HYBRID_CUSTOMIZED``, whose last field is the layer's own policy)::

    name reserved fwd_compute fwd_type fwd_size ig_compute ig_type ig_size
         wg_compute wg_type wg_size update_time

Units: sizes are bytes (64-bit); compute and update times are ASTRA-sim cycles, and
``to_tasks`` turns a cycle into ``cycle_ps`` picoseconds (default 1000: ASTRA-sim and SimAI
tick at 1 GHz -- a tick is 1 ns -- and aicb writes its compute times in ns).

Semantics (ASTRA-sim 1.0 ``Workload::iterate_*`` and SimAI's copy of it, with which the
files here were made; both read the same columns):

* Forward pass, layer 0..n-1: wait until the layer's weight-gradient collective of the
  previous pass is done, compute ``fwd_compute``, then the forward collective, blocking:
  the next layer starts when it is done.
* Backward pass, layer n-1..0, by policy:

  - ``DATA``: weight-gradient compute, weight-gradient collective issued without waiting,
    then input-gradient compute (not for layer 0);
  - ``HYBRID_TRANSFORMER[_FWD_IN_BCKWD]``: input-gradient compute, input-gradient collective
    (blocking), weight-gradient compute, weight-gradient collective (not waited for);
  - ``MODEL``, ``HYBRID_DATA_MODEL``, ``HYBRID_MODEL_DATA``, ``HYBRID_CUSTOMIZED``: input-
    gradient compute, input-gradient collective issued without waiting (not for layer 0),
    weight-gradient compute, weight-gradient collective (``MODEL``: none), then wait for the
    layer's input-gradient collective before the next layer;
  - ``HYBRID_DLRM[_ENHANCED]``: as ``DATA``, but layer 0 (the embedding) runs its forward and
    input-gradient all-to-alls over all GPUs, issued without waiting; the last bottom layer
    waits for the forward all-to-all, the first top layer's input-gradient compute issues the
    input-gradient all-to-all, and (``HYBRID_DLRM`` only) the backward pass waits for it at
    layer 0;
  - ``HYBRID_TRANSFORMER_FWD_IN_BCKWD``: before a layer listed in ``checkpoint_initiates``
    computes its input gradient, the forward pass (compute and collective) is re-run from
    the nearest checkpoint at or below it up to the layer before it. (SimAI also raises
    forward collectives smaller than 4 KiB to 4 KiB in this policy; not done here.)

* Every collective finishes ``update_time`` cycles after its last byte arrives
  (ASTRA-sim's ``Layer::call`` delays each ``*_Comm_Finished`` event by it).
* ``MICRO``: ASTRA-sim issues only layer 0's weight-gradient collective, ``passes`` times,
  all at once. Here, on purpose, every layer's weight-gradient collective runs, one after
  another in file order (aicb's micro-benchmarks list one size per layer and expect them
  all to run).
* A collective of type ``NONE``, of size 0, or whose group has one GPU, is a no-op (no
  update delay either). ``NONE`` with a non-zero size is accepted and ignored, as ASTRA-sim does.

Groups (ranks 0..n_gpus-1): model-parallel (MP/TP) groups are ``m`` contiguous ranks;
data-parallel (DP) groups take one rank from each block of ``m * pp`` ranks (SimAI's
``MockNcclGroup``: rank ``i + j * m * pp``). ASTRA-sim runs forward and input-gradient
collectives in the MP group and weight-gradient ones in the DP group
(``decode_involved_dimensions``: model dims for fwd/ig, data dims for wg); ``DATA``, ``MICRO``
and ``HYBRID_DLRM`` use one DP group of all GPUs, ``MODEL`` one MP group of all GPUs.
``m`` is ``workload.mp_group`` (``to_tasks(mp_group=)``) when set, else as ASTRA-sim derives
it: the file's ``model_parallel_NPU_group`` (transformer policies, ``HYBRID_CUSTOMIZED``);
``HYBRID_DATA_MODEL`` puts MP on ASTRA-sim's first network dimension and
``HYBRID_MODEL_DATA`` puts DP there (MP groups are then strided, of
``workload.gpus / workload.gpus_per_server`` ranks): that dimension is taken to be one
server (``workload.gpus_per_server``, ``CommConfig.gpus_per_server``). SimAI
suffixes: ``_EP`` runs in an expert-parallel group of ``ep`` ranks -- ``ep`` consecutive
members of a DP group -- and ``_DP_EP`` in the group of DP-group members with the same
index modulo ``ep`` (``dp / ep`` ranks). For ``pp = 1`` this is exactly
SimAI's layout; for ``pp > 1`` SimAI builds EP groups across pipeline stages and leaves
some ranks without a DP_EP group, so we keep both inside a DP group instead. SimAI sends
no pipeline traffic (``pp_comm`` only feeds its analytical bubble report): ``pp`` only sets
the DP stride, and ``pp_comm`` is parsed but not simulated.

Scaled-down instances: SimAI's ``all_gpus`` is the cluster the file was made for. With
``n_gpus == all_gpus`` (or no ``all_gpus``) the groups are exactly as above and must fit
(``m * pp`` divides ``n_gpus``, ``ep`` divides the DP size). With ``n_gpus < all_gpus``
we simulate a slice: MP groups keep ``m`` ranks (``n_gpus`` must be a multiple of ``m``),
``pp`` is dropped (DP groups of ``n_gpus / m``), and EP groups have the largest size
``<= ep`` that divides the DP size (so the 9216-GPU SimAI file on 16 GPUs runs TP 2,
DP 8, EP 8, DP_EP 1; on 64 GPUs TP 2, DP 32, EP 16, DP_EP 2).

Collective sizes are handed to ``collectives.collective`` in NCCL's conventions. They are
the same in these files except for all-gather: ASTRA-sim 1.0's ring sends the whole size
at each step (the size is each rank's contribution; ``Ring``: ``msg_size = data_size``,
``final_data_size = data_size * nodes``), whereas SimAI's ``MockNcclGroup`` splits it into
``size / nranks`` chunks (the size is the gathered output, as in NCCL). ``load_layers``
therefore records a dialect: ``"simai"`` when the file uses anything only SimAI/aicb writes
(``ep: pp: vpp: ga: all_gpus: pp_comm``, a ``_EP``/``_DP_EP`` suffix or ``BROADCAST``),
else ``"astra-sim"``; pass ``dialect=`` to override (aicb's ``MICRO`` micro-benchmarks,
e.g. ``all_gather.txt``, carry no marker and need ``dialect="simai"``).

Streams per GPU: compute on ``STREAM_COMPUTE``; forward / input-gradient collectives on
``STREAM_COMM``; weight-gradient collectives on their own stream (so one that is not waited
for never holds up a blocking one; they run one after another, as on one NCCL communicator).
"""

from __future__ import annotations

import dataclasses
import os

from multiverse_jax.errors import InputError
from multiverse_jax.textfile import parse_int, read_lines
from multiverse_jax.workload import collectives
from multiverse_jax.workload.collectives import CommConfig
from multiverse_jax.workload.tasks import NO_STREAM, STREAM_COMM, STREAM_COMPUTE, TaskGraph, TaskGraphBuilder

STREAM_WG = 2  # weight-gradient collectives (not waited for), beside STREAM_COMPUTE / STREAM_COMM

# policy -> (fwd group, ig group, wg group): "all" GPUs, "mp" or "dp" groups, None = no collective
_PHASE_GROUPS = {
    "MICRO": (None, None, "all"),
    "DATA": (None, None, "all"),
    "HYBRID_DLRM": (None, None, "all"),
    "HYBRID_DLRM_ENHANCED": (None, None, "all"),
    "MODEL": ("all", "all", None),
    "HYBRID_DATA_MODEL": ("mp", "mp", "dp"),
    "HYBRID_MODEL_DATA": ("mp", "mp", "dp"),
    "HYBRID_TRANSFORMER": ("mp", "mp", "dp"),
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": ("mp", "mp", "dp"),
    "HYBRID_CUSTOMIZED": ("mp", "mp", "dp"),
}
POLICIES = tuple(_PHASE_GROUPS)
_TRANSFORMER = ("HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD")
_DLRM = ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED")

_KINDS = {
    "ALLREDUCE": "all_reduce",
    "ALLGATHER": "all_gather",
    "REDUCESCATTER": "reduce_scatter",
    "ALLTOALL": "all_to_all",
    "BROADCAST": "broadcast",
}
_SUFFIXES = {"": None, "_EP": "ep", "_DP_EP": "dp_ep"}
_VALID_TYPES = "NONE or " + "/".join(_KINDS) + ", optionally with suffix _EP or _DP_EP"
_INT_KEYS = {  # header key -> LayerWorkload field
    "model_parallel_NPU_group:": "mp_group",
    "ep:": "ep",
    "pp:": "pp",
    "vpp:": "vpp",
    "ga:": "ga",
    "all_gpus:": "all_gpus",
    "pp_comm": "pp_comm_bytes",
    "pp_comm:": "pp_comm_bytes",
    "DLRM_LAST_BOTTOM_LAYER:": "dlrm_last_bottom",
}
_LIST_KEYS = {"checkpoints:": "checkpoints", "checkpoint_initiates:": "checkpoint_initiates"}
_SIMAI_KEYS = ("ep", "pp", "vpp", "ga", "all_gpus", "pp_comm_bytes")
_LAYER_FIELDS = (
    "name reserved fwd_compute fwd_type fwd_size ig_compute ig_type ig_size wg_compute wg_type wg_size update_time"
)


@dataclasses.dataclass(frozen=True)
class Comm:
    """One collective column triple: ``kind`` is a ``collectives.COLLECTIVES`` name or None."""

    kind: str | None
    group: str | None  # None: the phase's group (policy); "ep" / "dp_ep" from a SimAI suffix
    size_bytes: int
    text: str  # the type as written (for names and errors)


@dataclasses.dataclass(frozen=True)
class Layer:
    name: str
    line: int
    fwd_cycles: int
    fwd: Comm
    ig_cycles: int
    ig: Comm
    wg_cycles: int
    wg: Comm
    update_cycles: int
    policy: str | None = None  # HYBRID_CUSTOMIZED: this layer's policy


@dataclasses.dataclass(frozen=True)
class LayerWorkload:
    """A parsed layer file. Optional header values are None when absent."""

    policy: str
    layers: tuple[Layer, ...]
    dialect: str  # "astra-sim" | "simai" (all-gather size convention, see module doc)
    source: str
    mp_group: int | None = None
    ep: int | None = None
    pp: int | None = None
    vpp: int | None = None
    ga: int | None = None
    all_gpus: int | None = None
    pp_comm_bytes: int | None = None
    dlrm_last_bottom: int | None = None
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()


# ----------------------------------------------------------------------------- parsing


def _parse_comm(text: str, size_text: str, what: str, path: str, line: int) -> Comm:
    size = parse_int(size_text, f"{what} size", path, line, minimum=0)
    if text == "NONE":
        return Comm(None, None, size, text)
    for suffix in ("_DP_EP", "_EP", ""):
        base = text[: len(text) - len(suffix)] if suffix else text
        if text.endswith(suffix) and base in _KINDS:
            return Comm(_KINDS[base], _SUFFIXES[suffix], size, text)
    raise InputError(f"{what} type: unknown collective {text!r} (valid: {_VALID_TYPES})", source=path, line=line)


def _parse_header(tokens: list[str], path: str) -> dict:
    policy = tokens[0]
    if policy not in _PHASE_GROUPS:
        raise InputError(f"unknown parallelism policy {policy!r} (valid: {', '.join(POLICIES)})", source=path, line=1)
    fields: dict = {"policy": policy}
    i = 1
    while i < len(tokens):
        key = tokens[i]
        if key in _INT_KEYS or key in _LIST_KEYS:
            name = _INT_KEYS.get(key) or _LIST_KEYS[key]
            if name in fields:
                raise InputError(f"header key {key!r} given twice", source=path, line=1)
            if i + 1 >= len(tokens):
                raise InputError(f"header key {key!r} is missing its value", source=path, line=1)
            if key in _LIST_KEYS:
                count = parse_int(tokens[i + 1], f"{key} count", path, 1, minimum=0)
                values = tokens[i + 2 : i + 2 + count]
                if len(values) < count:
                    raise InputError(
                        f"{key} {count} announces {count} layer indices but only {len(values)} follow",
                        source=path,
                        line=1,
                    )
                fields[name] = tuple(parse_int(v, f"{key} layer index", path, 1, minimum=0) for v in values)
                i += 2 + count
                continue
            minimum = 0 if name in ("pp_comm_bytes", "dlrm_last_bottom") else 1
            fields[name] = parse_int(tokens[i + 1], key.rstrip(":"), path, 1, minimum=minimum)
            i += 2
            continue
        if policy in _DLRM and "dlrm_last_bottom" not in fields and key.lstrip("-").isdigit():
            # ASTRA-sim 1.0 reads the last bottom-MLP layer as a bare integer after HYBRID_DLRM.
            fields["dlrm_last_bottom"] = parse_int(key, "last bottom layer", path, 1, minimum=0)
            i += 1
            continue
        valid = ", ".join([*_INT_KEYS, *_LIST_KEYS])
        raise InputError(f"unknown header token {key!r} after {policy} (valid keys: {valid})", source=path, line=1)
    return fields


def _parse_layer(tok: list[str], n_fields: int, path: str, line: int) -> Layer:
    """One layer line, already split into fields."""
    if len(tok) != n_fields:
        expected = _LAYER_FIELDS + (" policy" if n_fields == 13 else "")
        raise InputError(f"expected {n_fields} fields ({expected}), got {len(tok)}", source=path, line=line)
    parse_int(tok[1], "reserved field", path, line)
    layer_policy = None
    if n_fields == 13:
        layer_policy = tok[12]
        if layer_policy not in _PHASE_GROUPS or layer_policy == "HYBRID_CUSTOMIZED":
            valid = ", ".join(p for p in POLICIES if p != "HYBRID_CUSTOMIZED")
            raise InputError(f"unknown layer policy {layer_policy!r} (valid: {valid})", source=path, line=line)
    cycles = [
        parse_int(tok[k], what, path, line, minimum=0)
        for k, what in ((2, "fwd_compute"), (5, "ig_compute"), (8, "wg_compute"), (11, "update_time"))
    ]
    return Layer(
        name=tok[0],
        line=line,
        fwd_cycles=cycles[0],
        fwd=_parse_comm(tok[3], tok[4], "fwd", path, line),
        ig_cycles=cycles[1],
        ig=_parse_comm(tok[6], tok[7], "ig", path, line),
        wg_cycles=cycles[2],
        wg=_parse_comm(tok[9], tok[10], "wg", path, line),
        update_cycles=cycles[3],
        policy=layer_policy,
    )


def _parse_layers(lines: list[str], policy: str, path: str) -> list[Layer]:
    """Line 2 (the number of layers) and the layer lines after it (blank lines skipped)."""
    count_tokens = lines[1].split() if len(lines) > 1 else []
    if len(count_tokens) != 1:
        got = "nothing" if not count_tokens else repr(" ".join(count_tokens))
        raise InputError(f"line 2 must be the number of layers (one integer), got {got}", source=path, line=2)
    n_layers = parse_int(count_tokens[0], "number of layers", path, 2, minimum=1)
    n_fields = 13 if policy == "HYBRID_CUSTOMIZED" else 12
    layers: list[Layer] = []
    for number, text in enumerate(lines[2:], start=3):
        tok = text.split()
        if not tok:
            continue
        if len(layers) == n_layers:
            raise InputError(f"more layer lines than the {n_layers} declared on line 2", source=path, line=number)
        layers.append(_parse_layer(tok, n_fields, path, number))
    if len(layers) < n_layers:
        last = f" (last layer on line {layers[-1].line})" if layers else ""
        message = f"line 2 declares {n_layers} layers but the file has only {len(layers)}{last}: truncated?"
        raise InputError(message, source=path, line=2)
    return layers


def _check_layer_indices(fields: dict, n_layers: int, path: str) -> None:
    """The layer indices of the header (checkpoints, the DLRM's last bottom layer) exist and fit."""
    error = lambda message: InputError(message, source=path, line=1)  # noqa: E731
    for key in ("checkpoints", "checkpoint_initiates"):
        for index in fields.get(key, ()):
            if index >= n_layers:
                raise error(f"{key}: layer {index} does not exist (layers: 0..{n_layers - 1})")
    for index in fields.get("checkpoint_initiates", ()):
        if not any(c <= index for c in fields.get("checkpoints", ())):
            why = "has no checkpoint at or below it to re-run the forward pass from"
            raise error(f"checkpoint_initiates: layer {index} {why}")
    policy = fields["policy"]
    if policy in _DLRM and "dlrm_last_bottom" not in fields:
        raise error(f"{policy} needs the last bottom layer after it on line 1, e.g. '{policy} 4'")
    if "dlrm_last_bottom" in fields and fields["dlrm_last_bottom"] >= n_layers - 1:
        raise error(f"last bottom layer {fields['dlrm_last_bottom']} leaves no top layer (layers: 0..{n_layers - 1})")


def _detect_dialect(fields: dict, layers: list[Layer]) -> str:
    """"simai" when the file uses anything only SimAI / aicb write, else "astra-sim"."""
    comms = (c for layer in layers for c in (layer.fwd, layer.ig, layer.wg))
    simai = any(k in fields for k in _SIMAI_KEYS) or any(c.group is not None or c.kind == "broadcast" for c in comms)
    return "simai" if simai else "astra-sim"


def load_layers(path, *, dialect: str = "auto") -> LayerWorkload:
    """Parse an ASTRA-sim 1.0 / SimAI / aicb layer file (see the module doc for the format)."""
    source = os.fspath(path)
    if dialect not in ("auto", "astra-sim", "simai"):
        raise InputError(f"dialect must be 'auto', 'astra-sim' or 'simai', got {dialect!r}", source=source)
    lines = read_lines(source, "workload file")
    header = lines[0].split()
    if not header:
        message = f"line 1 must start with the parallelism policy ({', '.join(POLICIES)})"
        raise InputError(message, source=source, line=1)
    fields = _parse_header(header, source)
    layers = _parse_layers(lines, fields["policy"], source)
    _check_layer_indices(fields, len(layers), source)
    if dialect == "auto":
        dialect = _detect_dialect(fields, layers)
    return LayerWorkload(layers=tuple(layers), dialect=dialect, source=source, **fields)


# ----------------------------------------------------------------------------- groups


def _largest_divisor_at_most(n: int, bound: int) -> int:
    return max(d for d in range(1, min(n, bound) + 1) if n % d == 0)


def _model_parallel(w: LayerWorkload, n: int, cfg: CommConfig, mp_group: int | None) -> tuple[int, bool, str]:
    """(size of the contiguous blocks of ranks, whether they are the DP groups rather than the
    MP groups, where the size comes from) -- ASTRA-sim's layout of the policy on ``n`` GPUs."""
    err = lambda msg: InputError(msg, source=w.source, line=1)  # noqa: E731
    policy = w.policy
    if policy in ("DATA", "MICRO") or policy in _DLRM:
        return 1, False, f"{policy}: no model parallelism"
    if policy == "MODEL":
        return n, False, "MODEL: one group of all GPUs"
    if policy == "HYBRID_MODEL_DATA":
        # ASTRA-sim's first network dimension carries DP here; MP spans the other dimensions.
        if mp_group is not None:
            if n % mp_group:
                raise err(f"workload.gpus = {n} is not a multiple of workload.mp_group = {mp_group}")
            return n // mp_group, True, "workload.mp_group"
        if cfg.gpus_per_server > 1:
            return cfg.gpus_per_server, True, "workload.gpus_per_server"
        raise err(
            "HYBRID_MODEL_DATA needs the size of its model-parallel groups: set workload.mp_group (a divisor of "
            f"workload.gpus = {n}), or workload.gpus_per_server > 1 (ASTRA-sim puts data parallelism on its first "
            "network dimension, one server, and model parallelism across servers)"
        )
    if mp_group is not None:
        return mp_group, False, "workload.mp_group"
    if w.mp_group is not None:
        return w.mp_group, False, "model_parallel_NPU_group on line 1"
    if policy in ("HYBRID_DATA_MODEL", "HYBRID_CUSTOMIZED"):
        if cfg.gpus_per_server > 1:
            return cfg.gpus_per_server, False, "workload.gpus_per_server"
        raise err(
            f"{policy} needs the size of its model-parallel groups: model_parallel_NPU_group: on line 1, "
            "workload.mp_group, or workload.gpus_per_server > 1 (ASTRA-sim puts model parallelism on its first "
            "network dimension, one server)"
        )
    raise err(
        f"{policy} needs the size of its model-parallel groups: set model_parallel_NPU_group: on line 1, "
        "or workload.mp_group"
    )


def _layout(w: LayerWorkload, n: int, cfg: CommConfig, mp_group: int | None) -> dict[str, list[list[int]]]:
    """The GPU groups: name ("all", "mp", "dp", "ep", "dp_ep") -> disjoint groups covering 0..n-1."""
    err = lambda msg: InputError(msg, source=w.source, line=1)  # noqa: E731
    if w.all_gpus is not None and n > w.all_gpus:
        raise err(f"workload.gpus = {n} is more than the all_gpus {w.all_gpus} the file was made for")
    full = w.all_gpus is None or n == w.all_gpus
    tp, swap, origin = _model_parallel(w, n, cfg, mp_group)
    if tp > n or n % tp:
        groups = "data-parallel" if swap else "model-parallel"
        raise err(f"workload.gpus = {n} cannot host {groups} groups of {tp} GPUs ({origin}): use a multiple of {tp}")
    ep_wanted = w.ep or 1
    if full:
        pp = w.pp or 1
        if n % (tp * pp):
            raise err(f"workload.gpus = {n} is not a multiple of the model-parallel group x pp: = {tp} x {pp}")
        dp = n // (tp * pp)
        if dp % ep_wanted:
            raise err(f"ep: {ep_wanted} does not divide the data-parallel size {dp} (= {n} / ({tp} x {pp}))")
        ep = ep_wanted
    else:  # scaled-down slice of an all_gpus cluster: keep MP, drop pp, largest EP that fits
        pp, dp = 1, n // tp
        ep = _largest_divisor_at_most(dp, ep_wanted)
    stride = tp * pp
    mp_groups = [list(range(i * tp, (i + 1) * tp)) for i in range(n // tp)]
    dp_groups = [[i + j * stride for j in range(dp)] for i in range(stride)]
    if swap:
        mp_groups, dp_groups = dp_groups, mp_groups
    return {
        "all": [list(range(n))],
        "mp": mp_groups,
        "dp": dp_groups,
        "ep": [g[k * ep : (k + 1) * ep] for g in dp_groups for k in range(len(g) // ep)],
        "dp_ep": [g[r::ep] for g in dp_groups for r in range(ep)],
    }


# ----------------------------------------------------------------------------- expansion


class _Expander:
    """Emits one pass of the loop for all GPUs at once (every GPU runs the same program)."""

    def __init__(self, w: LayerWorkload, n: int, cfg: CommConfig, cycle_ps: int, groups: dict):
        self.w, self.n, self.cfg, self.cycle_ps, self.groups = w, n, cfg, cycle_ps, groups
        self.b = TaskGraphBuilder(n, source=w.source)
        self.gpus = range(n)

    def compute(self, cur: list, cycles: int, extra: list | None, name: str, line: int) -> list:
        """A compute task per GPU after ``cur`` (and ``extra``); zero-length ones without extra deps are skipped."""
        if cycles == 0 and extra is None:
            return cur
        out = []
        for g in self.gpus:
            deps = [d for d in (cur[g], extra[g] if extra else None) if d is not None]
            out.append(
                self.b.delay(
                    g, cycles * self.cycle_ps, deps, stream=STREAM_COMPUTE, category="compute", name=name, line=line
                )
            )
        return out

    @staticmethod
    def then(cur: list, done: list | None) -> list:
        """Where a blocking collective ran (``done``, issued after ``cur``), the GPU continues after it."""
        return cur if done is None else [c if d is None else d for c, d in zip(cur, done, strict=True)]

    def join(self, a: list, b: list | None, name: str, line: int) -> list:
        """Per GPU: after both a and b (b issued independently of a)."""
        if b is None:
            return a
        out = []
        for g in self.gpus:
            deps = [d for d in (a[g], b[g]) if d is not None]
            out.append(
                deps[0]
                if len(deps) < 2
                else self.b.delay(g, 0, deps, stream=NO_STREAM, category="sync", name=name, line=line)
            )
        return out

    def comm(
        self, comm: Comm, phase_group: str | None, phase: str, layer: Layer, after: list, stream: int, name: str
    ) -> list | None:
        """The collective on every group; per GPU the id that ends it (after the update delay), None where no-op."""
        group_name = comm.group or phase_group
        if comm.kind is None or comm.size_bytes == 0 or group_name is None:
            return None
        category = comm.group or ("tp" if phase in ("fwd", "ig") else "dp")
        done: list = [None] * self.n
        for members in self.groups[group_name]:
            if len(members) < 2:
                continue
            size = comm.size_bytes
            if comm.kind == "all_gather" and self.w.dialect == "astra-sim":
                size *= len(members)  # ASTRA-sim's size is each rank's part; NCCL's is the output
            joins = collectives.collective(
                self.b,
                comm.kind,
                members,
                size,
                {g: [after[g]] if after[g] is not None else [] for g in members},
                self.cfg,
                category=category,
                name=name,
                line=layer.line,
                stream=stream,
            )
            for g in members:
                done[g] = joins[g]
                if layer.update_cycles:
                    done[g] = self.b.delay(
                        g,
                        layer.update_cycles * self.cycle_ps,
                        [joins[g]],
                        stream=NO_STREAM,
                        category=category,
                        name=f"{name}.update",
                        line=layer.line,
                    )
        return done if any(d is not None for d in done) else None

    def phase_groups(self, layer: Layer) -> tuple:
        return _PHASE_GROUPS[layer.policy or self.w.policy]

    def forward(self, i: int, cur: list, wg_done: list) -> tuple[list, list | None]:
        """Layer i's forward compute and collective; DLRM's embedding all-to-all is not waited for."""
        layer = self.w.layers[i]
        tag = f"{layer.name}[{i}]"
        cur = self.compute(cur, layer.fwd_cycles, wg_done[i], f"{tag}.fwd", layer.line)
        group, blocking = self.phase_groups(layer)[0], True
        if self.w.policy in _DLRM and i == 0:  # ASTRA-sim: layer 0 of a DLRM spans all dims
            group, blocking = ("all" if layer.fwd.kind == "all_to_all" else None), False
        done = self.comm(layer.fwd, group, "fwd", layer, cur, STREAM_COMM, f"{tag}.fwd_comm")
        return (self.then(cur, done) if blocking else cur), done

    def one_pass(self, cur: list, wg_done: list) -> list:
        w, layers = self.w, self.w.layers
        n_layers = len(layers)
        if w.policy == "MICRO":
            for i, layer in enumerate(layers):
                done = self.comm(layer.wg, "all", "wg", layer, cur, STREAM_WG, f"{layer.name}[{i}].wg_comm")
                cur = self.then(cur, done)
            return cur

        dlrm = w.policy in _DLRM
        fwd_pending = None
        for i in range(n_layers):
            cur, done = self.forward(i, cur, wg_done)
            if dlrm and i == 0:
                fwd_pending = done
            if dlrm and i == w.dlrm_last_bottom:
                cur = self.join(cur, fwd_pending, f"{layers[i].name}[{i}].wait_embedding", layers[i].line)

        if w.policy == "DATA" or dlrm:
            ig_pending = None
            for i in reversed(range(n_layers)):
                layer, tag = layers[i], f"{layers[i].name}[{i}]"
                cur = self.compute(cur, layer.wg_cycles, None, f"{tag}.wg", layer.line)
                wg_done[i] = self.comm(layer.wg, "all", "wg", layer, cur, STREAM_WG, f"{tag}.wg_comm")
                if i == 0:
                    if w.policy == "HYBRID_DLRM":
                        cur = self.join(cur, ig_pending, f"{tag}.wait_embedding", layer.line)
                    break
                cur = self.compute(cur, layer.ig_cycles, None, f"{tag}.ig", layer.line)
                if dlrm and i == w.dlrm_last_bottom + 1:
                    emb = layers[0]
                    ig_pending = self.comm(emb.ig, "all", "ig", emb, cur, STREAM_COMM, f"{emb.name}[0].ig_comm")
            return cur

        blocking_ig = w.policy in _TRANSFORMER
        initiates = set(w.checkpoint_initiates) if w.policy == "HYBRID_TRANSFORMER_FWD_IN_BCKWD" else set()
        for i in reversed(range(n_layers)):
            layer, tag = layers[i], f"{layers[i].name}[{i}]"
            if i in initiates:
                start = max(c for c in w.checkpoints if c <= i)
                for k in range(start, i):
                    cur, _ = self.forward(k, cur, wg_done)
            _, ig_g, wg_g = self.phase_groups(layer)
            cur = self.compute(cur, layer.ig_cycles, None, f"{tag}.ig", layer.line)
            ig_done = None
            if blocking_ig or i > 0:
                ig_done = self.comm(layer.ig, ig_g, "ig", layer, cur, STREAM_COMM, f"{tag}.ig_comm")
            if blocking_ig:
                cur, ig_done = self.then(cur, ig_done), None
            cur = self.compute(cur, layer.wg_cycles, None, f"{tag}.wg", layer.line)
            if w.policy != "MODEL":
                wg_done[i] = self.comm(layer.wg, wg_g, "wg", layer, cur, STREAM_WG, f"{tag}.wg_comm")
            cur = self.join(cur, ig_done, f"{tag}.ig_wait", layer.line)
        return cur


def to_tasks(
    workload: LayerWorkload,
    n_gpus: int,
    *,
    comm_cfg: CommConfig = CommConfig(),
    cycle_ps: int = 1000,
    passes: int = 1,
    mp_group: int | None = None,
) -> TaskGraph:
    """The training loop of ``workload`` on ``n_gpus`` GPUs, ``passes`` iterations.

    ``cycle_ps``: picoseconds per ASTRA-sim cycle (1000 = 1 GHz). ``mp_group``
    (``workload.mp_group``): the model-parallel group size, over the file's
    ``model_parallel_NPU_group`` (see the module doc for its default per policy).
    """
    if n_gpus < 1:
        raise InputError(f"workload.gpus must be >= 1, got {n_gpus}", source=workload.source)
    if passes < 1:
        raise InputError(f"passes must be >= 1, got {passes}", source=workload.source)
    if cycle_ps < 1:
        raise InputError(f"cycle_ps must be >= 1, got {cycle_ps}", source=workload.source)
    if mp_group is not None and mp_group < 1:
        raise InputError(f"workload.mp_group must be >= 1, got {mp_group}", source=workload.source)
    groups = _layout(workload, n_gpus, comm_cfg, mp_group)
    expander = _Expander(workload, n_gpus, comm_cfg, cycle_ps, groups)
    cur: list = [None] * n_gpus
    wg_done: list = [None] * len(workload.layers)
    for _ in range(passes):
        cur = expander.one_pass(cur, wg_done)
    if len(expander.b) == 0:
        raise InputError("the workload has no tasks: every compute time and collective is zero", source=workload.source)
    return expander.b.build()


def load(path, n_gpus: int, **kwargs) -> TaskGraph:
    """``to_tasks(load_layers(path), n_gpus, **kwargs)``; ``dialect=`` goes to ``load_layers``."""
    dialect = kwargs.pop("dialect", "auto")
    return to_tasks(load_layers(path, dialect=dialect), n_gpus, **kwargs)
