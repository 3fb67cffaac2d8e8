"""Refactors keep results: three runs whose outputs must stay the same, bit for bit.

The digests were first taken from the outputs of commit e15ec61 (before the config /
component refactor of issue 10, which kept them bit for bit) and retaken once, when PFC
became exact (issue 11: a pause at the crossing arrival, not at the window end), which
moved them: default run job time 353.78 -> 353.16 us (-0.18 %), 78 -> 83 pauses; HPCC
incast job time 348.05 -> 330.74 us (-5.0 %), FCT p99 342.09 -> 325.16 us; small LLM
iteration 3241.88 -> 3242.97 us (+0.03 %), 370 -> 389 pauses; and retaken again when ties
became those of an event list (issue 11: simultaneous arrivals at a FIFO in the order their
events were scheduled, NIC round robin as htsim's, PFC counting an arrival before a
departure at the same instant): default run job time unchanged (353.16 us, 83 pauses),
per-flow finish times moved; HPCC incast job time 330.74 -> 336.05 us (+1.6 %), FCT p99
325.16 -> 331.52 us; small LLM iteration 3242.97 -> 3237.03 us (-0.18 %), 389 -> 394
pauses. They guard every change
since: the default run, an HPCC incast and a small LLM iteration, through the same path
as the ``multiverse-jax`` command (the LLM run with plots and progress lines, which its
output test here also reads: one simulation for both). A digest covers the
figures that existed then: the columns of ``fct.csv`` named in ``FCT_COLUMNS`` (new columns
may be added next to them) and the summary keys listed below.
"""

import contextlib
import csv
import hashlib
import io
import json

import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_module

from multiverse_jax.cli import run

FCT_COLUMNS = ("id", "src", "dst", "size_bytes", "start_us", "finish_us", "rx_finish_us", "fct_us")
SUMMARY_KEYS = (
    "status", "error", "n_flows", "flows_finished", "job_time_us", "simulated_time_us", "fct_mean_us",
    "fct_p50_us", "fct_p99_us", "max_queue_bytes", "pfc_pauses", "bytes_on_wire", "n_windows", "n_packet_hops",
    "iteration_time_us", "compute_us", "exposed_comm_us", "bubble_us", "topology",
)
TINY_MODEL = "workload.model={layers:4,hidden:512,heads:8,seq_len:256,vocab:1000}"

RUNS = {
    "default": [],
    "hpcc_incast": ["workload=incast", "cc=hpcc", "workload.flow_bytes=300000"],
    "llm_small": ["workload=llm", TINY_MODEL, "workload.tp=2", "workload.pp=2", "workload.dp=4"],
}


def digests(run_dir) -> tuple[str, str]:
    """sha256 of the FCT table's original columns and of the summary's original figures."""
    with open(run_dir / "fct.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    fct_text = "\n".join(",".join(row[c] for c in FCT_COLUMNS) for row in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    figures = {key: summary[key] for key in SUMMARY_KEYS if key in summary}
    summary_text = json.dumps(figures, sort_keys=True)
    return hashlib.sha256(fct_text.encode()).hexdigest(), hashlib.sha256(summary_text.encode()).hexdigest()


EXPECTED = {
    "default": (
        "b3244b787d16e9632e6971c7beb9b9671fb13e6de02b28cecb731aaceb131d90",
        "238bd63528f9c4610e583e1ccb09c88e909c7e1a1d92c446fa3fee2aa3531b07",
    ),
    "hpcc_incast": (
        "ab0666b61e58a19d40f818bdf0fdb19316061bbe42dda26ce780ced37131b0a1",
        "026f7f2c4a19f21872d307845d61d9e7ec9c0cbf9ba20d13e6af808273342f15",
    ),
    "llm_small": (
        "ac27785ed1275afd3e2ffcd7fc966a006d0a3223a71343022f27dd4bc92eae0f",
        "b6b925dd05d21d6760477f52170a11f4bca73db7fc19a958e7380dd921dae986",
    ),
}


def run_cli(run_dir, *overrides) -> int:
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        return run(compose("config", overrides=list(overrides)), run_dir)


@pytest.fixture(scope="module")
def llm_small(tmp_path_factory):
    """The small LLM iteration run once for this module's tests: with plots (the task
    timeline) and, off a terminal, a progress line after every compiled call; its folder,
    exit code and progress lines (stderr)."""
    run_dir = tmp_path_factory.mktemp("llm_small")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = run_cli(run_dir, *RUNS["llm_small"], "output.progress_interval_s=1e-9")
    return run_dir, code, [line for line in stderr.getvalue().splitlines() if line.startswith("simulating")]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_outputs_unchanged_by_refactors(name, tmp_path, request):
    if name == "llm_small":  # the module's run (plots and progress lines change no figure)
        run_dir, code, _ = request.getfixturevalue("llm_small")
    else:
        run_dir, code = tmp_path, run_cli(tmp_path, "output=minimal", *RUNS[name])
    assert code == 0
    assert digests(run_dir) == EXPECTED[name]


def test_llm_iteration_writes_tasks_timeline_and_split(llm_small):
    """A tiny transformer with TP=2, PP=2, DP=4 on the 16 hosts of a k=4 fat-tree: the
    iteration's split, its task table and timeline; off a terminal, a progress line after
    every compiled call."""
    run_dir, code, lines = llm_small
    assert code == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok"
    split = summary["compute_us"] + summary["exposed_comm_us"] + summary["bubble_us"]
    assert split == pytest.approx(summary["iteration_time_us"])
    assert summary["compute_us"] > 0 and summary["exposed_comm_us"] > 0
    tasks = pq.read_table(run_dir / "tasks.parquet").to_pydict()
    assert {"tp", "pp", "dp", "compute"} <= set(tasks["category"])
    assert max(tasks["finish_us"]) == summary["iteration_time_us"]
    assert max(tasks["finish_ps"]) == summary["iteration_time_ps"] and min(tasks["start_ps"]) >= 0
    assert (run_dir / "timeline.png").stat().st_size > 0
    n = len(tasks["category"])
    assert len(lines) > 2 and all(f"/{n:,} tasks (" in line and " · simulated " in line for line in lines)
    assert all("windows/s" in line for line in lines[1:])  # rates start at the first report
    assert "ETA" in lines[1] and lines[-1].startswith(f"simulating ended: {n:,}/{n:,} tasks (100%) · simulated ")
