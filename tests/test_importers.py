"""Workload importers: ASTRA-sim 1.0 / SimAI / aicb layer files, Chakra traces, GOAL schedules.

Every file in ../shared/workloads imports into a task graph that builds (skipped when that
folder is not beside the checkout); counts and sizes are checked against the files; the
ASTRA-sim training loop is checked against hand-computed critical paths; truncated and
malformed inputs give errors that name the file and line (record, for .et).
"""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.workload import astra, chakra, collectives
from multiverse_jax.workload.collectives import CommConfig
from multiverse_jax.workload.goal import load_goal
from multiverse_jax.workload.tasks import NO_STREAM, TASK_FLOW

SHARED = Path(__file__).parents[2] / "shared" / "workloads"
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason=f"{SHARED} is not beside this checkout (third-party test data)"
)


# ----------------------------------------------------------------------------- helpers


def _fake_collective(calls):
    """One zero-length task per GPU after its deps; records (kind, gpus, size, category, stream)."""

    def fake(builder, kind, gpus, size_bytes, deps, cfg=CommConfig(), *, category="comm", name="", line=0, stream=1):
        calls.append((kind, tuple(gpus), size_bytes, category, stream))
        per_gpu = deps if isinstance(deps, dict) else {g: deps for g in gpus}
        return {
            g: builder.delay(g, 0, per_gpu.get(g, []), stream=NO_STREAM, category=category, name=name, line=line)
            for g in gpus
        }

    return fake


@pytest.fixture
def fake_calls(monkeypatch):
    """Collectives replaced by the fake: the tests see exactly which collectives were asked for."""
    calls = []
    monkeypatch.setattr(collectives, "collective", _fake_collective(calls))
    return calls


@pytest.fixture
def any_calls(monkeypatch):
    """The real collectives, with the calls recorded."""
    calls = []
    real = collectives.collective

    def spy(builder, kind, gpus, size_bytes, deps, cfg=CommConfig(), **kw):
        calls.append((kind, tuple(gpus), size_bytes, kw.get("category"), kw.get("stream")))
        return real(builder, kind, gpus, size_bytes, deps, cfg, **kw)

    monkeypatch.setattr(collectives, "collective", spy)
    return calls


def finish_ps(graph):
    """Finish time of every task when flows take no time (critical path of compute + delays)."""
    fin = np.zeros(len(graph), np.int64)
    for t in range(len(graph)):
        d = graph.deps[t][graph.deps[t] >= 0]
        assert (d < t).all(), "importers create tasks after their dependencies"
        fin[t] = (fin[d].max() if d.size else 0) + (0 if graph.kind[t] == TASK_FLOW else graph.duration_ps[t])
    return fin


