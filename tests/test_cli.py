"""The Hydra CLI, its config -> Experiment mapping and the files a run writes."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_module

from conftest import run_cli
from multiverse_jax.cli import run
from multiverse_jax.config import experiment_from_config
from multiverse_jax.errors import InputError

FCT_HEADER = ["id", "src", "dst", "size_bytes", "start_us", "finish_us", "rx_finish_us", "fct_us"]
FCT_HEADER += ["start_ps", "finish_ps", "rx_finish_ps", "fct_ps"]  # the same times, exact, in integer ps
FCT_HEADER += ["src_name", "dst_name"]  # the hosts by name
SMALL = "workload.flow_bytes=20000"

# Flow 7 starts at 0; 8 starts when 7 completes at its sender; 9 when 8 does.
CHAIN_CM = """Nodes 16
Connections 3
Triggers 2
0->15 id 7 start 0 size 20000 send_done_trigger 1
3->12 id 8 trigger 1 size 12000 send_done_trigger 2
5->6 id 9 trigger 2 size 4096
trigger id 1 oneshot
trigger id 2 oneshot
"""


def config(*overrides):
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        return compose("config", overrides=list(overrides))


def read_fct(run_dir):
    with open(run_dir / "fct.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], [dict(zip(rows[0], row)) for row in rows[1:]]


def test_default_job_writes_outputs(tmp_path):
    assert run(config(SMALL), tmp_path) == 0
    assert {p.name for p in tmp_path.iterdir()} >= {"summary.json", "flows.parquet", "fct.csv", "fct_cdf.png"}
    header, rows = read_fct(tmp_path)
    assert header == FCT_HEADER
    assert len(rows) == 16  # fattree k=4: one permutation flow per host
    assert sorted(int(r["id"]) for r in rows) == list(range(16))
    for r in rows:
        assert int(r["size_bytes"]) == 20000
        assert float(r["fct_us"]) == float(r["finish_us"]) - float(r["start_us"])
        assert float(r["start_us"]) == 0.0 and float(r["rx_finish_us"]) <= float(r["finish_us"])
        assert int(r["fct_ps"]) == int(r["finish_ps"]) - int(r["start_ps"]) and int(r["start_ps"]) == 0
        for t in ("start", "finish", "rx_finish", "fct"):
            assert float(r[f"{t}_us"]) == int(r[f"{t}_ps"]) / 1e6
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["flows_finished"] == 16
    assert summary["config"]["workload"]["flow_bytes"] == 20000
    table = pq.read_table(tmp_path / "flows.parquet")
    assert set(FCT_HEADER) <= set(table.column_names) and table.num_rows == 16


def test_failed_run_writes_outputs_and_exits_1(tmp_path, capsys):
    assert run(config(SMALL, "sim.max_time_us=5"), tmp_path) == 1
    assert "simulation failed" in capsys.readouterr().err
    _, rows = read_fct(tmp_path)
    unfinished = [r for r in rows if r["finish_us"] == ""]
    assert len(rows) == 16 and unfinished  # flows under one ToR may finish within 5 µs; the rest cannot
    assert all(r["fct_us"] == "" and r["start_us"] == "0.0" for r in unfinished)
    assert all(r["fct_ps"] == r["finish_ps"] == "-1" and r["start_ps"] == "0" for r in unfinished)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


def test_relative_paths_are_read_from_the_starting_directory(tmp_path, monkeypatch):
    """A relative path (workload.path, topology.path, ...) is read from the directory the
    command started in: inside a Hydra job running in its own output directory
    (hydra.job.chdir), Hydra's runtime.cwd; anywhere else the current directory, even with
    Hydra's configuration still set from a run that ended in this process (a sweep run from
    Python leaves it, with that run's directories)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from multiverse_jax.config import _path

    started, job, caller = (tmp_path / name for name in ("started", "job", "caller"))
    for folder in (started, job, caller):
        folder.mkdir()
    ended_run = OmegaConf.create({"hydra": {"runtime": {"cwd": str(started), "output_dir": str(job)}}})
    monkeypatch.setattr(HydraConfig.instance(), "cfg", ended_run)
    monkeypatch.chdir(job)
    assert _path("chain.cm") == str(started / "chain.cm")  # inside the job's own directory
    monkeypatch.chdir(caller)
    assert _path("chain.cm") == str(caller / "chain.cm")  # the run has ended: the caller's directory
    assert _path(str(started / "x.cm")) == str(started / "x.cm") and _path("") is None


