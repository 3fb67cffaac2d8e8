"""Every workload file in ../shared/workloads runs end to end; a truncated copy of one gives
an error naming the line.

Each file (a Chakra trace set counts as one workload) is turned into an experiment through
the config layer, as the CLI does (``experiment_from_config``: import, placement, topology),
and simulated. All of them run as ONE batch padded to one ``Static`` (one compiled
program); three cheap ones run again alone at that Static and must match the batch bit for
bit. Per file: the experiment finishes ok, every task ran, every task started exactly when
its last dependency finished, delay tasks took their duration, every flow delivered all
its bytes, and the iteration time is > 0 and at least the compute of the busiest GPU stream
(tasks of one stream run one after another, so that sum is a lower bound).

This checks the pipeline (importer -> placement -> engine -> results) on every real file,
not network behaviour, and must stay within about a minute on a 2-core CPU, so the
simulated work is kept small:

* few GPUs (2-16; ``gpus_per_server`` puts model-parallel groups inside a server, where
  their collectives are analytical delays, and only data-parallel traffic crosses the
  network), 5 us links: a window is the shortest link delay, so fewer windows;
* light files: 800 Gb/s, 64 KiB packets (1 MiB for SimAI's 8-GPU micro all-reduce) on a
  k=4 fat-tree (multi-hop ECMP paths);
* heavy files (GiB-sized collectives: the big ASTRA-sim transformers, aicb's models and
  4 KiB..1 GiB sweeps): a fictitious 16 Tb/s fabric with 1 MiB packets and big switch
  buffers, on fabrics where their traffic takes two hops (a rail per GPU index, or two
  GPUs under one switch). 1 MiB is the largest payload the engine accepts
  (``serialization_ps`` computes wire_bytes * 8e12 in int64; ``Experiment.validate`` says so).
* ``simai/workload_analytical.txt`` (1789 layers; even on 2 GPUs 31k tasks, 5k flows and
  ~100 GB per GPU of tensor-parallel traffic, ~10k windows) takes minutes: it runs alone
  in a test marked ``slow`` (CI skips those).
* ``chakra-json/small_chakra.0.json`` (one rank, collectives without ``comm_size``) sends
  nothing over the network: a compute-only iteration.
"""

import copy
import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import multiverse_jax  # noqa: F401  (64-bit integers)
from multiverse_jax.batch import build_batch
from multiverse_jax.config import experiment_from_config, run_options
from multiverse_jax.errors import InputError
from multiverse_jax.simulate import simulate
from multiverse_jax.workload import astra
from multiverse_jax.workload.collectives import CommConfig
from multiverse_jax.workload.placement import place, placement
from multiverse_jax.workload.tasks import NO_STREAM, TASK_DELAY, TASK_FLOW

SHARED = Path(__file__).resolve().parents[2] / "shared" / "workloads"
pytestmark = pytest.mark.skipif(
    not SHARED.is_dir(), reason=f"{SHARED} (third-party workload files) is not beside this checkout"
)
NOT_WORKLOADS = re.compile(r"(^|/)(LICEN[CS]E[^/]*|README[^/]*|SHA256SUMS)$")

SLOTS = 64  # sim.packets_per_host of every case (one Static)
FATTREE = {"kind": "fattree", "k": 4}
LIGHT = {"link": {"rate_gbps": 800.0, "delay_us": 5.0}, "packet": {"payload_bytes": 65536}}
HEAVY = {
    "link": {"rate_gbps": 16000.0, "delay_us": 5.0},
    "packet": {"payload_bytes": 1 << 20},
    "switch": {"buffer_bytes": 1 << 30, "pfc_xoff_bytes": 1 << 29, "pfc_xon_bytes": 1 << 28},
}


def rail(servers: int, gpus_per_server: int) -> dict:
    """One leaf per GPU index (rail) under one spine: data-parallel peers share a leaf."""
    return {
        "kind": "rail",
        "servers": servers,
        "gpus_per_server": gpus_per_server,
        "servers_per_leaf": servers,
        "spines": 1,
    }


