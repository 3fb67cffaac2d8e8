"""The learned queue restorer (HyGra §IV-C): a small Transformer encoder over one port.

Tokens, per port: one prefix token embedding the context (``features.CONTEXT_NAMES``),
then one token per depth sample of the history (newest first) plus a fixed sinusoidal
encoding of its position. ``n_layers`` pre-LayerNorm encoder blocks mix them; the
prefix token is read out, with the newest depth sample alongside, into the depth at the
phase's end as a share of the buffer.

Every op acts on one port's row (attention over its own tokens, LayerNorm over features),
so a batch of ports gives what each port alone gives; ``predict`` is pure and traces
inside the simulator's jitted step (``restorer/inference.py``).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from multiverse_jax.restorer.features import N_CONTEXT, N_HISTORY

# The output is a correction to the newest depth sample (the depth the queue froze at:
# ``freeze``), clipped at an empty queue: max(newest + raw, 0). A model at its initial
# (small) weights is close to ``freeze``, an empty queue is exactly 0 rather than a
# softplus floor (most ports of a fabric hold nothing: a floor's bias on each of them
# outweighed the queues it got right, measured), and a constant queue is raw = 0.


@dataclasses.dataclass(frozen=True)
class RestorerConfig:
    """The model's shape (hashable: a static argument of jitted functions)."""

    d_model: int = 32  # token width
    n_layers: int = 2  # encoder blocks
    n_heads: int = 4  # attention heads (divides d_model)
    mlp_dim: int = 64  # hidden width of the blocks' MLPs and of the readout
    dropout: float = 0.0  # training only; inference is always deterministic

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"model.n_heads ({self.n_heads}) must divide model.d_model ({self.d_model})")
        if min(self.d_model, self.n_layers, self.n_heads, self.mlp_dim) < 1 or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model sizes must be at least 1 and 0 <= dropout < 1, got {self}")


def sinusoidal_positions(n_positions: int, d_model: int) -> np.ndarray:
    """(n_positions, d_model) float32 fixed encoding (Vaswani et al.): column 2i is
    sin(p / 10000^(2i/d)), column 2i+1 the cos; position 0 is the newest sample."""
    position = np.arange(n_positions)[:, None]
    frequency = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    angle = position * frequency  # (n_positions, ceil(d_model / 2))
    encoding = np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(n_positions, -1)
    return encoding[:, :d_model].astype(np.float32)  # float32: a float64 constant would promote under x64


class EncoderBlock(nn.Module):
    """Pre-LayerNorm Transformer block: tokens (N, T, d_model) → (N, T, d_model)."""

    config: RestorerConfig

    @nn.compact
    def __call__(self, tokens, deterministic: bool):
        c = self.config
        x = nn.LayerNorm()(tokens)
        x = nn.MultiHeadDotProductAttention(
            num_heads=c.n_heads, qkv_features=c.d_model, dropout_rate=c.dropout, deterministic=deterministic
        )(x)
        tokens = tokens + nn.Dropout(c.dropout, deterministic=deterministic)(x)
        x = nn.LayerNorm()(tokens)
        x = nn.Dense(c.d_model)(nn.gelu(nn.Dense(c.mlp_dim)(x)))
        return tokens + nn.Dropout(c.dropout, deterministic=deterministic)(x)


class QueueRestorer(nn.Module):
    """history (N, N_HISTORY) and context (N, N_CONTEXT) float32 → (N,) float32 depth at
    the phase's end as a share of the buffer, >= 0."""

    config: RestorerConfig

    @nn.compact
    def __call__(self, history, context, deterministic: bool = True):
        c = self.config
        sample_embed = nn.Dense(c.d_model, name="sample_embed")(history[:, :, None])  # (N, H, d)
        samples = sample_embed + sinusoidal_positions(N_HISTORY, c.d_model)
        prefix = nn.Dense(c.d_model, name="context_embed")(context)[:, None, :]  # (N, 1, d)
        tokens = jnp.concatenate([prefix, samples], axis=1)  # (N, 1 + H, d)
        for layer in range(c.n_layers):
            tokens = EncoderBlock(c, name=f"block_{layer}")(tokens, deterministic)
        x = nn.LayerNorm(name="readout_norm")(tokens[:, 0])  # (N, d)
        x = nn.gelu(nn.Dense(c.mlp_dim, name="readout_hidden")(x))  # (N, mlp_dim)
        raw = nn.Dense(1, name="readout")(jnp.concatenate([x, history[:, :1]], axis=1))[:, 0]  # (N,)
        return jnp.maximum(history[:, 0] + raw, 0.0)


def init_params(config: RestorerConfig, key):
    """Fresh parameters (the ``params`` collection, a nested dict of float32 arrays)."""
    history = jnp.zeros((1, N_HISTORY), jnp.float32)
    context = jnp.zeros((1, N_CONTEXT), jnp.float32)
    return QueueRestorer(config).init(key, history, context)["params"]


def predict(config: RestorerConfig, params, history, context):
    """(N,) float32 depth at the phase's end, as a share of the buffer, of the ports'
    ``history`` (N, N_HISTORY) and ``context`` (N, N_CONTEXT) (any float dtype; computed
    in float32). Pure: jit it with ``config`` static, vmap it over leading axes."""
    history = jnp.asarray(history, jnp.float32)
    context = jnp.asarray(context, jnp.float32)
    return QueueRestorer(config).apply({"params": params}, history, context)
