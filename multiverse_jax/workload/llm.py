"""LLM training iterations as task graphs: GPT / LLaMA / MoE under TP, PP (1F1B), DP and EP.

``generate(model, parallel, n_gpus=...)`` returns the ``TaskGraph`` of one training
iteration (Megatron-LM style); ``memory_model`` / ``fits`` / ``check_memory`` say whether a
design point fits in GPU memory before anything is simulated (``generate`` raises
``OutOfMemory``, an ``InputError``, for one that does not: the engine reports such a point
with status "oom" and does not simulate it).

Models
------
``ModelSpec`` takes (layers, hidden, heads, seq_len, vocab) plus optional ffn_hidden
(default 4·hidden), experts / top_k (MoE), kv_heads (grouped-query attention) and ``arch``:

* ``"gpt"``: LayerNorm, GeLU MLP with two matrices, biases, learned position embeddings,
  output layer tied to the word embedding (GPT-3, Megatron-LM);
* ``"llama"``: RMSNorm, SwiGLU MLP with three matrices, no biases, rotary positions (no
  parameters), separate output layer.

Named configs (``MODELS``): gpt3-13b and gpt3-175b (Brown et al. 2020, Table 2.1; seq 2048,
GPT-2 vocab 50257); llama-7b and llama-65b (LLaMA 1, Touvron et al. 2023, Table 2; its
context is 2048 tokens, which is what we use -- LLaMA 2 doubled it to 4096; vocab 32000,
SwiGLU ffn 11008 / 22016); mixtral-8x7b (Jiang et al. 2024, "Mixtral of Experts", Table 1:
32 layers, hidden 4096, 32 heads with 8 key/value heads, SwiGLU ffn 14336, 8 experts, top-2,
vocab 32000; we train it at seq 4096 -- its 32k context is an inference limit).

Parameters: embedding V·h (+ s·h positions for gpt) + per layer [attention h·(h + 2·kv) + h·h
(+ biases), MLP m·h·f per expert (m = 2 gpt, 3 llama, + biases), router h·E (MoE), norms]
+ final norm + output layer V·h (llama only; gpt ties it). GPT-3 175B: 174.6e9.

FLOPs (a multiply-add is 2 FLOPs). Forward, per sequence: per layer 2·s·(attention and MLP
matrix parameters a token passes through: top_k experts for MoE, plus the router) + 2·s²·h for
attention scores and their weighted sum; plus 2·s·h·V for the output layer. Training =
3 × forward (the backward pass computes gradients of activations and of weights, 2 × forward),
no activation recomputation. For gpt with f = 4h this is Narayanan et al. 2021 (Megatron-LM,
SC'21) eq. 3, 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)), except for the attention term: eq. 3
counts the full s×s score matrix (4·s²·h per layer); we count the causal half, which is what
fused causal kernels (FlashAttention) compute, so that term is s/(12h) instead of s/(6h).
Dense models come within a few percent of 6·params·tokens.

Parallelism and rank layout
---------------------------
``ParallelConfig`` (tp, pp, dp, ep ...). GPU ranks are laid out as Megatron-LM and SimAI
do, tensor-parallel ranks innermost (so a TP group shares a server):

    rank = dp_idx · (pp · tp) + pp_idx · tp + tp_idx

TP group: the tp consecutive ranks of one (dp_idx, pp_idx); pipeline: the pp ranks of one
(dp_idx, tp_idx), stage pp_idx, stride tp; DP group: the dp ranks of one (pp_idx, tp_idx),
stride pp·tp. Expert parallelism is carved out of data parallelism (Megatron-Core): the EP
group of a rank is the ep ranks with the same (pp_idx, tp_idx) whose dp_idx share
``dp_idx // ep``; each holds experts/ep experts of every MoE layer (each split over TP too).
The expert-data-parallel (EDP) group -- the dp/ep ranks holding the same experts -- is the
ranks with the same (pp_idx, tp_idx, dp_idx % ep). ``rank_groups`` lists them all.

Sequence parallelism is assumed with TP (Korthikanti et al. 2022): activations outside the
TP regions are split across the TP group, which is what the activation-memory formula below
assumes. On the network, its reduce-scatter + all-gather pair per block moves the same bytes
as the ring all-reduce that we issue (a ring all-reduce is a reduce-scatter then an
all-gather), so a TP collective is an ``all_reduce`` of the block's b·s·h·2 bytes.

Memory model (bytes per GPU, per pipeline stage; ``memory_model`` returns the fullest stage)
------------------------------------------------------------------------------------------
Mixed precision with Adam (Rajbhandari et al. 2020, ZeRO, §3.1): weights 2 B/param (bf16),
gradients 2 B/param, optimizer states 12 B/param (fp32 master weights, momentum, variance);
with ZeRO-1 the optimizer states are split over the DP group (expert parameters over the
EDP group). Parameters per GPU are the stage's share, split over TP (experts also over EP);
stage 0 holds the word (and position) embedding, the last stage the final norm and output
layer (for tied gpt models Megatron keeps a copy of the word embedding there when pp > 1).
Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", §4.2, with sequence parallelism) s·b·h·(34 + 5·a·s/h)/tp bytes per layer per
micro-batch, where a = heads (the formula is for the GPT block; it is applied as is to
SwiGLU and MoE blocks, and the embedding / output-layer activations are left out). Under
1F1B, stage i keeps min(pp - i, microbatches) micro-batches in flight (Narayanan et al. 2021,
§2.2.1), so stage 0 holds the most. A design point fits when every stage's total is at most
the GPU's ``memory_bytes`` (``gpus.py``).

The iteration (what ``generate`` builds)
----------------------------------------
Per GPU: a compute stream and one stream per communicator (TP, PP, DP, EP), as Megatron runs
each NCCL communicator on its own CUDA stream; tasks of one stream run in issue order.

* Pipeline: the non-interleaved 1F1B schedule of Megatron-LM (Narayanan et al. 2021,
  Fig. 4 top): stage i runs min(pp - i - 1, m) warm-up forwards, then alternates one forward
  and one backward, then the remaining backwards. A forward's output activations (b·s·h·2/tp
  bytes: each TP rank sends its sequence-parallel shard to the same TP rank of the next stage)
  and a backward's input gradients (same size, to the previous stage) are ``send`` flows; as in
  Megatron's non-interleaved schedule the point-to-point is blocking: both the receiver's and
  the sender's next compute wait for the flow.
* A stage's layers are grouped into chunks of ``layers_per_chunk`` consecutive layers (default
  1: every layer on its own). Per chunk and micro-batch, forward: attention compute → TP
  all-reduce → [EP all-to-all dispatch →] MLP / experts compute [→ EP all-to-all combine] →
  TP all-reduce; backward: the same in reverse with 2× the FLOPs ([EP all-to-all →] MLP
  compute [→ EP all-to-all] → TP all-reduce → attention compute → TP all-reduce). So there are
  2 compute tasks per chunk per micro-batch per direction, and a chunk of k layers carries k
  layers' FLOPs and one collective of k layers' bytes at each place: aggregation only loses
  the per-collective latency and the finer grain of DP gradient buckets. Compute tasks block
  on the TP / EP collective before them (Megatron waits for them); the output layer's FLOPs
  ride on the last chunk of the last stage, the embedding lookup has none.
  Compute time = FLOPs of the GPU's share / (peak × efficiency), rounded up to whole ps.
  TP all-reduce: b·s·h·2 bytes per layer. EP all-to-all: each rank sends b·s·h·2·top_k/tp
  bytes per layer (its sequence-parallel share of the tokens, each copied to top_k experts).
* DP: during the backward of the last micro-batch, gradients become final block by block
  (the output layer first, the embedding last); they fill buckets of ``dp_bucket_bytes``
  (PyTorch DDP's 25 MiB by default; a bucket may split a layer's gradients, so the buckets
  sum exactly to the GPU's gradient bytes) and each full bucket is all-reduced over the DP
  group (expert gradients over the EDP group) as soon as it is full, overlapping the backward
  compute that remains; the last partial bucket goes when the backward ends. With ZeRO-1 the
  buckets are reduce-scattered instead, and after the optimizer step the updated bf16 weights
  are all-gathered (same bucket size).
* Optimizer step: a compute task after the last backward and every DP collective of the GPU,
  priced as memory-bound fused Adam: 28 bytes of HBM traffic per parameter it updates (read
  and write fp32 master, momentum and variance, read the bf16 gradient, write the bf16 weight).

Task categories: "compute" (layers and optimizer), "tp", "pp", "dp", "ep". Collectives go
through ``collectives.collective`` with the ``CommConfig`` given, which prices intra-server
ones analytically and turns inter-server ones into flows.
"""

