"""Progress of long work, on stderr, readable on a terminal and in a log file.

Every long command (``multiverse-jax`` single runs and sweeps,
``multiverse-jax-restorer-dataset``, ``multiverse-jax-train-restorer``) reports where it is:

* stderr is a terminal: a rich bar, refreshed as the work goes;
* otherwise (a log file, a batch job, CI): a plain line on stderr every ``interval_s``
  seconds (``output.progress_interval_s``, default 10 s): lines fall due on a grid of
  ``interval_s`` from the start, each written at the first report after it is due (at most
  one per report), and a final line when the work ends. ``interval_s`` 0 turns both off.

A line names the work, then what applies of: units done of total with the share and an
ETA, simulated time, windows per second, a detail (losses), and the wall time so far::

    simulating: 340/1,024 tasks (33%), ETA 1 min 20 s · simulated 1.234 ms · 12,345 windows/s · 40 s elapsed

Rates are measured from the first report, which comes after the first compiled call, so
compilation is not in them: units per second = (done now - done then) / wall time since
then, windows per second likewise. ETA = units left / that rate (shown once a unit has
been done since the first report; with a linear rate it is rough for a training
iteration, whose tasks do not finish at an even pace).

Cost: the engine hands the state to the host after every compiled call of
``sim.steps_per_call`` windows (its done flags are read there already). A report reads a
few more small arrays (clocks, window counts; for task workloads the task finish
times) only when it is due (``Progress.due``: every ``interval_s`` for lines, every
``BAR_REFRESH_S`` for the bar), never per window; a line appears at the first call
boundary after its interval. ``benchmarks/progress_overhead.py`` measures the cost.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import jax
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress as RichProgress, TextColumn

from multiverse_jax.units import NEVER, PS_PER_US

DEFAULT_INTERVAL_S = 10.0  # between log lines off a terminal
BAR_REFRESH_S = 0.25  # between reads of the state for the terminal bar


def duration_text(seconds: float) -> str:
    """``seconds`` for a person: '45 s', '3 min 20 s', '2 h 05 min'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def simulated_text(us: float) -> str:
    """Simulated time in µs, ms or s."""
    if us < 1e3:
        return f"{us:,.1f} µs"
    if us < 1e6:
        return f"{us / 1e3:,.3f} ms"
    return f"{us / 1e6:,.3f} s"


