"""The learned queue restorer: the model learns, training is reproducible, checkpoints
round-trip and are checked, batched inference equals per-port inference, and the
training command runs end to end.

One tiny model shape and one set of training settings throughout, so the train step and
``predict`` compile once per shape for the whole module.
"""

import dataclasses
import subprocess
import sys
from functools import partial
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import serialization

import multiverse_jax  # noqa: F401  (64-bit mode, as in the simulator)
from multiverse_jax.restorer import checkpoint
from multiverse_jax.restorer.features import N_CONTEXT, N_HISTORY
from multiverse_jax.restorer.model import RestorerConfig, predict
from multiverse_jax.restorer.train import _train_step, load_dataset, train

CONFIG = RestorerConfig(d_model=16, n_layers=1, n_heads=2, mlp_dim=32)
SETTINGS = dict(seed=0, epochs=150, batch_size=16, learning_rate=3e-3, weight_decay=0.0, warmup_steps=10)
SETTINGS.update(patience=1000, progress_interval_s=0)
predict_jit = jax.jit(predict, static_argnums=0)


def synthetic(n_train=64, n_eval=16, seed=0) -> dict:
    """A dataset in the file's layout: n_train training and n_eval validation and test
    rows whose target is a smooth function of the newest samples and the load."""
    rng = np.random.default_rng(seed)
    n = n_train + 2 * n_eval
    history = rng.random((n, N_HISTORY), dtype=np.float32)
    context = rng.random((n, N_CONTEXT), dtype=np.float32)
    target = 0.5 * history[:, 0] + 0.3 * context[:, 3] * history[:, 1]
    return {
        "history": history,
        "context": context,
        "target": target.astype(np.float32),
        "split": np.repeat(np.array([0, 1, 2], np.int8), [n_train, n_eval, n_eval]),
        "scenario": np.repeat(np.arange(3, dtype=np.int32), [n_train, n_eval, n_eval]),
        "scenario_names": np.array(["train", "validation", "test"]),
    }


@pytest.fixture(scope="module")
def trained():
    """(params, history) of the tiny model trained on ``synthetic()``."""
    return train(synthetic(), CONFIG, **SETTINGS)


def assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_overfits_tiny_set(trained):
    _, history = trained
    assert history["train_loss"][-1] * 10 <= history["train_loss"][0]
    assert len(history["train_loss"]) == len(history["val_loss"]) == SETTINGS["epochs"]
    assert history["val_loss"][history["best_epoch"] - 1] == history["best_val_loss"] == min(history["val_loss"])
    # It generalises too: on the held-out rows, under 3/4 of the error of keeping the newest
    # sample (``freeze``, where the model starts from).
    test = synthetic()["split"] == 2
    freeze_mse = float(np.mean((synthetic()["history"][test, 0] - synthetic()["target"][test]) ** 2))
    assert history["test_mse"] < 0.75 * freeze_mse, (history["test_mse"], freeze_mse)
    assert (history["n_train"], history["n_validation"], history["n_test"]) == (64, 16, 16)


def test_same_seed_same_params(trained):
    """Retraining with the same seed reproduces every bit, and reuses the compiled step."""
    compiled = _train_step._cache_size()
    params, history = train(synthetic(), CONFIG, **SETTINGS)
    assert_trees_equal(params, trained[0])
    assert history == trained[1]
    assert _train_step._cache_size() == compiled
    other, _ = train(synthetic(), CONFIG, **{**SETTINGS, "seed": 1})
    assert not np.array_equal(jax.tree.leaves(other)[0], jax.tree.leaves(params)[0])


