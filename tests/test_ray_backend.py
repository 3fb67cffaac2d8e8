"""Ray scale-out: groups run as Ray tasks give what ``simulate`` gives here, failures included."""

import dataclasses
import os
import secrets
import sys

import numpy as np
import pytest

from conftest import SMALL, padded_size
from multiverse_jax.conf.schema import SimConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.errors import InputError
from multiverse_jax.simulate import simulate
from multiverse_jax.sweep.ray_backend import run_groups_on_ray
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows

# Ray starts its processes with fork + exec, which is safe: JAX warns of any fork.
pytestmark = pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")

K4 = fattree(4, 100.0, 1.0)
# run_small's shapes and batch size (one experiment per group, SMALL, padded to four): the
# reference runs here share the suite's compiled program (from the persistent cache when
# another worker compiled it), and both groups share one program on the workers.
KWARGS = {"slots_per_host": SMALL.slots_per_host, "static": SMALL, "batch_size": padded_size(1)}
GROUPS = [
    ([Experiment(K4, make_flows([0], [15], [30_000], [0]))], KWARGS),
    ([Experiment(K4, make_flows([1, 2], [14, 3], [20_000, 5_000], [0, 0]), sim=SimConfig(seed=3))], KWARGS),
]


@pytest.fixture(scope="module")
def ray_cluster():
    """One private Ray instance in this process for the module (started once, always shut
    down): faster than ``ray start`` plus ``ray.init(address=...)`` (about 3 s against 6 s,
    and 1.4 s against 6 s to stop), and it stops only its own processes (``ray stop`` stops
    every Ray on the machine). Ray binds the machine's address even when asked for 127.0.0.1.
    One CPU: the groups run one after the other on one worker, which compiles their program
    once."""
    ray = pytest.importorskip("ray")
    saved = {name: os.environ.get(name) for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}  # ray.init sets the mode
    # Ray's default token authentication, with a throwaway token in the environment (which
    # Ray's processes inherit) rather than one written to ~/.ray/auth_token.
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    try:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="warning")
        yield ray
    finally:
        ray.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run(groups):
    outcomes = {}

    def on_done(index, outcome):
        assert index not in outcomes
        outcomes[index] = outcome

    run_groups_on_ray(groups, "unused: Ray is already initialised", on_done=on_done)
    assert sorted(outcomes) == list(range(len(groups)))
    return outcomes


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.flows.keys() == w.flows.keys()
        for key in w.flows:
            assert g.flows[key].dtype == w.flows[key].dtype, key
            np.testing.assert_array_equal(g.flows[key], w.flows[key], err_msg=key)
        strip = lambda summary: {k: v for k, v in summary.items() if not k.startswith("batch_")}  # noqa: E731
        assert strip(g.summary) == strip(w.summary)
        np.testing.assert_array_equal(g.port_max_queue_bytes, w.port_max_queue_bytes)


def test_groups_on_ray_equal_local_runs(ray_cluster):
    outcomes = _run(GROUPS)
    assert ray_cluster.is_initialized()  # reused, not shut down
    for index, (experiments, kwargs) in enumerate(GROUPS):
        want = simulate(experiments, **kwargs)
        assert all(r.ok for r in want)
        _assert_same(outcomes[index], want)


def test_a_failing_group_reports_its_exception_and_the_others_finish(ray_cluster):
    too_small = dict(KWARGS, static=dataclasses.replace(SMALL, n_flows=1))  # group 1 has 2 flows
    with pytest.raises(InputError) as local:
        simulate(GROUPS[1][0], **too_small)
    outcomes = _run([GROUPS[0], (GROUPS[1][0], too_small)])
    assert type(outcomes[1]) is InputError
    assert str(outcomes[1]) == str(local.value)
    _assert_same(outcomes[0], simulate(GROUPS[0][0], **KWARGS))


def test_missing_ray_is_an_input_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(InputError, match="multiverse-jax\\[ray\\]"):
        run_groups_on_ray(GROUPS, "auto", on_done=lambda index, outcome: None)


def test_sweep_through_ray_equals_the_local_sweep(ray_cluster, monkeypatch, tmp_path):
    """The batched launcher with ``hydra.launcher.ray_address``: every chunk a Ray task, the
    results gathered back into the same job directories and table as a local sweep."""
    import json

    from test_sweep import multirun, same_flows, table

    sweep = ("lb=ecmp,spray", "sim.seed=1,2", "hydra.launcher.max_batch_size=2")
    multirun(tmp_path / "local", *sweep)
    # Ray is already initialised (the fixture): the launcher reuses it, whatever the address.
    # Nothing may run here: local chunks would fail (Ray's workers are other processes).
    from multiverse_jax.sweep import groups

    def not_here(*args, **kwargs):
        raise AssertionError("a chunk ran in the driver, not on Ray")

    monkeypatch.setattr(groups, "run_chunk", not_here)
    multirun(tmp_path / "ray", *sweep, "hydra.launcher.ray_address=auto")
    local, remote = table(tmp_path / "local"), table(tmp_path / "ray")
    assert remote["status"] == ["ok"] * 4 and remote["overrides"] == local["overrides"]
    for name in ("job_time_us", "fct_mean_us", "fct_p99_us", "max_queue_bytes", "point_key", "group"):
        assert remote[name] == local[name], name
    for job_dir in local["job_dir"]:
        assert same_flows(tmp_path / "local" / job_dir / "flows.parquet", tmp_path / "ray" / job_dir / "flows.parquet")
        summaries = [json.loads((tmp_path / d / job_dir / "summary.json").read_text()) for d in ("local", "ray")]
        strip = [{k: v for k, v in s.items() if not k.startswith("batch_")} for s in summaries]
        assert strip[0] == strip[1]
