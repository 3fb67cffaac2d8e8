"""Progress reports (``progress.py``) off a terminal, driven by a fake clock: lines at the
set cadence with the figures the module doc names, worked out by hand; the state is read
only when a line is due; a bar on a terminal; nothing when turned off."""

import io
import types

import numpy as np
from rich.console import Console

from multiverse_jax.progress import Progress, SimulationProgress
from multiverse_jax.units import NEVER, PS_PER_US


class FakeClock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class FakeRun:
    """A batch of one experiment with 8 tasks (padded to 10): every call of 2 s wall it
    steps 100 windows, 1 µs of simulated time each, and one more task finishes."""

    def __init__(self):
        self.calls = 0
        self.reads = 0  # how often a report read the state

    def state(self):
        self.calls += 1
        finish_ps = np.full((1, 10), NEVER, np.int64)
        finish_ps[0, : self.calls] = 1
        run = self

        class State:
            @property
            def time_ps(self):
                run.reads += 1
                return np.array([100 * run.calls * PS_PER_US])

            n_windows = np.array([100 * self.calls])
            tasks = types.SimpleNamespace(task_finish_ps=finish_ps)

        return State()


def not_a_terminal() -> Console:
    return Console(file=io.StringIO(), width=200)


def test_lines_at_the_set_cadence_with_tasks_done_eta_simulated_time_and_windows_per_second():
    clock, run, console = FakeClock(), FakeRun(), not_a_terminal()
    progress = Progress("simulating", total=8, unit="tasks", interval_s=10, console=console, clock=clock)
    with SimulationProgress(progress, [8]) as tasks_progress:
        for _ in range(8):  # compiled calls of 2 s each (the first one's state starts the rates)
            clock.now_s += 2
            tasks_progress.on_state(run.state())
        clock.now_s += 1
    lines = console.file.getvalue().splitlines()
    # At t = 10 s: 5 of 8 tasks, 4 done since the first report at 2 s, so 0.5 tasks/s and
    # 6 s left; 400 windows in 8 s. At 16 s the run ends (no line due); the final line at
    # 17 s reads the last state: 700 windows in 15 s.
    assert lines == [
        "simulating: 5/8 tasks (62%), ETA 6 s · simulated 500.0 µs · 50 windows/s · 10 s elapsed",
        "simulating ended: 8/8 tasks (100%) · simulated 800.0 µs · 47 windows/s · 17 s",
    ]
    assert run.reads == 3  # the first call (it starts the rates), the one at 10 s and the final line


def test_units_of_several_batches_and_a_long_run():
    """A sweep's points: batches finish, each adding its points, simulated time and windows.
    Lines fall due every 30 s and are written at the next report (every 24 s): at 48, 72,
    96, 120, 168, 192, 216 and 240 s, 8 in 4 minutes."""
    clock, console = FakeClock(), not_a_terminal()
    progress = Progress("sweep", total=40, unit="points", interval_s=30, console=console, clock=clock)
    with SimulationProgress(progress) as points:
        for _ in range(10):  # batches of 4 points, 24 s each
            clock.now_s += 24
            points.finished([{"simulated_time_us": 1500.0, "n_windows": 600}] * 4)
    lines = console.file.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["sweep"] * 8 + ["sweep ended"]
    # The first batch (24 s) starts the rates: at 48 s, 4 points in 24 s, 32 left: 3 min 12 s.
    assert lines[0] == "sweep: 8/40 points (20%), ETA 3 min 12 s · simulated 12.000 ms · 100 windows/s · 48 s elapsed"
    assert lines[-1] == "sweep ended: 40/40 points (100%) · simulated 60.000 ms · 100 windows/s · 4 min 00 s"


def test_a_terminal_gets_a_bar_and_interval_zero_shows_nothing():
    terminal = Console(file=io.StringIO(), force_terminal=True, width=120)
    with Progress("training", total=3, unit="epochs", console=terminal) as progress:
        assert progress.bar is not None
        for epoch in (1, 2, 3):
            progress.update(epoch, detail="train 1.0e-02")
    assert "3/3 epochs (100%)" in terminal.file.getvalue()
    quiet = not_a_terminal()
    with Progress("training", total=3, interval_s=0, console=quiet) as progress:
        assert not progress.due()
        progress.update(1)
    assert quiet.file.getvalue() == ""