@dataclasses.dataclass(frozen=True)
class Case:
    path: str  # under SHARED: a layer / GOAL file, a Chakra trace prefix, or an ASTRA-sim system config
    kind: str  # workload.kind
    gpus: int = 8
    gpus_per_server: int = 1
    topology: dict = dataclasses.field(default_factory=lambda: FATTREE)
    profile: dict = dataclasses.field(default_factory=lambda: LIGHT)
    extra: dict = dataclasses.field(default_factory=dict)  # more config groups


CASES = {
    "astra-sim-1.0/microAllReduce.txt": Case("astra-sim-1.0/microAllReduce.txt", "astra"),
    "astra-sim-1.0/microAllToAll.txt": Case("astra-sim-1.0/microAllToAll.txt", "astra"),
    "astra-sim-1.0/MLP_ModelParallel.txt": Case("astra-sim-1.0/MLP_ModelParallel.txt", "astra", gpus=4),
    # HYBRID_DATA_MODEL: the model-parallel group is one server (ASTRA-sim's first dimension).
    "astra-sim-1.0/MLP_HybridParallel_Data_Model.txt": Case(
        "astra-sim-1.0/MLP_HybridParallel_Data_Model.txt", "astra", gpus=8, gpus_per_server=2
    ),
    "astra-sim-1.0/DLRM_HybridParallel.txt": Case("astra-sim-1.0/DLRM_HybridParallel.txt", "astra"),
    "astra-sim-1.0/Resnet50_DataParallel.txt": Case("astra-sim-1.0/Resnet50_DataParallel.txt", "astra", gpus=2),
    "astra-sim-1.0/Transformer_HybridParallel.txt": Case(
        "astra-sim-1.0/Transformer_HybridParallel.txt", "astra", 8, 4, rail(2, 4), HEAVY
    ),
    "astra-sim-1.0/Transformer_HybridParallel_Fwd_In_Bckwd.txt": Case(
        "astra-sim-1.0/Transformer_HybridParallel_Fwd_In_Bckwd.txt", "astra", 8, 4, rail(2, 4), HEAVY
    ),
    "simai/microAllReduce.txt": Case(
        "simai/microAllReduce.txt", "simai", extra={"packet": {"payload_bytes": 1 << 20}}
    ),
    "aicb/G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt": Case(
        "aicb/G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt", "simai", 16, 8, rail(2, 8), HEAVY
    ),
    "aicb/L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt": Case(
        "aicb/L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt", "simai", 4, 2, rail(2, 2), HEAVY
    ),
    # aicb's MICRO sweeps carry no SimAI marker: workload.kind=simai gives SimAI's all-gather size convention.
    "aicb/all_gather.txt": Case("aicb/all_gather.txt", "simai", 2, profile=HEAVY),
    "aicb/all_reduce.txt": Case("aicb/all_reduce.txt", "simai", 2, profile=HEAVY),
    "aicb/all_to_all.txt": Case("aicb/all_to_all.txt", "simai", 2, profile=HEAVY),
    "chakra-et/microbenchmarks/all_reduce/8npus_1MB/all_reduce": Case(
        "chakra-et/microbenchmarks/all_reduce/8npus_1MB/all_reduce", "chakra"
    ),
    "chakra-et/microbenchmarks/all_to_all/8npus_1MB/all_to_all": Case(
        "chakra-et/microbenchmarks/all_to_all/8npus_1MB/all_to_all", "chakra"
    ),
    # An ASTRA-sim system config naming the custom ring all-reduce trace set beside it.
    "chakra-et/custom_collectives/custom_collective.json": Case(
        "chakra-et/custom_collectives/custom_collective.json", "chakra"
    ),
    # One rank whose collectives have no comm_size: compute only.
    "chakra-json/small_chakra": Case("chakra-json/small_chakra", "chakra", gpus=1),
    # 32 ranks: a 32-host leaf-spine (4 leaves x 8 hosts, 2 spines).
    "goal/binary_tree_32.goal": Case(
        "goal/binary_tree_32.goal",
        "goal",
        gpus=32,
        topology={"kind": "leafspine", "leaves": 4, "hosts_per_leaf": 8, "oversubscription": 4},
    ),
}
ANALYTICAL = Case("simai/workload_analytical.txt", "simai", 2, profile=HEAVY)
ALONE = [  # cheap ones, three importers, two topologies
    "astra-sim-1.0/microAllToAll.txt",
    "chakra-et/microbenchmarks/all_to_all/8npus_1MB/all_to_all",
    "goal/binary_tree_32.goal",
]
RUN = list(CASES)