from __future__ import annotations

import dataclasses
import math

from multiverse_jax.errors import InputError
from multiverse_jax.workload import collectives
from multiverse_jax.workload.collectives import CommConfig
from multiverse_jax.workload.gpus import GpuSpec, get_gpu
from multiverse_jax.workload.tasks import STREAM_COMM, STREAM_COMPUTE, TaskGraph, TaskGraphBuilder

STREAM_TP = STREAM_COMM
STREAM_PP, STREAM_DP, STREAM_EP = 2, 3, 4
BYTES_PER_ACTIVATION = 2  # bf16
WEIGHT_BYTES, GRADIENT_BYTES, OPTIMIZER_BYTES = 2, 2, 12  # per parameter (ZeRO paper, §3.1)
ADAM_HBM_BYTES = 28  # per parameter updated: r/w fp32 master, m, v (24) + read bf16 grad + write bf16 weight
ARCHS = ("gpt", "llama")


# ---------------------------------------------------------------------------------- models


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. ``ffn_hidden`` None → 4·hidden; ``kv_heads`` None → heads."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int | None = None
    experts: int = 1  # > 1: every layer's MLP is a mixture of this many experts
    top_k: int = 1  # experts each token goes through
    kv_heads: int | None = None
    arch: str = "gpt"

    def __post_init__(self):
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        for key in ("layers", "hidden", "heads", "seq_len", "vocab", "ffn_hidden", "experts", "top_k", "kv_heads"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"workload.{key} must be an integer >= 1, got {value!r} (model {self.name!r})")
        if self.arch not in ARCHS:
            raise InputError(f"workload.arch must be one of {', '.join(ARCHS)}, got {self.arch!r} (model {self.name!r})")
        if self.hidden % self.heads:
            raise InputError(f"workload.hidden={self.hidden} must be divisible by workload.heads={self.heads} (model {self.name!r})")
        if self.heads % self.kv_heads:
            raise InputError(f"workload.heads={self.heads} must be divisible by workload.kv_heads={self.kv_heads} (model {self.name!r})")
        if self.top_k > self.experts:
            raise InputError(f"workload.top_k={self.top_k} must be <= workload.experts={self.experts} (model {self.name!r})")

    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def kv_dim(self) -> int:
        return self.hidden // self.heads * self.kv_heads


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("gpt3-13b", layers=40, hidden=5120, heads=40, seq_len=2048, vocab=50257),
        ModelSpec("gpt3-175b", layers=96, hidden=12288, heads=96, seq_len=2048, vocab=50257),
        ModelSpec("llama-7b", layers=32, hidden=4096, heads=32, seq_len=2048, vocab=32000, ffn_hidden=11008, arch="llama"),
        ModelSpec("llama-65b", layers=80, hidden=8192, heads=64, seq_len=2048, vocab=32000, ffn_hidden=22016, arch="llama"),
        ModelSpec(
            "mixtral-8x7b", layers=32, hidden=4096, heads=32, seq_len=4096, vocab=32000, ffn_hidden=14336,
            experts=8, top_k=2, kv_heads=8, arch="llama",
        ),
    )
}


