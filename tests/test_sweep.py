"""Sweeps through the batched Hydra launcher: one compiled program per shape, job dirs,
the results table, invalid points, resume after a kill, and the grouping rules.

Every sweep here is the same small shape (k=4 fat-tree, 16 flows of 20 KB, 40 packet
slots per host, no time series): a few compiled programs serve the whole file.
"""

from __future__ import annotations

import json
import math
import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import run_cli
from multiverse_jax import cli, engine
from multiverse_jax.components.static import Static
from multiverse_jax.conf.schema import sweep_name
from multiverse_jax.sweep import groups
from multiverse_jax.sweep.groups import bucket, chunks, make_groups, simulate_many
from multiverse_jax.sweep.results import TABLE_FILE

SMALL = ["workload.flow_bytes=20000", "sim.packets_per_host=40", "sim.sample_interval_us=0", "output=minimal"]


def multirun(sweep_dir, *overrides, base=SMALL) -> None:
    """``multiverse-jax -m OVERRIDES`` in this process (so compiled programs are shared); it
    must exit 0."""
    assert run_cli("-m", *overrides, *base, f"hydra.sweep.dir={sweep_dir}") == 0


def table(sweep_dir) -> dict:
    return pq.read_table(sweep_dir / TABLE_FILE).to_pydict()


def same_flows(a, b) -> bool:
    a, b = pq.read_table(a).to_pydict(), pq.read_table(b).to_pydict()
    floats = {k for k in a if np.asarray(a[k]).dtype.kind == "f"}  # NaN only there (names, paths: str)
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=k in floats) for k in a)


def test_sweep_is_one_compiled_batch_with_a_job_dir_per_point_equal_to_single_runs(monkeypatch, tmp_path):
    sweep_dir = tmp_path / "sweep"
    compiled_before = engine.compiled_programs()
    multirun(sweep_dir, "cc=none,dcqcn", "lb=ecmp,spray", "switch.buffer_bytes=200000,400000,800000")
    # 12 points, one static shape: one compiled program (this shape is new to the process).
    assert engine.compiled_programs() - compiled_before == 1
    rows = table(sweep_dir)
    assert len(rows["job_num"]) == 12 and set(rows["status"]) == {"ok"}
    assert set(rows["group"]) == {0} and set(rows["batch_size"]) == {12}
    assert sorted(set(rows["cc"])) == ["dcqcn", "none"] and sorted(set(rows["switch.buffer_bytes"])) == [
        200000, 400000, 800000,
    ]
    for num, overrides, job_dir in zip(rows["job_num"], rows["overrides"], rows["job_dir"]):
        point_dir = sweep_dir / job_dir
        assert job_dir == str(num)
        assert (point_dir / ".hydra" / "overrides.yaml").is_file() and (point_dir / "flows.parquet").is_file()
        summary = json.loads((point_dir / "summary.json").read_text())
        assert summary["status"] == "ok" and summary["config"]["switch"]["buffer_bytes"] in (200000, 400000, 800000)
        # The same point as a single run (its own batch of one).
        single_dir = tmp_path / f"single{num}"
        config = cli_config(overrides.split())
        assert cli.run(config, single_dir) == 0
        single = json.loads((single_dir / "summary.json").read_text())
        for key, value in summary.items():
            if not key.startswith("batch_"):
                assert single[key] == value, (overrides, key)
        assert same_flows(point_dir / "flows.parquet", single_dir / "flows.parquet"), overrides
    # The spraying points differ from the ECMP ones (the sweep really varied something).
    lb = np.array(rows["lb"])
    assert set(np.array(rows["max_queue_bytes"])[lb == "spray"]) != set(np.array(rows["max_queue_bytes"])[lb == "ecmp"])


def cli_config(overrides):
    from hydra import compose, initialize_config_module

    with initialize_config_module("multiverse_jax.conf", version_base=None):
        return compose("config", overrides=list(overrides))