def write(tmp_path, text, name="w.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    return info.value


# ----------------------------------------------------------------------------- every shared file

ASTRA_SETTINGS = {  # file -> to_tasks keyword arguments (n_gpus and what the file needs)
    "astra-sim-1.0/MLP_HybridParallel_Data_Model.txt": {"n_gpus": 8, "mp_group": 2},
    "astra-sim-1.0/MLP_ModelParallel.txt": {"n_gpus": 4},
    "simai/workload_analytical.txt": {"n_gpus": 16},
    "aicb/G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt": {"n_gpus": 16},
    "aicb/all_gather.txt": {"n_gpus": 8, "dialect": "simai"},
}
NOT_WORKLOADS = re.compile(r"(^|/)(LICEN[CS]E[^/]*|README[^/]*|SHA256SUMS)$")


def _shared_files():
    if not SHARED.is_dir():
        return []
    return sorted(
        str(p.relative_to(SHARED)) for p in SHARED.rglob("*") if p.is_file() and not NOT_WORKLOADS.search(str(p))
    )


def _import(rel: str):
    path = SHARED / rel
    if rel.endswith(".txt"):
        kw = dict(ASTRA_SETTINGS.get(rel, {"n_gpus": 8}))
        return astra.load(path, kw.pop("n_gpus"), **kw)
    if rel.endswith(".et") or re.search(r"\.\d+\.json$", rel):
        return chakra.load_et(path)
    if rel.endswith(".goal"):
        return load_goal(path)
    if rel.endswith("custom_collective.json"):
        # An ASTRA-sim system config, not a workload: it names the custom all-reduce trace set.
        prefix = json.loads(path.read_text())["all-reduce-implementation-custom"][0]
        return chakra.load_et(path.parent / Path(prefix).parent.name / Path(prefix).name)
    raise AssertionError(f"no importer for {rel}")


@needs_shared
@pytest.mark.parametrize("rel", _shared_files() or ["<none>"])
def test_every_shared_file_imports(rel, any_calls):
    graph = _import(rel)
    assert len(graph) > 0 and graph.n_gpus >= 1
    assert graph.deps.shape[0] == len(graph)
    if rel.startswith("chakra-json/"):
        assert graph.n_gpus == 1  # one rank file; its collectives carry no comm_size
    else:
        assert len(graph.flow_tasks) > 0 or any_calls, "every shared workload except the JSON snippet sends data"


# ----------------------------------------------------------------------------- ASTRA-sim / SimAI / aicb


@needs_shared
def test_micro_allreduce(fake_calls):
    w = astra.load_layers(SHARED / "astra-sim-1.0/microAllReduce.txt")
    assert (w.policy, w.dialect, len(w.layers)) == ("MICRO", "astra-sim", 1)
    layer = w.layers[0]
    assert (layer.name, layer.line, layer.wg.kind, layer.wg.size_bytes, layer.update_cycles) == (
        "conv1",
        3,
        "all_reduce",
        1048576,
        5,
    )
    graph = astra.to_tasks(w, 8)
    assert fake_calls == [("all_reduce", tuple(range(8)), 1048576, "dp", astra.STREAM_WG)]
    assert finish_ps(graph).max() == 5 * 1000  # the update delay after the collective; MICRO has no compute


@needs_shared
@pytest.mark.parametrize(
    "name, kind", [("all_reduce", "all_reduce"), ("all_gather", "all_gather"), ("all_to_all", "all_to_all")]
)
def test_aicb_micro_sweeps(fake_calls, name, kind):
    w = astra.load_layers(SHARED / f"aicb/{name}.txt", dialect="simai")
    graph = astra.to_tasks(w, 8)
    assert [c[0] for c in fake_calls] == [kind] * 19
    assert [c[2] for c in fake_calls] == [4096 << k for k in range(19)]  # 4 KiB .. 1 GiB, in file order
    assert finish_ps(graph).max() == 19 * 1000  # one after another, each + 1 update cycle


@needs_shared
def test_all_gather_size_convention(fake_calls):
    path = SHARED / "aicb/all_gather.txt"
    assert astra.load_layers(path).dialect == "astra-sim"  # no SimAI marker in this file
    astra.to_tasks(astra.load_layers(path), 8)
    assert fake_calls[0][2] == 4096 * 8  # ASTRA-sim: each rank's part; NCCL: the gathered output
    w = astra.load_layers(SHARED / "astra-sim-1.0/MLP_ModelParallel.txt")
    fake_calls.clear()
    astra.to_tasks(w, 4)
    gathers = [c for c in fake_calls if c[0] == "all_gather"]
    assert [c[2] for c in gathers] == [4 * layer.fwd.size_bytes for layer in w.layers]
    reduces = [c for c in fake_calls if c[0] == "all_reduce"]
    assert len(reduces) == 5  # MODEL: no input-gradient collective for layer 0
    assert all(c[1] == (0, 1, 2, 3) and c[3] == "tp" for c in fake_calls)


@needs_shared
def test_transformer_groups(fake_calls):
    w = astra.load_layers(SHARED / "astra-sim-1.0/Transformer_HybridParallel.txt")
    assert (w.policy, w.mp_group, len(w.layers)) == ("HYBRID_TRANSFORMER", 4, 57)
    assert sum(layer.name == "layernorm2" for layer in w.layers) == 2
    astra.to_tasks(w, 8)
    tp = {c[1] for c in fake_calls if c[3] == "tp"}
    dp = {c[1] for c in fake_calls if c[3] == "dp"}
    assert tp == {(0, 1, 2, 3), (4, 5, 6, 7)}
    assert dp == {(0, 4), (1, 5), (2, 6), (3, 7)}
    e = error_of(astra.to_tasks, w, 6)
    assert "cannot host model-parallel groups of 4" in str(e) and e.line == 1


@needs_shared
def test_fwd_in_bckwd_recompute(fake_calls):
    w = astra.load_layers(SHARED / "astra-sim-1.0/Transformer_HybridParallel_Fwd_In_Bckwd.txt")
    assert (w.mp_group, w.checkpoints, w.checkpoint_initiates, len(w.layers)) == (4, (2, 11), (19, 10), 21)
    graph = astra.to_tasks(w, 4)
    fwd = [n for n, g in zip(graph.name, graph.gpu, strict=True) if g == 0 and n.endswith(".fwd")]
    assert len(fwd) == 21 + (19 - 11) + (10 - 2)  # forward pass + re-runs from the checkpoints


@needs_shared
def test_dlrm(fake_calls):
    w = astra.load_layers(SHARED / "astra-sim-1.0/DLRM_HybridParallel.txt")
    assert (w.policy, w.dlrm_last_bottom, len(w.layers)) == ("HYBRID_DLRM", 4, 8)
    astra.to_tasks(w, 8)
    a2a = [c for c in fake_calls if c[0] == "all_to_all"]
    assert [(c[1], c[2]) for c in a2a] == [(tuple(range(8)), 98304)] * 2  # embedding fwd + ig, all GPUs
    assert [c[2] for c in fake_calls if c[0] == "all_reduce"] == [
        layer.wg.size_bytes for layer in reversed(w.layers[1:])
    ]


@needs_shared
def test_simai_header_and_scaled_down_groups(fake_calls):
    w = astra.load_layers(SHARED / "simai/workload_analytical.txt")
    header = (w.policy, w.mp_group, w.ep, w.pp, w.vpp, w.ga, w.all_gpus, w.pp_comm_bytes, w.checkpoints)
    assert header == ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", 2, 16, 12, 8, 24, 9216, 50331648, ())
    assert (len(w.layers), w.dialect) == (1789, "simai")
    assert max(c.size_bytes for layer in w.layers for c in (layer.fwd, layer.ig, layer.wg)) == 38654705664
    assert w.layers[5].wg == astra.Comm("reduce_scatter", "dp_ep", 38654705664, "REDUCESCATTER_DP_EP")
    sizes = {name: {len(g) for g in groups} for name, groups in astra._layout(w, 64, CommConfig(), None).items()}
    assert sizes == {"all": {64}, "mp": {2}, "dp": {32}, "ep": {16}, "dp_ep": {2}}
    full = astra._layout(w, 9216, CommConfig(), None)
    assert {len(g) for g in full["dp"]} == {384} and full["dp"][0][:2] == [0, 24]  # stride TP x PP
    assert {len(g) for g in full["dp_ep"]} == {24}
    graph = astra.to_tasks(w, 16)
    assert graph.n_gpus == 16
    by_cat = {}
    for _, gpus, _, cat, _ in fake_calls:
        by_cat.setdefault(cat, set()).add(len(gpus))
    assert by_cat == {"tp": {2}, "ep": {8}, "dp": {8}}  # DP_EP has one GPU on 16: no-op
    assert "cannot host model-parallel groups of 2" in str(error_of(astra.to_tasks, w, 3))
    assert "more than the all_gpus 9216" in str(error_of(astra.to_tasks, w, 9217))


@needs_shared
def test_simai_micro_and_aicb_model(fake_calls):
    w = astra.load_layers(SHARED / "simai/microAllReduce.txt")
    assert (w.mp_group, w.ep, w.all_gpus, [layer.fwd.size_bytes for layer in w.layers]) == (
        8,
        1,
        8,
        [16777216, 67108864],
    )
    astra.to_tasks(w, 8)
    assert [(c[0], c[2], c[3]) for c in fake_calls] == [("all_reduce", 16777216, "tp"), ("all_reduce", 67108864, "tp")]
    fake_calls.clear()
    w = astra.load_layers(SHARED / "aicb/L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt")
    assert (w.dialect, len(w.layers), w.layers[1].wg.size_bytes) == ("simai", 76, 13509853184)
    astra.to_tasks(w, 4)
    assert ("broadcast", (0, 1), 16384, "tp", 1) in fake_calls


# Closed forms: a 2-layer file, collectives free, compute and update delays in cycles.
TWO_LAYERS = """{policy}
2
L0 -1 10 ALLREDUCE 100 20 ALLREDUCE 100 30 ALLREDUCE 100 1
L1 -1 40 NONE 0 50 ALLGATHER 100 60 NONE 0 2
"""


@pytest.mark.parametrize(
    "policy, makespan",
    [
        # fwd 10 +1 (update), 40 = 51; ig1 50, blocking comm +2, wg1 60 -> 163; ig0 20 +1, wg0 30 -> 214, wg comm +1
        ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2", 215),
        # as above, but the ig comm of L1 is waited for only after wg1 (103 < 161), none for L0: 51+50+60+20+30+1
        ("HYBRID_DATA_MODEL", 212),
        # no fwd/ig comms; backward wg1 60, ig1 50, wg0 30 (no ig0), wg comm +1
        ("DATA", 10 + 40 + 60 + 50 + 30 + 1),
        # MODEL: ig comms (none for L0), no wg comm: 51 + 50 + 60 (ig comm 103 waited) + 20 + 30
        ("MODEL", 211),
    ],
)
def test_training_loop_critical_path(tmp_path, fake_calls, policy, makespan):
    w = astra.load_layers(write(tmp_path, TWO_LAYERS.format(policy=policy)))
    graph = astra.to_tasks(w, 4, mp_group=2 if policy == "HYBRID_DATA_MODEL" else None)
    assert finish_ps(graph).max() == makespan * 1000


def test_second_pass_waits_for_weight_gradients(tmp_path, fake_calls):
    w = astra.load_layers(write(tmp_path, TWO_LAYERS.format(policy="DATA")))
    # pass 2 starts layer 0 when its wg collective (+1 update) is done: 191, then 190 more, +1
    assert finish_ps(astra.to_tasks(w, 2, passes=2)).max() == 382 * 1000
    assert finish_ps(astra.to_tasks(w, 2, cycle_ps=500)).max() == 191 * 500


def test_layer_file_quirks(tmp_path, fake_calls):
    text = (  # tabs, CRLF, a blank line, a space before a tab, no final newline, a size > 2^32
        "HYBRID_TRANSFORMER\tmodel_parallel_NPU_group: 2\t\t\r\n2\t\t\r\n"
        "A\t-1\t1\tALLREDUCE_EP\t4096 \t1\tNONE\t0\t1\tREDUCESCATTER_DP_EP\t0\t1\r\n\r\n"
        "B -1 1 NONE 0 1 NONE 0 1 ALLGATHER 5000000000 1"
    )
    w = astra.load_layers(write(tmp_path, text))
    assert w.dialect == "simai" and [layer.line for layer in w.layers] == [3, 5]
    assert w.layers[0].fwd.group == "ep" and w.layers[1].wg.size_bytes == 5_000_000_000
    astra.to_tasks(w, 4)  # ep defaults to 1: the _EP collective is a no-op, so is the size-0 one
    assert [(c[0], c[2], c[3]) for c in fake_calls] == [("all_gather", 5_000_000_000, "dp")] * 2
    pp = astra.load_layers(
        write(
            tmp_path,
            "HYBRID_TRANSFORMER model_parallel_NPU_group: 1 pp_comm: 7\n1\nA -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n",
        )
    )
    assert pp.pp_comm_bytes == 7


def test_customized_and_model_data_groups(tmp_path, fake_calls):
    text = (
        "HYBRID_CUSTOMIZED\n2\n"
        "A -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 64 1 DATA\n"
        "B -1 1 ALLGATHER 8 1 NONE 0 1 ALLREDUCE 32 1 HYBRID_DATA_MODEL\n"
    )
    w = astra.load_layers(write(tmp_path, text))
    assert [layer.policy for layer in w.layers] == ["DATA", "HYBRID_DATA_MODEL"]
    astra.to_tasks(w, 4, mp_group=2)
    # B: fwd all-gather in MP groups (ASTRA-sim size x 2), wg in DP groups; A (DATA): wg over all GPUs
    expected = [((0, 1), 16), ((2, 3), 16), ((0, 2), 32), ((1, 3), 32), ((0, 1, 2, 3), 64)]
    assert sorted((c[1], c[2]) for c in fake_calls) == sorted(expected)
    fake_calls.clear()
    w = astra.load_layers(
        write(tmp_path, "HYBRID_MODEL_DATA\n1\nA -1 1 ALLREDUCE 8 1 NONE 0 1 ALLREDUCE 16 1\n", "md.txt")
    )
    astra.to_tasks(w, 4, comm_cfg=CommConfig(gpus_per_server=2))
    # ASTRA-sim's first dimension (one server of 2 GPUs) carries DP here; MP is strided across servers
    strided = {((0, 2), "tp"), ((1, 3), "tp"), ((0, 1), "dp"), ((2, 3), "dp")}
    assert {(c[1], c[3]) for c in fake_calls} == strided
    fake_calls.clear()
    astra.to_tasks(w, 4, mp_group=2)  # workload.mp_group: MP groups of 2, the same layout
    assert {(c[1], c[3]) for c in fake_calls} == strided
    e = error_of(astra.to_tasks, w, 4)
    assert "HYBRID_MODEL_DATA needs the size of its model-parallel groups: set workload.mp_group" in str(e)
    assert "workload.gpus_per_server > 1" in str(e) and "comm_cfg" not in str(e) and "mp_group=" not in str(e)
    e = error_of(astra.to_tasks, w, 4, mp_group=3)
    assert "workload.gpus = 4 is not a multiple of workload.mp_group = 3" in str(e)


MODEL_DATA = "HYBRID_MODEL_DATA\n1\nA -1 1 ALLREDUCE 8000 1 NONE 0 1 ALLREDUCE 16000 1\n"


def test_model_data_file_with_one_gpu_per_server_runs_with_workload_mp_group(tmp_path):
    """An ASTRA-sim 1.0 HYBRID_MODEL_DATA file, one GPU per server: the error names the
    config key to set, and with it set the iteration runs."""
    from multiverse_jax.config import experiment_from_config
    from multiverse_jax.simulate import simulate

    cfg = {
        "topology": {"kind": "fattree", "k": 4},
        "workload": {"kind": "astra", "path": str(write(tmp_path, MODEL_DATA, "md.txt")), "gpus": 4},
        "sim": {"sample_interval_us": 0},
    }
    e = error_of(experiment_from_config, cfg)
    assert str(e).startswith(f"{tmp_path / 'md.txt'}:1: HYBRID_MODEL_DATA needs") and "set workload.mp_group" in str(e)
    cfg["workload"]["mp_group"] = 2
    exp = experiment_from_config(cfg)
    # MP groups {0, 2} and {1, 3} (strided), DP groups {0, 1} and {2, 3}: ring all-reduces of 2 GPUs
    pairs = {(0, 2), (2, 0), (1, 3), (3, 1), (0, 1), (1, 0), (2, 3), (3, 2)}
    assert set(zip(exp.flows.src.tolist(), exp.flows.dst.tolist())) == pairs
    (result,) = simulate([exp])
    assert result.ok and result.summary["iteration_time_us"] > 0
    cfg["workload"]["mp_group"] = 0
    assert "workload.mp_group must be an integer >= 1, got 0" in str(error_of(experiment_from_config, cfg))


@needs_shared
def test_layer_file_truncated(tmp_path):
    text = (SHARED / "astra-sim-1.0/Resnet50_DataParallel.txt").read_bytes()
    cut = text.index(b"layer_64_1_conv2") + 30  # mid-line
    line = text[:cut].count(b"\n") + 1
    (tmp_path / "cut.txt").write_bytes(text[:cut])
    e = error_of(astra.load_layers, tmp_path / "cut.txt")
    assert e.line == line and "expected 12 fields" in str(e) and str(e).startswith(f"{tmp_path / 'cut.txt'}:{line}: ")
    (tmp_path / "short.txt").write_bytes(b"\r\n".join(text.split(b"\r\n")[:10]))
    e = error_of(astra.load_layers, tmp_path / "short.txt")
    assert e.line == 2 and "declares 54 layers but the file has only 8" in str(e)


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("DATAX\n1\nA -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n", 1, "unknown parallelism policy 'DATAX'"),
        (
            "DATA model_parallel_NPU_group 2\n1\nA -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n",
            1,
            "unknown header token 'model_parallel_NPU_group'",
        ),
        (
            "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 checkpoints: 3 0 1\n2\n",
            1,
            "announces 3 layer indices but only 2 follow",
        ),
        (
            "HYBRID_DLRM\n2\nA -1 1 NONE 0 1 NONE 0 1 NONE 0 1\nB -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n",
            1,
            "needs the last bottom layer",
        ),
        ("DATA\nx\n", 2, "number of layers: expected an integer, got 'x'"),
        ("DATA\n1\nA -1 1x2 NONE 0 1 NONE 0 1 NONE 0 1\n", 3, "fwd_compute: expected an integer, got '1x2'"),
        (
            "DATA\n1\nA -1 1 NONE 0 1 NONE 0 1 ALLREDUCEX 8 1\n",
            3,
            "wg type: unknown collective 'ALLREDUCEX' (valid: NONE or ALLREDUCE/",
        ),
        ("DATA\n1\nA -1 1 NONE 0 1 NONE 0 1 ALLREDUCE -8 1\n", 3, "wg size must be >= 0, got -8"),
        ("DATA\n1\nA -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 99999999999999999999 1\n", 3, "does not fit in 64 bits"),
        (
            "DATA\n1\nA -1 1 NONE 0 1 NONE 0 1 NONE 0 1\nB -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n",
            4,
            "more layer lines than the 1 declared",
        ),
    ],
)
def test_layer_file_errors(tmp_path, text, line, message):
    path = write(tmp_path, text)
    e = error_of(astra.load_layers, path)
    assert e.line == line and message in str(e) and str(e).startswith(f"{path}:{line}: ")


