"""The ``multiverse-jax-report`` command: rank and plot the design points of a sweep.

    multiverse-jax-report SWEEP_DIR [--metric job_time_us] [--top 10] [--out DIR]
    python -m multiverse_jax.report.sweep_report SWEEP_DIR ...

Inputs (written by a sweep into ``SWEEP_DIR``):

* ``results.parquet``: one row per design point. Bookkeeping columns ``job_num``,
  ``job_dir`` (the point's job directory, relative to ``SWEEP_DIR``), ``overrides`` (the
  point's config overrides as one string), ``point_key``, ``status`` (ok, failed, oom or
  invalid) and ``reason`` ('' when ok); one column per config value, by dotted key
  (``topology.k``, ``cc``, ``switch.buffer_bytes``, ...; non-scalar values as JSON
  strings); one double column per metric (``job_time_us``, ``fct_p99_us``, ...; NaN where
  it does not apply). The schema metadata key ``multiverse_jax`` holds the JSON
  ``{"config_columns": [...], "metric_columns": [...]}`` that says which column is which;
  without it, the metrics are the known metric names present and the config columns are
  those with a '.' in their name, plus ``cc`` and ``lb`` (``column_roles``).
* ``SWEEP_DIR/<job_dir>/flows.parquet`` of each ok point: the run's per-flow table, of
  which the flow completion times ``fct_us`` (µs, NaN for unfinished flows) are read.

Outputs: on stdout a table of the ``--top`` best ok points by ``--metric`` (lowest
first), the number of points by status and the points that are not ok with their reason;
in ``--out`` (default ``SWEEP_DIR/report/``):

* ``metric_vs_params.png``: the metric against each swept parameter (``swept_parameters``);
* ``fct_cdf.png``: the FCT CDFs of the ok points overlaid (at most ``MAX_CDF_CURVES``: the
  best and the worst half of that by the metric when there are more);
* ``parallel_coordinates.png``: the design space, one axis per swept parameter plus the
  metric, one line per ok point coloured by the metric;
* ``metric_vs_failed_link.png``, when the sweep varies ``topology.links_down``,
  ``topology.link_rates_gbps`` or ``topology.link_events`` (e.g. ``multiverse-jax-failures``' sweep): one bar per
  failed (or degraded) link set, the metric's mean over its points, the healthy fabric first.

With no swept parameter (a single design point) the first and the last are skipped.

For a search (``hydra/sweeper=optuna``: ``SWEEP_DIR/search.json`` names its objectives),
the default metric is the first objective; ``optimization_history.png`` and, for two
objectives, ``pareto_front.png`` are added and the front is printed
(``report/search_report.py``).

Exit codes: 0 success; 2 bad input (a missing directory or file, an unreadable file, an
unknown metric), reported in one line on stderr without a traceback.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from multiverse_jax.errors import InputError
from multiverse_jax.report.figure import new_figure, save
from multiverse_jax.report.plot import positive_int, read_checked
from multiverse_jax.report.search_report import front_rows, write_search_plots
from multiverse_jax.sweep.results import BOOKKEEPING, METRICS, TABLE_FILE
from multiverse_jax.sweep.search import read_search_file
from multiverse_jax.topology.failures import DOWN_KEY, EVENTS_KEY, RATES_KEY
from multiverse_jax.topology.link_events import as_link_events

PROG = "multiverse-jax-report"
EXIT_BAD_INPUT = 2

RESULTS_FILE = TABLE_FILE
FLOWS_FILE = "flows.parquet"  # a job directory's per-flow table (report.outputs.write_outputs)
REPORT_DIR = "report"  # default output directory, under SWEEP_DIR
METADATA_KEY = b"multiverse_jax"  # schema metadata: {"config_columns": [...], "metric_columns": [...]}

METRIC_VS_PARAMS_FILE = "metric_vs_params.png"
FCT_CDF_FILE = "fct_cdf.png"
PARALLEL_FILE = "parallel_coordinates.png"
FAILED_LINK_FILE = "metric_vs_failed_link.png"
LINK_KEYS = (DOWN_KEY, RATES_KEY, EVENTS_KEY)  # the config keys of failed / degraded links
HEALTHY = "healthy"  # the bar of the points with no link down or degraded

STATUS_OK = "ok"
STATUSES = ("ok", "failed", "oom", "invalid")  # the order the status counts are printed in
BOOKKEEPING_COLUMNS = BOOKKEEPING  # job number, directory, overrides, key, status, reason, group
REQUIRED_COLUMNS = ("job_dir", "overrides", "status")  # what the report cannot do without
# The metric columns a sweep writes; only the fallback when the schema metadata is absent.
KNOWN_METRICS = METRICS
FALLBACK_CONFIG_NAMES = ("cc", "lb")  # config columns without a '.' in their name

MAX_CDF_CURVES = 12  # more ok points: the best and the worst MAX_CDF_CURVES // 2
MAX_LISTED_PROBLEMS = 20  # non-ok points listed with their reason
MAX_AXIS_LABELS = 12  # categorical axis of the parallel coordinates: label at most this many values
LOG_DECADES = 2.0  # a positive numeric axis spanning more decades than this is drawn in log scale


# --------------------------------------------------------------------------------------------
# Reading the sweep
# --------------------------------------------------------------------------------------------


def load_results(sweep_dir) -> pa.Table:
    """``SWEEP_DIR/results.parquet`` as a table; InputError naming the path if absent or unreadable."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        what = "is not a directory" if sweep_dir.exists() else "does not exist"
        raise InputError(f"sweep directory {sweep_dir} {what} (expected a sweep directory with {RESULTS_FILE})")
    path = sweep_dir / RESULTS_FILE
    if not path.is_file():
        raise InputError(f"{sweep_dir} has no {RESULTS_FILE} (expected the results of a multiverse-jax sweep)")
    return read_checked(path, REQUIRED_COLUMNS, InputError)


