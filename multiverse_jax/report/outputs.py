"""What a run leaves on disk, and the table it prints.

``write_outputs`` writes into ``run_dir``:

* ``summary.json``: the result's summary scalars (NaN written as null; ``overflow_by_port``,
  a list with one record per port whose queue grew past its buffer), the topology's
  name and, if given, the resolved config under ``config``; times in µs (``job_time_us``,
  ``simulated_time_us``, ``iteration_time_us``) and, exact, in integer ps
  (``job_time_ps``, ``simulated_time_ps``, ``iteration_time_ps``; -1 where there is none);
* ``flows.parquet``: every per-flow column of the result (``src``, ``dst``: host indices),
  the hosts by name (``src_name``, ``dst_name``) and, when ``output.flow_paths`` (the
  default), ``path``: the flow's data path by node names, ``h0->tor0->agg1->core2->agg3->tor5->h12``
  (``report.paths``: exact, as the engine routes it; empty for a flow that is not pinned
  under ``lb=spray`` or ``lb=flowlet``, whose packets take several paths);
* ``fct.csv``: ``id,src,dst,size_bytes,start_us,finish_us,rx_finish_us,fct_us`` (times in
  µs; empty where a flow never started or finished), then the same four times as the
  simulator keeps them, in integer picoseconds: ``start_ps,finish_ps,rx_finish_ps,fct_ps``
  (-1, ``units.NOT_YET_PS``, where a flow never started or finished), then the hosts by
  name, ``src_name,dst_name``;
* ``fct_cdf.png`` (when ``plots``): the empirical CDF of the flow completion times;
* when the result has time series (``sim.sample_interval_us`` > 0):
  ``timeseries_flows.parquet`` (``time_us, flow_id, rate_gbps, window_bytes, rx_bytes,
  steady, tx_bytes, tx_gbps``: one row per sample and flow; ``rate_gbps``: congestion
  control's rate, the line rate under ``cc=none``; ``tx_bytes``: payload the flow has put
  on the wire so far, ``tx_gbps``: what it sent since the previous sample, see
  ``timeseries``; ``steady``: the flow was steady or advancing at flow level,
  ``sim.mode=hybrid``), ``timeseries_ports.parquet`` (``time_us, port, src_node, dst_node,
  queue_bytes, port_name``: one row per sample and egress port; ``port_name``, added to
  the result's series here, the port by its nodes' names, ``tor1->agg2``) and, when ``plots``, ``timeseries.png``
  (``plot_timeseries``; ``multiverse-jax-plot`` redraws it from the two parquet files);
* for a task workload: ``tasks.parquet`` (``timeline.task_columns``: one row per task, its
  times in µs and, exact, ``start_ps`` / ``finish_ps``) and, when ``plots``, ``timeline.png``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.table import Table

from multiverse_jax.report.figure import new_figure, save
from multiverse_jax.report.paths import flow_path_names
from multiverse_jax.report.timeline import plot_gantt

FCT_COLUMNS = (
    "id", "src", "dst", "size_bytes", "start_us", "finish_us", "rx_finish_us", "fct_us",
    "start_ps", "finish_ps", "rx_finish_ps", "fct_ps", "src_name", "dst_name",
)  # fmt: skip
FLOWS_FILE = "flows.parquet"
FLOW_SERIES_FILE = "timeseries_flows.parquet"
PORT_SERIES_FILE = "timeseries_ports.parquet"
TIMESERIES_PLOT_FILE = "timeseries.png"
FLOW_SERIES_COLUMNS = ("time_us", "flow_id", "rate_gbps", "window_bytes", "rx_bytes", "steady", "tx_bytes", "tx_gbps")
PORT_SERIES_COLUMNS = ("time_us", "port", "src_node", "dst_node", "queue_bytes", "port_name")
MAX_PLOTTED_FLOWS = 16  # more flows: plot an evenly spaced sample of this many, plus the mean


def _plain(value):
    """JSON-safe Python value: NumPy scalars unwrapped, NaN/inf as None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _csv_cell(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    return str(int(value))


def write_fct_csv(flows: dict[str, np.ndarray], path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FCT_COLUMNS)
        for row in zip(*(flows[name] for name in FCT_COLUMNS)):
            writer.writerow([_csv_cell(v) for v in row])


def plot_fct_cdf(fct_us: np.ndarray, title: str, path: Path) -> None:
    """Step plot of the empirical CDF of the finished flows' completion times."""
    fig = new_figure(6, 4)
    ax = fig.add_subplot()
    finished = np.sort(fct_us[~np.isnan(fct_us)])
    if finished.size:
        fraction = np.arange(1, finished.size + 1) / fct_us.size
        ax.step(np.concatenate([[0.0], finished]), np.concatenate([[0.0], fraction]), where="post")
    else:
        ax.text(0.5, 0.5, "no flow finished", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("flow completion time (µs)")
    ax.set_ylabel("fraction of flows")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    save(fig, path)


def _flow_lines(time_us, flow_id, values):
    """{flow id: (times, values)} of a long-format series, each in time order."""
    order = np.lexsort((time_us, flow_id))
    time_us, flow_id, values = time_us[order], flow_id[order], values[order]
    ids, first = np.unique(flow_id, return_index=True)
    return {int(i): (t, v) for i, t, v in zip(ids, np.split(time_us, first[1:]), np.split(values, first[1:]))}


def _shown_flows(lines: dict, flows) -> tuple[list[int], bool]:
    """(the flow ids drawn, whether the mean over all flows is drawn too): ``flows`` when
    given (an id not in ``lines`` is a ValueError), else all of them, else an evenly spaced
    sample of ``MAX_PLOTTED_FLOWS`` plus the mean."""
    if flows is not None:
        wanted = [int(i) for i in flows]
        missing = [i for i in wanted if i not in lines]
        if missing:
            known = sorted(lines)
            shown = ", ".join(map(str, known[:20])) + (", ..." if len(known) > 20 else "")
            raise ValueError(
                f"flow id{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} not in the time series "
                f"(flow ids: {shown or 'none'})"
            )
        return list(dict.fromkeys(wanted)), False
    if len(lines) > MAX_PLOTTED_FLOWS:
        ids = np.array(sorted(lines))
        return [int(i) for i in ids[np.linspace(0, len(ids) - 1, MAX_PLOTTED_FLOWS).round().astype(int)]], True
    return sorted(lines), False


def _plot_rates(ax, flow_series, title: str, flows, flow_names: dict | None) -> None:
    """Each shown flow's sending rate (Gb/s) over time, and the mean when flows are sampled:
    what it sent in each sample interval (``tx_gbps``), or, for series written without it,
    its congestion-control rate. Flows are labelled by id and ``flow_names`` (id -> text)."""
    import matplotlib

    f_time = np.asarray(flow_series["time_us"], float)
    sent = "tx_gbps" in flow_series
    rate = np.asarray(flow_series["tx_gbps" if sent else "rate_gbps"], float)
    flow_id = np.asarray(flow_series["flow_id"]).astype(np.int64)
    lines = _flow_lines(f_time, flow_id, rate)
    steady = np.asarray(flow_series.get("steady", np.zeros(len(rate), bool)), bool)
    steady_lines = _flow_lines(f_time, flow_id, steady.astype(float))
    shown_ids, show_mean = _shown_flows(lines, flows)
    palette = matplotlib.colormaps["tab20" if len(shown_ids) > 10 else "tab10"]
    for k, i in enumerate(shown_ids):
        t, v = lines[i]
        name = (flow_names or {}).get(i)
        label = f"flow {i}: {name}" if name else f"flow {i}"
        if sent:  # what it sent over the interval that ends at each sample, the first from time 0
            ax.step(np.r_[0.0, t], np.r_[v[:1], v], where="pre", lw=1.0, color=palette(k % palette.N), label=label)
        else:
            ax.plot(t, v, lw=1.0, color=palette(k % palette.N), label=label)
        # sim.mode=hybrid: a thick band from each steady sample to the next (the jump it took).
        held = steady_lines[i][1] > 0
        held = held | np.concatenate([[False], held[:-1]])
        if held.any():
            ax.plot(t, np.where(held, v, np.nan), lw=5.0, alpha=0.3, color=palette(k % palette.N))
    if show_mean:
        times, inverse = np.unique(f_time, return_inverse=True)
        mean = np.bincount(inverse, weights=rate) / np.bincount(inverse)
        ax.plot(times, mean, color="black", lw=2.0, ls="--", label=f"mean of {len(lines)} flows")
    if shown_ids:
        ax.legend(fontsize="x-small", ncol=4, loc="lower left")
    else:
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
    sampled = f" ({len(shown_ids)} of {len(lines)} flows)" if show_mean else ""
    if steady.any():
        sampled += "; thick: steady, at flow level"
    what = "sending rate (sent per sample interval)" if sent else "sending rate (congestion control's)"
    ax.set_ylabel("sending rate (Gb/s)")
    ax.set_title(f"{title}: {what}{sampled}" if title else f"{what}{sampled}", fontsize="medium")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)


def _plot_queues(ax, port_series, n_ports: int) -> None:
    """Queue depth (KB) over time of the ``n_ports`` ports with the largest peak queue,
    labelled by ``port_name`` (``src_node->dst_node`` indices for series written without it)."""
    p_time = np.asarray(port_series["time_us"], float)
    port = np.asarray(port_series["port"]).astype(np.int64)
    src, dst, names = port_series["src_node"], port_series["dst_node"], port_series.get("port_name")
    queue_kb = np.asarray(port_series["queue_bytes"], float) / 1000.0
    busiest = []
    if port.size:
        ports, inverse = np.unique(port, return_inverse=True)
        peak = np.zeros(len(ports))
        np.maximum.at(peak, inverse, queue_kb)
        order = np.argsort(-peak, kind="stable")
        busiest = [int(ports[j]) for j in order[: max(0, n_ports)] if peak[j] > 0]
    for p in busiest:
        mask = port == p
        t, q = p_time[mask], queue_kb[mask]
        o = np.argsort(t, kind="stable")
        first = np.flatnonzero(mask)[0]
        ax.plot(t[o], q[o], lw=1.0, label=str(names[first]) if names is not None else f"{src[first]}->{dst[first]}")
    if busiest:
        ax.legend(fontsize="x-small", ncol=4, loc="upper left", title="port (src->dst)", title_fontsize="x-small")
    else:
        message = "no queue built up" if port.size else "no samples"
        ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("queue (KB)")
    ax.set_xlabel("time (µs)")
    ports_title = f"queue depth of the {len(busiest)} port{'s' if len(busiest) != 1 else ''} with the largest peak"
    ax.set_title(ports_title if busiest else "queue depth", fontsize="medium")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)


