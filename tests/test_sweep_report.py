"""``multiverse-jax-report``: ranking and plotting a sweep directory (synthetic, no simulation)."""

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.report import sweep_report
from multiverse_jax.report.sweep_report import (
    best_points,
    column_roles,
    default_metric,
    load_results,
    main,
    swept_parameters,
)
from multiverse_jax.sweep.results import METRICS as RESULT_METRICS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
METRICS = list(RESULT_METRICS)
CONFIG = ["topology.kind", "topology.k", "cc", "lb", "switch.buffer_bytes", "dcqcn.g", "output.plots", "workload.path"]
INVALID_REASON = "switch.buffer_bytes=400000 exceeds the switch's shared memory (262144 bytes)"

# (cc, buffer, status, job_time_us): the best is job 4, then 3, 1, 2, 0; job 5 is invalid.
POINTS = [
    ("none", 100_000, "ok", 50.0),
    ("none", 200_000, "ok", 30.0),
    ("none", 400_000, "ok", 40.0),
    ("dcqcn", 100_000, "ok", 20.0),
    ("dcqcn", 200_000, "ok", 10.0),
    ("dcqcn", 400_000, "invalid", math.nan),
]
BEST_ORDER = [4, 3, 1, 2, 0]


def _write_flows(job_dir, scale: float) -> None:
    """A job directory's flows.parquet: four flows, one unfinished."""
    job_dir.mkdir(parents=True, exist_ok=True)
    fct = np.array([1.0, 2.0, 3.0, np.nan]) * scale
    pq.write_table(
        pa.table(
            {
                "id": np.arange(4),
                "src": np.zeros(4, np.int64),
                "dst": np.ones(4, np.int64),
                "size_bytes": np.full(4, 4096, np.int64),
                "start_us": np.zeros(4),
                "finish_us": fct,
                "rx_finish_us": fct,
                "fct_us": fct,
            }
        ),
        job_dir / "flows.parquet",
    )


