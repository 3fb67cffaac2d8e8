"""Stop 66: the FIFO pass's SEARCHED (ops/fifo_pass.py) at 64 against a larger value, on the
htsim sweep's point (one experiment, k=8, 4 MB flows, 512 slots a host, sim.fifo_pass=always)
run to its end on one core, the two programs alternating in one process; FCTs and packet-hops
checked equal.

    python benchmarks/results/stop66/ab_searched.py 256 3      # SEARCHED=256, three runs each
"""

import sys
import time

sys.path.insert(0, "benchmarks")
from ab_window import compile_with, on_one_core  # noqa: E402

on_one_core()
import jax  # noqa: E402
import numpy as np  # noqa: E402

from kernel_profile import sweep_point  # noqa: E402
from multiverse_jax.ops import fifo_pass  # noqa: E402

WINDOWS_A_CALL = 256
other, repeats = int(sys.argv[1]), int(sys.argv[2])
batch = sweep_point(8, 4_000_000, 512, fifo_pass="always")


def compiled(searched: int):
    """``advance``'s program over ``WINDOWS_A_CALL`` windows, traced with ``SEARCHED = searched``
    (``ab_window.compile_with`` sets any name of the module for the trace, then puts it back)."""
    began = time.perf_counter()
    program = compile_with(fifo_pass, {"SEARCHED": searched}, batch.params, batch.state, WINDOWS_A_CALL)
    print(f"SEARCHED={searched}: compiled in {time.perf_counter() - began:.1f} s", flush=True)
    return program


def run(program):
    state = batch.state
    began = time.perf_counter()
    while not bool(np.asarray(state.done).all()):
        state = program(batch.params, state, WINDOWS_A_CALL)
    jax.block_until_ready(state)
    return time.perf_counter() - began, state


programs = {searched: compiled(searched) for searched in (fifo_pass.SEARCHED, other)}
walls, ends = {s: [] for s in programs}, {}
for r in range(repeats):
    for searched, program in programs.items():
        wall, state = run(program)
        walls[searched].append(wall)
        ends[searched] = (np.asarray(state.flows.flow_finish_ps), int(np.asarray(state.n_packet_hops)[0]), int(np.asarray(state.n_windows)[0]))
        print(r, f"SEARCHED={searched}", round(wall, 3), "s", ends[searched][1], "packet-hops", ends[searched][2], "windows", flush=True)
(a_fct, a_hops, _), (b_fct, b_hops, _) = ends.values()
assert np.array_equal(a_fct, b_fct) and a_hops == b_hops, "results differ"
base, new = (np.array(w) for w in walls.values())
print(f"SEARCHED {fifo_pass.SEARCHED} / {other} wall, paired median {np.median(base / new):.3f}, min {base.min():.3f} / {new.min():.3f} = {base.min() / new.min():.3f}")