def column_roles(table: pa.Table) -> tuple[list[str], list[str]]:
    """(config columns, metric columns) of a results table, each in table order.

    From the schema metadata when it is there and well formed (names the table lacks are
    dropped); otherwise the metrics are the ``KNOWN_METRICS`` present and the config
    columns are those whose name has a '.' or is ``cc``/``lb``, minus bookkeeping and metrics.
    """
    names = table.column_names
    roles = None
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is not None:
        try:
            meta = json.loads(raw)
            config, metrics = meta["config_columns"], meta["metric_columns"]
            if all(isinstance(c, str) for c in [*config, *metrics]):
                roles = set(config), set(metrics)
        except (ValueError, TypeError, KeyError):
            roles = None  # malformed metadata: fall back on the column names
    if roles is None:
        metrics = set(KNOWN_METRICS) & set(names)
        config = {
            n
            for n in names
            if ("." in n or n in FALLBACK_CONFIG_NAMES) and n not in BOOKKEEPING_COLUMNS and n not in metrics
        }
        roles = config, metrics
    config, metrics = roles
    return [n for n in names if n in config], [n for n in names if n in metrics]


def metric_columns(table: pa.Table) -> list[str]:
    return column_roles(table)[1]


def config_columns(table: pa.Table) -> list[str]:
    return column_roles(table)[0]


def _hashable(value):
    """A set key for a cell: NaN equal to NaN, lists and dicts (unencoded non-scalars) as JSON."""
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, (list, dict)):
        return ("json", json.dumps(value, sort_keys=True, default=str))
    return (type(value).__name__, value) if isinstance(value, bool) else value


def swept_parameters(table: pa.Table) -> list[str]:
    """The config columns with more than one distinct value over the points that have a config
    (null counts as a value; a point invalid before its config resolved has none)."""
    columns = config_columns(table)
    rows = table.select(columns).to_pylist()
    rows = [row for row in rows if any(v is not None for v in row.values())]
    return [c for c in columns if len({_hashable(row[c]) for row in rows}) > 1]


def _as_float(value) -> float:
    """A metric cell as a float: null (None) as NaN."""
    return float("nan") if value is None else float(value)


def _check_metric(table: pa.Table, metric: str) -> None:
    valid = metric_columns(table)
    if metric not in valid:
        raise InputError(f"unknown metric {metric!r} (metric columns: {', '.join(valid) or 'none'})")


