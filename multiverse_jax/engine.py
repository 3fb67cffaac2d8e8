"""The step, the compiled scan over steps, and the host loop.

``step(params, state) -> state`` processes one lookahead window of one experiment, as the
chain of systems ``SYSTEMS`` (name, function) in order; ``advance`` applies it to every
experiment of the batch (vmap, or a loop over experiments on a CPU) and loops over up to
K steps in one compiled program; ``run`` calls ``advance`` until every experiment has
finished (or failed), checking the error words on the host between calls.

Several devices (``run(..., devices=N)``): the experiment axis E of every leaf of the
batch is sharded over a 1-D mesh of N local devices (axis ``"experiments"``), and the
same per-experiment program runs on each device's slice under ``jax.shard_map`` (see
``sharded_advance``). Experiments never interact, so no device talks to another inside
a call; the host loop is unchanged.
"""

from __future__ import annotations

import functools
import time
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from multiverse_jax.components.experiment import Params, State
from multiverse_jax.ops.link_events import params_at
from multiverse_jax.ops import pool
from multiverse_jax.systems.ack import ack
from multiverse_jax.systems.admit import admit
from multiverse_jax.systems.cc import congestion_control
from multiverse_jax.systems.clock import clock
from multiverse_jax.systems.complete import complete
from multiverse_jax.systems.flow_clock import flow_clock
from multiverse_jax.systems.fluid import fluid
from multiverse_jax.systems.forward import set_forward_plan
from multiverse_jax.systems.pfc import pfc
from multiverse_jax.systems.receive import receive
from multiverse_jax.systems.sample import sample
from multiverse_jax.systems.schedule import schedule
from multiverse_jax.systems.steady import steady, thaw
from multiverse_jax.systems.transmit import transmit


System = Callable[[Params, State, jax.Array], State]

# The step's systems in order, each ``f(params, state, window_end_ps) -> state``.
SYSTEMS: tuple[tuple[str, System], ...] = (
    ("thaw", thaw),  # hybrid: frozen partitions whose steady phase ends -> packet level
    ("forward", set_forward_plan),  # arrivals at switches -> egress queues
    ("receive", receive),  # data at receivers -> ACKs (ECN echo, CNPs)
    ("cc", congestion_control),  # ACKs and timers -> rates, windows
    ("ack", ack),  # ACKs at senders
    ("complete", complete),  # finish times -> triggers -> flow starts
    ("schedule", schedule),  # task DAG: starts, finishes -> flow starts
    ("admit", admit),  # polling senders that began in this window -> packets handed to their NICs
    ("transmit", transmit),  # NICs and switch ports serialise
    ("pfc", pfc),  # pause / resume decisions
    ("sample", sample),  # time series
    ("steady", steady),  # hybrid: rate samples -> steady partitions frozen, jumping at flow level
    ("clock", clock),  # the next window, or a jump to the next event
)

def systems_before(name: str, params: Params, state: State, window_end_ps) -> State:
    """The state the system ``name`` of ``SYSTEMS`` starts a window from: the systems before
    it applied (profiles and tests that look at one system's input)."""
    names = [system_name for system_name, _ in SYSTEMS]
    for _, system in SYSTEMS[: names.index(name)]:
        state = system(params, state, window_end_ps)
    return state


# The flow-level step (sim.mode=flow, ``Static.flow_level``): one event per step, no packets.
SYSTEMS_FLOW: tuple[tuple[str, System], ...] = (
    ("complete", complete),  # finish times -> triggers -> flow starts
    ("schedule", schedule),  # task DAG: starts, finishes -> flow starts
    ("fluid", fluid),  # max-min rates; every active flow advances to the next event
    ("flow_clock", flow_clock),  # count the event; a finished experiment stops at its last one
)


