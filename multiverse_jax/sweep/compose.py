"""Each design point's config, composed as Hydra would, without recomposing the whole tree.

Hydra composes a config from its defaults tree: reading every group option, merging the
schema, applying the overrides -- about a tenth of a second per point, which is minutes
for a sweep of thousands of small points (longer than simulating them). Most points of a
sweep differ from each other only in config *values* (``switch.buffer_bytes=400000``),
not in which group options they pick (``cc=dcqcn``). So points are composed in two parts:

* a template per distinct set of *structural* overrides (group choices, additions ``+k=v``,
  deletions ``~k``, ``hydra.*`` keys): Hydra's own ``load_sweep_config``;
* the value overrides applied to a copy of the template with Hydra's own
  ``ConfigLoaderImpl._apply_overrides_to_config`` (the same code, in the same order, that
  ``load_sweep_config`` runs after composing), and the ``hydra.overrides.task`` and
  ``hydra.job.override_dirname`` entries set as Hydra sets them.

``tests/test_sweep.py`` checks that this gives exactly Hydra's config for a mix of points.
"""

from __future__ import annotations

import copy

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict


class PointComposer:
    """``compose(overrides)``: the point's DictConfig (with its ``hydra`` node), like
    ``config_loader.load_sweep_config(master_config, overrides)``."""

    def __init__(self, config_loader, master_config: DictConfig):
        self.config_loader = config_loader
        self.master = master_config
        self.parser = OverridesParser.create()
        self.groups = set(master_config.hydra.runtime.choices.keys())  # config groups of the tree
        self.templates: dict[tuple[str, ...], DictConfig] = {}

    def _is_value(self, override) -> bool:
        """A plain ``key=value`` change of a config value (not a group, not hydra's)."""
        return (
            not override.is_add()
            and not override.is_delete()
            and not override.is_force_add()
            and not override.is_hydra_override()
            and override.package is None
            and override.key_or_group not in self.groups
        )

    def compose(self, overrides: list[str]) -> DictConfig:
        parsed = self.parser.parse_overrides(list(overrides))
        structural = tuple(o.input_line for o in parsed if not self._is_value(o))
        values = [o for o in parsed if self._is_value(o)]
        template = self.templates.get(structural)
        if template is None:
            template = self.config_loader.load_sweep_config(self.master, list(structural))
            self.templates[structural] = template
        cfg = copy.deepcopy(template)
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        app = [o for o in parsed if not o.is_hydra_override()]
        with open_dict(cfg.hydra):
            cfg.hydra.overrides.task = [o.input_line for o in app]
            cfg.hydra.job.override_dirname = get_overrides_dirname(
                overrides=app,
                kv_sep=cfg.hydra.job.config.override_dirname.kv_sep,
                item_sep=cfg.hydra.job.config.override_dirname.item_sep,
                exclude_keys=cfg.hydra.job.config.override_dirname.exclude_keys,
            )
        OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
        return cfg