def _is_ok(table: pa.Table) -> pa.ChunkedArray:
    """Per point: its status is ok (a null status is not)."""
    return pc.fill_null(pc.equal(table["status"], STATUS_OK), False)


def _ok(table: pa.Table) -> pa.Table:
    """The points whose status is ok, in table order."""
    return table.filter(_is_ok(table))


def _finite(table: pa.Table, metric: str) -> pa.ChunkedArray:
    """Per point: ``metric`` is a finite number (not NaN, not null)."""
    return pc.fill_null(pc.is_finite(pc.cast(table[metric], pa.float64(), safe=False)), False)


def _ok_with(table: pa.Table, metric: str) -> pa.Table:
    """The ok points with a finite ``metric``, in table order."""
    ok = _ok(table)
    return ok.filter(_finite(ok, metric))


def best_points(table: pa.Table, metric: str, top: int = 10) -> list[dict]:
    """The ``top`` ok points with the lowest finite ``metric``, best first, as row dicts.

    Points whose metric is NaN or null are left out; ties keep the table order (the sort
    is stable). An unknown metric is an InputError listing the metric columns.
    """
    _check_metric(table, metric)
    return _ok_with(table, metric).sort_by(metric).slice(0, max(0, int(top))).to_pylist()


def default_metric(table: pa.Table) -> str:
    """``iteration_time_us`` if some ok point has a finite one, else ``job_time_us``
    (else the first metric column, when a sweep has neither)."""
    metrics = metric_columns(table)
    if "iteration_time_us" in metrics and _ok_with(table, "iteration_time_us").num_rows:
        return "iteration_time_us"
    if "job_time_us" in metrics or not metrics:
        return "job_time_us"
    return metrics[0]


# --------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------


def _is_numeric(table: pa.Table, column: str) -> bool:
    """Integer or floating column (booleans and strings are categorical)."""
    kind = table.schema.field(column).type
    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


def _wide_range(values: np.ndarray) -> bool:
    """Positive values spanning more than ``LOG_DECADES`` decades (drawn on a log scale)."""
    values = values[np.isfinite(values)]
    return bool(values.size) and values.min() > 0 and math.log10(values.max() / values.min()) > LOG_DECADES


def _label(value) -> str:
    """Axis text of a config value."""
    if value is None:
        return "null"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _categories(values: list) -> list:
    """The distinct values of a column in display order: sorted, null (and NaN) last."""
    distinct = list({_hashable(v): v for v in values}.values())
    missing = [v for v in distinct if v is None or (isinstance(v, float) and math.isnan(v))]
    present = [v for v in distinct if not (v is None or (isinstance(v, float) and math.isnan(v)))]
    try:
        present.sort()
    except TypeError:  # mixed types
        present.sort(key=str)
    return present + missing


def _numeric_values(rows: list[dict], column: str) -> np.ndarray | None:
    """The column's values as floats, or None if one of them is null or NaN (then drawn as categories)."""
    values = np.array([_as_float(r[column]) for r in rows], float)
    return values if np.isfinite(values).all() else None


