"""The batched Hydra launcher's work: a whole sweep as a few batched simulations.

``hydra_plugins/multiverse_jax_launcher`` hands ``launch`` every design point of the sweep
(Hydra's override lists). For each point, in order:

1. compose its config (as Hydra does: ``sweep/compose.py``; schema types and keys),
   resolve and validate it
   (``experiment_from_config``: ranges, files, sizes against the topology). A point
   that fails is *invalid* (or *oom*: an LLM point that does not fit in GPU memory), with
   the reason; it is reported as data, never as an exception, so the others go on;
2. skip it if the sweep directory's ``results.parquet`` already holds it (same resolved
   config: ``point_key``) -- a killed sweep resumes where it stopped;
3. group the remaining points by static shape and run each group as ONE batched program,
   in chunks that fit the device (``sweep/groups.py``), here or as Ray tasks;
4. as each chunk finishes, give each point its Hydra job directory (``.hydra/`` config and
   overrides, written by ``hydra.core.utils.run_job``) with the same outputs as a single
   run (``summary.json``, ``flows.parquet``, ...), and rewrite ``results.parquet``.

It returns one ``JobReturn`` per point, in Hydra's order, whose value is the point's
summary (status ok, failed, oom or invalid). Progress on stderr (``progress.py``: a bar
on a terminal, else a line every ``hydra.launcher.progress_interval_s``) counts points
done of total with an ETA, simulated time (summed over the points) and windows per second.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from pathlib import Path

from omegaconf import open_dict
from rich.console import Console
from rich.markup import escape

from multiverse_jax.errors import InputError
from multiverse_jax.progress import DEFAULT_INTERVAL_S, Progress, SimulationProgress
from multiverse_jax.sweep.compose import PointComposer
from multiverse_jax.sweep.results import METRICS, ResultsTable, metrics_of, point_key

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Point:
    """One design point of the sweep and what became of it."""

    job_num: int
    overrides: list[str]
    hydra_config: object = None  # the composed DictConfig (with its hydra node); None if composing failed
    config: dict | None = None  # resolved plain config
    key: str = ""
    experiment: object = None
    options: dict = dataclasses.field(default_factory=dict)
    compile_cache: str = "auto"  # sim.compile_cache (config.compile_cache_setting)
    status: str = "pending"  # pending | ok | failed | oom | invalid
    reason: str = ""
    summary: dict | None = None
    result: object = None
    resumed: bool = False
    extra: dict = dataclasses.field(default_factory=dict)  # oom: memory usage; resumed: the job dir of its outputs


def _reason(exc: BaseException) -> str:
    """A one-paragraph reason: the message, and Hydra/OmegaConf's cause when it has one."""
    text = str(exc).strip() or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in text:
        text += f": {str(cause).strip()}"
    return " ".join(text.split())


def _prepare(point: Point, composer, table: ResultsTable, resume: bool, sweep_dir: Path) -> None:
    """Compose, resolve and validate one point (or find it finished in the table)."""
    from hydra.core.hydra_config import HydraConfig

    from multiverse_jax.config import compile_cache_setting, experiment_from_config, load_config, resolve_config, run_options
    from multiverse_jax.workload.llm import OutOfMemory

    try:
        cfg = composer.compose(point.overrides)
    except Exception as exc:  # noqa: BLE001 -- a type error or unknown key in this point's overrides
        point.status, point.reason = "invalid", _reason(exc)
        point.key = point_key({"overrides": point.overrides})
        return
    with open_dict(cfg):
        cfg.hydra.job.id = point.job_num
        cfg.hydra.job.num = point.job_num
        # The sweep's directory, not one resolved from this point's own overrides (the
        # default name interpolates hydra.overrides.task, which differs per point).
        cfg.hydra.sweep.dir = str(sweep_dir)
    point.hydra_config = cfg
    HydraConfig.instance().set_config(cfg)  # relative paths resolve against the original cwd
    try:
        typed = load_config(cfg)  # once per point: the table row, the experiment and the options read it
        point.config = resolve_config(typed)
    except InputError as exc:
        point.status, point.reason = "invalid", _reason(exc)
        point.key = point_key({"overrides": point.overrides})
        return
    point.key = point_key(point.config)
    row = table.finished(point.key) if resume else None
    if row is not None:
        point.status, point.reason, point.resumed = row["status"], row["reason"] or "", True
        point.summary = {name: row.get(name) for name in METRICS}  # what a search reads as its objectives
        point.extra = {"same_point_as": row["job_dir"]}  # where its outputs are
        return
    try:
        point.experiment = experiment_from_config(typed)
        point.options = run_options(typed)
        point.compile_cache = compile_cache_setting(typed)
    except OutOfMemory as exc:
        point.status, point.reason, point.extra = "oom", str(exc), {"memory_bytes": exc.usage}
    except InputError as exc:
        point.status, point.reason = "invalid", _reason(exc)
    except Exception as exc:  # noqa: BLE001 -- e.g. a bug in an importer: reported, the sweep goes on
        point.status, point.reason = "invalid", f"{type(exc).__name__}: {_reason(exc)}"