def write_sweep(sweep_dir, points=POINTS, *, metadata: bool = True, iteration: bool = False):
    """A sweep directory as a sweep writes it: results.parquet plus a job dir per ok/failed point."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    n = len(points)
    columns = {
        "job_num": pa.array(range(n), pa.int64()),
        "job_dir": pa.array([str(i) for i in range(n)], pa.string()),
        "overrides": pa.array([f"cc={cc} switch.buffer_bytes={buf}" if n > 1 else "" for cc, buf, _, _ in points]),
        "point_key": pa.array([f"{i:016x}" for i in range(n)]),
        "status": pa.array([status for _, _, status, _ in points]),
        "reason": pa.array(["" if status == "ok" else INVALID_REASON for _, _, status, _ in points]),
        "topology.kind": pa.array(["fat_tree"] * n),
        "topology.k": pa.array([4] * n, pa.int64()),
        "cc": pa.array([cc for cc, _, _, _ in points]),
        "lb": pa.array(["ecmp"] * n),
        "switch.buffer_bytes": pa.array([buf for _, buf, _, _ in points], pa.int64()),
        "dcqcn.g": pa.array([0.0625] * n, pa.float64()),
        "output.plots": pa.array([False] * n, pa.bool_()),
        "workload.path": pa.array([None] * n, pa.string()),
    }
    for name in METRICS:
        values = []
        for i, (_, _, status, job_time) in enumerate(points):
            if status != "ok":
                values.append(math.nan)
            elif name == "job_time_us":
                values.append(job_time)
            elif name == "iteration_time_us":
                values.append(job_time * 2 if iteration else math.nan)
            elif name == "fct_p99_us":
                values.append(job_time / 2)
            else:
                values.append(float(i))
        columns[name] = pa.array(values, pa.float64())
    table = pa.table(columns)
    if metadata:
        meta = {"config_columns": CONFIG, "metric_columns": METRICS}
        table = table.replace_schema_metadata({b"multiverse_jax": json.dumps(meta).encode()})
    pq.write_table(table, sweep_dir / "results.parquet")
    for i, (_, _, status, job_time) in enumerate(points):
        if status in ("ok", "failed"):
            _write_flows(sweep_dir / str(i), scale=job_time / 10)
    return sweep_dir


@pytest.fixture
def sweep(tmp_path):
    return write_sweep(tmp_path / "sweep")


def test_load_results_reads_the_table_and_its_metadata(sweep):
    table = load_results(sweep)
    assert table.num_rows == len(POINTS)
    config, metrics = column_roles(table)
    assert config == CONFIG
    assert metrics == METRICS


def test_load_results_names_a_missing_path(tmp_path):
    with pytest.raises(InputError, match="does not exist") as info:
        load_results(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="results.parquet"):
        load_results(tmp_path / "empty")


def test_load_results_names_an_unreadable_file(tmp_path):
    (tmp_path / "results.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot read") as info:
        load_results(tmp_path)
    assert str(tmp_path / "results.parquet") in str(info.value)


def test_swept_parameters_are_cc_and_buffer(sweep):
    assert swept_parameters(load_results(sweep)) == ["cc", "switch.buffer_bytes"]


def test_swept_parameters_count_null_as_a_value(sweep):
    table = load_results(sweep)
    paths = pa.array(["a.csv"] + [None] * (table.num_rows - 1), pa.string())
    table = table.set_column(table.column_names.index("workload.path"), "workload.path", paths)
    assert swept_parameters(table) == ["cc", "switch.buffer_bytes", "workload.path"]


def test_column_roles_fall_back_on_names_without_metadata(tmp_path):
    table = load_results(write_sweep(tmp_path / "sweep", metadata=False))
    config, metrics = column_roles(table)
    assert metrics == METRICS
    assert config == CONFIG
    assert swept_parameters(table) == ["cc", "switch.buffer_bytes"]


def test_best_points_order_and_invalid_excluded(sweep):
    table = load_results(sweep)
    # Give the invalid point the lowest metric of all: it must still be left out.
    column = table.column_names.index("job_time_us")
    values = table.column("job_time_us").to_pylist()
    values[5] = 1.0
    table = table.set_column(column, "job_time_us", pa.array(values, pa.float64()))
    best = best_points(table, "job_time_us", top=10)
    assert [row["job_num"] for row in best] == BEST_ORDER
    assert all(row["status"] == "ok" for row in best)
    assert [row["job_num"] for row in best_points(table, "job_time_us", top=2)] == BEST_ORDER[:2]
    with pytest.raises(InputError, match="job_time_us"):
        best_points(table, "no_such_metric", top=3)


def test_default_metric_prefers_a_finite_iteration_time(tmp_path):
    assert default_metric(load_results(write_sweep(tmp_path / "a"))) == "job_time_us"
    assert default_metric(load_results(write_sweep(tmp_path / "b", iteration=True))) == "iteration_time_us"


def test_cdf_points_keep_the_best_and_worst_when_too_many():
    metric = np.random.default_rng(0).permutation(20)
    rows = [{"status": "ok", "job_num": i, "m": float(v)} for i, v in enumerate(metric)]
    chosen, selected = sweep_report._cdf_points(pa.Table.from_pylist(rows), "m")
    assert selected
    assert [r["m"] for r in chosen] == [0, 1, 2, 3, 4, 5, 14, 15, 16, 17, 18, 19]
    chosen, selected = sweep_report._cdf_points(pa.Table.from_pylist(rows[:12]), "m")
    assert not selected and len(chosen) == 12


def _assert_png(path):
    assert path.is_file(), path
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_MAGIC)


def test_main_prints_the_best_point_and_the_invalid_reason(sweep, capsys):
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "best: job 4: cc=dcqcn switch.buffer_bytes=200000" in out
    assert "by job_time_us" in out
    assert INVALID_REASON in out
    assert "6 points: 5 ok, 1 invalid" in out
    report = sweep / "report"
    for name in ("metric_vs_params.png", "fct_cdf.png", "parallel_coordinates.png"):
        _assert_png(report / name)
        assert str(report / name) in out


def test_main_writes_into_out_and_ranks_by_metric(sweep, tmp_path, capsys):
    out_dir = tmp_path / "elsewhere" / "plots"
    assert main([str(sweep), "--metric", "fct_p99_us", "--top", "2", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "best 2 points by fct_p99_us" in out
    assert "best: job 4:" in out
    for name in ("metric_vs_params.png", "fct_cdf.png", "parallel_coordinates.png"):
        _assert_png(out_dir / name)
    assert not (sweep / "report").exists()


def test_main_missing_dir_is_exit_2_naming_the_path(tmp_path, capsys):
    missing = tmp_path / "no_sweep_here"
    assert main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err
    assert str(missing) in err


def test_main_unknown_metric_is_exit_2_listing_the_metrics(sweep, capsys):
    assert main([str(sweep), "--metric", "goodput"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "goodput" in err
    assert "job_time_us" in err and "fct_p99_us" in err
    assert not (sweep / "report").exists()


def test_main_single_point_skips_the_swept_plots(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "one", points=[("dcqcn", 200_000, "ok", 10.0)])
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "no swept parameter" in out
    report = sweep / "report"
    assert not (report / "parallel_coordinates.png").exists()
    assert not (report / "metric_vs_params.png").exists()
    _assert_png(report / "fct_cdf.png")


def test_main_metric_without_values_skips_the_swept_plots(sweep, capsys):
    # iteration_time_us is NaN everywhere in this sweep: nothing to rank or to colour by.
    assert main([str(sweep), "--metric", "iteration_time_us"]) == 0
    out = capsys.readouterr().out
    assert "no ok point has a finite iteration_time_us" in out
    report = sweep / "report"
    assert not (report / "parallel_coordinates.png").exists()
    assert not (report / "metric_vs_params.png").exists()
    _assert_png(report / "fct_cdf.png")


def test_where_selects_points_by_column_value(sweep, capsys):
    from multiverse_jax.report.sweep_report import select

    table = load_results(sweep)
    none = select(table, ["cc=none"])
    assert set(none.column("cc").to_pylist()) == {"none"} and 0 < none.num_rows < table.num_rows
    both = select(table, ["cc=dcqcn", "switch.buffer_bytes=2e5"])  # numbers compare as numbers
    assert both.column("switch.buffer_bytes").to_pylist() == [200000] * both.num_rows and both.num_rows >= 1
    with pytest.raises(InputError, match="--where 'nope=1'"):
        select(table, ["nope=1"])
    assert main([str(sweep), "--where", "cc=none"]) == 0
    out = capsys.readouterr().out
    assert "where cc=none" in out and "best: job" in out and "cc=dcqcn" not in out.split("best: job")[1].splitlines()[0]
    assert main([str(sweep), "--where", "cc"]) == 2


def test_metric_vs_failed_link(tmp_path, capsys):
    """A sweep over single-link failures (``multiverse-jax-failures``): one bar per link
    set, the healthy fabric first, labels from the JSON cells of the results table."""
    from multiverse_jax.sweep.results import flatten

    # The sweep's table keeps both keys whole, as JSON (not a column per cable).
    point = {"topology": {"links_down": ["agg0-core0"], "link_rates_gbps": {"agg1-core1": 25.0}}}
    assert flatten(point) == {"topology.links_down": '["agg0-core0"]', "topology.link_rates_gbps": '{"agg1-core1": 25.0}'}
    down = ["[]", '["agg0-core0"]', '["agg0-core2"]', "[]"]
    rates = ["{}", "{}", "{}", '{"agg1-core1": 25.0}']
    n = len(down)
    table = pa.table(
        {
            "job_num": pa.array(range(n), pa.int64()),
            "job_dir": pa.array([str(i) for i in range(n)]),
            "overrides": pa.array([""] * n),
            "status": pa.array(["ok"] * n),
            "reason": pa.array([""] * n),
            "topology.links_down": pa.array(down),
            "topology.link_rates_gbps": pa.array(rates),
            "job_time_us": pa.array([10.0, 12.0, 11.0, 13.0]),
        }
    )
    meta = {"config_columns": ["topology.links_down", "topology.link_rates_gbps"], "metric_columns": ["job_time_us"]}
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    pq.write_table(table.replace_schema_metadata({b"multiverse_jax": json.dumps(meta).encode()}), sweep / "results.parquet")
    labels = [sweep_report.failed_link_label(row) for row in table.to_pylist()]
    assert labels == ["healthy", "agg0-core0", "agg0-core2", "agg1-core1 25G"]
    assert main([str(sweep)]) == 0
    _assert_png(sweep / "report" / "metric_vs_failed_link.png")