def plot_metric_vs_params(table: pa.Table, metric: str, params: list[str], path) -> Path:
    """One subplot per swept parameter: the metric of each ok point against the parameter's value.

    Numeric parameters: a scatter plus the mean per value as a line, sorted by value (log x
    when the values span more than two decades). Categorical ones (strings, booleans, or a
    numeric column with nulls): the points of each category at evenly spaced positions,
    the category mean marked by a bar.
    """
    rows = _ok_with(table, metric).to_pylist()
    y = np.array([_as_float(r[metric]) for r in rows], float)
    ncols = min(3, len(params))
    nrows = math.ceil(len(params) / ncols)
    fig = new_figure(4.2 * ncols, 3.4 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(params) :]:
        ax.set_visible(False)
    for ax, param in zip(axes, params):
        x = _numeric_values(rows, param) if _is_numeric(table, param) else None
        if x is not None:
            ax.scatter(x, y, s=18, alpha=0.6, color="tab:blue", label="points")
            values = np.unique(x)
            means = [y[x == v].mean() for v in values]
            ax.plot(values, means, color="tab:red", lw=1.5, marker="o", ms=4, label="mean")
            if _wide_range(x):
                ax.set_xscale("log")
            elif len(values) <= 8:  # a small grid: tick its values (rotated, they can be long)
                ax.set_xticks(values, [_label(v) for v in _categories([r[param] for r in rows])])
                ax.tick_params(axis="x", labelrotation=30)
            else:
                ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
        else:
            cells = [r[param] for r in rows]
            categories = _categories(cells)
            index = {_hashable(c): i for i, c in enumerate(categories)}
            pos = np.array([index[_hashable(c)] for c in cells], float)
            # A small deterministic spread so that equal metrics of one category stay visible.
            jitter = (np.arange(len(pos)) % 5 - 2) * 0.04
            ax.scatter(pos + jitter, y, s=18, alpha=0.6, color="tab:blue", label="points")
            for i in range(len(categories)):
                if (pos == i).any():
                    ax.scatter([i], [y[pos == i].mean()], marker="_", s=600, lw=2.5, color="tab:red", zorder=3)
            ax.scatter([], [], marker="_", s=100, lw=2.5, color="tab:red", label="mean")
            ax.set_xticks(range(len(categories)), [_label(c) for c in categories])
            ax.set_xlim(-0.5, len(categories) - 0.5)
            if len(categories) > 4:
                ax.tick_params(axis="x", labelrotation=30)
        ax.set_xlabel(param)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
        if not rows:
            ax.text(0.5, 0.5, f"no ok point with a {metric}", ha="center", va="center", transform=ax.transAxes)
    axes[0].legend(fontsize="x-small")
    fig.suptitle(f"{metric} against the swept parameters ({len(rows)} ok points)", fontsize="medium")
    return save(fig, path)


def _decoded(value):
    """A config cell that may hold a list or dict as JSON (the results table's non-scalars)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def failed_link_label(row: dict) -> str:
    """The links a point fails or degrades: ``agg0-core0``, ``agg0-core0 25G``, joined by
    ', '; ``healthy`` when none."""
    down = _decoded(row.get(DOWN_KEY)) or []
    rates = _decoded(row.get(RATES_KEY)) or {}
    events = _decoded(row.get(EVENTS_KEY)) or []
    labels = [*map(str, down), *(f"{cable} {_label(float(gbps))}G" for cable, gbps in rates.items())]
    return ", ".join(labels + [_event_label(e) for e in events]) or HEALTHY


def _event_label(event: dict) -> str:
    """A timed link event of a results row: ``agg0-core0 down@50µs`` (``LinkEvent.label``)."""
    return as_link_events([event])[0].label()


def plot_metric_vs_failed_link(table: pa.Table, metric: str, path) -> Path:
    """One bar per failed (or degraded) link set: the metric's mean over its ok points (each
    point a dot), the healthy fabric first and as a dashed line, the others in table order."""
    rows = _ok_with(table, metric).to_pylist()
    groups: dict[str, list[float]] = {}
    for row in sorted(rows, key=lambda r: failed_link_label(r) != HEALTHY):
        groups.setdefault(failed_link_label(row), []).append(_as_float(row[metric]))
    labels = list(groups)
    fig = new_figure(max(5.0, 0.45 * len(labels) + 2.0), 4.2)
    ax = fig.subplots()
    ax.bar(range(len(labels)), [np.mean(groups[k]) for k in labels], color="tab:blue", alpha=0.7)
    for i, label in enumerate(labels):
        ax.scatter([i] * len(groups[label]), groups[label], s=10, color="black", zorder=3)
    if HEALTHY in groups:
        ax.axhline(np.mean(groups[HEALTHY]), color="tab:red", ls="--", lw=1, label=HEALTHY)
        ax.legend(fontsize="x-small")
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize="x-small")
    ax.set_ylabel(metric)
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{metric} against the failed link ({len(rows)} ok points)", fontsize="medium")
    return save(fig, path)


def _cdf_points(table: pa.Table, metric: str) -> tuple[list[dict], bool]:
    """The ok points whose CDF is drawn (row dicts), best first, and whether that is a selection.

    At most ``MAX_CDF_CURVES``: beyond that, the best and the worst half of that number by
    the metric (points with a NaN metric only fill in when too few have one).
    """
    ok = _ok(table)
    finite = _finite(ok, metric)
    ranked = ok.filter(finite).sort_by(metric).to_pylist()
    unranked = ok.filter(pc.invert(finite)).to_pylist()
    if ok.num_rows <= MAX_CDF_CURVES:
        return ranked + unranked, False
    half = MAX_CDF_CURVES // 2
    if len(ranked) >= MAX_CDF_CURVES:
        return ranked[:half] + ranked[-half:], True
    return ranked + unranked[: MAX_CDF_CURVES - len(ranked)], True


def _read_fct(sweep_dir: Path, row: dict) -> np.ndarray:
    """``fct_us`` of a point's flows.parquet; InputError naming the file if absent or unreadable."""
    import pyarrow.parquet as pq

    if row.get("job_dir") is None:
        raise InputError(f"job {row.get('job_num')} has no job_dir")
    path = sweep_dir / str(row["job_dir"]) / FLOWS_FILE
    if not path.is_file():
        raise InputError(f"{path} does not exist")
    try:
        flows = pq.read_table(path, columns=["fct_us"])
    except Exception as exc:  # a damaged file, or no fct_us column
        raise InputError(f"cannot read fct_us of {path}: {' '.join(str(exc).split())}") from None
    return flows.column("fct_us").to_numpy(zero_copy_only=False).astype(float)