def test_a_sweep_with_invalid_points_finishes_the_others(monkeypatch, tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    from multiverse_jax import compile_cache

    asked = []  # the sweep's compilation cache (the tests' own stands: conftest)
    monkeypatch.setattr(compile_cache, "use_compile_cache", lambda setting: asked.append(setting))
    # A negative buffer and an odd fat-tree arity pass the schema (integers) but not validation.
    multirun(sweep_dir, "switch.buffer_bytes=200000,-5", "topology.k=4,3", f"sim.compile_cache={tmp_path}/kept")
    assert asked == [f"{tmp_path}/kept"]
    rows = table(sweep_dir)
    status = dict(zip(rows["overrides"], rows["status"]))
    reason = dict(zip(rows["overrides"], rows["reason"]))
    ok = "switch.buffer_bytes=200000 topology.k=4 " + " ".join(SMALL)
    ok = ok.replace(" workload", f" sim.compile_cache={tmp_path}/kept workload")
    assert status.pop(ok) == "ok" and reason[ok] == ""
    assert set(status.values()) == {"invalid"} and len(status) == 3
    assert reason[ok.replace("200000", "-5")] == "switch.buffer_bytes must be an integer >= 1, got -5"
    assert "topology.k" in reason[ok.replace("k=4", "k=3")]
    for num, st in zip(rows["job_num"], rows["status"]):
        summary = json.loads((sweep_dir / str(num) / "summary.json").read_text())
        assert summary["status"] == st
    err = capsys.readouterr().err
    assert "1 ok" in err and "3 invalid" in err and "switch.buffer_bytes must be an integer" in err
    assert "sweep ended: 1/1 points (100%) · simulated " in err  # progress off a terminal: the final line


def test_an_llm_point_that_does_not_fit_in_gpu_memory_is_reported_oom(monkeypatch, tmp_path):
    sweep_dir = tmp_path / "sweep"
    tiny = "{layers:2,hidden:256,heads:4,seq_len:128,vocab:1000}"
    multirun(sweep_dir, "workload=llm", f"workload.model=gpt3-175b,{tiny}",
             base=["sim.sample_interval_us=0", "output=minimal"])
    rows = table(sweep_dir)
    assert rows["status"] == ["oom", "ok"]
    assert "GPU memory" in rows["reason"][0] or "GB" in rows["reason"][0]
    assert rows["iteration_time_us"][1] > 0 and math.isnan(rows["iteration_time_us"][0])
    summary = json.loads((sweep_dir / "0" / "summary.json").read_text())
    assert summary["status"] == "oom" and summary["memory_bytes"]["total"] > summary["memory_bytes"]["capacity"]
    assert (sweep_dir / "1" / "tasks.parquet").is_file()


def test_a_point_that_does_not_compose_is_reported_and_the_others_run(monkeypatch, tmp_path):
    """A wrong type in one swept value: that point is invalid with Hydra's message naming the
    key (the batched sweeper leaves composing to the launcher); the other point runs."""
    sweep_dir = tmp_path / "sweep"
    multirun(sweep_dir, "sim.seed=0,x")
    rows = table(sweep_dir)
    assert rows["status"] == ["ok", "invalid"]
    assert "sim.seed" in rows["reason"][1] and "could not be converted to Integer" in rows["reason"][1]
    assert json.loads((sweep_dir / "1" / "summary.json").read_text())["status"] == "invalid"


def test_point_composer_equals_hydra(monkeypatch):
    """sweep/compose.py's shortcut gives exactly the config Hydra composes for each point."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from multiverse_jax.sweep.compose import PointComposer

    with initialize_config_module("multiverse_jax.conf", version_base=None):
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()
        master = compose("config", overrides=["workload.flow_bytes=1000"], return_hydra_config=True)
        composer = PointComposer(loader, master)
        points = [
            ["cc=dcqcn", "switch.buffer_bytes=400000"],
            ["cc=dcqcn", "switch.buffer_bytes=800000", "dcqcn.g=0.5"],
            ["topology=rail", "topology.servers=8", "lb=spray"],
            ["switch=shallow", "sim.seed=3", "workload.model={layers: 2, hidden: 64}"],
            ["cc=none", "switch.buffer_bytes=400000"],
        ]
        for overrides in points:
            fast = OmegaConf.to_container(composer.compose(overrides), resolve=False)
            slow = OmegaConf.to_container(loader.load_sweep_config(master, overrides), resolve=False)
            for c in (fast, slow):
                c["hydra"]["runtime"].pop("cwd")
            assert fast == slow, overrides
        assert len(composer.templates) == 4  # cc=dcqcn points share one composition


def test_killed_sweep_resumes_with_only_the_missing_points(monkeypatch, tmp_path):
    sweep_dir = tmp_path / "sweep"
    sweep = ("lb=ecmp,spray,flowlet", "sim.seed=1,2", "hydra.launcher.max_batch_size=2")
    real_run_chunk = groups.run_chunk
    simulated = []

    def killed_after_two_chunks(experiments, *args, **kwargs):
        if len(simulated) == 2:
            raise KeyboardInterrupt  # what Ctrl-C (or a kill) does to the sweep mid-way
        simulated.append(len(experiments))
        return real_run_chunk(experiments, *args, **kwargs)

    monkeypatch.setattr(groups, "run_chunk", killed_after_two_chunks)
    with pytest.raises(KeyboardInterrupt):
        multirun(sweep_dir, *sweep)
    assert simulated == [2, 2]
    assert sorted(table(sweep_dir)["job_num"]) == [0, 1, 2, 3]  # the finished chunks were saved

    simulated.clear()
    monkeypatch.setattr(groups, "run_chunk", lambda experiments, *a, **k: simulated.append(len(experiments))
                        or real_run_chunk(experiments, *a, **k))
    multirun(sweep_dir, *sweep)
    assert simulated == [2]  # only points 4 and 5
    rows = table(sweep_dir)
    assert sorted(rows["job_num"]) == list(range(6)) and set(rows["status"]) == {"ok"}
    assert len(set(rows["point_key"])) == 6

    simulated.clear()
    multirun(sweep_dir, *sweep)  # everything done: nothing simulated
    assert simulated == []


def test_default_sweep_directory_holds_every_point(monkeypatch, tmp_path):
    """Without hydra.sweep.dir: one directory named after the sweep, every job inside it
    (each point's own overrides must not rename it), and a re-run resumes there."""
    monkeypatch.chdir(tmp_path)
    args = ["lb=ecmp,spray", *SMALL]
    assert run_cli("-m", *args) == 0
    (sweep_dir,) = (tmp_path / "multirun" / "config").iterdir()
    assert sweep_dir.name == sweep_name(args)
    rows = table(sweep_dir)
    assert rows["job_dir"] == ["0", "1"] and rows["status"] == ["ok", "ok"]
    assert all((sweep_dir / d / "summary.json").is_file() for d in rows["job_dir"])
    simulated = []
    monkeypatch.setattr(groups, "run_chunk", lambda *a, **k: simulated.append(1))
    assert run_cli("-m", *args) == 0
    assert simulated == [] and len(list((tmp_path / "multirun" / "config").iterdir())) == 1


def test_sweep_directory_is_named_after_the_overrides():
    a = sweep_name(["cc=none,dcqcn", "lb=ecmp,spray"])
    assert a == sweep_name(["lb=ecmp,spray", "cc=none,dcqcn"]) and a.startswith("cc=none,dcqcn__lb=ecmp,spray-")
    assert a != sweep_name(["cc=none,dcqcn", "lb=ecmp"])
    assert sweep_name([]).startswith("defaults-") and "/" not in sweep_name(["workload.path=/a/b.cm"])


def test_bucket_grid():
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 6, 7, 9, 13, 17, 25, 33, 80, 100)] == [
        1, 2, 3, 4, 6, 6, 8, 12, 16, 24, 32, 48, 96, 128,
    ]
    assert all(n <= bucket(n) <= 1.5 * n for n in range(1, 2000))


