"""Refactors keep results: three runs whose outputs must stay the same, bit for bit.

The digests were taken from the outputs of commit e15ec61 (before the config / component
refactor) and guard every change since: the default run, an HPCC incast and a small LLM
iteration, through the same path as the ``multiverse-jax`` command. A digest covers the
figures that existed then: the columns of ``fct.csv`` named in ``FCT_COLUMNS`` (new columns
may be added next to them) and the summary keys listed below.
"""

import csv
import hashlib
import json

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
        "58ecb347c4befec72882f37e918782fca95a5221c47a945096495cfb72a5e04f",
        "0240584cce42d8bb3e8a5b8d7b9130f3dbefb14b0754a8fbf6e39c52db0e4967",
    ),
    "hpcc_incast": (
        "1435a8d1aaa23242431ad00cd6a2d83328de8db686fd16721d9e84bb6ab34382",
        "b09d7a20ae3a289e601c81ad680b24dd8fbd00ffd5e8fa3e87e38caadca8b33b",
    ),
    "llm_small": (
        "b1ba70c603ca5e15e76fbf36ed77d8652e4cd3f57965ed45c5d661d66f5d6c1a",
        "02cebafbd22b8556e5aa8bde092b8ff14fdb52c498b4a74fc35f5c455564054f",
    ),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_outputs_unchanged_by_refactors(name, tmp_path):
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        cfg = compose("config", overrides=["output=minimal", *RUNS[name]])
    assert run(cfg, tmp_path) == 0
    assert digests(tmp_path) == EXPECTED[name]