def step(params: Params, state: State) -> State:
    """One window [t, t + window) of one experiment: ``SYSTEMS`` in order, each in a
    ``jax.named_scope`` of its name (so profiles read like the design).

    Every packet arriving anywhere inside the window was already in flight when it began,
    so arrivals are applied first, each with its exact time; then ports transmit through
    the window; what they send lands in later windows.

    A flow-level batch (``params.static.flow_level``) runs ``SYSTEMS_FLOW`` instead: its
    window is the time from one flow event to the next.

    With timed link events the step runs on the fabric of the epoch the window starts in,
    and the window ends at the next event (``ops/link_events.py``).

    A large pool runs its windows on its live prefix (``ops/pool.py``, chosen in
    ``_steps_until_stopped``): the same step on a smaller pool.
    """
    params = params_at(params, state.time_ps)
    window_end_ps = state.time_ps + params.window_ps
    for name, system in SYSTEMS_FLOW if params.static.flow_level else SYSTEMS:
        with jax.named_scope(name):
            state = system(params, state, window_end_ps)
    return state


BATCHING_MODES = ("auto", "vmap", "map")


def resolve_batching(batching: str) -> str:
    """``auto``: ``map`` on a CPU, ``vmap`` on an accelerator.

    ``vmap`` runs the experiments of a batch as one set of wide array operations, in
    lockstep: what a GPU is for. On a CPU, which gains nothing from the wider arrays,
    ``map`` is faster: it loops over the experiments inside the same compiled program,
    so each experiment runs only the transmit rounds it needs, its arrays stay in cache,
    and a finished experiment costs nothing. Both give the same results, bit for bit.
    """
    if batching not in BATCHING_MODES:
        raise ValueError(f"sim.batching must be one of {BATCHING_MODES}, got {batching!r}")
    if batching == "auto":
        return "map" if jax.default_backend() == "cpu" else "vmap"
    return batching


def _step_if_running(params: Params, state: State) -> State:
    """One window, or nothing for an experiment that has finished or failed."""
    stopped = state.done | (state.error != 0)
    return jax.lax.cond(stopped, lambda: state, lambda: step(params, state))


def _going(steps_done, state: State, n_steps):
    """() bool fewer than ``n_steps`` windows are done and some experiment of ``state``
    (one, or a batch) has not finished or failed."""
    return (steps_done < n_steps) & ~jnp.all(state.done | (state.error != 0))


def _windows(step_fn, params: Params, state: State, steps_done, n_steps, more=None):
    """``step_fn(params, state)`` while fewer than ``n_steps`` windows are done, some
    experiment of ``state`` (one, or a batch) has not finished or failed, and ``more(params,
    state)`` holds (if given); returns the windows done (from ``steps_done``) and the state."""

    def running(carry):
        steps, s = carry
        go = _going(steps, s, n_steps)
        return go if more is None else go & more(params, s)

    def body(carry):
        steps, s = carry
        return steps + 1, step_fn(params, s)

    return jax.lax.while_loop(running, body, (steps_done, state))


def _steps_until_stopped(step_fn, params: Params, state: State, n_steps, batched: bool) -> State:
    """Apply ``step_fn(params, state)`` up to ``n_steps`` times, stopping early once every
    experiment in ``state`` (one, or a batch: ``batched``) has finished or failed.

    With a live prefix (``Static.prefix_columns``, ``ops/pool.py``), the windows run on
    the whole pool while some running experiment's next window does not fit in the
    prefix, then on the prefix while every one fits, and so on: each stretch of windows
    in one loop, the prefix copied out of the pool before its stretch and back after it
    (not every window; a stretch of no window copies it all the same, once). The two
    stretches follow each other in the loop's body, not as branches of a ``lax.cond``: a
    conditional around the whole pool's windows cost ~5 % (XLA's copies at its boundary).
    """
    columns = params.static.prefix_columns
    if not columns:
        return _windows(step_fn, params, state, jnp.int32(0), n_steps)[1]
    each = jax.vmap if batched else (lambda f: f)

    def fits(p, s):
        """() bool every experiment still running fits its next window in the prefix."""
        return jnp.all(each(lambda p_, s_: pool.prefix_fits(p_, s_, columns))(p, s) | s.done | (s.error != 0))

    def on_prefix(steps, s):
        small_params, small = each(lambda p_, s_: pool.shrink(p_, s_, columns))(params, s)
        steps, small = _windows(step_fn, small_params, small, steps, n_steps, fits)
        return steps, each(lambda s_, small_: pool.grow(params.static, s_, small_))(s, small)

    def on_whole_pool(steps, s):
        return _windows(step_fn, params, s, steps, n_steps, lambda p, s_: ~fits(p, s_))

    def stretches(carry):
        return on_prefix(*on_whole_pool(*carry))

    return jax.lax.while_loop(lambda carry: _going(*carry, n_steps), stretches, (jnp.int32(0), state))[1]


