"""The batched sweeper: Hydra's basic sweeper, minus its up-front composition of every point
when the batched launcher runs the sweep.

The basic sweeper composes every point before launching, and one point that does not
compose (``sim.seed=0,x``) aborts the whole sweep. The batched launcher composes each
point itself and reports one that fails as an invalid point, with Hydra's message, while
the others run -- so with it this check is left to the launcher (with another launcher,
the basic sweeper's check runs as usual). Everything else (``-m a=1,2 b=x,y`` cartesian
products, ``hydra.sweeper.params``, ``max_batch_size``) is the basic sweeper's.
"""

from dataclasses import dataclass
from typing import Dict, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore


@dataclass
class BatchedSweeperConf:
    _target_: str = "hydra_plugins.multiverse_jax_launcher.batched_sweeper.BatchedSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="batched", node=BatchedSweeperConf, provider="multiverse-jax")


class BatchedSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch) -> None:
        from hydra_plugins.multiverse_jax_launcher.batched_launcher import BatchedLauncher

        if not isinstance(self.launcher, BatchedLauncher):
            super().validate_batch_is_legal(batch)
