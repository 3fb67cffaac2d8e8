"""Sharding the experiment axis over several devices gives the one-device results, bit for bit.

The pytest process has already started JAX with one CPU device, so the two-device run
happens in a subprocess whose CPU platform is split into two devices
(``--xla_force_host_platform_device_count=2``).
"""

import json
import os
import pathlib
import subprocess
import sys

import jax
import pytest

from multiverse_jax import engine
from multiverse_jax.simulate import simulate

TESTS = pathlib.Path(__file__).parent

SCRIPT = r"""
import dataclasses, json, sys
import jax
import numpy as np
from conftest import SMALL, run_small
from multiverse_jax import engine
from multiverse_jax.batch import build_batch
from multiverse_jax.conf.schema import SimConfig, SwitchConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.simulate import simulate
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows

assert len(jax.local_devices()) == 2, jax.local_devices()
PS = 1_000_000
K4 = fattree(4, 100.0, 1.0)
rng = np.random.default_rng(3)
experiments = []
for e in range(3):  # 3 experiments over 2 devices: the batch is padded to 4
    n = 4 + 2 * e
    src = rng.integers(0, 16, n)
    dst = (src + 1 + rng.integers(0, 15, n)) % 16
    flows = make_flows(src, dst, rng.integers(2_000, 60_000, n), rng.integers(0, 2 * PS, n))
    experiments.append(Experiment(K4, flows, lb=("ecmp", "spray", "flowlet")[e], switch=SwitchConfig(flowlet_gap_us=0.5), sim=SimConfig(seed=e)))

# No telemetry columns (int_hops 0: no HPCC here): zero-size state, which must keep its
# sharding from call to call, or the sharded program compiles again (compiled_programs).
kwargs = dict(slots_per_host=SMALL.slots_per_host, static=dataclasses.replace(SMALL, int_hops=0), steps_per_call=16)
one = simulate(experiments, **kwargs)
placements = []
two = simulate(
    experiments, devices=2, on_progress=lambda s: placements.append((s.done.shape[0], len(s.done.sharding.device_set))), **kwargs
)

def columns(result):
    return {k: np.asarray(v).tolist() for k, v in result.flows.items()}

def summary(result):
    return {k: v for k, v in result.summary.items() if not k.startswith("batch_")}

sharded_fn = engine.sharded_advance(tuple(jax.local_devices()), 16, engine.resolve_batching("auto"))
try:
    simulate(experiments, devices=3, **kwargs)
    too_many = None
except ValueError as err:
    too_many = str(err)
batch = build_batch(experiments, **{k: v for k, v in kwargs.items() if k != "steps_per_call"})
try:
    engine.run(batch.params, batch.state, devices=2)
    uneven = None
except ValueError as err:
    uneven = str(err)

json.dump(
    {
        "one": [{"flows": columns(r), "summary": summary(r), "queues": r.port_max_queue_bytes.tolist()} for r in one],
        "two": [{"flows": columns(r), "summary": summary(r), "queues": r.port_max_queue_bytes.tolist()} for r in two],
        "n_calls": two[0].summary["batch_n_calls"],
        "placements": placements,
        "compiled_programs": sharded_fn._cache_size(),
        "too_many": too_many,
        "uneven": uneven,
    },
    sys.stdout,
)
"""


def _run_on_two_cpu_devices():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(TESTS), env.get("PYTHONPATH", "")] if p)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=TESTS.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def two_devices():
    return _run_on_two_cpu_devices()


def _assert_bit_identical(a, b):
    """Flow columns, port queues and summaries equal bit for bit (NaN == NaN)."""
    assert a.keys() == b.keys()
    for column in a["flows"]:
        assert json.dumps(a["flows"][column]) == json.dumps(b["flows"][column]), column
    assert a["queues"] == b["queues"]
    assert json.dumps(a["summary"], sort_keys=True) == json.dumps(b["summary"], sort_keys=True)


def test_sharded_results_equal_unsharded_bit_for_bit(two_devices):
    one, two = two_devices["one"], two_devices["two"]
    assert len(one) == len(two) == 3  # the padding copy is not returned
    for a, b in zip(one, two):
        assert a["summary"]["status"] == "ok", a["summary"]
        _assert_bit_identical(a, b)
    # the comparison can fail: the experiments differ from each other
    with pytest.raises(AssertionError):
        _assert_bit_identical(one[0], two[1])


def test_sharded_state_lives_on_both_devices_and_compiles_once(two_devices):
    assert two_devices["n_calls"] > 1  # several calls of the same compiled program
    assert two_devices["placements"] and all(p == [4, 2] for p in two_devices["placements"])
    assert two_devices["compiled_programs"] == 1


def test_sharding_errors(two_devices):
    assert "devices=3" in two_devices["too_many"] and "2 local" in two_devices["too_many"]
    assert "3 experiments" in two_devices["uneven"] and "2 devices" in two_devices["uneven"]


@pytest.mark.filterwarnings("ignore:sim.devices")  # this process cannot split its CPU any more (warned)
def test_more_devices_than_exist_is_a_clear_error():
    n = len(jax.local_devices())
    with pytest.raises(ValueError, match=f"{n} local"):
        simulate([], devices=n + 1)
    with pytest.raises(ValueError, match="positive integer or 'all'"):
        engine.resolve_devices("many")
    assert engine.resolve_devices(None) is None and engine.resolve_devices(1) is None


SPLIT_SCRIPT = r"""
import json, os, sys
from multiverse_jax import engine
asked = sys.argv[1]
engine.split_cpu_into_devices(asked if asked == "all" else int(asked))
import jax
n = len(jax.local_devices())
engine.split_cpu_into_devices(n + 5)  # the backend has started: a process keeps its devices
json.dump({"devices": n, "after": len(jax.local_devices()), "cores": os.cpu_count()}, sys.stdout)
"""


@pytest.mark.parametrize(
    "asked, xla_flags, expected",
    [("all", "", "cores"), ("3", "", 3), ("3", "--xla_force_host_platform_device_count=2", 2)],
)
def test_a_cpu_is_split_into_the_devices_sim_devices_asks_for(asked, xla_flags, expected):
    """``sim.devices=all`` (or a count) on a CPU: before JAX starts, its CPU backend becomes
    one device per core (or that many), so a sharded batch uses every core; a count the
    user set in ``XLA_FLAGS`` stands, and a started backend keeps its devices."""
    env = dict(os.environ, XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SPLIT_SCRIPT, asked], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    assert out["devices"] == (out["cores"] if expected == "cores" else expected) == out["after"]


def test_asking_for_more_cpu_devices_once_jax_has_started_warns():
    """This process started JAX with one CPU device: the split can no longer happen, and the
    warning says what to set instead."""
    if jax.default_backend() != "cpu" or len(jax.local_devices()) > 1:
        pytest.skip("needs a process that started JAX on one CPU device")
    with pytest.warns(UserWarning, match="xla_force_host_platform_device_count=3"):
        engine.split_cpu_into_devices(3)