def _advance(params: Params, state: State, n_steps, batching: str = "auto") -> State:
    """Up to ``n_steps`` windows of every experiment of the batch (leading axis E), one program.

    Stops early once every experiment has finished or failed, so a batch never steps
    windows that no experiment needs. ``n_steps`` is a traced bound of that loop, not a
    compile-time constant: one window at a time and 64 per call are the same program.
    ``batching`` (see ``resolve_batching``):

    * ``vmap``: every step advances all experiments together, as wide arrays; an
      experiment that has stopped is kept as it is (``lax.cond`` under vmap selects). A
      batch wider than ``lockstep_block`` runs as blocks of that many, one after another.
    * ``map``: a loop over the experiments, each running its own steps until it stops
      or has run ``n_steps``; each experiment's state stays one loop carry throughout.
    """
    if resolve_batching(batching) == "map":

        def one_experiment(params_and_state):
            p, s = params_and_state
            return _steps_until_stopped(step, p, s, n_steps, batched=False)

        return jax.lax.map(one_experiment, (params, state))

    def in_lockstep(params_and_state):
        p, s = params_and_state
        return _steps_until_stopped(jax.vmap(_step_if_running), p, s, n_steps, batched=True)

    n_experiments = state.time_ps.shape[0]
    block = lockstep_block(params.static, n_experiments)
    if block == n_experiments:
        return in_lockstep((params, state))
    blocks = jax.tree.map(lambda x: x.reshape((n_experiments // block, block) + x.shape[1:]), (params, state))
    out = jax.lax.map(in_lockstep, blocks)
    return jax.tree.map(lambda x: x.reshape((n_experiments,) + x.shape[2:]), out)


LOCKSTEP_SLOTS_ON_CPU = 1 << 18  # packet slots of the experiments a CPU steps in lockstep at once (all their pools)


def lockstep_block(static, n_experiments: int) -> int:
    """Experiments a vmap batch of ``n_experiments`` steps in lockstep at once: blocks of
    this many run one after another, each until its own experiments stop.

    ``Static.lockstep_experiments`` if set, else by backend. An accelerator steps the whole
    batch at once: its width is what fills the device. A CPU steps at most
    ``LOCKSTEP_SLOTS_ON_CPU`` packet slots' worth of experiments at once: a system's pass over
    a pool of a million slots (64 experiments of 16,384) streams its columns from memory, one
    over a quarter of that works in cache (k=8 permutation, E = 64, 20 windows on the 2-core
    CPU: 2.88 s all at once, 2.46-2.49 s in blocks of 8 or 16, 2.57 s of 32; ``map`` 2.36 s).
    The block is the largest divisor of ``n_experiments`` not above that, so blocks are equal
    (one compiled program); a batch of a prime count on a CPU steps one by one.
    """
    if static.lockstep_experiments:
        most = static.lockstep_experiments
    elif jax.default_backend() == "cpu":
        most = max(1, LOCKSTEP_SLOTS_ON_CPU // static.n_slots)
    else:
        most = n_experiments
    return max(b for b in range(1, min(most, n_experiments) + 1) if n_experiments % b == 0)


_advance_compiled = jax.jit(_advance, static_argnames=("batching",))


def advance(params: Params, state: State, n_steps, batching: str = "auto") -> State:
    """``_advance`` compiled: one program per shapes (``Static``, E) and batching mode
    (``auto`` resolved first, so that it shares ``map``'s or ``vmap``'s program)."""
    return _advance_compiled(params, state, n_steps, batching=resolve_batching(batching))


def lower_advance(params: Params, state: State, n_steps, batching: str = "auto"):
    """``advance``'s program lowered for these arguments (``.compile()``, ``.as_text()``:
    what the profiling benchmarks read); the compiled one takes ``(params, state, n_steps)``."""
    return _advance_compiled.lower(params, state, n_steps, batching=resolve_batching(batching))


def compiled_programs() -> int:
    """How many ``advance`` programs this process has compiled (a test's guard against
    recompiling per design point)."""
    return _advance_compiled._cache_size()


# --- Sharding the experiment axis over local devices -------------------------------------

EXPERIMENTS_AXIS = "experiments"


def split_cpu_into_devices(devices: int | str | None) -> None:
    """Make XLA's CPU backend as many devices as ``devices`` asks for (``"all"``: one per
    core), so that sharding the experiment axis (``sim.devices``) uses every core of a CPU.

    XLA makes one device of a whole CPU; a program there uses ~1.7 of 2 cores, and a batch
    sharded over one device per core runs faster (``benchmarks/sweep_vs_htsim.py --devices
    1,2``: 1.55x on 2 cores). Only possible before JAX starts its backends, so the entry
    points call it first (the CLI, the sweep launcher, ``simulate``). Does nothing for one
    device, or where the count is already set (``jax_num_cpu_devices``, or
    ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``); once a backend has
    started (a process keeps the devices it started with), it warns where a CPU has fewer
    devices than asked for. Accelerators are not split: this sets the CPU backend only.
    """
    import os

    from jax._src import xla_bridge  # backends_are_initialized: not in JAX's public API

    wanted = (os.cpu_count() or 1) if devices == "all" else devices
    if not isinstance(wanted, (int, np.integer)) or isinstance(wanted, bool) or wanted <= 1:
        return
    if xla_bridge.num_cpu_devices.value != -1 or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return  # the user's own count
    if not xla_bridge.backends_are_initialized():
        jax.config.update("jax_num_cpu_devices", int(wanted))
    elif jax.default_backend() == "cpu" and len(jax.local_devices()) < wanted:
        warnings.warn(
            f"sim.devices={devices}: JAX started with {len(jax.local_devices())} CPU device(s) before the CPU could "
            f"be split into {wanted}; start the process with XLA_FLAGS=--xla_force_host_platform_device_count={wanted} "
            "(or call engine.split_cpu_into_devices before anything else uses JAX)",
            stacklevel=2,
        )


def resolve_devices(devices: int | str | None) -> tuple | None:
    """The local devices to shard the experiment axis over, or None for one device.

    ``None`` or ``1``: None (the unsharded path). ``N > 1``: the first N of
    ``jax.local_devices()``. ``"all"``: every local device (None if there is only one).
    """
    if devices is None:
        return None
    available = jax.local_devices()
    if devices == "all":
        n = len(available)
    elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        n = int(devices)
    else:
        raise ValueError(f"devices must be a positive integer or 'all', got {devices!r}")
    if n < 1:
        raise ValueError(f"devices must be >= 1, got {n}")
    if n > len(available):
        raise ValueError(
            f"devices={n} asks for more devices than exist: {len(available)} local "
            f"{jax.default_backend()} device(s) available"
        )
    return None if n == 1 else tuple(available[:n])


def experiment_mesh(devices: tuple) -> Mesh:
    """A 1-D mesh over ``devices`` whose one axis, ``"experiments"``, splits the batch."""
    return Mesh(np.array(devices, dtype=object), (EXPERIMENTS_AXIS,))


def shard_batch(tree, mesh: Mesh):
    """Place every leaf of ``tree`` (leading axis E) split along E over ``mesh``: device i
    holds experiments [i E/N, (i+1) E/N).

    Placed from host memory: splitting arrays that live on one device compiles a slicing
    program per leaf shape (about 200 of them: 1.2 s for a batch at the tests' shapes),
    where a copy through the host takes milliseconds; it happens once per run."""
    return jax.device_put(jax.device_get(tree), NamedSharding(mesh, P(EXPERIMENTS_AXIS)))


@functools.lru_cache(maxsize=None)
def sharded_advance(devices: tuple, n_steps: int, batching: str):
    """``advance`` with the experiment axis sharded over ``devices``: a compiled function
    ``(params, state) -> state`` (built once per devices / n_steps / batching, cached).

    ``jax.shard_map`` runs ``_advance`` on each device's slice of E/N experiments: the
    same per-experiment program (vmap or map over the slice, then the early-stop loop),
    only with a smaller batch. Nothing crosses devices: there is no collective, and
    each device's early-stop ``while_loop`` ends when its own experiments have all
    finished or failed. An experiment's result never depends on the others of its
    batch (nor on the batch size: see ``test_batch_equals_each_experiment_alone``), so
    the sharded run gives the unsharded results, bit for bit. The output stays sharded
    the same way, so the host loop feeds it back without moving any data.
    """
    mode = resolve_batching(batching)
    spec = P(EXPERIMENTS_AXIS)

    def per_shard(params: Params, state: State) -> State:
        return _advance(params, state, n_steps, mode)

    # check_vma=False: the body has no collectives, so JAX's tracking of which values vary
    # over the mesh axis (it guards collectives and autodiff) has nothing to check; with
    # it on, every loop carry built from constants inside the systems' while_loops would
    # need an explicit ``pcast`` to "varying" to match the sharded values it is mixed with.
    mapped = jax.shard_map(
        per_shard, mesh=experiment_mesh(devices), in_specs=(spec, spec), out_specs=spec, check_vma=False
    )
    # The outputs' sharding stated, so that the next call's inputs have the first call's:
    # JAX would give a zero-size output (e.g. the telemetry columns of a batch without HPCC)
    # a replicated sharding, and the next call would compile the program again.
    experiments = NamedSharding(experiment_mesh(devices), spec)
    return jax.jit(mapped, in_shardings=experiments, out_shardings=experiments)


def run(
    params: Params,
    state: State,
    *,
    steps_per_call: int = 64,
    batching: str = "auto",
    on_progress: Callable[[State], None] | None = None,
    devices: int | str | None = None,
) -> tuple[State, dict]:
    """Advance until every experiment is done or has an error; returns the state and timings.

    The host looks at the batch only between calls (done flags, error words), so the
    stepped loop never syncs with the host.

    ``devices`` (see ``resolve_devices``): ``None`` or ``1`` runs the batch on the
    default device. ``N > 1`` or ``"all"`` shards the experiment axis over N local
    devices (``sharded_advance``); E must then be a multiple of N (``simulate`` pads the
    batch for you) and the returned state stays sharded. Same results, bit for bit.
    """
    resolve_batching(batching)  # a bad value fails here, before compiling
    mesh_devices = resolve_devices(devices)
    sharded = None
    if mesh_devices is not None:
        n_experiments = state.done.shape[0]
        if n_experiments % len(mesh_devices):
            raise ValueError(
                f"{n_experiments} experiments cannot be split evenly over {len(mesh_devices)} devices; "
                "pad the batch to a multiple of the device count (simulate does this)"
            )
        mesh = experiment_mesh(mesh_devices)
        params, state = shard_batch(params, mesh), shard_batch(state, mesh)
        sharded = sharded_advance(mesh_devices, steps_per_call, resolve_batching(batching))
    wall_start = time.perf_counter()
    n_calls = 0
    first_call_s = None
    while True:
        call_start = time.perf_counter()
        if sharded is None:
            state = advance(params, state, steps_per_call, batching)
        else:
            state = sharded(params, state)
        done, error = jax.device_get((state.done, state.error))
        n_calls += 1
        if first_call_s is None:
            first_call_s = time.perf_counter() - call_start
        if on_progress is not None:
            on_progress(state)
        if np.all(np.asarray(done) | (np.asarray(error) != 0)):
            break
    timings = {"wall_s": time.perf_counter() - wall_start, "first_call_s": first_call_s, "n_calls": n_calls}
    return state, timings