def get_model(name: str, *, key: str = "workload.model") -> ModelSpec:
    """A named model config (case-insensitive)."""
    model = {k.lower(): v for k, v in MODELS.items()}.get(str(name).lower())
    if model is None:
        raise InputError(f"{key}: unknown model {name!r} (valid: {', '.join(MODELS)}; or give layers, hidden, heads, seq_len, vocab)")
    return model


@dataclasses.dataclass(frozen=True)
class _LayerParams:
    """Parameters of one layer, by where they live."""

    attention: int  # QKV + output projection (+ biases) + the norm before it
    shared_mlp: int  # the norm before the MLP + router (MoE) + the MLP itself (dense)
    expert: int  # one expert's MLP (MoE; 0 for dense)
    attention_matmul: int  # matrix parameters a token passes through in attention
    mlp_matmul: int  # ... in the MLP (top_k experts, router)


def _layer_params(m: ModelSpec) -> _LayerParams:
    h, f, kv = m.hidden, m.ffn_hidden, m.kv_dim
    gpt = m.arch == "gpt"
    norm = 2 * h if gpt else h  # LayerNorm gamma + beta | RMSNorm gamma
    attn_mm = h * (h + 2 * kv) + h * h
    attn_bias = (h + 2 * kv) + h if gpt else 0
    ffn_mm = (2 if gpt else 3) * h * f
    ffn = ffn_mm + (f + h if gpt else 0)
    router = h * m.experts if m.moe else 0
    return _LayerParams(
        attention=attn_mm + attn_bias + norm,
        shared_mlp=norm + router + (0 if m.moe else ffn),
        expert=ffn if m.moe else 0,
        attention_matmul=attn_mm,
        mlp_matmul=router + ffn_mm * (m.top_k if m.moe else 1),
    )


def _embedding_params(m: ModelSpec) -> int:
    return m.vocab * m.hidden + (m.seq_len * m.hidden if m.arch == "gpt" else 0)


