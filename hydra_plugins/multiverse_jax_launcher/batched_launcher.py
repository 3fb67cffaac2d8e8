"""The batched Hydra launcher: every design point of a sweep simulated as a few batched programs.

Selected with ``hydra/launcher=batched`` (the default of ``multiverse-jax -m``). Hydra
imports every plugin module at every start, so this module stays light: the work (JAX,
the simulator) lives in ``multiverse_jax.sweep.launcher`` and is imported in ``launch``.
"""

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.plugins.launcher import Launcher


@dataclass
class BatchedLauncherConf:
    _target_: str = "hydra_plugins.multiverse_jax_launcher.batched_launcher.BatchedLauncher"
    # Points per batched simulation; null: as many as fit in memory_fraction of the device
    # memory (estimated from the size of one point's state).
    max_batch_size: Optional[int] = None
    memory_fraction: float = 0.5
    # Pad every batched program to at least this many points (copies that cost no steps), so
    # launches of different sizes share one compiled program; a search sets it to its n_jobs.
    min_batch_size: Optional[int] = None
    # Skip points whose results are already in the sweep directory's results.parquet.
    resume: bool = True
    # Ray: null runs groups in this process; an address ("auto", "ray://host:10001",
    # "127.0.0.1:6379", or "local" for a private local instance) runs one Ray task per group.
    ray_address: Optional[str] = None
    ray_num_gpus_per_task: float = 0
    ray_runtime_env: Optional[Any] = None
    progress: bool = True  # progress across the sweep on stderr: a bar on a terminal, else log lines
    progress_interval_s: float = 10.0  # off a terminal, a progress line this often


ConfigStore.instance().store(group="hydra/launcher", name="batched", node=BatchedLauncherConf, provider="multiverse-jax")


class BatchedLauncher(Launcher):
    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = options
        self.config = None
        self.task_function = None
        self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int):
        from multiverse_jax.sweep.launcher import launch

        return launch(self, job_overrides, initial_job_idx)
