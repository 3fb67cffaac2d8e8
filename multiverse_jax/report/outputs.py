"""What a run leaves on disk, and the table it prints.

``write_outputs`` writes into ``run_dir``:

* ``summary.json``: the result's summary scalars (NaN written as null), the topology's
  name and, if given, the resolved config under ``config``;
* ``flows.parquet``: every per-flow column of the result;
* ``fct.csv``: ``id,src,dst,size_bytes,start_us,finish_us,rx_finish_us,fct_us`` (times in
  µs; empty where a flow never started or finished);
* ``fct_cdf.png`` (when ``plots``): the empirical CDF of the flow completion times.
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

FCT_COLUMNS = ("id", "src", "dst", "size_bytes", "start_us", "finish_us", "rx_finish_us", "fct_us")


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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(fig)
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
    fig.tight_layout()
    fig.savefig(path)


def write_outputs(result, run_dir, experiment, plots: bool = True, config: dict | None = None) -> dict[str, Path]:
    """Write a result's files into ``run_dir`` (created if needed); returns them by name."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "summary": run_dir / "summary.json",
        "flows": run_dir / "flows.parquet",
        "fct": run_dir / "fct.csv",
    }
    summary = {**result.summary, "topology": experiment.topology.name}
    if config is not None:
        summary["config"] = config
    files["summary"].write_text(json.dumps(_plain(summary), indent=2) + "\n")
    pq.write_table(pa.table({name: np.asarray(col) for name, col in result.flows.items()}), files["flows"])
    write_fct_csv(result.flows, files["fct"])
    if plots:
        files["fct_cdf"] = run_dir / "fct_cdf.png"
        n = len(result.flows["fct_us"])
        title = f"FCT CDF: {experiment.topology.name}, {n} flow{'s' if n != 1 else ''}"
        plot_fct_cdf(np.asarray(result.flows["fct_us"], float), title, files["fct_cdf"])
    return files


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
    table = Table(title=title)
    table.add_column("metric")
    for i in range(len(results)):
        table.add_column(str(names[i]) if names is not None else f"#{i}", justify="right")
    for label, cell in metrics:
        table.add_row(label, *(cell(result.summary) for result in results))
    return table
