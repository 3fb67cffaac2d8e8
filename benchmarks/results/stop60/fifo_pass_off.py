"""The FIFO pass off, for ab_window.py (stop 60): python benchmarks/ab_window.py multiverse_jax.ops.fifo_pass
benchmarks/results/stop60/fifo_pass_off.py applies --fifo-pass always --one-core --warm-windows 450 (current: the pass, other: the rounds alone)."""


def applies(static):
    return False