def test_chunks_have_equal_size():
    assert chunks([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3], [4, 4]]
    assert chunks([7, 8], 5) == [[7, 8]]


def test_groups_by_bucket_and_simulate_many_equals_simulate(small_experiments):
    from multiverse_jax.simulate import simulate

    exps = small_experiments
    found = make_groups(exps, [{"slots_per_host": 40}] * len(exps))
    assert [g.members for g in found] == [tuple(range(len(exps)))]
    assert isinstance(found[0].static, Static)
    results = simulate_many(exps, {"slots_per_host": 40}, max_batch_size=2)
    # One at a time, padded like the chunks (done copies never step): the chunks' program.
    alone = [simulate([e], slots_per_host=40, static=found[0].static, batch_size=2)[0] for e in exps]
    for a, b in zip(results, alone):
        assert all(np.array_equal(a.flows[k], b.flows[k], equal_nan=True) for k in a.flows)


@pytest.fixture
def small_experiments():
    from multiverse_jax.config import experiment_from_config

    return [
        experiment_from_config({"workload": {"flow_bytes": 20000}, "sim": {"seed": s, "sample_interval_us": 0}, "lb": lb})
        for s, lb in ((0, "ecmp"), (1, "spray"), (2, "flowlet"))
    ]


def test_point_key_leaves_out_the_progress_cadence_and_the_compile_cache():
    from multiverse_jax.sweep.results import point_key

    config = {"cc": "none", "output": {"plots": True, "progress_interval_s": 10.0}}
    assert point_key(config) == point_key({**config, "output": {"plots": True, "progress_interval_s": 2.0}})
    assert point_key(config) != point_key({**config, "output": {"plots": False, "progress_interval_s": 10.0}})
    assert config["output"]["progress_interval_s"] == 10.0  # the caller's config is left as it was
    # Nor where compiled programs are kept (sim.compile_cache; a key added later: old tables still resume).
    sim = {"seed": 1, "compile_cache": "auto"}
    assert point_key({"sim": sim}) == point_key({"sim": {**sim, "compile_cache": "/elsewhere"}}) == point_key({"sim": {"seed": 1}})
    assert point_key({"sim": sim}) != point_key({"sim": {**sim, "seed": 2}})


def test_a_point_repeated_in_one_sweep_is_simulated_once(monkeypatch, tmp_path):
    """A search may ask for the same point twice in one ask: one simulation, two job dirs."""
    sweep_dir = tmp_path / "sweep"
    simulated = []
    real_run_chunk = groups.run_chunk
    monkeypatch.setattr(groups, "run_chunk", lambda e, *a, **k: simulated.append(len(e)) or real_run_chunk(e, *a, **k))
    multirun(sweep_dir, "lb=spray,spray")
    assert simulated == [1]
    rows = table(sweep_dir)
    assert rows["job_num"] == [0] and rows["status"] == ["ok"]  # one row per distinct point
    repeat = json.loads((sweep_dir / "1" / "summary.json").read_text())
    assert repeat["status"] == "ok" and repeat["same_point_as"] == "0"
