"""Shared helpers: runs padded to a few fixed shapes, so tests share compiled programs."""

import dataclasses

import numpy as np
import pytest

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from multiverse_jax.batch import build_batch
from multiverse_jax.components.static import Static
from multiverse_jax.conf.schema import STEPS_PER_CALL
from multiverse_jax.simulate import simulate

# One shape for every small test network (k=4 fat-tree: 36 nodes, 16 hosts, 96 ports), roomy
# enough for the invariants' trigger chains and the task graphs' tests: each engine program
# costs ~10-15 s to compile on 2 cores, ~70 % of the suite's time, so tests share this one.
SMALL = Static(
    n_nodes=40,
    n_hosts=16,
    n_ports=96,
    n_flows=16,
    n_triggers=16,  # up to one per flow (test_invariants' chains)
    n_activators=4,
    route_width=4,
    pinned_len=8,
    slots_per_host=128,
    pfc_history=16,
    n_samples=STEPS_PER_CALL,  # time series on (the schema's sim.sample_interval_us), a call's windows (sim.steps_per_call)
    path_len=8,  # longest flow path in links (a fat-tree path has 6)
    # One packet a port a transmit round: the reference transmit. Runs of packets (ops/runs.py,
    # a CPU's default) compile ~35 % longer (7.7 against 5.0 s for this program); test_runs checks
    # them against one a round, and every run at the CLI's shapes (golden digests, peers, sweeps) takes them.
    run_packets=1,
    n_tasks=32,  # task graphs (test_tasks, test_flow_mode's packet runs)
    task_deps=4,
    # vmap in two lanes (engine._in_lanes: a CPU's own vmap path for large batches): a batch of
    # four steps two at a time, an experiment that stops giving its lane to the next. The
    # whole-batch path (an accelerator's) runs in every module with shapes of its own.
    lockstep_experiments=2,
)


# Batches are padded to a multiple of this many experiments (copies of the last one, marked
# done: they never step), so that tests of 1 to 4 experiments share one compiled program.
BATCH_QUANTUM = 4