def _head_params(m: ModelSpec, *, copy_tied: bool) -> int:
    """Final norm + output layer (a gpt model's output layer is the word embedding: it is
    counted again only where a stage keeps its own copy)."""
    norm = 2 * m.hidden if m.arch == "gpt" else m.hidden
    untied = m.arch != "gpt" or copy_tied
    return norm + (m.vocab * m.hidden if untied else 0)


def parameter_count(model: ModelSpec) -> int:
    """Total parameters (every expert counted)."""
    lp = _layer_params(model)
    per_layer = lp.attention + lp.shared_mlp + model.experts * lp.expert
    return _embedding_params(model) + model.layers * per_layer + _head_params(model, copy_tied=False)


def active_parameter_count(model: ModelSpec) -> int:
    """Parameters one token passes through (top_k experts of each MoE layer)."""
    lp = _layer_params(model)
    per_layer = lp.attention + lp.shared_mlp + (model.top_k * lp.expert if model.moe else 0)
    return _embedding_params(model) + model.layers * per_layer + _head_params(model, copy_tied=False)


def _layer_forward_flops(model: ModelSpec, sequences: int) -> tuple[int, int]:
    """(attention, MLP) forward FLOPs of one layer for ``sequences`` sequences."""
    lp = _layer_params(model)
    s, h = model.seq_len, model.hidden
    attention = 2 * sequences * s * lp.attention_matmul + 2 * sequences * s * s * h  # causal half of 4·s²·h
    return attention, 2 * sequences * s * lp.mlp_matmul


def _head_forward_flops(model: ModelSpec, sequences: int) -> int:
    return 2 * sequences * model.seq_len * model.hidden * model.vocab


def forward_flops(model: ModelSpec, sequences: int = 1) -> int:
    """Forward FLOPs of the whole model for ``sequences`` sequences of seq_len tokens."""
    attention, mlp = _layer_forward_flops(model, sequences)
    return model.layers * (attention + mlp) + _head_forward_flops(model, sequences)


def training_flops(model: ModelSpec, sequences: int) -> int:
    """Forward + backward FLOPs for ``sequences`` sequences (3 × forward)."""
    return 3 * forward_flops(model, sequences)


# ---------------------------------------------------------------------------- parallelism


@dataclasses.dataclass(frozen=True)
class ParallelConfig:
    """How one iteration is parallelised. Global batch = dp · microbatches · micro_batch_size sequences."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1  # expert parallelism, carved out of dp (ep divides dp)
    microbatches: int = 1  # per iteration, per pipeline (gradient accumulation steps)
    micro_batch_size: int = 1  # sequences per micro-batch
    zero1: bool = False  # shard optimizer states over DP (reduce-scatter + all-gather)
    dp_bucket_bytes: int = 25 * 2**20  # PyTorch DDP bucket_cap_mb = 25
    gpu: str = "A100-80GB"
    efficiency: float | None = None  # None: the GPU's default
    layers_per_chunk: int = 1  # layers per compute task (aggregation, see the module doc)

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def rank(self, dp_idx: int, pp_idx: int, tp_idx: int) -> int:
        return (dp_idx * self.pp + pp_idx) * self.tp + tp_idx

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(dp_idx, pp_idx, tp_idx) of ``rank``."""
        return rank // (self.pp * self.tp), rank // self.tp % self.pp, rank % self.tp


