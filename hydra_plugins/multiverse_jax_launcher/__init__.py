"""Hydra plugin of multiverse-jax: the batched launcher (``hydra/launcher=batched``)."""
