"""The restorer's checkpoint: one msgpack file (never a pickle) holding

    {"format": FORMAT, "config": RestorerConfig as a dict, "params": nested dict of
     float32 arrays, "meta": plain numbers and strings}

``meta`` carries what the model was trained on (sample counts, losses, seed) and the
feature widths ``n_history``/``n_context``, checked against ``restorer/features.py`` on
load so a checkpoint never meets features of another shape.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import jax
import numpy as np
from flax import serialization

import multiverse_jax
from multiverse_jax.restorer.features import N_CONTEXT, N_HISTORY
from multiverse_jax.restorer.model import RestorerConfig

FORMAT = "multiverse-jax-restorer/1"
SHIPPED = Path(multiverse_jax.__file__).parent / "data" / "restorer.msgpack"


def save(path, config: RestorerConfig, params, meta: dict) -> None:
    """Write ``params`` (a nested dict of arrays) of a model of ``config`` to ``path``;
    ``meta`` (plain numbers and strings) is stored with the feature widths added."""
    checkpoint = {
        "format": FORMAT,
        "config": dataclasses.asdict(config),
        "params": jax.tree.map(np.asarray, params),
        "meta": {**meta, "n_history": N_HISTORY, "n_context": N_CONTEXT},
    }
    Path(path).write_bytes(serialization.msgpack_serialize(checkpoint))


def load(path):
    """``(config, params, meta)`` of the checkpoint at ``path``; ValueError (naming the file
    and what was expected) for another format or feature widths other than ours."""
    try:
        checkpoint = serialization.msgpack_restore(Path(path).read_bytes())
    except ValueError as exc:  # msgpack's ExtraData / FormatError are ValueErrors
        raise ValueError(f"{path}: not a restorer checkpoint (msgpack): {exc}") from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != FORMAT:
        found = checkpoint.get("format") if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise ValueError(f"{path}: format {found!r}, expected {FORMAT!r}")
    meta = checkpoint["meta"]
    for key, expected in (("n_history", N_HISTORY), ("n_context", N_CONTEXT)):
        if meta.get(key) != expected:
            raise ValueError(
                f"{path}: trained on {key}={meta.get(key)}, but restorer/features.py builds {expected}; "
                "retrain with multiverse-jax-train-restorer"
            )
    unknown = set(checkpoint["config"]) - {f.name for f in dataclasses.fields(RestorerConfig)}
    if unknown:
        raise ValueError(f"{path}: config keys {sorted(unknown)} that RestorerConfig does not have")
    return RestorerConfig(**checkpoint["config"]), checkpoint["params"], meta


@functools.lru_cache(maxsize=1)
def load_shipped():
    """``load(SHIPPED)``, read once per process."""
    if not SHIPPED.exists():
        raise FileNotFoundError(
            f"{SHIPPED}: no trained restorer shipped; build a dataset with multiverse-jax-restorer-dataset, "
            f"train it with multiverse-jax-train-restorer dataset=<npz> out={SHIPPED}"
        )
    return load(SHIPPED)
