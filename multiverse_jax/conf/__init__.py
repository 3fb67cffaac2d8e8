"""The default Hydra config tree of ``multiverse-jax`` (a package so Hydra can find it)."""