# ----------------------------------------------------------------------------- Chakra


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _field(number: int, value) -> bytes:
    """A protobuf field: int -> varint, bytes -> length-delimited."""
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    return _varint(number << 3) + _varint(value & (2**64 - 1))


def _attr(name: str, field: int, value) -> bytes:
    return _field(10, _field(1, name.encode()) + _field(field, value))


def _node(node_id, node_type, name="", deps=(), packed=True, duration=0, attrs=b""):
    msg = (_field(1, node_id) if node_id else b"") + _field(2, name.encode()) + _field(3, node_type)
    if deps:
        msg += _field(5, b"".join(map(_varint, deps))) if packed else b"".join(_field(5, d) for d in deps)
    return msg + (_field(7, duration) if duration else b"") + attrs


def _write_et(folder: Path, ranks) -> Path:
    folder.mkdir(exist_ok=True)
    meta = _field(1, b"0.0.4")
    for r, nodes in enumerate(ranks):
        (folder / f"t.{r}.et").write_bytes(b"".join(_varint(len(m)) + m for m in [meta, *nodes]))
    return folder / "t"


@needs_shared
def test_chakra_all_reduce_microbenchmark(any_calls):
    graph = chakra.load_et(SHARED / "chakra-et/microbenchmarks/all_reduce/8npus_1MB/all_reduce")
    assert graph.n_gpus == 8
    assert [c[:3] for c in any_calls] == [("all_reduce", tuple(range(8)), 1048576)]  # 8 ranks, one collective each


