"""Training the learned queue restorer (HyGra §IV-C) on the dataset of ``restorer/dataset.py``.

    multiverse-jax-train-restorer dataset=restorer_dataset.npz out=restorer.msgpack

The dataset (``.npz``), N pairs of one port at one re-entry (``restorer/features.py``):

* ``history`` (N, N_HISTORY) float32, ``context`` (N, N_CONTEXT) float32: the features;
* ``target`` (N,) float32: the depth at the phase's end, as a share of the buffer;
* ``split`` (N,) int8: 0 train, 1 validation, 2 test (decided by scenario, never by sample);
* ``scenario`` (N,) int32: index into ``scenario_names`` (S,) str.

AdamW on the mean squared error of the predicted share, with linear warmup then cosine
decay, over shuffled minibatches; the epoch with the lowest validation loss is kept and
training stops after ``patience`` epochs without a better one. Everything random comes
from ``seed``: the same seed gives bit-identical parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path

import hydra
import jax
import jax.numpy as jnp
import numpy as np
import optax
from hydra.utils import to_absolute_path
from omegaconf import DictConfig
from rich.console import Console
from rich.markup import escape

from multiverse_jax.progress import DEFAULT_INTERVAL_S, Progress
from multiverse_jax.report.figure import new_figure, save as save_figure
from multiverse_jax.restorer import checkpoint
from multiverse_jax.restorer.dataset import SPLIT_TEST, SPLIT_TRAIN, SPLIT_VALIDATION
from multiverse_jax.restorer.features import N_CONTEXT, N_HISTORY
from multiverse_jax.restorer.model import QueueRestorer, RestorerConfig, init_params, predict

SPLITS = {"train": SPLIT_TRAIN, "validation": SPLIT_VALIDATION, "test": SPLIT_TEST}
FEATURES = ("history", "context", "target")
# The dataset's per-sample arrays: dtype and shape after the sample axis (N,).
COLUMNS = {
    "history": (np.float32, (N_HISTORY,)),
    "context": (np.float32, (N_CONTEXT,)),
    "target": (np.float32, ()),
    "split": (np.int8, ()),
    "scenario": (np.int32, ()),
}
EVAL_ROWS = 1024  # evaluation runs in chunks of this many rows: one compiled shape for every split
CLIP_NORM = 1.0  # global gradient norm clip: keeps an early large batch error from wrecking the warmup
END_LR_SHARE = 0.01  # the cosine decay ends at this share of the peak learning rate
EXIT_BAD_INPUT = 2
# The command's training settings (conf/train_restorer.yaml) and the results kept in the checkpoint's meta.
SETTINGS = ("seed", "epochs", "batch_size", "learning_rate", "weight_decay", "warmup_steps", "patience")
RESULTS = ("best_epoch", "best_val_loss", "test_mse", "test_mae", "n_train", "n_validation", "n_test")


# --- The dataset ---------------------------------------------------------------------------


def load_dataset(path) -> dict:
    """The arrays of the dataset file ``path`` (see the module doc), cast to their dtypes;
    ValueError naming the file and the missing or bad key."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, EOFError) as exc:  # not an array file, or one that needs pickle
        raise ValueError(f"{path}: not a restorer dataset (.npz): {exc}") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: a single array, not a restorer dataset (.npz with {sorted(COLUMNS)})")
    with loaded:
        arrays = {key: loaded[key] for key in loaded.files}
    expected = (*COLUMNS, "scenario_names")
    for key in expected:
        if key not in arrays:
            raise ValueError(f"{path}: no array {key!r} (a restorer dataset has {', '.join(expected)})")
    n = len(arrays["target"])
    dataset = {key: _column(path, key, arrays[key], n) for key in COLUMNS}
    names = arrays["scenario_names"]
    if names.ndim != 1 or names.dtype.kind not in "US":
        raise ValueError(f"{path}: 'scenario_names' must be a 1-D array of strings, got {names.dtype} {names.shape}")
    if not np.isin(dataset["split"], list(SPLITS.values())).all():
        raise ValueError(f"{path}: 'split' holds values other than {SPLITS}")
    if n and not (0 <= dataset["scenario"].min() and dataset["scenario"].max() < len(names)):
        raise ValueError(f"{path}: 'scenario' must index 'scenario_names' (0 .. {len(names) - 1})")
    return {**dataset, "scenario_names": names}