class Progress:
    """One long piece of work reported on ``console`` (stderr): a bar on a terminal, else
    log lines (module doc). Use as a context manager; ``update`` as the work goes."""

    def __init__(
        self,
        label: str,
        *,
        total: int | None = None,
        unit: str = "",
        interval_s: float = DEFAULT_INTERVAL_S,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.total, self.unit, self.interval_s, self.clock = label, total, unit, interval_s, clock
        self.console = console or Console(stderr=True)
        self.enabled = interval_s > 0
        self.start_s = self.last_read_s = clock()
        self.next_line_s = self.start_s + interval_s  # lines fall due on a grid of interval_s from the start
        self.first = None  # (wall s, units done, windows) at the first update: where rates start
        self.latest = {}  # the figures of the last update
        self.bar = None
        if self.enabled and self.console.is_terminal:
            self.bar = RichProgress(
                TextColumn(f"[bold]{label}"), BarColumn(), TextColumn("{task.fields[info]}"), console=self.console
            )
            self.task = self.bar.add_task(label, total=total, info="compiling")
            self.bar.start()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def due(self) -> bool:
        """Whether an update now would be shown (the first one always is: it starts the
        rates). Callers read the device state only then."""
        if not self.enabled:
            return False
        if self.first is None:
            return True
        if self.bar is not None:
            return self.clock() - self.last_read_s >= BAR_REFRESH_S
        return self.clock() >= self.next_line_s

    def update(self, done: int | None = None, *, simulated_us: float | None = None, windows: int | None = None,
               detail: str = "") -> None:
        """The work's figures now: units ``done`` (of ``total``), simulated µs, windows
        stepped, a ``detail`` text; shown on the bar, or as a line when one is due."""
        if not self.enabled:
            return
        now = self.clock()
        self.latest = {"done": done, "simulated_us": simulated_us, "windows": windows, "detail": detail}
        if self.first is None:
            self.first = (now, done or 0, windows or 0)
        self.last_read_s = now
        if self.bar is not None:
            self.bar.update(self.task, completed=done or 0, info=self._figures(now))
        elif now >= self.next_line_s:
            self._line(f"{self.label}: {self._figures(now)} · {duration_text(now - self.start_s)} elapsed")
            self.next_line_s += self.interval_s * (1 + (now - self.next_line_s) // self.interval_s)

    def close(self) -> None:
        """Stop the bar, or write the final line."""
        if self.bar is not None:
            self.bar.stop()
        elif self.enabled:
            now = self.clock()
            self._line(f"{self.label} ended: {self._figures(now, eta=False)} · {duration_text(now - self.start_s)}")
        self.enabled = False

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _figures(self, now: float, eta: bool = True) -> str:
        """The latest figures as text: done/total (share, ETA; with a total) · simulated ·
        windows/s · detail."""
        figures = self.latest
        if not figures:
            return "compiling"
        since_s = now - self.first[0]
        parts = []
        if figures["done"] is not None and self.total:
            done = figures["done"]
            text = f"{done:,}/{self.total:,} {self.unit} ({100 * done / self.total:.0f}%)"
            rate = (done - self.first[1]) / since_s if since_s > 0 else 0.0
            if eta and rate > 0 and done < self.total:
                text += f", ETA {duration_text((self.total - done) / rate)}"
            parts.append(text)
        if figures["simulated_us"] is not None:
            parts.append(f"simulated {simulated_text(figures['simulated_us'])}")
        if figures["windows"] is not None and since_s > 0:
            parts.append(f"{(figures['windows'] - self.first[2]) / since_s:,.0f} windows/s")
        if figures["detail"]:
            parts.append(figures["detail"])
        return " · ".join(parts)


def state_figures(state, task_counts: Sequence[int] = ()) -> tuple[float, int, int]:
    """(simulated µs summed over the batch's experiments, windows stepped in all, tasks
    finished in all) of a batch's State; ``task_counts[e]``: experiment e's tasks (the
    first entries of its padded task axis; none: 0 tasks counted, nothing read)."""
    time_ps, windows = jax.device_get((state.time_ps, state.n_windows))
    tasks_done = 0
    if any(task_counts):
        finish_ps = np.asarray(jax.device_get(state.tasks.task_finish_ps))  # (E, T)
        tasks_done = sum(int(np.sum(finish_ps[e, :n] != NEVER)) for e, n in enumerate(task_counts))
    return float(np.sum(time_ps)) / PS_PER_US, int(np.sum(windows)), tasks_done


class SimulationProgress:
    """``Progress`` of simulations: ``on_state`` is ``simulate``'s ``on_progress``; use as a
    context manager (it closes the ``Progress``).

    One run of a task workload (``task_counts`` given): the units are its tasks, read from
    the state. Several batches (sweep points, dataset scenarios): the units are the
    batches' experiments, counted by ``finished`` as each batch ends; simulated time and
    windows add the finished batches' to the running one's.
    """

    def __init__(self, progress: Progress, task_counts: Sequence[int] = ()):
        self.progress, self.task_counts = progress, tuple(task_counts)
        self.units_done = 0
        self.finished_us = 0.0  # simulated µs of the finished batches' experiments
        self.finished_windows = 0
        self.last_state = None  # the running batch's latest state: the final line reads it

    def __enter__(self) -> "SimulationProgress":
        return self

    def __exit__(self, *exc) -> None:
        """The final figures (read once from the last state) and the final line."""
        if self.last_state is not None and self.progress.enabled:
            self._read(self.last_state)
        self.progress.close()

    def on_state(self, state) -> None:
        self.last_state = state
        if self.progress.due():
            self._read(state)

    def _read(self, state) -> None:
        simulated_us, windows, tasks_done = state_figures(state, self.task_counts)
        self._update(tasks_done if self.task_counts else self.units_done, simulated_us, windows)

    def finished(self, summaries: Sequence[dict]) -> None:
        """A batch ended: one summary (``Result.summary``; {} for a failed one) per unit."""
        self.last_state = None
        self.units_done += len(summaries)
        self.finished_us += sum(float(s.get("simulated_time_us", 0.0)) for s in summaries)
        self.finished_windows += sum(int(s.get("n_windows", 0)) for s in summaries)
        self._update(self.units_done, 0.0, 0)

    def _update(self, done: int, running_us: float, running_windows: int) -> None:
        self.progress.update(
            done, simulated_us=self.finished_us + running_us, windows=self.finished_windows + running_windows
        )