@needs_shared
def test_chakra_custom_ring(fake_calls):
    graph = chakra.load_et(SHARED / "chakra-et/custom_collectives/custom_ring_allreduce_8npus_1MB")
    flows = graph.flow_tasks
    assert len(flows) == 8 * 14 and set(graph.size_bytes[flows]) == {131072} and not fake_calls
    assert all(graph.peer[t] == (graph.gpu[t] + 1) % 8 for t in flows)
    assert finish_ps(graph).max() == 7 * 7 * 10**6  # 7 COMP nodes of 7 us on the chain of each rank


def test_chakra_synthetic_p2p_packed_and_unpacked(tmp_path, fake_calls):
    prefix = _write_et(
        tmp_path / "et",
        [
            [
                _node(0, chakra.COMP_NODE, "c0", duration=5, attrs=_attr("is_cpu_op", 27, 0)),
                _node(
                    1,
                    chakra.COMM_SEND_NODE,
                    "s",
                    deps=[0],
                    attrs=_attr("comm_dst", 7, 1) + _attr("comm_size", 17, 1000 * 2) + _attr("comm_tag", 11, 3),
                ),
                _node(
                    2,
                    chakra.COMM_COLL_NODE,
                    "ar",
                    deps=[0],
                    attrs=_attr("comm_type", 9, 0) + _attr("comm_size", 9, 4096),
                ),
            ],
            [
                _node(
                    7,
                    chakra.COMM_RECV_NODE,
                    "r",
                    attrs=_attr("comm_src", 7, 0) + _attr("comm_size", 9, 1000) + _attr("comm_tag", 11, 3),
                ),
                _node(8, chakra.COMP_NODE, "c1", deps=[7], packed=False, attrs=_attr("runtime", 9, 3)),
                _node(
                    9,
                    chakra.COMM_COLL_NODE,
                    "ar",
                    deps=[7, 8],
                    packed=False,
                    attrs=_attr("comm_size", 9, 4096) + _attr("x", 10, _field(1, _varint(1) + _varint(2))),
                ),
                _node(10, chakra.MEM_LOAD_NODE, "m", deps=[9]),
            ],
        ],
    )
    graph = chakra.load_et(prefix)
    (flow,) = graph.flow_tasks
    assert (graph.gpu[flow], graph.peer[flow], graph.size_bytes[flow]) == (0, 1, 1000)  # sint64 zig-zag size
    assert fake_calls == [("all_reduce", (0, 1), 4096, "coll", 1)]
    assert finish_ps(graph).max() == 8 * 10**6  # c0 5 us -> send -> recv -> c1 3 us (runtime attribute)
    assert chakra.load_et(tmp_path / "et") is not None and chakra.load_et(tmp_path / "et" / "t.1.et") is not None


