"""Scale-out over a Ray cluster: each group (one batch of design points) runs as one Ray task.

Install with ``pip install 'multiverse-jax[ray]'``. Every node of the cluster needs
``multiverse_jax`` importable by its Ray workers (the same venv on one machine;
``pip install multiverse-jax`` on each node of a cluster, or ship it with a
``runtime_env``, e.g. ``{"py_modules": [multiverse_jax]}`` or ``{"pip": [...]}``).

Token authentication: a cluster started with ``ray start`` enables it when a token exists
(``~/.ray/auth_token``), but a driver that connects to an explicit address does not; set
``RAY_AUTH_MODE=token`` (and the token, e.g. ``RAY_AUTH_TOKEN``) in the driver's
environment before Ray is imported, or the connection fails with ``AuthenticationError``.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Callable, Sequence

from multiverse_jax.errors import InputError


def _simulate_group(experiments, simulate_kwargs: dict):
    """The task body, run on a Ray worker. Module level, so Ray pickles it by reference
    (module and name): the worker imports multiverse_jax instead of receiving code."""
    from multiverse_jax.simulate import simulate

    return simulate(experiments, **simulate_kwargs)


def run_groups_on_ray(
    groups: Sequence[tuple[list, dict]],
    address: str | None,
    *,
    on_done: Callable[[int, object], None],
    num_cpus_per_task: float = 1,
    num_gpus_per_task: float = 0,
    runtime_env: dict | None = None,
) -> None:
    """Run each group ``(experiments, simulate_kwargs)`` as one Ray task: ``simulate(experiments,
    **simulate_kwargs)`` on a worker.

    ``on_done(index, outcome)`` is called in this process as each task finishes, in
    completion order: ``outcome`` is the ``list[Result]`` of group ``index``, or the
    exception it raised (its original type and message; the worker's traceback is attached
    as a note), or a ``ray.exceptions.RayError`` when Ray lost the task (worker or node
    died). A failed group does not stop the others. Arrays in the results may be
    read-only (Ray deserialises NumPy arrays without copying).

    Connects with ``ray.init(address=address, runtime_env=...)`` (``"local"``: a private
    local instance; ``"auto"``: the cluster this machine belongs to) and disconnects at
    the end, stopping only an instance it started. If Ray is already initialised in this
    process it is reused (``address`` ignored, ``runtime_env`` applied per task) and left
    running.

    ``num_gpus_per_task``: on GPU nodes give each task a GPU (>= 1): Ray then sets
    ``CUDA_VISIBLE_DEVICES`` for it and starts a fresh worker per task, whereas a task
    with 0 GPUs sees every GPU of its node. CPU workers are reused, so groups of one
    shape compile once per worker.
    """
    try:
        import ray  # lazy: Ray is an optional extra
    except ImportError as exc:
        raise InputError(
            "hydra.launcher.ray_address is set but Ray is not installed: pip install 'multiverse-jax[ray]'"
        ) from exc

    started = not ray.is_initialized()
    if started:
        # Quiet: workers' output stays in Ray's session logs (failures come back as
        # exceptions anyway) and only the driver's warnings are shown.
        init = {"log_to_driver": False, "logging_level": logging.WARNING, "runtime_env": runtime_env}
        if address == "local":
            init["include_dashboard"] = False  # a private instance needs no web UI
        with warnings.catch_warnings():
            # Ray starts its processes with fork + exec, which is safe: JAX warns of any fork.
            warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
            ray.init(address=address, **init)
    # Resources in the decorator (not ``.options``): Ray decides worker reuse there, and a
    # GPU task must get a fresh worker, since JAX keeps the devices it saw first.
    options = {"num_cpus": num_cpus_per_task, "num_gpus": num_gpus_per_task}
    if runtime_env is not None and not started:  # else ray.init gave it to the whole job
        options["runtime_env"] = runtime_env
    task = ray.remote(**options)(_simulate_group)
    pending: dict = {}
    try:
        for index, (experiments, simulate_kwargs) in enumerate(groups):
            pending[task.remote(list(experiments), dict(simulate_kwargs))] = index
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ref)
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayTaskError as err:
                # The task raised: hand on the worker's exception itself, not Ray's wrapper
                # (whose str() is the remote traceback), with that traceback as a note.
                outcome = err.cause
                outcome.add_note(str(err))
            except ray.exceptions.RayError as err:  # the task was lost, not raised
                outcome = err
            del ref  # lets Ray free the result in its object store
            on_done(index, outcome)
    finally:
        for ref in pending:  # on_done raised, or an interrupt: stop the work nobody waits for
            with contextlib.suppress(Exception):  # keep the exception that got us here
                ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