def _job_dir(point: Point, sweep_dir: Path) -> Path:
    if point.hydra_config is None:
        return sweep_dir / str(point.job_num)
    return Path(str(point.hydra_config.hydra.sweep.dir)) / str(point.hydra_config.hydra.sweep.subdir)


def _finish(point: Point, launcher, sweep_dir: Path, table: ResultsTable, group: int = -1, batch_size: int = 0):
    """Write the point's job directory and table row; returns its JobReturn."""
    from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job

    from multiverse_jax.report.outputs import write_outputs, write_status_summary

    job_dir = _job_dir(point, sweep_dir)

    def task(_cfg) -> dict:
        """Runs inside Hydra's job (its output dir, logging, .hydra files) for this point."""
        from hydra.core.hydra_config import HydraConfig

        out = Path(HydraConfig.get().runtime.output_dir)
        if point.resumed:  # its outputs are already there; its metrics are the table's
            if not (out / "summary.json").is_file():  # a point a search asked for again, under a new job number
                write_status_summary(out, point.status, point.reason, **point.extra)
            return {"status": point.status, "error": point.reason, "resumed": True, "metrics": point.summary}
        if point.result is not None:
            plots = bool(point.config["output"]["plots"])
            write_outputs(point.result, out, point.experiment, plots=plots, config=point.config)
            return point.result.summary
        write_status_summary(out, point.status, point.reason, **point.extra)
        return {"status": point.status, "error": point.reason}

    if point.hydra_config is not None:
        ret = run_job(
            hydra_context=launcher.hydra_context,
            task_function=task,
            config=point.hydra_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
        if ret.status == JobStatus.FAILED:  # writing outputs failed: report it as this point's failure
            point.status, point.reason = "failed", f"writing outputs: {_reason(ret._return_value)}"
            ret = JobReturn(overrides=list(point.overrides), status=JobStatus.COMPLETED, _return_value={
                "status": point.status, "error": point.reason})
    else:
        summary = {"status": point.status, "error": point.reason, "overrides": point.overrides}
        write_status_summary(job_dir, point.status, point.reason, overrides=point.overrides)
        ret = JobReturn(overrides=list(point.overrides), working_dir=str(job_dir), status=JobStatus.COMPLETED)
        ret.return_value = summary
    if not point.resumed:
        summary = point.result.summary if point.result is not None else {"status": point.status}
        table.add(
            job_num=point.job_num,
            job_dir=job_dir.relative_to(sweep_dir) if job_dir.is_relative_to(sweep_dir) else job_dir,
            overrides=point.overrides,
            key=point.key,
            status=point.status,
            reason=point.reason,
            config=point.config,
            summary=summary,
            group=group,
            batch_size=batch_size,
        )
    return ret


def _distinct(points) -> tuple[list[Point], dict[str, list[Point]]]:
    """(the first point of each resolved config, the later points with the same config by
    key): a search may ask for one point several times in one ask; it is simulated once."""
    first: dict[str, Point] = {}
    repeats: dict[str, list[Point]] = collections.defaultdict(list)
    for point in points:
        if point.key in first:
            repeats[point.key].append(point)
        else:
            first[point.key] = point
    return list(first.values()), dict(repeats)


def _same_as(repeat: Point, point: Point, sweep_dir: Path) -> None:
    """``repeat`` has ``point``'s outcome, like a point resumed from the table: its job
    directory's summary names the job that holds the outputs."""
    summary = point.result.summary if point.result is not None else {"status": point.status}
    repeat.status, repeat.reason, repeat.resumed = point.status, point.reason, True
    repeat.summary = metrics_of(summary)
    job_dir = _job_dir(point, sweep_dir)
    repeat.extra = {"same_point_as": str(job_dir.relative_to(sweep_dir) if job_dir.is_relative_to(sweep_dir) else job_dir)}


def _split_cpu_for(pending) -> None:
    """Before the first simulation starts JAX's backend: a CPU split into as many devices
    as the pending points' ``sim.devices`` ask for (``engine.split_cpu_into_devices``)."""
    from multiverse_jax import engine

    wanted = [p.options.get("devices") for p in pending if p.options.get("devices") not in (None, 1)]
    if "all" in wanted:
        engine.split_cpu_into_devices("all")
    elif wanted:
        engine.split_cpu_into_devices(max(wanted))


def _use_compile_cache_for(pending, console: Console) -> None:
    """The compilation cache the first pending point's ``sim.compile_cache`` names (a key
    of the run, not of a point: ``compile_cache.use_compile_cache``). A folder that cannot
    be used is reported, and the sweep runs without it."""
    from multiverse_jax.compile_cache import use_compile_cache

    if not pending:
        return
    try:
        use_compile_cache(pending[0].compile_cache)
    except InputError as exc:
        console.print(f"[bold yellow]warning:[/bold yellow] {escape(str(exc))}; compiling without a cache", highlight=False, soft_wrap=True)


def launch(launcher, job_overrides, initial_job_idx: int):
    """``Launcher.launch``: every point of ``job_overrides`` (numbered from ``initial_job_idx``)."""
    from hydra.core.utils import configure_log, setup_globals

    from multiverse_jax.sweep.groups import simulate_many

    setup_globals()
    options = dict(launcher.options)
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir)).absolute()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    table = ResultsTable(sweep_dir)
    points = [Point(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
    composer = PointComposer(launcher.hydra_context.config_loader, launcher.config)
    for point in points:
        _prepare(point, composer, table, resume=bool(options.get("resume", True)), sweep_dir=sweep_dir)
    pending, repeats = _distinct(p for p in points if p.status == "pending")
    _split_cpu_for(pending)
    _use_compile_cache_for(pending, console)
    resumed = sum(p.resumed for p in points)
    console.print(
        f"sweep of {len(points)} points in {sweep_dir}: {len(pending)} to simulate"
        + (f", {resumed} already done (resumed)" if resumed else "")
        + (f", {sum(map(len, repeats.values()))} repeating another (simulated once)" if repeats else "")
        + (f", {sum(p.status in ('invalid', 'oom') and not p.resumed for p in points)} invalid or oom"),
        highlight=False,
        soft_wrap=True,
    )

    returns: dict[int, object] = {}
    # Points that need no simulation get their job directories first.
    for point in points:
        if point.status != "pending":
            returns[point.job_num] = _finish(point, launcher, sweep_dir, table)
    table.write()

    interval_s = float(options.get("progress_interval_s", DEFAULT_INTERVAL_S)) if options.get("progress", True) else 0.0
    progress = Progress("sweep", total=len(pending), unit="points", interval_s=interval_s if pending else 0.0)
    points_progress = SimulationProgress(progress)
    group_ids: dict = {}

    def on_group_done(group, indices, results) -> None:
        gid = group_ids.setdefault(id(group), len(group_ids))
        done = []
        for i, result in zip(indices, results):
            point = pending[i]
            if isinstance(result, Exception):
                point.status, point.reason = "failed", f"{type(result).__name__}: {_reason(result)}"
            else:
                point.result = result
                point.status = result.summary["status"]
                point.reason = result.summary.get("error", "") or ("" if point.status == "ok" else "did not finish")
            returns[point.job_num] = _finish(point, launcher, sweep_dir, table, gid, len(group.members))
            for repeat in repeats.get(point.key, []):
                _same_as(repeat, point, sweep_dir)
                returns[repeat.job_num] = _finish(repeat, launcher, sweep_dir, table)
            done.append(point)
        table.write()
        points_progress.finished([p.result.summary if p.result is not None else {} for p in done])

    if pending:
        ray_options = {"num_gpus_per_task": options.get("ray_num_gpus_per_task", 0)}
        if options.get("ray_runtime_env") is not None:
            ray_options["runtime_env"] = options["ray_runtime_env"]
        with points_progress:
            simulate_many(
                [p.experiment for p in pending],
                [p.options for p in pending],
                max_batch_size=options.get("max_batch_size"),
                min_batch_size=options.get("min_batch_size"),
                memory_fraction=float(options.get("memory_fraction", 0.5)),
                ray_address=options.get("ray_address"),
                ray_options=ray_options,
                on_group_done=on_group_done,
                on_progress=points_progress.on_state,
            )
    _print_summary(console, points, table)
    return [returns[p.job_num] for p in points]


def _print_summary(console: Console, points: list[Point], table: ResultsTable) -> None:
    counts = collections.Counter(point.status for point in points)
    text = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    console.print(f"sweep done: {text}; table {table.path}", highlight=False, soft_wrap=True)
    bad = [p for p in points if p.status != "ok"]
    for point in bad[:20]:
        console.print(
            f"  job {point.job_num} ({escape(' '.join(point.overrides))}): [bold red]{point.status}[/bold red] "
            f"{escape(point.reason)}",
            highlight=False,
            soft_wrap=True,
        )
    if len(bad) > 20:
        console.print(f"  ... and {len(bad) - 20} more (see the table)", highlight=False)