@pytest.mark.parametrize(
    "rank0, rank1, rank, line, message",
    [
        (
            [_node(0, 7, attrs=_attr("comm_type", 9, 1))],
            [_node(0, 7, attrs=_attr("comm_type", 9, 1))],
            0,
            2,
            "collective REDUCE is not supported",
        ),
        (
            [_node(0, 7, attrs=_attr("comm_size", 9, 8))],
            [_node(0, 7, attrs=_attr("comm_size", 9, 16))],
            1,
            2,
            "every rank must issue the same collectives",
        ),
        (
            [_node(0, 4), _node(1, 5, attrs=_attr("comm_dst", 7, 1) + _attr("comm_size", 9, 8))],
            [_node(0, 4)],
            0,
            3,
            "send to rank 1 tag 0 has no matching recv",
        ),
        ([_node(0, 4, deps=[5])], [_node(0, 4)], 0, 2, "depends on node id 5, which is not in this file"),
        ([_node(0, 4, deps=[1]), _node(1, 4, deps=[0])], [_node(0, 4)], 0, 2, "form a cycle"),
        ([_node(0, 7)], [_node(0, 4)], 0, 2, "waits for rank 1"),
        ([_field(1, b"x")], [_node(0, 4)], 0, 2, "uint64 value with wire type 2"),
    ],
)
def test_chakra_errors(tmp_path, fake_calls, rank0, rank1, rank, line, message):
    prefix = _write_et(tmp_path / "et", [rank0, rank1])
    e = error_of(chakra.load_et, prefix)
    assert e.line == line and message in str(e) and e.source == f"{prefix}.{rank}.et", str(e)
    assert f"record {line}" in str(e)