def plot_timeseries(
    flow_series,
    port_series,
    path,
    *,
    title: str = "",
    flows=None,
    n_ports: int = 8,
    flow_names: dict | None = None,
) -> None:
    """Two stacked panels sharing the time axis, written to ``path`` (PNG).

    Top: what each flow sent (Gb/s) in each sample interval; with more than
    ``MAX_PLOTTED_FLOWS`` flows an evenly spaced sample of that many, plus the mean over
    all flows. ``flows`` (flow ids) picks the flows instead; an id not in the series is a
    ValueError. Flows are labelled ``flow 3: h0->h8`` by ``flow_names`` ({id: text}, e.g.
    ``flow_labels``). Bottom: queue depth (KB) of the ``n_ports`` egress ports with the
    largest peak queue, labelled by name (``tor1->agg2``). ``flow_series`` and
    ``port_series`` are mappings of equal-length columns (``FLOW_SERIES_COLUMNS``,
    ``PORT_SERIES_COLUMNS``).
    """
    save(timeseries_figure(flow_series, port_series, title=title, flows=flows, n_ports=n_ports, flow_names=flow_names), path)


def timeseries_figure(flow_series, port_series, *, title="", flows=None, n_ports=8, flow_names=None):
    """The figure ``plot_timeseries`` writes: axes 0 the flows, axes 1 the ports."""
    fig = new_figure(8, 7)
    ax_rate, ax_queue = fig.subplots(2, 1, sharex=True)
    _plot_rates(ax_rate, flow_series, title, flows, flow_names)
    _plot_queues(ax_queue, port_series, n_ports)
    return fig