def test_cm_workload_trigger_chain(tmp_path, monkeypatch):
    (tmp_path / "chain.cm").write_text(CHAIN_CM)
    monkeypatch.chdir(tmp_path)  # workload.path is relative to the starting directory
    out = tmp_path / "out"
    assert run(config("workload.kind=cm", "workload.path=chain.cm", "output.plots=false"), out) == 0
    assert not (out / "fct_cdf.png").exists()
    _, rows = read_fct(out)
    by_id = {int(r["id"]): r for r in rows}
    assert list(by_id) == [7, 8, 9]
    assert float(by_id[7]["start_us"]) == 0.0
    assert float(by_id[8]["start_us"]) == float(by_id[7]["finish_us"])
    assert float(by_id[9]["start_us"]) == float(by_id[8]["finish_us"])
    assert all(r["finish_us"] != "" for r in rows)


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["workload.kind=cm"], "workload.path"),
        (["workload.flow_bytes=-5"], "workload.flow_bytes"),
        (["workload.kind=incast", "workload.senders=16"], "workload.senders"),
        (["sim.steps_per_call=0"], "sim.steps_per_call"),
        (["link.delay_us=0"], "link.delay_us"),
    ],
)
def test_bad_values_exit_2(tmp_path, capsys, overrides, needle):
    assert run(config(*overrides), tmp_path) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "fct.csv").exists()


@pytest.mark.parametrize(
    "override, key, valid",
    [
        ("topology.kind=torus", "topology.kind", "[fattree, leafspine, rail, custom]"),
        ("sim.mode=fluid", "sim.mode", "[packet, hybrid, flow]"),
        ("workload.kind=ring", "workload.kind", "[permutation, incast, cm, llm, astra, simai, chakra, goal]"),
        ("workload.placement=scattered", "workload.placement", "[packed, random, rail]"),
        ("sim.batching=fast", "sim.batching", "[auto, vmap, map]"),
    ],
)
def test_choices_are_enums_checked_when_composing(override, key, valid):
    """A choice that is not one of its Enum's members is Hydra's error naming the key and the
    valid values, before any of our code runs (the CLI exits 2: test below)."""
    with pytest.raises(Exception) as info:
        config(override)
    message = f"{info.value} {info.value.__cause__}"
    assert f"full_key: {key}" in message and f"expected one of {valid}" in message


def test_cli_bad_choice_exits_2(tmp_path, capsys):
    assert run_cli("workload.placement=scattered", f"hydra.run.dir={tmp_path / 'run'}") == 2
    err = capsys.readouterr().err
    assert "workload.placement" in err and "expected one of [packed, random, rail]" in err


def test_malformed_cm_line_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.cm"
    path.write_text(CHAIN_CM.replace("5->6 id 9", "5-6 id 9"))
    assert run(config("workload.kind=cm", f"workload.path={path}"), tmp_path / "out") == 2
    assert f"{path}:6:" in capsys.readouterr().err


def test_cm_with_more_nodes_than_hosts(tmp_path):
    path = tmp_path / "big.cm"
    path.write_text(CHAIN_CM.replace("Nodes 16", "Nodes 64"))
    with pytest.raises(InputError, match=r"Nodes 64.*fattree\(k=4\).*16 hosts"):
        experiment_from_config({"workload": {"kind": "cm", "path": str(path)}})


def test_permutation_is_a_seeded_derangement():
    def destinations(seed):
        exp = experiment_from_config({"topology": {"k": 6}, "sim": {"seed": seed}})
        assert exp.topology.n_hosts == 54
        np.testing.assert_array_equal(exp.flows.src, np.arange(54))
        return exp.flows.dst

    dst = destinations(3)
    assert sorted(dst) == list(range(54)) and not np.any(dst == np.arange(54))
    np.testing.assert_array_equal(dst, destinations(3))
    assert not np.array_equal(dst, destinations(4))