@needs_shared
def test_chakra_truncated_record(tmp_path):
    src = SHARED / "chakra-et/custom_collectives/custom_ring_allreduce_8npus_1MB"
    dst = tmp_path / "ring"
    shutil.copytree(src, dst)
    data = (dst / "custom_allreduce.3.et").read_bytes()
    (dst / "custom_allreduce.3.et").write_bytes(data[:-10])  # cut inside the last Node (record 36)
    e = error_of(chakra.load_et, dst / "custom_allreduce")
    assert e.source == str(dst / "custom_allreduce.3.et") and e.line == 36
    assert "record 36" in str(e) and "truncated" in str(e)
    (dst / "custom_allreduce.5.et").unlink()
    assert "missing the trace of rank 5" in str(error_of(chakra.load_et, dst))


@needs_shared
def test_chakra_json(tmp_path):
    graph = chakra.load_et(SHARED / "chakra-json/small_chakra")
    assert (graph.n_gpus, len(graph)) == (1, 7)
    assert sorted(graph.duration_ps.tolist()) == [
        0,
        0,
        0,
        4 * 10**6,
        28 * 10**6,
        153 * 10**6,
        318 * 10**6,
    ]  # COLL: no comm_size
    text = (
        (SHARED / "chakra-json/small_chakra.0.json").read_text().replace('"data_deps": [216]', '"data_deps": [999]', 1)
    )
    e = error_of(chakra.load_et, write(tmp_path, text, "bad.0.json"))
    assert e.line == text[: text.index('"Id": 217')].count("\n") + 1 and "depends on node id 999" in str(e)
    e = error_of(chakra.load_et, write(tmp_path, text[:200], "cut.0.json"))
    assert "invalid JSON" in str(e) and e.line is not None