def rank_groups(parallel: ParallelConfig) -> dict[str, list[list[int]]]:
    """Every group of each kind: "tp", "pp" (a pipeline, stage order), "dp", "ep", "edp"."""
    p = parallel
    r = p.rank
    return {
        "tp": [[r(d, s, t) for t in range(p.tp)] for d in range(p.dp) for s in range(p.pp)],
        "pp": [[r(d, s, t) for s in range(p.pp)] for d in range(p.dp) for t in range(p.tp)],
        "dp": [[r(d, s, t) for d in range(p.dp)] for s in range(p.pp) for t in range(p.tp)],
        "ep": [
            [r(block * p.ep + e, s, t) for e in range(p.ep)]
            for block in range(p.dp // p.ep) for s in range(p.pp) for t in range(p.tp)
        ],
        "edp": [
            [r(block * p.ep + e, s, t) for block in range(p.dp // p.ep)]
            for e in range(p.ep) for s in range(p.pp) for t in range(p.tp)
        ],
    }


def check_parallel(model: ModelSpec, parallel: ParallelConfig, n_gpus: int | None = None) -> None:
    """Raise an ``InputError`` naming the key when the parallelism cannot run ``model``."""
    p = parallel
    for key in ("tp", "pp", "dp", "ep", "microbatches", "micro_batch_size", "dp_bucket_bytes", "layers_per_chunk"):
        value = getattr(p, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"workload.{key} must be an integer >= 1, got {value!r}")
    if p.efficiency is not None and not 0 < p.efficiency <= 1:
        raise InputError(f"workload.efficiency must be in (0, 1], got {p.efficiency!r}")
    get_gpu(p.gpu)
    if n_gpus is not None and p.n_gpus != n_gpus:
        raise InputError(
            f"workload.tp * workload.pp * workload.dp = {p.tp} * {p.pp} * {p.dp} = {p.n_gpus} "
            f"must equal the GPU count {n_gpus}"
        )
    if model.layers % p.pp:
        raise InputError(f"workload.pp={p.pp} must divide the {model.layers} layers of {model.name}")
    if model.heads % p.tp or model.kv_heads % p.tp:
        raise InputError(
            f"workload.tp={p.tp} must divide the attention heads of {model.name} "
            f"({model.heads} heads, {model.kv_heads} key/value heads)"
        )
    if (model.layers // p.pp) % p.layers_per_chunk:
        raise InputError(
            f"workload.layers_per_chunk={p.layers_per_chunk} must divide the {model.layers // p.pp} "
            f"layers of each pipeline stage ({model.layers} layers / workload.pp={p.pp})"
        )
    if p.ep > 1:
        if not model.moe:
            raise InputError(f"workload.ep={p.ep} needs a mixture-of-experts model; {model.name} has 1 expert per layer")
        if p.dp % p.ep:
            raise InputError(f"workload.ep={p.ep} must divide workload.dp={p.dp} (expert parallelism is carved out of DP)")
        if model.experts % p.ep:
            raise InputError(f"workload.ep={p.ep} must divide the {model.experts} experts of {model.name}")


def _efficiency(parallel: ParallelConfig, gpu: GpuSpec) -> float:
    return gpu.efficiency if parallel.efficiency is None else parallel.efficiency


# ---------------------------------------------------------------------------------- memory


@dataclasses.dataclass(frozen=True)
class _StageParams:
    """Parameters one GPU of a pipeline stage holds."""

    per_layer_attention: int
    per_layer_shared_mlp: int
    per_layer_experts: int  # the GPU's experts/ep experts of one layer
    embedding: int  # stage 0 only
    head: int  # last stage only
    layers: int

    @property
    def dense(self) -> int:  # replicated over DP
        return self.layers * (self.per_layer_attention + self.per_layer_shared_mlp) + self.embedding + self.head

    @property
    def expert(self) -> int:  # replicated over EDP
        return self.layers * self.per_layer_experts

    @property
    def total(self) -> int:
        return self.dense + self.expert


def _stage_params(model: ModelSpec, parallel: ParallelConfig, stage: int) -> _StageParams:
    lp, tp = _layer_params(model), parallel.tp
    last = stage == parallel.pp - 1
    return _StageParams(
        per_layer_attention=-(-lp.attention // tp),
        per_layer_shared_mlp=-(-lp.shared_mlp // tp),
        per_layer_experts=model.experts // parallel.ep * -(-lp.expert // tp),
        embedding=-(-_embedding_params(model) // tp) if stage == 0 else 0,
        head=-(-_head_params(model, copy_tied=parallel.pp > 1) // tp) if last else 0,
        layers=model.layers // parallel.pp,
    )


def _activation_bytes_per_layer(model: ModelSpec, parallel: ParallelConfig) -> int:
    """Korthikanti et al. 2022 (sequence parallel): s·b·h·(34 + 5·a·s/h) / t."""
    s, b, h, a = model.seq_len, parallel.micro_batch_size, model.hidden, model.heads
    return -(-(s * b * (34 * h + 5 * a * s)) // parallel.tp)


def stage_memory(model: ModelSpec, parallel: ParallelConfig) -> list[dict[str, int]]:
    """Per pipeline stage, bytes per GPU: weights, gradients, optimizer, activations, total."""
    check_parallel(model, parallel)
    gpu = get_gpu(parallel.gpu)
    p = parallel
    zero_dp, zero_edp = (p.dp, p.dp // p.ep) if p.zero1 else (1, 1)
    out = []
    for stage in range(p.pp):
        sp = _stage_params(model, p, stage)
        in_flight = min(p.pp - stage, p.microbatches)
        usage = {
            "weights": WEIGHT_BYTES * sp.total,
            "gradients": GRADIENT_BYTES * sp.total,
            "optimizer": OPTIMIZER_BYTES * (-(-sp.dense // zero_dp) + -(-sp.expert // zero_edp)),
            "activations": sp.layers * in_flight * _activation_bytes_per_layer(model, p),
        }
        usage["total"] = sum(usage.values())
        usage["capacity"] = gpu.memory_bytes
        usage["stage"] = stage
        out.append(usage)
    return out


def memory_model(model: ModelSpec, parallel: ParallelConfig) -> dict[str, int]:
    """Bytes per GPU on the fullest pipeline stage: weights, gradients, optimizer (states),
    activations, total; plus capacity (the GPU's bytes) and stage (which stage that is)."""
    return max(stage_memory(model, parallel), key=lambda u: u["total"])


def fits(model: ModelSpec, parallel: ParallelConfig) -> bool:
    """Whether every GPU's memory holds its share of the iteration."""
    usage = memory_model(model, parallel)
    return usage["total"] <= usage["capacity"]


class OutOfMemory(InputError):
    """The design point does not fit in GPU memory (status "oom"; nothing is simulated).
    ``usage`` is ``memory_model``'s dict for the fullest stage."""

    def __init__(self, message: str, usage: dict[str, int]):
        self.usage = usage
        super().__init__(message)


def check_memory(model: ModelSpec, parallel: ParallelConfig) -> dict[str, int]:
    """``memory_model``'s dict, or ``OutOfMemory`` when the point does not fit."""
    u = memory_model(model, parallel)
    if u["total"] > u["capacity"]:
        gb = lambda x: f"{x / 1e9:.1f} GB"  # noqa: E731
        p = parallel
        raise OutOfMemory(
            f"out of memory: {model.name} with workload.tp={p.tp} pp={p.pp} dp={p.dp} ep={p.ep} "
            f"microbatches={p.microbatches} micro_batch_size={p.micro_batch_size} zero1={p.zero1} needs "
            f"{gb(u['total'])} per GPU on pipeline stage {u['stage']} (weights {gb(u['weights'])}, "
            f"gradients {gb(u['gradients'])}, optimizer {gb(u['optimizer'])}, activations "
            f"{gb(u['activations'])}) but a {p.gpu} has {gb(u['capacity'])}: raise workload.tp or "
            f"workload.pp, set workload.zero1=true, or lower workload.micro_batch_size",
            u,
        )
    return u


# ------------------------------------------------------------------------------- generator


def one_f_one_b(stage: int, pp: int, microbatches: int) -> list[tuple[int, bool]]:
    """The (micro-batch, is_backward) order of ``stage`` under non-interleaved 1F1B."""
    warmup = min(pp - stage - 1, microbatches)
    ops = [(i, False) for i in range(warmup)]
    for j in range(microbatches - warmup):
        ops += [(warmup + j, False), (j, True)]
    ops += [(i, True) for i in range(microbatches - warmup, microbatches)]
    return ops


@dataclasses.dataclass(frozen=True)
class _Block:
    """One compute task of a chunk, and the collectives around it."""

    name: str  # "attn" | "mlp"
    forward_ps: int
    backward_ps: int
    dense_grad_bytes: int  # gradients that become final when its backward ends
    expert_grad_bytes: int
    all_to_all: bool  # wrapped in EP all-to-alls (MoE MLP with ep > 1)


@dataclasses.dataclass
class _Buckets:
    """A stage's gradients that are final but not yet in a DP collective (bytes per GPU)."""

    dp: int = 0  # dense gradients (DP group)
    edp: int = 0  # expert gradients (EDP group)
    task: dict[int, int] = dataclasses.field(default_factory=dict)  # {rank: compute task that made the latest final}


class _Generator:
    def __init__(self, model: ModelSpec, parallel: ParallelConfig, n_gpus: int, comm_cfg: CommConfig):
        self.m, self.p, self.cfg = model, parallel, comm_cfg
        gpu = get_gpu(parallel.gpu)
        self.tflops = gpu.peak_tflops_bf16 * _efficiency(parallel, gpu)
        self.hbm_tbps = gpu.hbm_tbps
        self.b = TaskGraphBuilder(n_gpus, source=f"llm:{model.name}")
        p = parallel
        self.chunks = model.layers // p.pp // p.layers_per_chunk
        tokens = p.micro_batch_size * model.seq_len
        k = p.layers_per_chunk
        self.tp_bytes = k * tokens * model.hidden * BYTES_PER_ACTIVATION
        self.a2a_bytes = k * -(-tokens * model.hidden * BYTES_PER_ACTIVATION * model.top_k // p.tp)
        self.pp_bytes = -(-tokens * model.hidden * BYTES_PER_ACTIVATION // p.tp)
        self.cursor: dict[int, list[int]] = {g: [] for g in range(n_gpus)}  # what a GPU's next compute waits for
        self.recv: dict[tuple[int, int, bool], dict[int, int]] = {}  # (stage, microbatch, bwd) -> {rank: send task}
        self.dp_joins: dict[int, list[int]] = {g: [] for g in range(n_gpus)}
        self.stage_groups = {
            kind: [[grp for grp in groups if parallel.coords(grp[0])[1] == s] for s in range(p.pp)]
            for kind, groups in rank_groups(parallel).items()
        }
        self.blocks = {(s, c): self._blocks(s, c) for s in range(p.pp) for c in range(self.chunks)}

    def _ps(self, flops: float) -> int:
        return math.ceil(flops / self.tflops)  # FLOPs / (TFLOP/s) = ps

    def _blocks(self, stage: int, chunk: int) -> list[_Block]:
        m, p, k = self.m, self.p, self.p.layers_per_chunk
        sp = _stage_params(m, p, stage)
        attn_flops, mlp_flops = (k * f / p.tp for f in _layer_forward_flops(m, p.micro_batch_size))
        attn_grads = k * sp.per_layer_attention + (sp.embedding if chunk == 0 else 0)
        mlp_grads = k * sp.per_layer_shared_mlp
        if stage == p.pp - 1 and chunk == self.chunks - 1:
            mlp_flops += _head_forward_flops(m, p.micro_batch_size) / p.tp
            mlp_grads += sp.head
        return [
            _Block("attn", self._ps(attn_flops), self._ps(2 * attn_flops), GRADIENT_BYTES * attn_grads, 0, False),
            _Block(
                "mlp", self._ps(mlp_flops), self._ps(2 * mlp_flops), GRADIENT_BYTES * mlp_grads,
                GRADIENT_BYTES * k * sp.per_layer_experts, m.moe and p.ep > 1,
            ),
        ]

    # -- collectives over every group of a kind that lies in one stage ------------------

    def _collective(self, kind, groups, size, pending, *, category, name, stream) -> None:
        """Issue the collective on each group; each member's pending becomes its join."""
        for group in groups:
            joins = collectives.collective(
                self.b, kind, group, size, {g: list(pending[g]) for g in group}, self.cfg,
                category=category, name=name, stream=stream,
            )
            for g in group:
                pending[g] = [joins[g]]

    # -- one 1F1B op (a micro-batch's forward or backward) on every GPU of a stage -------

    def op(self, stage: int, mb: int, bwd: bool, last: bool, buckets: _Buckets) -> None:
        p, b = self.p, self.b
        ranks = [p.rank(d, stage, t) for d in range(p.dp) for t in range(p.tp)]
        recv = self.recv.pop((stage, mb, bwd), {})
        pending = {g: self.cursor[g] + ([recv[g]] if g in recv else []) for g in ranks}
        tag = f"{'B' if bwd else 'F'}{mb}"
        chunks = range(self.chunks - 1, -1, -1) if bwd else range(self.chunks)
        for c in chunks:
            blocks = self.blocks[stage, c]
            for blk in reversed(blocks) if bwd else blocks:
                name = f"{tag}.c{c}.{blk.name}"
                if blk.all_to_all:
                    self._collective("all_to_all", self.stage_groups["ep"][stage], self.a2a_bytes, pending,
                                     category="ep", name=name + ".a2a0", stream=STREAM_EP)
                for g in ranks:
                    pending[g] = [b.delay(g, blk.backward_ps if bwd else blk.forward_ps, pending[g],
                                          stream=STREAM_COMPUTE, category="compute", name=name)]
                if last:
                    self._grads_ready(stage, blk, {g: pending[g][0] for g in ranks}, buckets, name)
                if blk.all_to_all:
                    self._collective("all_to_all", self.stage_groups["ep"][stage], self.a2a_bytes, pending,
                                     category="ep", name=name + ".a2a1", stream=STREAM_EP)
                if p.tp > 1:
                    self._collective("all_reduce", self.stage_groups["tp"][stage], self.tp_bytes, pending,
                                     category="tp", name=name + ".tp", stream=STREAM_TP)
        peer_stage = stage - 1 if bwd else stage + 1
        if 0 <= peer_stage < p.pp:
            sends = {}
            for g in ranks:
                d, _, t = p.coords(g)
                peer = p.rank(d, peer_stage, t)
                sends[peer] = b.send(g, peer, self.pp_bytes, pending[g], stream=STREAM_PP, category="pp", name=f"{tag}.pp")
                pending[g] = [sends[peer]]  # blocking point-to-point (Megatron 1F1B)
            self.recv[(peer_stage, mb, bwd)] = sends
        for g in ranks:
            self.cursor[g] = pending[g]
        if last:
            self._flush(stage, buckets, tag)
            self._optimizer(stage, ranks)

    # -- DP gradient buckets -------------------------------------------------------------

    def _grads_ready(self, stage: int, blk: _Block, task: dict[int, int], buckets: _Buckets, name: str) -> None:
        """``blk``'s backward (``task``) made its gradients final: send every full bucket."""
        for kind, new in (("dp", blk.dense_grad_bytes), ("edp", blk.expert_grad_bytes)):
            ready = getattr(buckets, kind) + new
            while ready >= self.p.dp_bucket_bytes:
                ready -= self.p.dp_bucket_bytes
                self._bucket(kind, stage, self.p.dp_bucket_bytes, task, name)
            setattr(buckets, kind, ready)
        buckets.task = task

    def _flush(self, stage: int, buckets: _Buckets, tag: str) -> None:
        """The backward is over: send the partial buckets."""
        for kind in ("dp", "edp"):
            if getattr(buckets, kind):
                self._bucket(kind, stage, getattr(buckets, kind), buckets.task, f"{tag}.last")
                setattr(buckets, kind, 0)

    def _bucket(self, kind: str, stage: int, size: int, task: dict[int, int], name: str) -> None:
        groups = [grp for grp in self.stage_groups[kind][stage] if len(grp) > 1]
        op = "reduce_scatter" if self.p.zero1 else "all_reduce"
        for group in groups:
            joins = collectives.collective(
                self.b, op, group, size, {g: [task[g]] for g in group}, self.cfg,
                category="dp", name=f"{name}.{kind}", stream=STREAM_DP,
            )
            for g in group:
                self.dp_joins[g].append(joins[g])

    def _optimizer(self, stage: int, ranks: list[int]) -> None:
        p = self.p
        sp = _stage_params(self.m, p, stage)
        edp = p.dp // p.ep
        updated = (-(-sp.dense // p.dp) + -(-sp.expert // edp)) if p.zero1 else sp.total
        duration = math.ceil(ADAM_HBM_BYTES * updated / self.hbm_tbps)  # bytes / (TB/s) = ps
        steps = {g: self.b.delay(g, duration, self.cursor[g] + self.dp_joins[g], category="compute", name="optimizer")
                 for g in ranks}
        if not p.zero1:
            return
        for kind, weight_bytes in (("dp", WEIGHT_BYTES * sp.dense), ("edp", WEIGHT_BYTES * sp.expert)):
            groups = [grp for grp in self.stage_groups[kind][stage] if len(grp) > 1]
            for start in range(0, weight_bytes, p.dp_bucket_bytes):
                size = min(p.dp_bucket_bytes, weight_bytes - start)
                for group in groups:
                    collectives.collective(
                        self.b, "all_gather", group, size, {g: [steps[g]] for g in group}, self.cfg,
                        category="dp", name=f"optimizer.{kind}.all_gather", stream=STREAM_DP,
                    )

    def run(self) -> TaskGraph:
        p = self.p
        ops = [one_f_one_b(s, p.pp, p.microbatches) for s in range(p.pp)]
        at = [0] * p.pp
        buckets = [_Buckets() for _ in range(p.pp)]
        # Emit ops in an order where every op's input (a send from the neighbour stage)
        # exists already; 1F1B never deadlocks, so each sweep makes progress.
        while any(at[s] < len(ops[s]) for s in range(p.pp)):
            progressed = False
            for s in range(p.pp):
                while at[s] < len(ops[s]):
                    mb, bwd = ops[s][at[s]]
                    needs_input = (s < p.pp - 1) if bwd else (s > 0)
                    if needs_input and (s, mb, bwd) not in self.recv:
                        break
                    at[s] += 1
                    self.op(s, mb, bwd, last=at[s] == len(ops[s]), buckets=buckets[s])
                    progressed = True
            assert progressed, "1F1B emission stalled"
        return self.b.build()


def generate(model: ModelSpec, parallel: ParallelConfig, *, n_gpus: int, comm_cfg: CommConfig = CommConfig()) -> TaskGraph:
    """The task graph of one training iteration of ``model`` under ``parallel`` on GPUs
    0..n_gpus-1 (the rank layout in the module doc). Raises ``InputError`` for a
    parallelism that cannot run the model and ``OutOfMemory`` when it does not fit."""
    check_parallel(model, parallel, n_gpus)
    check_memory(model, parallel)
    return _Generator(model, parallel, n_gpus, comm_cfg).run()
