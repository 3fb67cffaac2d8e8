"""The ``multiverse-jax-plot`` command: redraw a run's time-series figure from its parquet files.

    multiverse-jax-plot RUN_DIR [--out PNG] [--flows ID [ID ...]] [--ports N]
    python -m multiverse_jax.report.plot RUN_DIR ...

Reads ``timeseries_flows.parquet`` and ``timeseries_ports.parquet`` of a run directory
(written by ``multiverse-jax`` when ``sim.sample_interval_us`` > 0) and writes the figure
of ``report.outputs.plot_timeseries`` (default ``RUN_DIR/timeseries.png``), its flows
labelled by their hosts' names from ``flows.parquet`` when the run has one. Series written
before ``tx_gbps`` and ``port_name`` existed still plot: the congestion-control rate, the
ports by node index.

Exit codes: 0 success; 2 bad input (a missing directory or file, an unreadable file, a
flow id not in the series), reported in one line on stderr without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from multiverse_jax.report.outputs import (
    FLOW_SERIES_FILE,
    FLOWS_FILE,
    PORT_SERIES_FILE,
    TIMESERIES_PLOT_FILE,
    flow_labels,
    plot_timeseries,
)

PROG = "multiverse-jax-plot"
EXIT_BAD_INPUT = 2
# The columns the figure cannot do without (every run's series has them).
NEEDED_FLOW_COLUMNS = ("time_us", "flow_id", "rate_gbps")
NEEDED_PORT_COLUMNS = ("time_us", "port", "src_node", "dst_node", "queue_bytes")


class PlotError(Exception):
    """Bad input: the message says what is wrong and what is expected."""


def _flow_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
        if not ids:
            raise ValueError
        return ids
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"flow ids must be integers (e.g. --flows 0 3 7 or --flows 0,3,7), got {text!r}"
        ) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Plot the time series of a multiverse-jax run: sending rate per flow, queue depth of the "
        "busiest ports.",
    )
    p.add_argument(
        "run_dir", metavar="RUN_DIR", type=Path, help=f"run directory holding {FLOW_SERIES_FILE} and {PORT_SERIES_FILE}"
    )
    p.add_argument("--out", type=Path, default=None, help=f"PNG to write (default: RUN_DIR/{TIMESERIES_PLOT_FILE})")
    p.add_argument(
        "--flows",
        type=_flow_ids,
        nargs="+",
        default=None,
        metavar="ID",
        help="flow ids to plot, space- or comma-separated (default: every flow, or an evenly spaced 16 plus the mean)",
    )
    p.add_argument(
        "--ports", type=positive_int, default=8, metavar="N", help="plot the N ports with the largest peak queue (default 8)"
    )
    return p


def read_series(run_dir: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(flow series, port series) of a run directory as dicts of NumPy columns (all the
    files have); PlotError if absent or lacking a needed column."""
    if not run_dir.is_dir():
        what = "is not a directory" if run_dir.exists() else "does not exist"
        raise PlotError(
            f"run directory {run_dir} {what} "
            f"(expected a multiverse-jax run directory with {FLOW_SERIES_FILE} and {PORT_SERIES_FILE})"
        )
    paths = (run_dir / FLOW_SERIES_FILE, run_dir / PORT_SERIES_FILE)
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise PlotError(
            f"{run_dir} has no {' or '.join(missing)} (expected the time series of a multiverse-jax run: "
            "run with sim.sample_interval_us > 0, e.g. multiverse-jax sim.sample_interval_us=5)"
        )
    series = []
    for path, columns in zip(paths, (NEEDED_FLOW_COLUMNS, NEEDED_PORT_COLUMNS)):
        table = read_checked(path, columns, PlotError)
        series.append({c: table.column(c).to_numpy() for c in table.column_names})
    return series[0], series[1]


def read_flow_labels(run_dir: Path) -> dict[int, str]:
    """``outputs.flow_labels`` of the run's flows.parquet; empty if it has none (or no names)."""
    path = run_dir / FLOWS_FILE
    if not path.is_file():
        return {}
    table = read_checked(path, ("id",), PlotError)
    return flow_labels({c: table.column(c).to_numpy() for c in table.column_names})


def read_checked(path: Path, columns, error=PlotError):
    """The Parquet table at ``path``; ``error`` (naming the file) if it cannot be read or
    lacks one of ``columns``."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise error(f"cannot read {path}: {' '.join(str(exc).split())}") from None
    absent = [c for c in columns if c not in table.column_names]
    if absent:
        plural = "s" if len(absent) > 1 else ""
        raise error(f"{path} lacks column{plural} {', '.join(absent)} (expected {', '.join(columns)})")
    return table


def _title(run_dir: Path) -> str:
    """The topology name from the run's summary.json, else the directory name."""
    try:
        return str(json.loads((run_dir / "summary.json").read_text())["topology"])
    except (OSError, ValueError, KeyError, TypeError):
        return run_dir.name


def main(argv=None) -> int:
    """Entry point of ``multiverse-jax-plot``; returns the exit code."""
    args = parser().parse_args(argv)
    run_dir: Path = args.run_dir
    out: Path = args.out if args.out is not None else run_dir / TIMESERIES_PLOT_FILE
    flows = None if args.flows is None else [i for group in args.flows for i in group]
    try:
        flow_series, port_series = read_series(run_dir)
        if not out.parent.is_dir():
            raise PlotError(f"cannot write {out}: directory {out.parent} does not exist")
        try:
            plot_timeseries(
                flow_series,
                port_series,
                out,
                title=_title(run_dir),
                flows=flows,
                n_ports=args.ports,
                flow_names=read_flow_labels(run_dir),
            )
        except ValueError as exc:  # a flow id not in the series, an image format matplotlib lacks
            raise PlotError(" ".join(str(exc).split())) from None
        except OSError as exc:
            raise PlotError(f"cannot write {out}: {exc.strerror or exc}") from None
    except PlotError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