def _cdf_steps(fct_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of the empirical CDF step of ``report.outputs.plot_fct_cdf``: the finished
    flows' completion times against the fraction of all flows (unfinished ones never count)."""
    finished = np.sort(fct_us[~np.isnan(fct_us)])
    fraction = np.arange(1, finished.size + 1) / max(1, fct_us.size)
    return np.concatenate([[0.0], finished]), np.concatenate([[0.0], fraction])


def _point_label(row: dict) -> str:
    return str(row.get("overrides") or "") or f"job {row.get('job_dir')} (defaults)"


def plot_fct_cdfs(sweep_dir, table: pa.Table, metric: str, path) -> tuple[Path | None, list[str]]:
    """The FCT CDFs of the ok points overlaid, one line per point labelled by its overrides.

    Returns (the path, or None when no ok point has a readable flows.parquet, and notes on
    the points left out because their flows.parquet is missing or unreadable).
    """
    import matplotlib

    sweep_dir = Path(sweep_dir)
    chosen, selected = _cdf_points(table, metric)
    curves, notes = [], []
    for row in chosen:
        try:
            curves.append((row, _read_fct(sweep_dir, row)))
        except InputError as exc:
            notes.append(f"no FCT CDF for job {row.get('job_num', row.get('job_dir'))}: {exc}")
    if not curves:
        return None, notes
    fig = new_figure(9, 5.5)
    ax = fig.add_subplot()
    palette = matplotlib.colormaps["tab20" if len(curves) > 10 else "tab10"]
    all_finished = []
    for k, (row, fct) in enumerate(curves):
        x, y = _cdf_steps(fct)
        all_finished.append(x[1:])
        value = _as_float(row[metric])
        shown = f"{value:,.1f}" if math.isfinite(value) else "-"
        ax.step(x, y, where="post", lw=1.2, color=palette(k % palette.N), label=f"{_point_label(row)}  [{shown}]")
    finished = np.concatenate(all_finished)
    if _wide_range(finished):
        ax.set_xscale("log")
    else:
        ax.set_xlim(left=0)
    ax.set_xlabel("flow completion time (µs)")
    ax.set_ylabel("fraction of flows")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    half = MAX_CDF_CURVES // 2
    what = f"{_ok(table).num_rows} ok points"
    if selected:
        what = f"best {half} and worst {half} of {what} by {metric}"
    ax.set_title(f"FCT CDF: {what}", fontsize="medium")
    ax.legend(fontsize="xx-small", loc="lower right", title=f"overrides  [{metric}]", title_fontsize="x-small")
    return save(fig, path), notes


def _axis(
    table: pa.Table, rows: list[dict], column: str, *, grid: bool = True
) -> tuple[np.ndarray, list[tuple[float, str]]]:
    """A parallel-coordinates axis: each row's position in [0, 1] and the (position, label) ticks.

    Numeric columns are scaled linearly from min to max (logarithmically when positive and
    spanning more than two decades); categorical ones put their values evenly from 0 to 1.
    A single value sits at 0.5. A numeric parameter (``grid``) with few values labels each
    of them; otherwise (the metric) five evenly spaced values are labelled.
    """
    values = _numeric_values(rows, column) if _is_numeric(table, column) else None
    if values is not None:
        log = _wide_range(values)
        scaled = np.log10(values) if log else values
        lo, hi = float(scaled.min()), float(scaled.max())
        if hi == lo:
            return np.full(len(rows), 0.5), [(0.5, _label(values[0].item()))]
        pos = (scaled - lo) / (hi - lo)
        distinct = _categories([r[column] for r in rows])
        if grid and len(distinct) <= MAX_AXIS_LABELS:  # a swept grid: label its values, as written
            return pos, [(float(p), _label(v)) for p, v in zip(np.unique(pos), sorted(distinct))]
        ticks = np.linspace(lo, hi, 5)  # a continuous axis (the metric): five evenly spaced labels
        return pos, [((t - lo) / (hi - lo), _label(float(10**t if log else t))) for t in ticks]
    cells = [r[column] for r in rows]
    categories = _categories(cells)
    n = len(categories)
    spot = {_hashable(c): (i / (n - 1) if n > 1 else 0.5) for i, c in enumerate(categories)}
    pos = np.array([spot[_hashable(c)] for c in cells], float)
    step = max(1, math.ceil(n / MAX_AXIS_LABELS))  # thin out the labels of many categories
    return pos, [(spot[_hashable(c)], _label(c)) for c in categories[::step]]


def plot_parallel_coordinates(table: pa.Table, metric: str, params: list[str], path) -> Path:
    """Parallel coordinates of the ok points: one vertical axis per swept parameter plus
    the metric, each normalised to [0, 1] (``_axis``), one polyline per point coloured by
    the metric (lower is darker in ``viridis``), with a colorbar."""
    import matplotlib
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    rows = _ok_with(table, metric).to_pylist()
    columns = [*params, metric]
    fig = new_figure(max(6.0, 1.9 * len(columns) + 2), 5)
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["viridis"]
    y = np.array([_as_float(r[metric]) for r in rows], float)
    norm = Normalize(vmin=float(y.min()) if y.size else 0.0, vmax=float(y.max()) if y.size else 1.0)
    xs = np.arange(len(columns), dtype=float)
    if rows:
        axes = [_axis(table, rows, c, grid=c != metric) for c in columns]
        positions = np.stack([pos for pos, _ in axes], axis=1)  # (points, axes)
        # Worst first, so that the best points' lines are drawn on top.
        for k in np.argsort(-y, kind="stable"):
            ax.plot(xs, positions[k], color=cmap(norm(y[k])), lw=1.3, alpha=0.8)
        for i, (_, ticks) in enumerate(axes):
            for pos, text in ticks:
                ax.text(xs[i] - 0.04, pos, text, ha="right", va="center", fontsize="x-small")
    else:
        ax.text(0.5, 0.5, f"no ok point with a {metric}", ha="center", va="center", transform=ax.transAxes)
    for x in xs:
        ax.axvline(x, color="black", lw=1.0)
    ax.set_xticks(xs, columns, fontsize="small")
    ax.set_xlim(-0.6, len(columns) - 0.8)
    ax.set_ylim(-0.05, 1.05)
    ax.set_yticks([])
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=metric, pad=0.02)
    ax.set_title(f"design space: {len(rows)} ok points coloured by {metric}", fontsize="medium")
    return save(fig, path)


