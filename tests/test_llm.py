"""LLM generator: model sizes and FLOPs against published numbers and closed forms, the memory
model, parallelism checks, and the structure of the generated 1F1B graph (no network
simulation: the graph is checked in plain Python)."""

import collections
import dataclasses
import math

import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.workload import collectives, llm
from multiverse_jax.workload.gpus import GPUS, get_gpu
from multiverse_jax.workload.llm import (
    MODELS,
    ModelSpec,
    OutOfMemory,
    ParallelConfig,
    active_parameter_count,
    check_parallel,
    fits,
    generate,
    get_model,
    memory_model,
    one_f_one_b,
    parameter_count,
    rank_groups,
    stage_memory,
    training_flops,
)
from multiverse_jax.workload.tasks import TASK_FLOW

DENSE = ("gpt3-13b", "gpt3-175b", "llama-7b", "llama-65b")
PUBLISHED_PARAMS = {"gpt3-13b": 13e9, "gpt3-175b": 175e9, "llama-7b": 6.7e9, "llama-65b": 65.2e9, "mixtral-8x7b": 46.7e9}
SMALL_GPT = dataclasses.replace(get_model("gpt3-13b"), name="gpt3-13b-4l", layers=4)
SMALL_MOE = ModelSpec(
    "moe-small", layers=4, hidden=1024, heads=8, seq_len=512, vocab=1000, ffn_hidden=2048,
    experts=4, top_k=2, kv_heads=4, arch="llama",
)


# ------------------------------------------------------------------------ sizes and FLOPs


@pytest.mark.parametrize("name", list(PUBLISHED_PARAMS))
def test_parameter_counts_match_published_sizes(name):
    assert parameter_count(MODELS[name]) == pytest.approx(PUBLISHED_PARAMS[name], rel=0.05)


def test_mixtral_active_parameters():
    # Jiang et al. 2024: 12.9B active parameters per token (top-2 of 8 experts).
    assert active_parameter_count(MODELS["mixtral-8x7b"]) == pytest.approx(12.9e9, rel=0.02)


@pytest.mark.parametrize("name", DENSE)
def test_flops_per_iteration_close_to_6_params_tokens(name):
    model = MODELS[name]
    sequences = 1536
    six_pt = 6 * parameter_count(model) * sequences * model.seq_len
    assert training_flops(model, sequences) == pytest.approx(six_pt, rel=0.05)


def test_gpt_flops_match_megatron_formula_with_causal_attention():
    # Narayanan et al. 2021 eq. 3, 72·B·s·l·h²·(1 + s/(6h) + V/(12lh)), with the attention
    # term halved (causal): 72Bslh² + 6Bs²lh + 6BshV, exactly.
    for name in ("gpt3-13b", "gpt3-175b"):
        m = MODELS[name]
        B, s, l, h, V = 1536, m.seq_len, m.layers, m.hidden, m.vocab
        assert training_flops(m, B) == 72 * B * s * l * h * h + 6 * B * s * s * l * h + 6 * B * s * h * V


# ------------------------------------------------------------------------------- memory


@pytest.mark.parametrize("dp", [1, 2, 4, 8])
def test_gpt3_175b_fits_with_tp8_pp16(dp):
    par = ParallelConfig(tp=8, pp=16, dp=dp, microbatches=16)
    assert fits(MODELS["gpt3-175b"], par)


def test_gpt3_175b_does_not_fit_without_model_parallelism():
    model, par = MODELS["gpt3-175b"], ParallelConfig(tp=1, pp=1, dp=8, microbatches=16)
    assert not fits(model, par)
    with pytest.raises(OutOfMemory, match="out of memory.*gpt3-175b.*workload.tp") as err:
        generate(model, par, n_gpus=8)
    assert isinstance(err.value, InputError)
    assert err.value.usage["total"] > err.value.usage["capacity"] == 80 * 10**9


