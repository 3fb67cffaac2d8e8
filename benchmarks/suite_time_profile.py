"""Where the test suite's time goes: each test's wall seconds split into XLA compiling, JAX
tracing and lowering, and the rest (running, Python), from JAX's own monitoring events.

As a pytest plugin (each xdist worker writes ``worker_<id>.jsonl`` into ``$TEST_TIME_PROFILE_DIR``,
default ``benchmarks/results/suite_time_profile``), then the summary:

    PYTHONPATH=benchmarks python -m pytest -q -p suite_time_profile
    python benchmarks/suite_time_profile.py --top 40

Compiles in subprocesses (the CLI's, Ray's workers) are not seen: their tests show as "rest".
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path

import pytest

COMPILE = "/jax/core/compile/backend_compile_duration"
TRACE = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration")
DEFAULT_DIR = Path(__file__).parent / "results" / "suite_time_profile"

_test = {"id": "<collection>"}
_seconds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def _on_duration(event: str, seconds: float, **_) -> None:
    counts = _seconds[_test["id"]]
    if event == COMPILE:
        counts["compile_s"] += seconds
        counts["compiles"] += 1
        counts["compiles_over_1s"] += seconds > 1.0
    elif event in TRACE:
        counts["trace_s"] += seconds


def pytest_configure(config) -> None:
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_on_duration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _test["id"] = item.nodeid
    start = time.perf_counter()
    yield
    _seconds[item.nodeid]["wall_s"] += time.perf_counter() - start
    _test["id"] = "<between tests>"


def pytest_unconfigure(config) -> None:
    folder = Path(os.environ.get("TEST_TIME_PROFILE_DIR", DEFAULT_DIR))
    folder.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(folder / f"worker_{worker}.jsonl", "w") as out:
        for test, counts in _seconds.items():
            out.write(json.dumps({"test": test, **counts}) + "\n")


def summarize(folder: Path, top: int) -> None:
    """Print the totals, each module's and the ``top`` tests' seconds."""
    rows = [json.loads(line) for path in sorted(folder.glob("worker_*.jsonl")) for line in path.open()]
    for row in rows:
        row["rest_s"] = row.get("wall_s", 0) - row.get("compile_s", 0) - row.get("trace_s", 0)
    keys = ("wall_s", "compile_s", "trace_s", "rest_s")
    print("all tests:", "  ".join(f"{k} {sum(r.get(k, 0) for r in rows):.0f}" for k in keys))
    modules = collections.defaultdict(collections.Counter)
    for row in rows:
        modules[row["test"].split("::")[0]].update({k: row.get(k, 0) for k in keys})
    print(f"\n{'module':44s}" + "".join(f"{k:>11s}" for k in keys))
    for module, counts in sorted(modules.items(), key=lambda kv: -kv[1]["wall_s"]):
        print(f"{module:44s}" + "".join(f"{counts[k]:11.1f}" for k in keys))
    print(f"\n{'test':100s}" + "".join(f"{k:>11s}" for k in keys))
    for row in sorted(rows, key=lambda r: -r.get("wall_s", 0))[:top]:
        print(f"{row['test'][:100]:100s}" + "".join(f"{row.get(k, 0):11.1f}" for k in keys))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", type=Path, default=Path(os.environ.get("TEST_TIME_PROFILE_DIR", DEFAULT_DIR)))
    p.add_argument("--top", type=int, default=40, help="tests listed (default 40)")
    args = p.parse_args()
    summarize(args.dir, args.top)


if __name__ == "__main__":
    main()