def test_checkpoint_round_trip(trained, tmp_path):
    params, _ = trained
    path = tmp_path / "restorer.msgpack"
    meta = {"seed": 0, "test_mse": 1.5e-3, "dataset": "synthetic"}
    checkpoint.save(path, CONFIG, params, meta)
    config, loaded, loaded_meta = checkpoint.load(path)
    assert config == CONFIG
    assert_trees_equal(loaded, params)
    assert loaded_meta == {**meta, "n_history": N_HISTORY, "n_context": N_CONTEXT}
    data = synthetic()
    np.testing.assert_array_equal(
        predict_jit(config, loaded, data["history"], data["context"]),
        predict_jit(CONFIG, params, data["history"], data["context"]),
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"format": "multiverse-jax-restorer/0"}, "expected 'multiverse-jax-restorer/1'"),
        ({"n_context": N_CONTEXT - 4}, f"n_context={N_CONTEXT - 4}"),
    ],
)
def test_checkpoint_rejects_other_formats(trained, tmp_path, change, message):
    path = tmp_path / "old.msgpack"
    checkpoint.save(path, CONFIG, trained[0], {})
    stored = serialization.msgpack_restore(path.read_bytes())
    stored["format"] = change.get("format", stored["format"])
    stored["meta"].update({k: v for k, v in change.items() if k != "format"})
    path.write_bytes(serialization.msgpack_serialize(stored))
    with pytest.raises(ValueError, match=message) as error:
        checkpoint.load(path)
    assert "old.msgpack" in str(error.value)


def test_batched_equals_per_port(trained):
    """Ports are independent rows: a batch, each port alone, and a vmap over experiments
    give the same depths."""
    params, _ = trained
    data = synthetic()
    history, context = data["history"][:16], data["context"][:16]  # (16, H), (16, C)
    batched = np.asarray(predict_jit(CONFIG, params, history, context))
    alone = np.concatenate([predict_jit(CONFIG, params, history[i : i + 1], context[i : i + 1]) for i in range(16)])
    np.testing.assert_allclose(batched, alone, rtol=1e-5, atol=1e-6)
    assert batched.dtype == np.float32 and batched.shape == (16,) and (batched >= 0).all()
    # Two experiments of 8 ports each: (2, 8, H) and (2, 8, C) → (2, 8).
    per_experiment = jax.jit(jax.vmap(partial(predict, CONFIG), in_axes=(None, 0, 0)))
    swept = per_experiment(params, history.reshape(2, 8, -1), context.reshape(2, 8, -1))
    np.testing.assert_allclose(np.asarray(swept).reshape(-1), batched, rtol=1e-5, atol=1e-6)


def test_load_dataset_names_missing_key(tmp_path):
    path = tmp_path / "no_target.npz"
    np.savez(path, **{k: v for k, v in synthetic().items() if k != "target"})
    with pytest.raises(ValueError, match="no_target.npz: no array 'target'"):
        load_dataset(path)
    bad = {**synthetic(), "context": np.zeros((96, N_CONTEXT - 1), np.float32)}
    np.savez(path, **bad)
    with pytest.raises(ValueError, match="'context' is float32"):
        load_dataset(path)


def test_train_command_end_to_end(tmp_path):
    """``multiverse-jax-train-restorer`` in its own process, paths relative to where it
    was started: the checkpoint and the loss curve land there and load."""
    np.savez(tmp_path / "data.npz", **synthetic())
    command = [
        str(Path(sys.executable).parent / "multiverse-jax-train-restorer"),
        "dataset=data.npz",
        "out=model/restorer.msgpack",
        "epochs=3",
        "batch_size=16",
        "warmup_steps=0",
        *(f"model.{f.name}={getattr(CONFIG, f.name)}" for f in dataclasses.fields(CONFIG)),
        f"hydra.run.dir={tmp_path / 'run'}",
        "progress_interval_s=1e-9",  # a progress line every epoch (stderr is not a terminal here)
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "64 train, 16 validation, 16 test" in done.stdout
    assert "training: 2/3 epochs (67%), ETA " in done.stderr and "training ended: 3/3 epochs (100%) · train " in done.stderr
    config, params, meta = checkpoint.load(tmp_path / "model" / "restorer.msgpack")
    assert config == CONFIG and meta["n_train"] == 64 and meta["epochs"] == 3 and meta["dataset"] == "data.npz"
    assert (tmp_path / "model" / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert predict_jit(config, params, synthetic()["history"], synthetic()["context"]).shape == (96,)