def flow_labels(flows) -> dict[int, str]:
    """{flow id: ``src->dst`` by host names} of a per-flow table (``id``, ``src_name``,
    ``dst_name`` columns); empty if it has no names."""
    if "src_name" not in flows or "dst_name" not in flows:
        return {}
    return {int(i): f"{s}->{d}" for i, s, d in zip(flows["id"], flows["src_name"], flows["dst_name"])}


def wants_flow_paths(config: dict | None) -> bool:
    """The config's ``output.flow_paths`` (on when there is no config)."""
    return bool(((config or {}).get("output") or {}).get("flow_paths", True))


def named_flows(result, experiment, paths: bool) -> dict[str, np.ndarray]:
    """The result's per-flow columns, its hosts by name (``src_name``, ``dst_name``) and,
    when ``paths``, each flow's data path by node names (``path``, ``report.paths``)."""
    names = np.asarray(experiment.topology.node_names)
    flows = {**result.flows, "src_name": names[result.flows["src"]], "dst_name": names[result.flows["dst"]]}
    if paths:
        flows["path"] = flow_path_names(experiment, result.flows["start_ps"], result.flows["rx_finish_ps"])
    return flows


def write_outputs(result, run_dir, experiment, plots: bool = True, config: dict | None = None) -> dict[str, Path]:
    """Write a result's files into ``run_dir`` (created if needed); returns them by name.
    Each flow's ``path`` is written when the config's ``output.flow_paths`` is on."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "summary": run_dir / "summary.json",
        "flows": run_dir / FLOWS_FILE,
        "fct": run_dir / "fct.csv",
    }
    summary = {**result.summary, "topology": experiment.topology.name}
    if config is not None:
        summary["config"] = config
    files["summary"].write_text(json.dumps(_plain(summary), indent=2) + "\n")
    flows = named_flows(result, experiment, wants_flow_paths(config))
    pq.write_table(pa.table({name: np.asarray(col) for name, col in flows.items()}), files["flows"])
    write_fct_csv(flows, files["fct"])
    if plots:
        files["fct_cdf"] = run_dir / "fct_cdf.png"
        n = len(result.flows["fct_us"])
        title = f"FCT CDF: {experiment.topology.name}, {n} flow{'s' if n != 1 else ''}"
        plot_fct_cdf(np.asarray(result.flows["fct_us"], float), title, files["fct_cdf"])
    flow_series, port_series = getattr(result, "flow_series", None), getattr(result, "port_series", None)
    if flow_series is not None and port_series is not None:
        files["timeseries_flows"] = run_dir / FLOW_SERIES_FILE
        files["timeseries_ports"] = run_dir / PORT_SERIES_FILE
        pq.write_table(_table(flow_series, FLOW_SERIES_COLUMNS), files["timeseries_flows"])
        # One str object per port, shared by its rows: 8 bytes a row in memory.
        port_series = {**port_series, "port_name": experiment.topology.port_names()[port_series["port"]]}
        pq.write_table(_table(port_series, PORT_SERIES_COLUMNS), files["timeseries_ports"])
        if plots:
            files["timeseries_plot"] = run_dir / TIMESERIES_PLOT_FILE
            plot_timeseries(
                flow_series,
                port_series,
                files["timeseries_plot"],
                title=experiment.topology.name,
                flow_names=flow_labels(flows),
            )
    tasks = getattr(result, "tasks", None)
    if tasks is not None:
        files["tasks"] = run_dir / "tasks.parquet"
        pq.write_table(pa.table({name: np.asarray(col) for name, col in tasks.items()}), files["tasks"])
        if plots:
            files["timeline"] = run_dir / "timeline.png"
            iteration = result.summary.get("iteration_time_us", float("nan"))
            plot_gantt(tasks, files["timeline"], title=f"{experiment.topology.name}: iteration {iteration:,.1f} µs")
    return files


def write_status_summary(run_dir, status: str, message: str, **extra) -> Path:
    """``summary.json`` of a design point that was not simulated (``status`` "oom" or
    "invalid"), with the reason under ``error``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "summary.json"
    path.write_text(json.dumps(_plain({"status": status, "error": message, **extra}), indent=2) + "\n")
    return path