def _column(path, key: str, array: np.ndarray, n: int) -> np.ndarray:
    """``array`` of dataset column ``key`` checked (shape (n, ...), finite numbers) and cast."""
    dtype, shape = COLUMNS[key]
    if array.shape != (n, *shape) or array.dtype.kind not in "biuf":
        raise ValueError(f"{path}: {key!r} is {array.dtype} {array.shape}, expected numbers of shape {(n, *shape)}")
    if not np.isfinite(array).all():
        raise ValueError(f"{path}: {key!r} holds NaN or infinite values")
    return array.astype(dtype)


def _split(dataset: dict, name: str) -> tuple:
    """(history (n, N_HISTORY), context (n, N_CONTEXT), target (n,)) of split ``name``."""
    rows = dataset["split"] == SPLITS[name]
    if not rows.any():
        raise ValueError(f"the dataset has no {name} samples (split == {SPLITS[name]})")
    return tuple(np.asarray(dataset[key][rows]) for key in FEATURES)


# --- The optimiser and the compiled steps ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The optimiser's settings (hashable: a static argument, so equal settings share one
    compiled train step)."""

    learning_rate: float  # peak, reached after the warmup
    weight_decay: float  # AdamW's decoupled decay
    warmup_steps: int  # linear warmup from 0
    total_steps: int  # warmup plus cosine decay


def _optimizer(schedule: Schedule) -> optax.GradientTransformation:
    """Clipped AdamW with linear warmup and cosine decay to END_LR_SHARE of the peak."""
    s = schedule
    rate = optax.warmup_cosine_decay_schedule(
        0.0, s.learning_rate, s.warmup_steps, s.total_steps, end_value=s.learning_rate * END_LR_SHARE
    )
    return optax.chain(optax.clip_by_global_norm(CLIP_NORM), optax.adamw(rate, weight_decay=s.weight_decay))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _train_step(config, schedule, params, opt_state, data, index, weight, dropout_key, step):
    """One AdamW step on the rows ``index`` (B,) of ``data`` (history, context, target of
    the training split), each weighted by ``weight`` (B,) (0 for padding); returns
    (params, opt_state, loss). Loss: mean squared error of the share, not Huber: targets
    are shares of the buffer, in [0, 1], so no error is unbounded to begin with, and the
    reported metric is the MSE."""
    history, context, target = (column[index] for column in data)
    rngs = {"dropout": jax.random.fold_in(dropout_key, step)}

    def loss_fn(p):
        share = QueueRestorer(config).apply({"params": p}, history, context, deterministic=False, rngs=rngs)
        return jnp.sum(weight * (share - target) ** 2) / jnp.sum(weight)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = _optimizer(schedule).update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@functools.partial(jax.jit, static_argnums=0)
def _error_sums(config, params, history, context, target, weight):
    """(sum of squared errors, sum of absolute errors) of the rows with ``weight`` (R,) 1."""
    error = predict(config, params, history, context) - target
    return jnp.sum(weight * error**2), jnp.sum(weight * jnp.abs(error))


def _errors(config, params, chunks) -> tuple[float, float]:
    """(MSE, MAE) in buffer shares of a split prepared by ``_eval_chunks``."""
    sums = np.sum([_error_sums(config, params, *chunk) for chunk in chunks], axis=0)
    n = sum(float(chunk[3].sum()) for chunk in chunks)
    return float(sums[0] / n), float(sums[1] / n)


def _eval_chunks(split: tuple) -> list:
    """A split (history, context, target) as chunks of EVAL_ROWS rows (the last padded,
    with weight 0): [(history, context, target, weight (EVAL_ROWS,))]."""
    n = len(split[2])
    rows = -(-n // EVAL_ROWS) * EVAL_ROWS
    padded = [np.concatenate([a, np.zeros((rows - n, *a.shape[1:]), a.dtype)]) for a in split]
    weight = (np.arange(rows) < n).astype(np.float32)
    starts = range(0, rows, EVAL_ROWS)
    return [tuple(jnp.asarray(a[start : start + EVAL_ROWS]) for a in (*padded, weight)) for start in starts]


# --- Training ------------------------------------------------------------------------------


def train(
    dataset: dict,
    config: RestorerConfig,
    *,
    seed: int,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    warmup_steps: int,
    patience: int,
    progress_interval_s: float = DEFAULT_INTERVAL_S,
):
    """Train a restorer of ``config`` on ``dataset`` (``load_dataset``'s arrays).

    Returns ``(params, history)``: the parameters of the epoch with the lowest validation
    loss, and ``history`` with per-epoch ``train_loss`` (mean over the epoch's minibatches)
    and ``val_loss`` (MSE at the epoch's end) lists, ``best_epoch`` (1-based),
    ``best_val_loss``, ``test_mse`` and ``test_mae`` (buffer shares, best parameters) and
    the sample count of every split (``n_train``, ``n_validation``, ``n_test``).

    Progress on stderr (``progress.py``): epochs done of ``epochs`` with an ETA (an upper
    bound: early stopping may end sooner) and the losses, a line every
    ``progress_interval_s`` off a terminal (0: none).
    """
    train_split = tuple(jnp.asarray(a) for a in _split(dataset, "train"))
    val_chunks, test_chunks = (_eval_chunks(_split(dataset, name)) for name in ("validation", "test"))
    n_train = len(train_split[2])
    batch = min(batch_size, n_train)
    steps_per_epoch = -(-n_train // batch)
    _check_settings(epochs, batch_size, patience, warmup_steps, epochs * steps_per_epoch)
    schedule = Schedule(float(learning_rate), float(weight_decay), int(warmup_steps), epochs * steps_per_epoch)
    init_key, shuffle_key, dropout_key = jax.random.split(jax.random.key(seed), 3)
    params = best_params = init_params(config, init_key)
    opt_state = _optimizer(schedule).init(params)
    history = {"train_loss": [], "val_loss": [], "best_epoch": 0, "best_val_loss": float("inf")}
    with Progress("training", total=epochs, unit="epochs", interval_s=progress_interval_s) as progress:
        for epoch in range(1, epochs + 1):
            index, weight = _batches(jax.random.fold_in(shuffle_key, epoch), n_train, batch)
            losses = []
            for i in range(steps_per_epoch):
                step = (epoch - 1) * steps_per_epoch + i
                params, opt_state, loss = _train_step(
                    config, schedule, params, opt_state, train_split, index[i], weight[i], dropout_key, step
                )
                losses.append(loss)
            history["train_loss"].append(float(np.average(losses, weights=weight.sum(axis=1))))
            history["val_loss"].append(_errors(config, params, val_chunks)[0])
            if history["val_loss"][-1] < history["best_val_loss"]:
                history.update(best_epoch=epoch, best_val_loss=history["val_loss"][-1])
                best_params = params
            progress.update(epoch, detail=_epoch_line(epoch, history))
            if epoch - history["best_epoch"] >= patience:
                break
    test_mse, test_mae = _errors(config, best_params, test_chunks)
    counts = {f"n_{name}": int(np.sum(dataset["split"] == code)) for name, code in SPLITS.items()}
    return best_params, {**history, "test_mse": test_mse, "test_mae": test_mae, **counts}


def _batches(key, n: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """One epoch's minibatches of ``n`` rows in the order of ``key``: row indices (S, batch)
    and weights (S, batch) float32, the last batch padded with row 0 at weight 0."""
    steps = -(-n // batch)
    order = np.asarray(jax.random.permutation(key, n))
    index = np.concatenate([order, np.zeros(steps * batch - n, order.dtype)])
    weight = (np.arange(steps * batch) < n).astype(np.float32)
    return index.reshape(steps, batch), weight.reshape(steps, batch)


def _check_settings(epochs: int, batch_size: int, patience: int, warmup_steps: int, total_steps: int) -> None:
    """ValueError naming the first training setting out of range."""
    for name, value in (("epochs", epochs), ("batch_size", batch_size), ("patience", patience)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"warmup_steps must be in [0, {total_steps}) (the schedule's length: epochs × steps per epoch), "
            f"got {warmup_steps}"
        )


def _epoch_line(epoch: int, history: dict) -> str:
    """The losses of ``epoch`` and the best epoch so far, for progress reports (short: it
    shares an 80-column line with the bar)."""
    train, val = history["train_loss"][epoch - 1], history["val_loss"][epoch - 1]
    return f"train {train:.2e} val {val:.2e} best@{history['best_epoch']}"


def plot_loss_curve(history: dict, path) -> Path:
    """Write a PNG of the training and validation loss per epoch (log scale) to ``path``."""
    fig = new_figure(6.0, 4.0)
    ax = fig.add_subplot()
    epochs = np.arange(1, len(history["train_loss"]) + 1)
    ax.plot(epochs, history["train_loss"], label="train (mean over the epoch)")
    ax.plot(epochs, history["val_loss"], label="validation")
    ax.axvline(history["best_epoch"], color="grey", ls="--", lw=1.0, label=f"best (epoch {history['best_epoch']})")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("MSE (share of the buffer)²")
    ax.legend()
    ax.grid(True, alpha=0.3)
    return save_figure(fig, path)


# --- The command ---------------------------------------------------------------------------


def run(cfg) -> dict:
    """Train on ``cfg.dataset``, write the checkpoint to ``cfg.out`` and ``loss_curve.png``
    beside it (paths relative to the directory the command was started in); returns the
    training history."""
    dataset_path, out = Path(to_absolute_path(cfg.dataset)), Path(to_absolute_path(cfg.out))
    dataset = load_dataset(dataset_path)
    config = RestorerConfig(**cfg.model)
    settings = {key: cfg[key] for key in SETTINGS}
    params, history = train(dataset, config, **settings, progress_interval_s=cfg.progress_interval_s)
    results = {key: history[key] for key in RESULTS}
    meta = {"dataset": dataset_path.name, "n_scenarios": len(dataset["scenario_names"]), **results, **settings}
    out.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.save(out, config, params, meta)
    plot_loss_curve(history, out.parent / "loss_curve.png")
    return history


@hydra.main(version_base=None, config_path="../conf", config_name="train_restorer")
def main(cfg: DictConfig) -> None:
    """The ``multiverse-jax-train-restorer`` command (Hydra parses ``sys.argv``; config
    ``conf/train_restorer.yaml``). Exit code 2 for a bad dataset or setting."""
    console = Console()
    try:
        history = run(cfg)
    except (ValueError, FileNotFoundError) as exc:
        Console(stderr=True).print(f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_BAD_INPUT)
    h = history
    console.print(
        f"samples: {h['n_train']} train, {h['n_validation']} validation, {h['n_test']} test\n"
        f"best epoch {h['best_epoch']} of {len(h['val_loss'])} (validation MSE {h['best_val_loss']:.3e})\n"
        f"test MSE {h['test_mse']:.3e}, MAE {h['test_mae']:.3e} (shares of the buffer)\n"
        f"wrote {to_absolute_path(cfg.out)} and loss_curve.png beside it",
        highlight=False,
        soft_wrap=True,
    )


if __name__ == "__main__":
    main()
