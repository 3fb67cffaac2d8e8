"""Design-space sweeps: grouping by static shape, the batched Hydra launcher, results, scale-out."""