def write_oom_summary(run_dir, message: str, usage: dict) -> Path:
    """``summary.json`` of a design point that does not fit in GPU memory (nothing simulated)."""
    return write_status_summary(run_dir, "oom", message, memory_bytes=usage)


def _table(series: dict, columns) -> pa.Table:
    """The series' columns, in ``columns`` order first (then any others)."""
    names = [c for c in columns if c in series] + [c for c in series if c not in columns]
    return pa.table({name: np.asarray(series[name]) for name in names})


# Rows of the summary table shown when a queue grew past its buffer (switch.overflow).
OVERFLOW_METRICS = (
    ("ports over buffer", lambda s: f"{s.get('overflow_ports', 0):,}"),
    ("  overflow events", lambda s: f"{s.get('overflow_events', 0):,}"),
    ("  max excess (bytes)", lambda s: f"{s.get('max_excess_bytes', 0):,}"),
    ("  time over buffer (µs, all ports)", lambda s: f"{s.get('over_buffer_us', 0.0):,.3f}"),
)


# Rows of the summary table in hybrid mode (sim.mode=hybrid): what ran at flow level.
HYBRID_METRICS = (
    ("windows executed", lambda s: f"{s['n_windows']:,}"),
    ("steady phases (entries / exits)", lambda s: f"{s['steady_entries']:,} / {s['steady_exits']:,}"),
    ("flow time at flow level", lambda s: f"{100 * s['flow_level_share']:.1f} %"),
    ("packet-hops run / skipped", lambda s: f"{s['n_packet_hops']:,} / {s['packet_hops_skipped']:,}"),
    (
        "packets restored at re-entry (added / drained)",
        lambda s: f"{s.get('restore_added_packets', 0):,} / {s.get('restore_drained_packets', 0):,}",
    ),
)