def write_plots(sweep_dir, table: pa.Table, metric: str, out_dir) -> tuple[dict[str, Path], list[str]]:
    """Write the report's figures into ``out_dir`` (created if needed).

    Returns (the files written by name, notes on what was skipped and why).
    """
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create output directory {out_dir}: {exc.strerror or exc}") from None
    files: dict[str, Path] = {}
    notes: list[str] = []
    params = swept_parameters(table)
    has_metric = _ok_with(table, metric).num_rows > 0
    try:
        if not params:
            notes.append(
                f"no swept parameter (every point has the same config): skipped {METRIC_VS_PARAMS_FILE} "
                f"and {PARALLEL_FILE}"
            )
        elif not has_metric:
            notes.append(f"no ok point has a finite {metric}: skipped {METRIC_VS_PARAMS_FILE} and {PARALLEL_FILE}")
        else:
            files["metric_vs_params"] = plot_metric_vs_params(table, metric, params, out_dir / METRIC_VS_PARAMS_FILE)
        cdf, cdf_notes = plot_fct_cdfs(sweep_dir, table, metric, out_dir / FCT_CDF_FILE)
        notes.extend(cdf_notes)
        if cdf is None:
            notes.append(f"no ok point with a readable {FLOWS_FILE}: skipped {FCT_CDF_FILE}")
        else:
            files["fct_cdf"] = cdf
        if params and has_metric:
            files["parallel_coordinates"] = plot_parallel_coordinates(table, metric, params, out_dir / PARALLEL_FILE)
        if has_metric and any(key in params for key in LINK_KEYS):
            files["metric_vs_failed_link"] = plot_metric_vs_failed_link(table, metric, out_dir / FAILED_LINK_FILE)
        search = read_search_file(sweep_dir)
        if search is not None:
            files.update(write_search_plots(table, search, out_dir))
    except OSError as exc:
        raise InputError(f"cannot write into {out_dir}: {exc.strerror or exc}") from None
    return files, notes


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Report on a multiverse-jax sweep: the best design points by a metric, the points that failed, "
        "and plots of the metric over the design space.",
    )
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", type=Path, help=f"sweep directory holding {RESULTS_FILE}")
    p.add_argument(
        "--metric",
        default=None,
        help="metric column to rank by, lowest first (default: iteration_time_us if the ok points have one, "
        "else job_time_us)",
    )
    p.add_argument("--top", type=positive_int, default=10, metavar="N", help="show the N best points (default 10)")
    p.add_argument("--out", type=Path, default=None, help=f"directory for the plots (default: SWEEP_DIR/{REPORT_DIR})")
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only the points whose column KEY equals VALUE (as text, e.g. --where workload.kind=incast "
        "--where cc=dcqcn); repeatable",
    )
    return p