# ----------------------------------------------------------------------------- GOAL

GOAL = """// a comment
num_ranks 3
/* a block
   comment */
rank 0 {
l1: calc 100 cpu 0
l2: send 64b to 1 tag 7 cpu 0 nic 0
l2 requires l1
l3: calc 50
l3 irequires l2
}
rank 1 {
r2 requires r1
r1: recv 64b from 0 tag 7
r2: calc 10
r3: send 0b to 2
r3 requires r2
}
rank 2 {
recv 0b from 1
}
"""


def test_goal_semantics(tmp_path):
    graph = load_goal(write(tmp_path, GOAL, "g.goal"))
    assert graph.n_gpus == 3
    flows = graph.flow_tasks
    assert [(graph.gpu[t], graph.peer[t], graph.size_bytes[t]) for t in flows] == [(0, 1, 64), (1, 2, 1)]
    fin = finish_ps(graph)
    by_name = dict(zip(graph.name, fin, strict=True))
    assert by_name["rank0:l3"] == 150_000  # irequires: starts with l2, at 100 ns (calc times are ns)
    assert by_name["rank1:r2"] == 110_000 and fin.max() == 150_000


@needs_shared
def test_goal_binary_tree(tmp_path):
    graph = load_goal(SHARED / "goal/binary_tree_32.goal")
    flows = graph.flow_tasks
    assert graph.n_gpus == 32 and len(flows) == 31 and set(graph.size_bytes[flows]) == {1}
    assert sorted(graph.peer[flows].tolist()) == list(range(1, 32))  # every rank but 0 receives once
    text = (SHARED / "goal/binary_tree_32.goal").read_text()
    cut = text.index("l2: send 1b to 3") + len("l2: send 1b to")
    line = text[:cut].count("\n") + 1
    e = error_of(load_goal, write(tmp_path, text[:cut], "cut.goal"))
    assert e.line == line and "destination rank: expected an integer" in str(e)
    lines = text.splitlines()
    keep = next(k for k in range(50, len(lines)) if lines[k - 1].startswith("l"))  # drop lines after an op
    e = error_of(load_goal, write(tmp_path, "\n".join(lines[:keep]), "short.goal"))
    assert e.line == keep and "ends inside rank" in str(e)