def test_memory_components_follow_the_formulas():
    model, par = MODELS["gpt3-175b"], ParallelConfig(tp=8, pp=16, dp=4, microbatches=16)
    usage = memory_model(model, par)
    assert usage["stage"] == 0  # 1F1B: the first stage keeps pp micro-batches in flight
    s, b, h, a = model.seq_len, 1, model.hidden, model.heads
    per_layer = s * b * h * (34 + 5 * a * s / h) / 8  # Korthikanti et al. 2022, sequence parallel
    assert usage["activations"] == pytest.approx(6 * 16 * per_layer, rel=1e-6)
    assert usage["gradients"] == usage["weights"]
    assert usage["optimizer"] == 6 * usage["weights"]  # 12 B vs 2 B per parameter
    # Every stage's share, times tp, adds up to the model (+ the tied embedding's copy on the last stage).
    one_tp = dataclasses.replace(par, tp=1)
    held = sum(u["weights"] // 2 for u in stage_memory(model, one_tp))
    assert held == parameter_count(model) + model.vocab * model.hidden


@pytest.mark.parametrize("dp", [2, 8])
def test_zero1_divides_optimizer_states_by_dp(dp):
    model = MODELS["gpt3-175b"]
    plain = ParallelConfig(tp=8, pp=16, dp=dp, microbatches=16)
    zero = dataclasses.replace(plain, zero1=True)
    a, z = memory_model(model, plain), memory_model(model, zero)
    assert z["optimizer"] == 12 * math.ceil(a["optimizer"] // 12 / dp)
    assert (z["weights"], z["gradients"], z["activations"]) == (a["weights"], a["gradients"], a["activations"])
    assert z["total"] < a["total"]


def test_zero1_makes_a_point_fit():
    model = MODELS["llama-65b"]
    par = ParallelConfig(tp=8, pp=2, dp=8, microbatches=8)
    assert not fits(model, par)
    assert fits(model, dataclasses.replace(par, zero1=True))


# ------------------------------------------------------------------------------- inputs


@pytest.mark.parametrize(
    "model, par, n_gpus, pattern",
    [
        (SMALL_GPT, ParallelConfig(tp=2, pp=2, dp=2), 16, r"workload.tp \* workload.pp \* workload.dp = 2 \* 2 \* 2 = 8 must equal the GPU count 16"),
        (MODELS["gpt3-13b"], ParallelConfig(tp=3, pp=1, dp=1), 3, r"workload.tp=3 must divide the attention heads"),
        (MODELS["gpt3-13b"], ParallelConfig(tp=1, pp=3, dp=1), 3, r"workload.pp=3 must divide the 40 layers"),
        (SMALL_MOE, ParallelConfig(dp=4, ep=3), 4, r"workload.ep=3 must divide workload.dp=4"),
        (SMALL_MOE, ParallelConfig(dp=3, ep=3), 3, r"workload.ep=3 must divide the 4 experts"),
        (SMALL_GPT, ParallelConfig(dp=2, ep=2), 2, r"workload.ep=2 needs a mixture-of-experts model"),
        (SMALL_GPT, ParallelConfig(pp=2, layers_per_chunk=3), 2, r"workload.layers_per_chunk=3 must divide the 2 layers"),
        (SMALL_GPT, ParallelConfig(microbatches=0), 1, r"workload.microbatches must be an integer >= 1"),
    ],
)
def test_impossible_parallelism_names_the_key(model, par, n_gpus, pattern):
    with pytest.raises(InputError, match=pattern):
        check_parallel(model, par, n_gpus)
    with pytest.raises(InputError, match=pattern):
        generate(model, par, n_gpus=n_gpus)


def test_bad_model_and_names():
    with pytest.raises(InputError, match="workload.hidden=100 must be divisible by workload.heads=3"):
        ModelSpec("x", layers=2, hidden=100, heads=3, seq_len=8, vocab=10)
    with pytest.raises(InputError, match="workload.layers must be an integer >= 1"):
        ModelSpec("x", layers=0, hidden=64, heads=4, seq_len=8, vocab=10)
    with pytest.raises(InputError, match="unknown model 'gpt5'.*gpt3-13b.*mixtral-8x7b"):
        get_model("gpt5")
    with pytest.raises(InputError, match="workload.gpu: unknown GPU 'V100'.*A100-80GB, H100-SXM"):
        get_gpu("V100")
    assert get_gpu("h100-sxm") is GPUS["H100-SXM"] and GPUS["H100-SXM"].peak_tflops_bf16 == 989.0


def test_rank_layout_tp_innermost():
    par = ParallelConfig(tp=4, pp=2, dp=3)
    groups = rank_groups(par)
    assert all(g == list(range(g[0], g[0] + 4)) for g in groups["tp"])  # contiguous TP ranks
    assert groups["pp"][0] == [0, 4] and groups["dp"][0] == [0, 8, 16]
    for r in range(par.n_gpus):
        assert par.rank(*par.coords(r)) == r
    moe = rank_groups(ParallelConfig(dp=4, ep=2))
    assert moe["ep"] == [[0, 1], [2, 3]] and moe["edp"] == [[0, 2], [1, 3]]


def test_one_f_one_b_order():
    # Megatron non-interleaved 1F1B, stage 0 of 4 with 6 micro-batches: 3 warm-up forwards.
    f = lambda i: (i, False)  # noqa: E731
    b = lambda i: (i, True)  # noqa: E731
    assert one_f_one_b(0, 4, 6) == [f(0), f(1), f(2), f(3), b(0), f(4), b(1), f(5), b(2), b(3), b(4), b(5)]
    assert one_f_one_b(3, 4, 6) == [x for i in range(6) for x in (f(i), b(i))]
    assert one_f_one_b(0, 4, 2) == [f(0), f(1), b(0), b(1)]


# -------------------------------------------------------------------------- the graph


@pytest.fixture
def calls(monkeypatch):
    """Records every collective the generator issues and runs the real one."""
    inner = collectives.collective
    log = []

    def recording(builder, kind, gpus, size_bytes, deps, cfg=collectives.CommConfig(), **kw):
        log.append(dict(kind=kind, gpus=list(gpus), size=size_bytes, deps={g: list(d) for g, d in deps.items()}, **kw))
        return inner(builder, kind, gpus, size_bytes, deps, cfg, **kw)

    monkeypatch.setattr(collectives, "collective", recording)
    return log


SMALL_PAR = ParallelConfig(tp=2, pp=2, dp=2, microbatches=4, dp_bucket_bytes=20 * 2**20)


def _longest_compute_path(graph) -> int:
    """Longest path where only compute tasks take time (communication counts as 0)."""
    finish = []
    for i in range(len(graph)):
        deps = [int(d) for d in graph.deps[i] if d >= 0]
        assert all(d < i for d in deps)
        w = int(graph.duration_ps[i]) if graph.category[i] == "compute" else 0
        finish.append(max((finish[d] for d in deps), default=0) + w)
    return max(finish)


def _compute_ps(graph, gpu, prefix):
    sel = (graph.gpu == gpu) & (graph.category == "compute")
    return sum(int(d) for d, n in zip(graph.duration_ps[sel], graph.name[sel]) if n.startswith(prefix))


def test_compute_tasks_per_gpu_follow_1f1b(calls):
    graph = generate(SMALL_GPT, SMALL_PAR, n_gpus=8)
    per_gpu = collections.Counter(graph.gpu[graph.category == "compute"].tolist())
    # 4 micro-batches × 2 directions × 2 layers (chunks of 1) × 2 blocks + the optimizer step
    assert per_gpu == {g: 4 * 2 * 2 * 2 + 1 for g in range(8)}
    # TP: 2 all-reduces per layer per micro-batch per direction, on contiguous ranks
    tp = [c for c in calls if c["category"] == "tp"]
    assert len(tp) == 4 * 2 * 2 * 2 * 4  # ... × 4 TP groups (2 stages × 2 replicas)
    assert all(c["kind"] == "all_reduce" and c["gpus"] in ([0, 1], [2, 3], [4, 5], [6, 7]) for c in tp)
    assert {c["size"] for c in tp} == {1 * 2048 * 5120 * 2}


def test_pp_sends_only_between_adjacent_stages(calls):
    par = dataclasses.replace(SMALL_PAR, pp=4, dp=1)
    graph = generate(SMALL_GPT, par, n_gpus=8)
    flows = graph.flow_tasks
    pp = [i for i in flows if graph.category[i] == "pp"]
    assert len(pp) == 2 * 4 * (4 - 1) * 2  # fwd + bwd, per micro-batch, per stage boundary, per TP rank
    for i in pp:
        d0, s0, t0 = par.coords(int(graph.gpu[i]))
        d1, s1, t1 = par.coords(int(graph.peer[i]))
        assert (d0, t0) == (d1, t1) and abs(s0 - s1) == 1
        assert graph.size_bytes[i] == 2048 * 5120 * 2 // 2
        # forward activations go down the pipeline, gradients up
        assert (s1 == s0 + 1) == graph.name[i].startswith("F")
    assert all(graph.kind[i] == TASK_FLOW for i in pp)


@pytest.mark.parametrize("zero1", [False, True])
def test_dp_collectives_carry_each_gpus_gradients(calls, zero1):
    par = dataclasses.replace(SMALL_PAR, zero1=zero1)
    graph = generate(SMALL_GPT, par, n_gpus=8)
    mem = stage_memory(SMALL_GPT, par)
    dp = [c for c in calls if c["category"] == "dp"]
    grad_kind = "reduce_scatter" if zero1 else "all_reduce"
    assert {c["kind"] for c in dp} == ({grad_kind, "all_gather"} if zero1 else {grad_kind})
    for g in range(8):
        stage = par.coords(g)[1]
        mine = [c for c in dp if g in c["gpus"]]
        assert all(len(c["gpus"]) == 2 and c["gpus"] in rank_groups(par)["dp"] for c in mine)
        assert sum(c["size"] for c in mine if c["kind"] == grad_kind) == mem[stage]["gradients"]
        if zero1:
            assert sum(c["size"] for c in mine if c["kind"] == "all_gather") == mem[stage]["weights"]
        buckets = [c for c in mine if c["kind"] == grad_kind]
        assert len(buckets) > 1 and all(c["size"] <= par.dp_bucket_bytes for c in buckets)
        # The first bucket waits only for a backward compute task that is not the last one:
        # the all-reduce overlaps the rest of the backward.
        last_backward = max(i for i in range(len(graph)) if graph.gpu[i] == g and str(graph.name[i]).startswith("B"))
        assert buckets[0]["deps"][g][0] < last_backward


def test_critical_path_of_compute_is_the_1f1b_formula(calls, monkeypatch):
    # Without the output layer every stage takes the same time: (m + p - 1)(t_f + t_b).
    monkeypatch.setattr(llm, "_head_forward_flops", lambda model, sequences: 0)
    model, par = SMALL_GPT, SMALL_PAR
    graph = generate(model, par, n_gpus=8)
    m, p = par.microbatches, par.pp
    t_f, t_b = _compute_ps(graph, 0, "F0."), _compute_ps(graph, 0, "B0.")
    for g in range(8):
        assert (_compute_ps(graph, g, "F0."), _compute_ps(graph, g, "B0.")) == (t_f, t_b)
    # A stage's forward: its 2 layers' FLOPs / tp / (312 TFLOP/s × 0.6 on an A100).
    layer_flops = training_flops(model, 1) / 3 / model.layers
    assert t_f == pytest.approx(2 * layer_flops / 2 / (312 * 0.6), abs=4)  # 4 tasks, each rounded up
    assert t_b == pytest.approx(2 * t_f, abs=4)
    t_opt = _compute_ps(graph, 0, "optimizer")  # stage 0 finishes last
    assert _longest_compute_path(graph) == (m + p - 1) * (t_f + t_b) + t_opt


def test_critical_path_with_the_output_layer_on_the_last_stage(calls):
    # The last stage also runs the output layer; as the slowest stage it runs its m
    # micro-batches back to back, so the path grows by m × its extra time.
    model, par = SMALL_GPT, SMALL_PAR
    graph = generate(model, par, n_gpus=8)
    m, p = par.microbatches, par.pp
    last = par.rank(0, p - 1, 0)
    t_f, t_b = _compute_ps(graph, 0, "F0."), _compute_ps(graph, 0, "B0.")
    extra = _compute_ps(graph, last, "F0.") + _compute_ps(graph, last, "B0.") - t_f - t_b
    head_ps = 3 * 2 * model.seq_len * model.hidden * model.vocab / 2 / (312 * 0.6)
    assert extra == pytest.approx(head_ps, abs=3)
    t_opt = _compute_ps(graph, 0, "optimizer")
    assert _longest_compute_path(graph) == (m + p - 1) * (t_f + t_b) + m * extra + t_opt


def test_total_compute_matches_training_flops(calls):
    model, par = SMALL_GPT, SMALL_PAR
    graph = generate(model, par, n_gpus=8)
    sel = (graph.category == "compute") & (graph.name != "optimizer")
    total_ps = int(graph.duration_ps[sel].sum())
    sequences = par.dp * par.microbatches * par.micro_batch_size
    assert total_ps * 312 * 0.6 == pytest.approx(training_flops(model, sequences), rel=1e-6)


def test_moe_graph_has_ep_all_to_all_and_expert_gradients(calls):
    par = ParallelConfig(tp=2, pp=2, dp=4, ep=2, microbatches=2, dp_bucket_bytes=2**20)
    graph = generate(SMALL_MOE, par, n_gpus=16)
    groups = rank_groups(par)
    ep = [c for c in calls if c["category"] == "ep"]
    # dispatch + combine, per layer per micro-batch per direction, per EP group
    assert len(ep) == 2 * 2 * 2 * 2 * len(groups["ep"])
    assert all(c["kind"] == "all_to_all" and c["gpus"] in groups["ep"] for c in ep)
    assert {c["size"] for c in ep} == {512 * 1024 * 2 * 2 // 2}  # b·s·h·2·top_k / tp
    mem = stage_memory(SMALL_MOE, par)
    for g in range(16):
        mine = [c for c in calls if c["category"] == "dp" and g in c["gpus"]]
        dense = sum(c["size"] for c in mine if c["gpus"] in groups["dp"])
        expert = sum(c["size"] for c in mine if c["gpus"] in groups["edp"])
        assert expert > 0 and dense + expert == mem[par.coords(g)[1]]["gradients"]
    assert (graph.category == "ep").sum() > 0


@pytest.mark.parametrize("pp, m, chunk", [(4, 2, 1), (2, 1, 1), (1, 3, 2), (4, 5, 2)])
def test_graph_builds_for_few_or_many_microbatches(calls, pp, m, chunk):
    model = dataclasses.replace(SMALL_GPT, layers=8)
    par = ParallelConfig(tp=1, pp=pp, dp=2, microbatches=m, layers_per_chunk=chunk)
    graph = generate(model, par, n_gpus=pp * 2)
    per_gpu = collections.Counter(graph.gpu[graph.category == "compute"].tolist())
    assert set(per_gpu.values()) == {m * 2 * (8 // pp // chunk) * 2 + 1}
    if pp > 1:
        t_f, t_b = _compute_ps(graph, 0, "F0."), _compute_ps(graph, 0, "B0.")
        last = par.rank(0, pp - 1, 0)
        extra = _compute_ps(graph, last, "F0.") + _compute_ps(graph, last, "B0.") - t_f - t_b
        assert _longest_compute_path(graph) == (m + pp - 1) * (t_f + t_b) + m * extra + _compute_ps(graph, 0, "optimizer")


def test_priorities_by_traffic_category():
    """workload.priorities: each category's flows get its class; typos and bad classes are errors."""
    from multiverse_jax.config import experiment_from_config
    from multiverse_jax.errors import InputError

    base = {"kind": "llm", "model": {"layers": 2, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000},
            "tp": 2, "pp": 2, "dp": 2}
    plain = experiment_from_config({"workload": base})
    assert set(plain.flows.prio) == {0}
    exp = experiment_from_config({"workload": {**base, "priorities": {"dp": 1, "pp": 2}}})
    category = exp.tasks.category[exp.tasks.kind == 1]  # flow tasks, in flow order
    assert len(category) == len(exp.flows)
    for name, want in (("tp", 0), ("pp", 2), ("dp", 1)):
        assert (category == name).any() and set(exp.flows.prio[category == name]) == {want}
    with pytest.raises(InputError, match=r"no 'db' traffic \(its flows' categories: dp, pp, tp\)"):
        experiment_from_config({"workload": {**base, "priorities": {"db": 1}}})
    with pytest.raises(InputError, match=r"workload.priorities.dp must be a class 0..7"):
        experiment_from_config({"workload": {**base, "priorities": {"dp": 8}}})
    # ep is a default key: allowed in a workload without EP traffic (sweeps across workloads)
    assert set(experiment_from_config({"workload": {**base, "priorities": {"ep": 3}}}).flows.prio) == {0}
