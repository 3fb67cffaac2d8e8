"""The ``multiverse-jax`` command: one experiment from the Hydra config, run and reported.

Exit codes: 0 success; 1 the simulation failed (outputs are still written) or the design
point does not fit in GPU memory (``summary.json`` with status "oom"); 2 bad input (a
config key or an input file; the message names it, no traceback).

Progress goes to stderr (``progress.py``): a bar on a terminal, else a line every
``output.progress_interval_s`` (simulated time, windows per second and, for task
workloads, tasks done of total with an ETA) and a final line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig
from rich.console import Console
from rich.markup import escape

import multiverse_jax.conf.schema  # noqa: F401  (registers the config schema with Hydra)
from multiverse_jax import engine
from multiverse_jax.compile_cache import use_compile_cache
from multiverse_jax.config import compile_cache_setting, experiment_from_config, load_config, resolve_config, run_options
from multiverse_jax.errors import InputError
from multiverse_jax.progress import Progress, SimulationProgress
from multiverse_jax.report.outputs import summary_table, write_oom_summary, write_outputs
from multiverse_jax.simulate import overflow_text, simulate
from multiverse_jax.workload.llm import OutOfMemory

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def run(cfg, output_dir, *, console: Console | None = None) -> int:
    """Build, simulate and report the experiment of ``cfg``; write outputs to ``output_dir``.

    Returns the exit code. Bad input is reported on stderr before any simulation starts.
    """
    console = console or Console()
    errors = Console(stderr=True)
    try:
        typed = load_config(cfg)
        use_compile_cache(compile_cache_setting(typed))  # programs compiled by an earlier run are read back
        config = resolve_config(typed)
        experiment = experiment_from_config(typed)
        options = run_options(typed)
        plots = typed.output.plots
        engine.split_cpu_into_devices(options.get("devices"))  # before anything starts JAX's backend
    except OutOfMemory as exc:
        # A valid design point that does not fit in GPU memory: a result, not bad input.
        write_oom_summary(output_dir, str(exc), exc.usage)
        errors.print(f"[bold red]out of GPU memory:[/bold red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return EXIT_FAILED
    except InputError as exc:
        errors.print(f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return EXIT_BAD_INPUT

    events = "".join(f"; {e.describe()}" for e in experiment.link_events)  # timed link events, in list order
    console.print(
        f"{experiment.topology.name}: {experiment.topology.n_hosts} hosts, {len(experiment.flows)} flows{events}",
        highlight=False,
        soft_wrap=True,
    )
    n_tasks = len(experiment.tasks) if experiment.tasks is not None else 0
    interval_s = typed.output.progress_interval_s
    progress = Progress("simulating", total=n_tasks or None, unit="tasks", interval_s=interval_s, console=errors)
    with SimulationProgress(progress, [n_tasks]) as tasks_progress:
        result = simulate([experiment], on_progress=tasks_progress.on_state, **options)[0]

    console.print(summary_table([result], names=["value"], title=experiment.topology.name))
    files = write_outputs(result, output_dir, experiment, plots=plots, config=config)
    names = ", ".join(p.name for p in files.values())
    console.print(f"outputs in {Path(output_dir).resolve()}: {names}", highlight=False, soft_wrap=True)
    if result.ok and result.summary["overflow_events"]:  # switch.overflow=report
        s = result.summary
        times = f"{s['overflow_events']} time{'s' if s['overflow_events'] > 1 else ''}, {s['over_buffer_us']:,.3f} µs in all"
        warning = f"{overflow_text(s['overflow_by_port'])} ({times}); nothing was dropped (switch.overflow=report)"
        errors.print(f"[bold yellow]warning:[/bold yellow] {escape(warning)}", highlight=False, soft_wrap=True)
    if not result.ok:
        reason = escape(result.summary["error"] or "did not finish")
        errors.print(f"[bold red]simulation failed:[/bold red] {reason}", highlight=False, soft_wrap=True)
        return EXIT_FAILED
    return 0


_task_started = False  # set once Hydra has composed the config and called the task


@hydra.main(version_base=None, config_path="conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    global _task_started
    _task_started = True
    code = run(cfg, HydraConfig.get().runtime.output_dir)
    if code:
        sys.exit(code)


def main() -> None:
    """The ``multiverse-jax`` command (Hydra parses ``sys.argv``; ``-m`` sweeps go to the
    batched launcher, ``multiverse_jax.sweep``).

    Hydra reports a config it cannot compose (a wrong type, an unknown key or group option,
    named in its message) and exits 1 before calling the task; that is bad input, so it
    becomes exit code 2 like the errors this module reports itself.
    """
    global _task_started
    _task_started = False  # (a process may call this more than once: the tests, a notebook)
    try:
        _hydra_main()
    except SystemExit as exc:
        if exc.code == 1 and not _task_started:
            raise SystemExit(EXIT_BAD_INPUT) from None
        raise


if __name__ == "__main__":
    main()