def padded_size(n_experiments: int) -> int:
    """``n_experiments`` rounded up to a multiple of BATCH_QUANTUM (``batch_size=``)."""
    return -(-n_experiments // BATCH_QUANTUM) * BATCH_QUANTUM


def run_small(experiments, batching="auto", batch_size=1, **overrides):
    """Simulate experiments padded to SMALL and to ``padded_size`` of at least ``batch_size``
    experiments (shared compilation: an experiment run alone, padded to its batch's size,
    reuses the batch's program)."""
    static = dataclasses.replace(SMALL, **overrides)
    return simulate(
        experiments,
        slots_per_host=static.slots_per_host,
        static=static,
        batching=batching,
        batch_size=padded_size(max(len(experiments), batch_size)),
    )


@pytest.fixture
def small_static():
    return SMALL


@pytest.fixture(autouse=True)
def _no_hydra_run_left_behind():
    """A test that runs Hydra (a sweep through its launcher) leaves Hydra's process-wide
    ``HydraConfig`` set, with that run's directories: cleared after each test, so that no
    test sees another's Hydra run, whatever ran before it in the worker. (Relative paths no
    longer depend on it: ``config._original_cwd``, tested in ``test_cli``.)"""
    yield
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None


def wire_sizes(size_bytes, payload=4096, header=64):
    """Wire size of each packet of a message (the last one carries the remainder)."""
    n = -(-size_bytes // payload)
    sizes = [payload + header] * n
    sizes[-1] = size_bytes - (n - 1) * payload + header
    return sizes


def pipeline_ps(ready_ps, wire, rates_bps, delays_ps):
    """Arrival (last bit at the far end) of each packet of a stream on an idle path.

    F(i, j) = max(F(i, j-1) + d_{j-1}, F(i-1, j)) + wire_i * 8 / R_j: packet i finishes
    serialising on link j; it is ready at the first link at ready_ps[i]. Integers, ps.
    A rate may be a function of the packet's start time on the link (a timed rate change
    applies to the next packet that starts).
    """
    prev = None
    arrivals = []
    for ready, w in zip(ready_ps, wire):
        cur = []
        for j, rate in enumerate(rates_bps):
            start = ready if j == 0 else cur[j - 1] + delays_ps[j - 1]
            if prev is not None:
                start = max(start, prev[j])
            bps = rate(start) if callable(rate) else rate
            cur.append(start + -(-w * 8 * 10**12 // bps))
        prev = cur
        arrivals.append(cur[-1] + delays_ps[-1])
    return arrivals


def store_and_forward_ps(wire, rates_bps, delays_ps, ack_bytes=64, start_ps=0):
    """Closed form of one flow on an idle path: (receiver has the last byte, sender has the
    last ACK). Each ACK leaves the receiver when its data packet arrives and crosses the
    path backwards (it can queue behind the previous ACK at a slower link)."""
    rx = pipeline_ps([start_ps] * len(wire), wire, rates_bps, delays_ps)
    acks = pipeline_ps(rx, [ack_bytes] * len(wire), rates_bps[::-1], delays_ps[::-1])
    return rx[-1], acks[-1]


def chain(rates_gbps, delays_us):
    """h0 - s0 - s1 - ... - h1: a path of len(rates) links."""
    from multiverse_jax.topology.graph import from_cables

    hops = len(rates_gbps)
    names = ["h0", "h1"] + [f"s{i}" for i in range(hops - 1)]
    path = [0] + list(range(2, 2 + hops - 1)) + [1]
    cables = [(path[i], path[i + 1], rates_gbps[i], delays_us[i]) for i in range(hops)]
    return from_cables(f"chain{hops}", names, 2, cables)


def run_cli(*args) -> int:
    """``multiverse-jax ARGS`` (overrides, ``-m`` for a sweep) run in this process: ``cli.main``
    with ``sys.argv`` as the command line gives it (Hydra parses it); its exit code, 0 when it
    returns. The compiled programs stay shared with the other tests, and no Python starts and
    imports JAX again (4-6 s a subprocess on 2 cores); ``test_cli`` keeps subprocesses for the
    real command's exits. Any other exception (a test's simulated kill) propagates."""
    import sys

    from multiverse_jax import cli

    argv = ["multiverse-jax", *args]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", argv)
        try:
            cli.main()
        except SystemExit as exc:
            return exc.code or 0
    return 0


__all__ = ["SMALL", "run_cli", "run_small", "padded_size", "wire_sizes", "pipeline_ps", "store_and_forward_ps", "chain", "build_batch", "np"]


# Every compiled XLA program keeps memory mappings for its code; a whole suite in one
# process compiles thousands of them and, near Linux's vm.max_map_count (65,530 by
# default), the next compilation aborts the process ("Aborted", no Python traceback).
# After each module, drop JAX's caches once the mappings pass 70 % of the limit.
MAPS_PATH = "/proc/self/maps"
MAX_MAP_COUNT_PATH = "/proc/sys/vm/max_map_count"


def _map_count_and_limit() -> tuple[int, int] | None:
    try:
        with open(MAPS_PATH) as maps, open(MAX_MAP_COUNT_PATH) as limit:
            return sum(1 for _ in maps), int(limit.read())
    except OSError:  # not Linux: no such limit to guard
        return None


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs_near_the_map_limit():
    yield
    counts = _map_count_and_limit()
    if counts is not None and counts[0] > counts[1] * 7 // 10:
        import gc

        import jax

        jax.clear_caches()
        gc.collect()


# One persistent XLA compilation cache per test run, shared by the xdist workers and by the
# processes they start (Ray's workers inherit the environment): a program one process
# compiled is read back by the others instead of compiled again (measured: the suite ~1 min
# faster on 2 cores, most of it Ray's workers no longer compiling what the tests did). The
# cache is keyed by the program and the jax version, so it can never return another program.
XLA_CACHE_SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": ("jax_persistent_cache_min_compile_time_secs", 0.0),
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": ("jax_persistent_cache_min_entry_size_bytes", 0),
}


_OWN_XLA_CACHE = []  # the cache folder this process made (the first to configure: xdist's controller)


# The tests compile ~60 engine programs (one per set of shapes), 9-11 s each on 2 cores:
# most of the suite's time. XLA's CPU backend compiles them ~35 % faster with its elemental
# IR emitters instead of its newer fusion emitters (measured on the SMALL engine program:
# 6.8-7.1 -> 4.2-4.4 s), and runs them ~3 % slower; and faster again without LLVM's
# optimisation passes (``--xla_backend_optimization_level=0``: test_runs' reference program
# traced and compiled in 6.9 s instead of 9.5 s, level 1 9.0 s:
# stop 62's compile_time_by_level.py, never committed: benchmarks/HISTORY.md, stop 64), which runs them up to ~1.7x slower
# (test_hybrid, whose long runs take ``optimised_engine`` below); the suite in CI form took
# 6:38-8:11 on 2 cores, 9:05-10:52 at stop 61 without it. The results are the same bits
# (LLVM's passes keep IEEE semantics: no fast-math; the golden digests and the peer
# comparisons check them). A user's runs of the CLI and the benchmarks keep XLA's defaults.
# Set before JAX starts its backend (conftest's imports do not), inherited by the xdist
# workers and the processes tests start.
TEST_XLA_FLAGS = "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"


ADDED_FLAGS_ENV = "MULTIVERSE_JAX_TEST_ADDED_XLA_FLAGS"  # the flags the first process added (xdist's workers inherit it)


@pytest.fixture(scope="module")
def optimised_engine():
    """The engine's CPU programs compiled with LLVM's optimisation passes (level 2, XLA's
    default), for a module whose long runs cost more than its compilations (``TEST_XLA_FLAGS``
    turns them off for the rest): test_hybrid's packet-mode elephants took 117 s at level 0,
    61 s at level 2, with the same results (stop 62's ``hybrid_elephants_by_level.py``, never committed: benchmarks/HISTORY.md, stop 64). Per program, through the engine's jit
    options (``engine.CPU_COMPILER_OPTIONS``), restored after the module. A level the user's
    ``XLA_FLAGS`` set stands (only one this conftest added is overridden)."""
    import os

    import jax

    from multiverse_jax import engine

    if "xla_backend_optimization_level" not in os.environ.get(ADDED_FLAGS_ENV, ""):
        yield
        return
    options = {**engine.CPU_COMPILER_OPTIONS, "xla_backend_optimization_level": 2}
    default = engine._advance_compiled["cpu"]
    engine._advance_compiled["cpu"] = jax.jit(engine._advance, static_argnames=("batching",), compiler_options=options)
    yield
    engine._advance_compiled["cpu"] = default


def _use_test_xla_flags():
    import os

    flags = os.environ.get("XLA_FLAGS", "")
    own = [flag for flag in TEST_XLA_FLAGS.split() if flag.split("=")[0] not in flags]  # a user's own choice stands
    os.environ["XLA_FLAGS"] = " ".join([flags, *own]).strip()
    if ADDED_FLAGS_ENV not in os.environ:  # set once, by the first process to configure
        os.environ[ADDED_FLAGS_ENV] = " ".join(own)


def _absl_handler_off_the_capture():
    """absl (imported with JAX) makes a logging handler on the ``sys.stderr`` of that
    moment, pytest's capture file, and closes that stream when logging is reconfigured
    unless it is the ``sys.stderr`` of then: Hydra's first run in a test that captures
    with ``capsys`` closed pytest's capture (a sweep test failed alone, passed after
    another sweep). Its stream is the process's own stderr, which it never closes."""
    import sys

    from absl import logging as absl_logging

    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


def pytest_configure(config):
    import os
    import tempfile

    import jax

    _use_test_xla_flags()
    _absl_handler_off_the_capture()
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):  # the user's own, or the controller's for this run
        return
    cache = tempfile.mkdtemp(prefix="multiverse-jax-tests-xla-cache-")
    _OWN_XLA_CACHE.append(cache)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = cache  # the workers started after this inherit it
    jax.config.update("jax_compilation_cache_dir", cache)
    for env, (option, value) in XLA_CACHE_SETTINGS.items():
        os.environ[env] = str(value)
        jax.config.update(option, value)


def pytest_unconfigure(config):
    import shutil

    for cache in _OWN_XLA_CACHE:
        shutil.rmtree(cache, ignore_errors=True)


# The heaviest modules first (seconds measured on 2 cores, the whole suite with ../shared on
# 2026-12-07, after stop 59's changes; test_runs from its own run; test_hybrid scaled from its
# run at stop 64, without the LLM pair that is now slow): pytest-xdist's
# loadfile hands a worker the next module as it frees up (in this order:
# ``--no-loadscope-reorder`` in pyproject.toml), so starting with the longest leaves short
# ones to fill the end, and the two workers finish closer together.
MODULE_SECONDS = {
    "test_hybrid.py": 110, "test_cli.py": 84, "test_sweep.py": 82, "test_runs.py": 95, "test_cc.py": 68,
    "test_pool.py": 64, "test_engine.py": 61, "test_link_events.py": 50, "test_hpcc_htsim.py": 45,
    "test_restorer_dataset.py": 40, "test_timeseries.py": 40, "test_queues.py": 39, "test_ray_backend.py": 39,
    "test_restorer_model.py": 34, "test_flow_mode.py": 33, "test_sharding.py": 33, "test_golden.py": 31,
    "test_search.py": 31, "test_failures.py": 30, "test_experiments.py": 29, "test_workload_files.py": 26,
    "test_pfc_exact.py": 25, "test_importers.py": 21, "test_invariants.py": 20, "test_vs_htsim.py": 15,
    "test_overflow.py": 15, "test_collective_times.py": 14, "test_cc_config.py": 9, "test_lockstep.py": 8,
    "test_ack_class.py": 7, "test_compile_cache.py": 6, "test_fifo_pass.py": 5, "test_prefix_scans.py": 2,
}  # fmt: skip


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: -MODULE_SECONDS.get(item.path.name, 0))  # stable: order within a module kept
