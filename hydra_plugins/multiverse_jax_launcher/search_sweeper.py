"""The search sweeper (``hydra/sweeper=optuna``): Hydra's Optuna sweeper, whose trials run as
batched programs and whose objective is read from the results table.

Hydra's Optuna sweeper asks Optuna for ``n_jobs`` trials at a time and hands them to the
launcher as one list of overrides; the batched launcher runs that list like any sweep
(grouped by static shape, one compiled program per group). What this subclass adds:

* ``objective``: the metric(s) of the results table to optimise -- one name (``job_time_us``,
  ``iteration_time_us``, ``fct_p99_us``, a cost column such as ``switch_ports``) or a list
  of them, one per ``direction`` (multi-objective: Optuna keeps the Pareto front);
* a point that is invalid, out of memory, failed or whose objective does not apply (NaN)
  is told to Optuna as a *failed trial*, with its reason, and the search goes on
  (``max_failure_rate`` defaults to 1.0 here; Hydra's own default, 0, aborts at the
  first one);
* ``SWEEP_DIR/search.json`` names the objectives and directions, so
  ``multiverse-jax-report`` draws the optimisation history and the Pareto front.

This module stores its config as ``hydra/sweeper=optuna`` (and ``=search``), in place of
the plugin's own, after Hydra has imported every plugin (``StoreSearchConfigs``). The work is in
``multiverse_jax.sweep.search``. Hydra imports every plugin at every start: without the
optional ``hydra-optuna-sweeper`` package, selecting it says how to install it.
"""

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.search_path_plugin import SearchPathPlugin

INSTALL_HINT = "the search sweeper needs Hydra's Optuna sweeper: pip install 'multiverse-jax[search]'"

try:
    from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # the optional extra is not installed
    OptunaSweeperConf = OptunaSweeper = None


if OptunaSweeperConf is None:

    @dataclass
    class SearchSweeperConf:
        _target_: str = "hydra_plugins.multiverse_jax_launcher.search_sweeper.missing_optuna"
        objective: Any = "job_time_us"

    def missing_optuna(**_options):
        raise ImportError(INSTALL_HINT)

else:

    @dataclass
    class SearchSweeperConf(OptunaSweeperConf):
        _target_: str = "hydra_plugins.multiverse_jax_launcher.search_sweeper.SearchSweeper"
        # A metric of the results table, or a list of them (one per direction).
        objective: Any = "job_time_us"
        max_failure_rate: float = 1.0  # invalid points are failed trials, not the end of the search

    class SearchSweeper(OptunaSweeper):
        def __init__(self, objective: Any, **options: Any) -> None:
            super().__init__(**options)
            self.objective = objective

        def setup(self, *, hydra_context, task_function, config) -> None:
            import sys

            from multiverse_jax.errors import InputError
            from multiverse_jax.sweep.search import ObjectiveLauncher

            super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
            impl = self.sweeper
            try:
                impl.launcher = ObjectiveLauncher(impl.launcher, self.objective, impl._get_directions(), config)
            except InputError as exc:  # bad input: one line and exit code 2, as the CLI reports it
                print(f"error: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
            impl.launcher.pad_batches_to(impl.n_jobs)

        def sweep(self, arguments):
            self.sweeper.launcher.write_search_file(self.sweeper)
            return super().sweep(arguments)


def store_search_configs() -> None:
    for name in ("optuna", "search"):
        ConfigStore.instance().store(group="hydra/sweeper", name=name, node=SearchSweeperConf, provider="multiverse-jax")


class StoreSearchConfigs(SearchPathPlugin):
    """Stores the configs again once Hydra has imported every plugin and before it composes
    the config: its plugin scan runs each plugin module afresh, the Optuna plugin's config
    module perhaps after this one (the order follows ``sys.path``), which would put the
    plugin's own ``optuna`` entry back. Hydra calls every search-path plugin at that point."""

    def manipulate_search_path(self, search_path) -> None:
        store_search_configs()


store_search_configs()