def test_incast():
    exp = experiment_from_config(
        {"workload": {"kind": "incast", "senders": 5, "flow_bytes": 1000, "start_us": 2.5}, "cc": "none"}
    )
    np.testing.assert_array_equal(exp.flows.src, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(exp.flows.dst, [0] * 5)
    np.testing.assert_array_equal(exp.flows.size_bytes, [1000] * 5)
    np.testing.assert_array_equal(exp.flows.start_ps, [2_500_000] * 5)


def test_unknown_key_in_plain_dict():
    with pytest.raises(InputError, match="workload.bytes"):
        experiment_from_config({"workload": {"bytes": 5}})


def cli(tmp_path, *overrides, env=None):
    return subprocess.run(
        [sys.executable, "-m", "multiverse_jax.cli", *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )


def test_cli_subprocess_default_job(tmp_path):
    # Without JAX_COMPILATION_CACHE_DIR (the tests' shared cache, conftest), the command keeps
    # its programs in sim.compile_cache, relative to where it was started.
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    proc = cli(tmp_path, SMALL, "sim.compile_cache=kept", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "outputs in" in proc.stdout
    for name in ("summary.json", "flows.parquet", "fct.csv", "fct_cdf.png"):
        assert (tmp_path / "run" / name).is_file()
    assert [p for p in (tmp_path / "kept").iterdir() if p.name.startswith("jit__advance-") and p.name.endswith("-cache")]


def test_cli_subprocess_bad_value_exits_2(tmp_path):
    proc = cli(tmp_path, "cc=reno")  # Hydra's error (no such group option) becomes exit 2
    assert proc.returncode == 2
    assert "Could not find 'cc/reno'" in proc.stderr and "Traceback" not in proc.stderr


def test_cli_bad_values_exit_2_in_one_process(tmp_path, capsys):
    """Ours (found in the task), then Hydra's (before any task: the first call's task started,
    as in a notebook): each is bad input, exit 2, a message without a traceback."""
    for override, needle in [("workload.flow_bytes=-5", "workload.flow_bytes"), ("cc=reno", "Could not find 'cc/reno'")]:
        assert run_cli(override, f"hydra.run.dir={tmp_path / 'run'}") == 2, override
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, err


def test_shipped_examples_run(tmp_path):
    """examples/: a custom topology, and a .cm pipeline with pinned routes on k=4."""
    examples = __import__("pathlib").Path(__file__).parent.parent / "examples"
    custom = config("topology.kind=custom", f"topology.path={examples / 'rack.topo'}", "workload.flow_bytes=20000")
    assert run(custom, tmp_path / "custom") == 0
    assert len(read_fct(tmp_path / "custom")[1]) == 6
    pipeline = config(
        "workload.kind=cm", f"workload.path={examples / 'pipeline.cm'}", f"workload.routes={examples / 'routes_k4.csv'}"
    )
    assert run(pipeline, tmp_path / "pipeline") == 0
    rows = {int(r["id"]): r for r in read_fct(tmp_path / "pipeline")[1]}
    assert int(rows[2]["start_ps"]) == int(rows[1]["rx_finish_ps"])
    assert int(rows[3]["start_ps"]) == int(rows[2]["rx_finish_ps"])
    barrier = max(int(rows[3]["finish_ps"]), int(rows[4]["finish_ps"]))
    assert int(rows[5]["start_ps"]) == barrier


TINY_MODEL = "workload.model={layers:4,hidden:512,heads:8,seq_len:256,vocab:1000}"


def test_llm_point_that_does_not_fit_is_an_oom_result(tmp_path, capsys):
    """GPT-3 175B on 16 GPUs with TP=1 cannot fit: status "oom", exit 1, nothing simulated."""
    overrides = ["workload.kind=llm", "workload.model=gpt3-175b", "workload.tp=1", "workload.pp=1", "workload.dp=16"]
    assert run(config(*overrides), tmp_path) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "oom" and summary["memory_bytes"]["total"] > summary["memory_bytes"]["capacity"]
    assert "out of GPU memory" in capsys.readouterr().err
    assert not (tmp_path / "flows.parquet").exists()


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["workload.kind=llm", "workload.tp=3"], "workload.tp"),
        (["workload.kind=llm", "workload.model=gpt5"], "workload.model must be one of"),
        (["workload.kind=llm", "workload.tp=8", "workload.pp=2", "workload.dp=4"], "= 64 GPUs, but topology fattree(k=4) has 16 hosts"),
        (["workload.kind=goal"], "workload.path must name the workload file"),
    ],
)
def test_bad_llm_config_exits_2(tmp_path, capsys, overrides, needle):
    assert run(config(TINY_MODEL, *overrides), tmp_path) == 2
    assert needle in capsys.readouterr().err.replace("\n", "")
