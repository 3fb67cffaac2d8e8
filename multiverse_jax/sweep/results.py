"""The sweep's results table: one row per design point, ``SWEEP_DIR/results.parquet``.

Columns (``multiverse-jax-report`` reads them; the roles are also in the Parquet schema
metadata under ``multiverse_jax``):

* bookkeeping: ``job_num``, ``job_dir`` (relative to the sweep dir), ``overrides`` (the
  point's command-line overrides, space-separated), ``point_key`` (hash of the point's
  resolved config: what resume matches on), ``status`` (ok | failed | oom | invalid),
  ``reason`` ('' when ok), ``group`` (which batched program ran it, -1 if none) and
  ``batch_size`` (points in that program);
* config: every config value by dotted key (``topology.k``, ``cc``, ``dcqcn.g`` ...);
  values that are not scalars (a model given as a dict) as JSON text;
* metrics (NaN where they do not apply): see ``METRICS``.

The table is rewritten (to a temporary file, then renamed) each time a group of points
finishes, so a sweep that is killed keeps every finished point and a re-run resumes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

TABLE_FILE = "results.parquet"
BOOKKEEPING = ("job_num", "job_dir", "overrides", "point_key", "status", "reason", "group", "batch_size")
METRICS = (
    "job_time_us", "fct_mean_us", "fct_p50_us", "fct_p99_us", "max_queue_bytes", "pfc_pauses",
    "simulated_time_us", "n_flows", "flows_finished", "skip_share", "iteration_time_us", "compute_us",
    "exposed_comm_us", "bubble_us", "overflow_ports", "overflow_events", "max_excess_bytes", "over_buffer_us",
    "wall_s", "n_windows", "n_packet_hops", "packet_hops_skipped", "steady_entries",
    "switch_ports", "switches", "cables", "max_radix",  # topology/cost.py: what the fabric costs
)
FINISHED = ("ok", "failed", "oom", "invalid")  # statuses a resumed sweep does not redo


# Keys that change what is printed or where compiled programs are kept, not the point.
DISPLAY_ONLY = (("output", "progress_interval_s"), ("sim", "compile_cache"))


def point_key(config: dict) -> str:
    """A stable hash of a resolved config (what makes two points the same point), leaving
    out ``DISPLAY_ONLY`` keys: a re-run with another progress cadence still resumes."""
    config = {**config}
    for group, key in DISPLAY_ONLY:
        if isinstance(config.get(group), dict) and key in config[group]:
            config[group] = {k: v for k, v in config[group].items() if k != key}
    return hashlib.sha1(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


# Dict-valued keys kept whole (one JSON column), not split into a column per dict key: a
# model spec, and the cables of topology.link_rates_gbps (which differ from point to point).
WHOLE_DICT_KEYS = ("workload.model", "topology.link_rates_gbps")


def flatten(config: dict, prefix: str = "") -> dict:
    """``{"switch": {"buffer_bytes": 1}}`` -> ``{"switch.buffer_bytes": 1}``; lists (and the
    dicts of ``WHOLE_DICT_KEYS``) as JSON."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in WHOLE_DICT_KEYS:
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (dict, list, tuple)):
            out[name] = json.dumps(value, sort_keys=True)
        else:
            out[name] = value
    return out


def metrics_of(summary: dict | None) -> dict:
    summary = summary or {}
    out = {}
    for name in METRICS:
        value = summary.get(name)
        if name == "wall_s":
            value = summary.get("batch_wall_s")
        if name == "skip_share":  # share of the flows' time spent at flow level (sim.mode=hybrid; packet: none)
            value = summary.get("flow_level_share", 0.0 if summary.get("status") in ("ok", "failed") else None)
        out[name] = float(value) if isinstance(value, (int, float)) else math.nan
    return out


def _column(values: list):
    """A pyarrow array; a column whose non-null values mix types becomes text."""
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float} and float in kinds:
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    if len(kinds) > 1:
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    return pa.array(values)


class ResultsTable:
    """The rows of one sweep, kept in memory and mirrored to ``SWEEP_DIR/results.parquet``."""

    def __init__(self, sweep_dir):
        self.path = Path(sweep_dir) / TABLE_FILE
        self.rows: dict[str, dict] = {}  # point_key -> row
        self.config_columns: list[str] = []
        if self.path.exists():
            table = pq.read_table(self.path)
            meta = json.loads((table.schema.metadata or {}).get(b"multiverse_jax", b"{}"))
            self.config_columns = list(meta.get("config_columns", []))
            for row in table.to_pylist():
                self.rows[row["point_key"]] = row

    def finished(self, key: str) -> dict | None:
        """The stored row of a finished point, or None."""
        row = self.rows.get(key)
        return row if row is not None and row.get("status") in FINISHED else None

    def add(self, *, job_num, job_dir, overrides, key, status, reason, config, summary, group=-1, batch_size=0):
        flat = flatten(config) if config else {}
        for name in flat:
            if name not in self.config_columns:
                self.config_columns.append(name)
        # A point that replaces another at the same job number (the sweep was edited): the
        # old row no longer belongs to this sweep.
        for old in [k for k, row in self.rows.items() if row["job_num"] == int(job_num) and k != key]:
            del self.rows[old]
        self.rows[key] = {
            "job_num": int(job_num),
            "job_dir": str(job_dir),
            "overrides": " ".join(overrides),
            "point_key": key,
            "status": status,
            "reason": reason,
            "group": int(group),
            "batch_size": int(batch_size),
            **flat,
            **metrics_of(summary),
        }

    def write(self) -> Path:
        """Write every row (sorted by job number) atomically."""
        rows = list(self.rows.values())
        names = list(BOOKKEEPING) + self.config_columns + list(METRICS)
        columns = {name: _column([row.get(name) for row in rows]) for name in names}
        meta = {"config_columns": self.config_columns, "metric_columns": list(METRICS)}
        table = pa.table(columns).sort_by("job_num").replace_schema_metadata({"multiverse_jax": json.dumps(meta)})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, self.path)
        return self.path