def _merge(base: dict, more: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in more.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def workload_path(case: Case) -> Path:
    path = SHARED / case.path
    if path.name == "custom_collective.json":  # the trace set it names, in the folder beside it
        prefix = Path(json.loads(path.read_text())["all-reduce-implementation-custom"][0])
        return path.parent / prefix.parent.name / prefix.name
    return path


def config(case: Case, path: Path | None = None) -> dict:
    cfg = {
        "topology": case.topology,
        "workload": {
            "kind": case.kind,
            "path": str(path or workload_path(case)),
            "gpus": case.gpus,
            "gpus_per_server": case.gpus_per_server,
        },
        "sim": {"sample_interval_us": 0, "max_time_us": 1e7, "packets_per_host": SLOTS},
    }
    return _merge(_merge(cfg, case.profile), case.extra)


def experiment(case: Case):
    cfg = config(case)
    exp = experiment_from_config(cfg)
    return exp, run_options(cfg)


def compute_bound_ps(graph) -> int:
    """The most compute on one (GPU, stream): its tasks run one after another."""
    mine = (graph.category == "compute") & (graph.kind == TASK_DELAY) & (graph.stream != NO_STREAM)
    if not mine.any():
        return 0
    keys, index = np.unique(np.stack([graph.gpu[mine], graph.stream[mine]]), axis=1, return_inverse=True)
    total = np.zeros(keys.shape[1], np.int64)
    np.add.at(total, index.reshape(-1), graph.duration_ps[mine])
    return int(total.max())


def check_result(name: str, exp, result) -> None:
    graph, s = exp.tasks, result.summary
    assert result.ok, f"{name}: {s['status']} {s['error']}"
    t = result.tasks
    start, finish = t["start_ps"], t["finish_ps"]  # exact, in ps (-1: never)
    assert (start >= 0).all() and (finish >= 0).all(), f"{name}: some tasks never ran"
    assert not np.isnan(t["start_us"]).any() and not np.isnan(t["finish_us"]).any()
    # Every task starts when its last dependency finishes (time 0 without one).
    deps = graph.deps
    dep_finish = np.where(deps >= 0, finish[np.maximum(deps, 0)], 0).max(axis=1)
    np.testing.assert_array_equal(start, dep_finish, err_msg=f"{name}: task starts")
    delay = graph.kind == TASK_DELAY
    np.testing.assert_array_equal(finish[delay] - start[delay], graph.duration_ps[delay], err_msg=f"{name}: delays")
    # Flows: all bytes delivered; each started with its task and ended it.
    f = result.flows
    np.testing.assert_array_equal(f["rx_bytes"], f["size_bytes"], err_msg=f"{name}: bytes delivered")
    assert (f["finish_ps"] >= 0).all() and not np.isnan(f["finish_us"]).any()
    flow_tasks = graph.flow_tasks
    assert (graph.kind[flow_tasks] == TASK_FLOW).all() and len(f["size_bytes"]) == len(flow_tasks)
    np.testing.assert_array_equal(f["start_ps"], start[flow_tasks])
    np.testing.assert_array_equal(f["rx_finish_ps"], finish[flow_tasks])
    iteration = s["iteration_time_ps"]
    assert iteration == finish.max() > 0 and s["iteration_time_us"] == t["finish_us"].max()
    assert iteration >= compute_bound_ps(graph), f"{name}: {iteration} ps < its compute {compute_bound_ps(graph)} ps"


@pytest.fixture(scope="module")
def batch():
    """name -> (experiment, result), every runnable file in one batch; plus the Static and options.

    The Static is what the batch needs: 32 hosts (the GOAL file), 96 ports (k=4 fat-tree),
    12768 tasks (aicb GPT-13B on 16 GPUs), task_deps 15 (all-to-all joins), 896 flows (DLRM).
    """
    exps, options = zip(*(experiment(CASES[name]) for name in RUN))
    opts = options[0]
    assert all(o == opts for o in options)
    static = build_batch(exps, slots_per_host=opts["slots_per_host"]).static  # what the batch needs
    results = simulate(exps, static=static, **opts)
    return {"runs": dict(zip(RUN, zip(exps, results))), "static": static, "options": opts}


def test_every_workload_file_has_a_case():
    """A new file in ../shared/workloads needs a case here (trace sets: one case per prefix)."""
    files = {str(p.relative_to(SHARED)) for p in SHARED.rglob("*") if p.is_file()}
    files = {f for f in files if not NOT_WORKLOADS.search(f)}
    covered = set()
    for case in [*CASES.values(), ANALYTICAL]:
        covered.add(case.path)
        path = workload_path(case)
        for rank_file in path.parent.glob(f"{path.name}.*"):
            if re.fullmatch(rf"{re.escape(path.name)}\.\d+\.(et|json)", rank_file.name):
                covered.add(str(rank_file.relative_to(SHARED)))
    assert sorted(files - covered) == [], "workload files without a case"


@pytest.mark.parametrize("name", list(CASES))
def test_workload_file_runs_end_to_end(name, batch):
    exp, result = batch["runs"][name]
    check_result(name, exp, result)


def test_batch_matches_each_file_alone(batch):
    """Bit for bit: the same Static, one experiment instead of all of them."""
    for name in ALONE:
        exp, batched = batch["runs"][name]
        alone = simulate([exp], static=batch["static"], batch_size=len(RUN), **batch["options"])[0]  # done copies
        assert alone.summary["iteration_time_us"] == batched.summary["iteration_time_us"], name
        np.testing.assert_array_equal(alone.tasks["finish_us"], batched.tasks["finish_us"], err_msg=name)
        np.testing.assert_array_equal(alone.flows["finish_us"], batched.flows["finish_us"], err_msg=name)


@pytest.mark.slow
def test_simai_analytical_runs_end_to_end():
    """simai/workload_analytical.txt on 2 GPUs (tensor parallel 2; the file's 9216-GPU
    cluster scaled down): 31k tasks, 5k flows, ~100 GB per GPU, about 10k windows. Slow:
    82 s on a busy 2-core CPU (54 s of CPU time, one compilation of its own); CI skips it."""
    exp, opts = experiment(ANALYTICAL)
    result = simulate([exp], **opts)[0]
    check_result(ANALYTICAL.path, exp, result)


def _truncated_copy(case: Case, tmp_path: Path) -> tuple[Path, Path]:
    """(path to give the config, the file that was cut): a copy cut in the middle of a line."""
    src = workload_path(case)
    if src.is_file():
        files, cut_name = [src], src.name
    else:  # a trace prefix: copy every rank, cut rank 0
        files = sorted(p for p in src.parent.glob(f"{src.name}.*") if re.fullmatch(r".*\.\d+\.(et|json)", p.name))
        cut_name = next(p.name for p in files if re.search(r"\.0\.(et|json)$", p.name))
    for f in files:
        shutil.copyfile(f, tmp_path / f.name)
    cut = tmp_path / cut_name
    data = cut.read_bytes()
    middle = len(data) // 2
    if not cut_name.endswith(".et"):  # text: end mid-token, not at a line break
        while data[middle - 1 : middle] in (b"\n", b"\r", b" ", b"\t"):
            middle += 1
    cut.write_bytes(data[:middle])
    return (cut if src.is_file() else tmp_path / src.name), cut


@pytest.mark.parametrize("name", [*CASES, ANALYTICAL.path])
def test_truncated_copy_names_the_line(name, tmp_path):
    case = CASES.get(name, ANALYTICAL)
    path, cut = _truncated_copy(case, tmp_path)
    with pytest.raises(InputError) as info:
        experiment_from_config(config(case, path))
    e = info.value
    assert e.source == str(cut) and e.line is not None, str(e)
    assert str(e).startswith(f"{cut}:{e.line}: "), str(e)
    if cut.suffix == ".et":  # binary: the "line" is the record number
        assert "truncated" in str(e) and e.line >= 1, str(e)
    else:  # the cut is in the copy's last line
        assert e.line == cut.read_bytes().count(b"\n") + 1, str(e)