def summary_table(results, names=None, title: str = "multiverse-jax results") -> Table:
    """One row per metric, one column per result (so that a single run reads as a list)."""

    def us(value) -> str:
        return "-" if value is None or math.isnan(value) else f"{value:,.3f}"

    metrics = (
        ("status", lambda s: f"[{'green' if s['status'] == 'ok' else 'red'}]{s['status']}[/]"),
        ("flows finished", lambda s: f"{s['flows_finished']:,} / {s['n_flows']:,}"),
        ("job time (µs)", lambda s: us(s["job_time_us"])),
        ("FCT mean (µs)", lambda s: us(s["fct_mean_us"])),
        ("FCT p50 (µs)", lambda s: us(s["fct_p50_us"])),
        ("FCT p99 (µs)", lambda s: us(s["fct_p99_us"])),
        ("max queue (bytes)", lambda s: f"{s['max_queue_bytes']:,}"),
        ("PFC pauses", lambda s: f"{s['pfc_pauses']:,}"),
        ("bytes on wire", lambda s: f"{s['bytes_on_wire']:,}"),
        ("wall time (s)", lambda s: f"{s['batch_wall_s']:.2f}" if "batch_wall_s" in s else "-"),
    )
    if any(r.summary.get("overflow_events", 0) for r in results):  # next to the largest queue
        at = [label for label, _ in metrics].index("max queue (bytes)") + 1
        metrics = metrics[:at] + OVERFLOW_METRICS + metrics[at:]
    if any("iteration_time_us" in r.summary for r in results):
        metrics = (
            metrics[:1]
            + (
                ("iteration time (µs)", lambda s: us(s.get("iteration_time_us", float("nan")))),
                ("  compute (µs, mean/GPU)", lambda s: us(s.get("compute_us", float("nan")))),
                ("  exposed comm (µs)", lambda s: us(s.get("exposed_comm_us", float("nan")))),
                ("  bubbles (µs)", lambda s: us(s.get("bubble_us", float("nan")))),
            )
            + metrics[1:]
        )
    if any(r.summary.get("mode") == "hybrid" for r in results):
        metrics = metrics[:-1] + HYBRID_METRICS + metrics[-1:]
    table = Table(title=title)
    table.add_column("metric")
    for i in range(len(results)):
        table.add_column(str(names[i]) if names is not None else f"#{i}", justify="right")
    for label, cell in metrics:
        table.add_row(label, *(cell(result.summary) for result in results))
    return table
