"""What machine and versions a benchmark ran on (the shared header of every results JSON),
and how long JAX spent compiling (``COMPILE_CLOCK``)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

import jax

import multiverse_jax


def git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent
        ).stdout.strip()
    except Exception:  # noqa: BLE001  (not a checkout, no git: the JSON says null)
        return None


def machine_info() -> dict:
    """Date, versions, commit, backend and device, CPUs, platform, load average at the start."""
    device = jax.devices()[0]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(__import__("jaxlib"), "__version__", None),
        "multiverse_jax_version": multiverse_jax.__version__,
        "git_commit": git_commit(),
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


class CompileClock:
    """Sums JAX's own compile-phase durations (trace, lower, backend compile) since the last ``take()``."""

    EVENTS = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )

    def __init__(self):
        self.total = 0.0
        self.seen = False
        try:
            from jax import monitoring

            monitoring.register_event_duration_secs_listener(self._listen)
        except Exception:  # noqa: BLE001 - older JAX: no compile split
            pass

    def _listen(self, name, duration, **_):
        if name in self.EVENTS:
            self.total += duration
            self.seen = True

    def take(self) -> float | None:
        total, seen = self.total, self.seen
        self.total, self.seen = 0.0, False
        return total if seen else None


COMPILE_CLOCK = CompileClock()