def select(table: pa.Table, conditions: list[str]) -> pa.Table:
    """The rows of ``table`` that meet every ``KEY=VALUE`` condition (values compared as text;
    ``1e5`` and ``100000.0`` are the same number). InputError names an unknown column."""
    masks = []
    for condition in conditions:
        key, sep, value = condition.partition("=")
        if not sep or key not in table.column_names:
            valid = ", ".join(c for c in table.column_names if c not in BOOKKEEPING_COLUMNS)
            raise InputError(f"--where {condition!r}: expected KEY=VALUE with KEY a column of the table ({valid})")
        masks.append(_equals(table[key], value))
    return table.filter(functools.reduce(pc.and_, masks)) if masks else table


def _equals(column: pa.ChunkedArray, text: str) -> pa.ChunkedArray:
    """Per cell: it reads as ``text`` (as Python's ``str`` shows it, so a null reads "None"),
    or it is a number in a numeric column equal to the number ``text``."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        values = pc.cast(column, pa.float64(), safe=False)  # as float(cell) rounds
        try:
            number = float(text)
        except ValueError:
            number = None  # equal to no number: a null comparison
        same = pc.is_nan(values) if text == "nan" else pc.equal(values, number)  # str(nan) == "nan"
    elif pa.types.is_boolean(kind):
        same = pc.equal(column, text == "True") if text in ("True", "False") else pc.equal(column, None)
    else:
        same = pc.equal(pc.cast(column, pa.string()), text)
    return pc.if_else(pc.is_null(column), text == "None", pc.fill_null(same, False))


def _number(value, digits: int = 3) -> str:
    value = _as_float(value)
    return "-" if not math.isfinite(value) else f"{value:,.{digits}f}"


def best_table(rows: list[dict], metric: str, swept: list[str] | None = None) -> Table:
    """The rich table of the best points (``best_points``' rows): each point named by its
    values of the ``swept`` parameters (what tells the points apart), else its overrides."""
    table = Table(title=f"best {len(rows)} point{'s' if len(rows) != 1 else ''} by {metric} (lowest first)")
    # In a narrow terminal the labels fold (at spaces first; main prints the best one in full).
    table.add_column("rank", justify="right")
    table.add_column("job", justify="right")
    table.add_column("swept values" if swept else "overrides", overflow="fold")
    table.add_column(metric, justify="right")
    table.add_column("fct_p99_us", justify="right")
    table.add_column("max_queue_bytes", justify="right")
    table.add_column("status")
    for rank, row in enumerate(rows, 1):
        table.add_row(
            str(rank),
            escape(str(row.get("job_num", row.get("job_dir")))),
            escape(" ".join(f"{p}={row.get(p)}" for p in swept) if swept else _point_label(row)),
            _number(row[metric]),
            _number(row.get("fct_p99_us")),
            _number(row.get("max_queue_bytes"), 0),
            f"[green]{escape(str(row['status']))}[/]",
        )
    return table


def print_front(console: Console, rows: list[dict], search: dict) -> None:
    """The Pareto front of a multi-objective search, one line per point."""
    objectives = search["objectives"]
    console.print(f"Pareto front of {' and '.join(objectives)}: {len(rows)} point(s)", highlight=False)
    for row in rows:
        values = ", ".join(f"{name} = {_number(row[name])}" for name in objectives)
        console.print(f"  job {row['job_num']}: {escape(_point_label(row))}: {values}", highlight=False, soft_wrap=True)


def status_counts(table: pa.Table) -> dict[str, int]:
    """Number of points per status: ``STATUSES`` first (those present), then any other, by name."""
    counts = {str(c["values"]): c["counts"] for c in pc.value_counts(table["status"]).to_pylist()}
    order = [s for s in STATUSES if s in counts] + sorted(s for s in counts if s not in STATUSES)
    return {s: counts[s] for s in order}


def main(argv=None) -> int:
    """Entry point of ``multiverse-jax-report``; returns the exit code."""
    args = parser().parse_args(argv)
    sweep_dir: Path = args.sweep_dir
    out_dir: Path = args.out if args.out is not None else sweep_dir / REPORT_DIR
    console = Console()
    try:
        table = load_results(sweep_dir)
        if args.where:
            table = select(table, args.where)
            console.print(f"{table.num_rows} point(s) where {' and '.join(args.where)}", highlight=False)
        search = read_search_file(sweep_dir)  # a search sweep: rank by its first objective
        metric = args.metric or (search["objectives"][0] if search else default_metric(table))
        best = best_points(table, metric, args.top)  # checks the metric

        # The best points, then one line of the best one in full (the table may fold it).
        if best:
            console.print(best_table(best, metric, swept_parameters(table)))
            console.print(
                f"best: job {escape(str(best[0].get('job_num', best[0]['job_dir'])))}: "
                f"{escape(_point_label(best[0]))} ({metric} = {_number(best[0][metric])})",
                highlight=False,
                soft_wrap=True,
            )
        else:
            console.print(f"no ok point has a finite {metric}", highlight=False)

        if search is not None and len(search["objectives"]) >= 2:
            print_front(console, front_rows(table, search), search)

        # How many points per status, then the ones that are not ok and why.
        counts = status_counts(table)
        console.print(
            f"{table.num_rows} point{'s' if table.num_rows != 1 else ''}: "
            + ", ".join(f"{n} {escape(s)}" for s, n in counts.items()),
            highlight=False,
        )
        problems = table.filter(pc.invert(_is_ok(table))).to_pylist()
        for row in problems[:MAX_LISTED_PROBLEMS]:
            reason = str(row.get("reason") or "") or "no reason given"
            console.print(
                f"  [red]{escape(str(row['status']))}[/] job {escape(str(row.get('job_num', row.get('job_dir'))))}: "
                f"{escape(_point_label(row))}: {escape(reason)}",
                highlight=False,
                soft_wrap=True,
            )
        if len(problems) > MAX_LISTED_PROBLEMS:
            console.print(f"  ... and {len(problems) - MAX_LISTED_PROBLEMS} more", highlight=False)

        files, notes = write_plots(sweep_dir, table, metric, out_dir)
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for note in notes:
        console.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    for path in files.values():
        console.print(f"wrote {escape(str(path))}", highlight=False, soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