@pytest.mark.parametrize(
    "body, line, message",
    [
        ("rank 0 {\nl1: sned 1b to 1\n}\n", 3, "unknown operation 'sned'"),
        ("rank 0 {\nl1: calc 5\nl1 requires l9\n}\n", 4, "label 'l9' is not defined"),
        ("rank 2 {\nl1: calc 5\n}\n", 2, "rank 2 out of range"),
        ("rank 0 {\nl1: send 8b to 5\n}\n", 3, "rank 5 out of range"),
        ("rank 0 {\nl1: send 8b to 1 tag 4\n}\n", 3, "send to rank 1 tag 4 on rank 0 has no matching recv"),
        ("rank 1 {\nrecv 8b from 0 tag 4\n}\n", 3, "has no matching send"),
        ("rank 1 {\nrecv 8b from -1\n}\n", 3, "source rank -1 (any) is not supported"),
        ("rank 0 {\nl1: calc 5 nic x\n}\n", 3, "nic: expected an integer, got 'x'"),
        ("rank 0 {\nl1: calc 5\nl1: calc 6\n}\n", 4, "label 'l1' defined twice"),
        ("rank 0 {\na: calc 1\nb1: calc 1\na requires b1\nb1 requires a\n}\n", 3, "form a cycle"),
    ],
)
def test_goal_errors(tmp_path, body, line, message):
    path = write(tmp_path, "num_ranks 2\n" + body, "e.goal")
    e = error_of(load_goal, path)
    assert e.line == line and message in str(e) and str(e).startswith(f"{path}:{line}: "), str(e)
