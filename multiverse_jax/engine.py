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

from multiverse_jax.conf.schema import STEPS_PER_CALL
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


def _running(state: State):
    """Bool (per experiment of ``state``, one or a batch): not finished, not failed, and
    short of the window it stops at in this ``advance`` call."""
    return ~state.done & (state.error == 0) & (state.n_windows < state.stop_window)


def _step_if_running(params: Params, state: State) -> State:
    """One window, or nothing for an experiment that is not running."""
    return jax.lax.cond(_running(state), lambda: step(params, state), lambda: state)


def _windows(step_fn, params: Params, state: State, more=None) -> State:
    """``step_fn(params, state)`` while some experiment of ``state`` (one, or a batch) is
    running and ``more(params, state)`` holds (if given)."""

    def going(s):
        go = jnp.any(_running(s))
        return go if more is None else go & more(params, s)

    return jax.lax.while_loop(going, lambda s: step_fn(params, s), state)


def _steps_until_stopped(step_fn, params: Params, state: State, batched: bool, more=None) -> State:
    """Apply ``step_fn(params, state)`` while some experiment in ``state`` (one, or a
    batch: ``batched``) is running and ``more(params, state)`` holds (if given).

    With a live prefix (``Static.prefix_columns``, ``ops/pool.py``), the windows run on
    the whole pool while some running experiment's next window does not fit in the
    prefix, then on the prefix while every one fits, and so on: each stretch of windows
    in one loop, the prefix copied out of the pool before its stretch and back after it
    (not every window; a stretch of no window copies it all the same, once). The two
    stretches follow each other in the loop's body, not as branches of a ``lax.cond``: a
    conditional around the whole pool's windows cost ~5 % (XLA's copies at its boundary).
    The prefix's windows run the same way on its own prefix, if it has one, and so on
    (``Static.prefix_inner_columns``; the recursion ends with them: ``pool._prefix_params``).
    """
    columns = params.static.prefix_columns
    if not columns:
        return _windows(step_fn, params, state, more)
    each = jax.vmap if batched else (lambda f: f)
    also = (lambda p, s: True) if more is None else more
    per_host = params.static.prefix_per_host  # columns H places holding each host's own columns (ops/pool.py)

    def fits(p, s, inside: bool):
        """() bool every experiment still running fits its next window in the prefix (from
        this pool, or ``inside`` the prefix: a per-host prefix checks each host's places)."""
        if per_host:
            one = lambda p_, s_: pool.per_host_fits(p_, s_, columns, inside)  # noqa: E731
        else:
            one = lambda p_, s_: pool.prefix_fits(p_, s_, columns)  # noqa: E731
        return jnp.all(each(one)(p, s) | ~_running(s))

    def on_prefix(s):
        shrink = pool.shrink_per_host if per_host else pool.shrink
        # No window runs on a prefix that did not hold the pool's packets when it was copied
        # out (a stretch on the pool may end because the pool's own parent no longer holds its
        # next window): its packets past the prefix would be missing from those windows.
        entered = fits(params, s, False)
        small_params, small = each(lambda p_, s_: shrink(p_, s_, columns))(params, s)
        # The prefix is a smaller pool: its windows run on its own prefix in turn, if it has one.
        small = _steps_until_stopped(
            step_fn, small_params, small, batched, lambda p, s_: entered & fits(p, s_, True) & also(p, s_)
        )  # fmt: skip
        if per_host:
            return each(lambda s_, p_, small_: pool.grow_per_host(params.static, s_, p_, small_))(s, small_params, small)
        return each(lambda s_, small_: pool.grow(params.static, s_, small_))(s, small)

    def on_whole_pool(s):
        return _windows(step_fn, params, s, lambda p, s_: ~fits(p, s_, False) & also(p, s_))

    going = lambda s: jnp.any(_running(s)) & also(params, s)  # noqa: E731
    return jax.lax.while_loop(going, lambda s: on_prefix(on_whole_pool(s)), state)


def _advance(params: Params, state: State, n_steps, batching: str = "auto") -> State:
    """Up to ``n_steps`` windows of every experiment of the batch (leading axis E), one program.

    Stops early once every experiment has finished or failed, so a batch never steps
    windows that no experiment needs. ``n_steps`` is a traced bound of that loop, not a
    compile-time constant: one window at a time and 256 per call are the same program.
    ``batching`` (see ``resolve_batching``):

    * ``vmap``: experiments step together, as wide arrays, in lanes (``_in_lanes``): an
      experiment that has stopped leaves its lane to the next one waiting.
    * ``map``: a loop over the experiments, each running its own steps until it stops
      or has run ``n_steps``; each experiment's state stays one loop carry throughout.
    """
    state = state.replace(stop_window=state.n_windows + n_steps)
    if resolve_batching(batching) == "map":

        def one_experiment(params_and_state):
            p, s = params_and_state
            return _steps_until_stopped(step, p, s, batched=False)

        return jax.lax.map(one_experiment, (params, state))
    n_experiments = state.time_ps.shape[0]
    n_lanes = lockstep_lanes(params.static, n_experiments)
    if n_lanes == n_experiments:
        return _steps_until_stopped(jax.vmap(_step_if_running), params, state, batched=True)
    return _in_lanes(params, state, n_lanes)


def _take(tree, index):
    """Every leaf's rows ``index`` (leading axis)."""
    return jax.tree.map(lambda x: x[index], tree)


def _in_lanes(params: Params, state: State, n_lanes: int) -> State:
    """The batch's running experiments stepped in lockstep ``n_lanes`` at a time.

    Each lane holds one experiment (its params and state gathered from the batch) and
    steps it while it runs; when one stops (finished, failed or at its last window of the
    call), the lanes' windows pause, the stopped experiments' states go back to the batch
    and the next running experiments take their lanes. So an experiment that has stopped
    is not stepped beside the others for the rest of the call, only while the last lanes
    finish: lockstep waste is the batch's tail (64 k=8 permutations need 105 windows on
    average, the slowest 141), which this bounds by a lane's. A swap is a scatter of the
    stopped lanes' rows into the batch and a gather of the next ones.
    """
    n_experiments = state.time_ps.shape[0]
    running = _running(state)
    queue = jnp.argsort(~running, stable=True).astype(jnp.int32)  # the running ones first, in batch order
    n_running = jnp.sum(running, dtype=jnp.int32)

    def fill(batch, lane_of, lane_params, lane_state, lanes_free, taken):
        """Lanes ``lanes_free`` take the next experiments of the queue (none left: empty,
        marked done); returns the lanes and how many experiments the queue has given."""
        position = taken + jnp.cumsum(lanes_free, dtype=jnp.int32) - 1
        given = lanes_free & (position < n_running)
        lane_of = jnp.where(lanes_free, jnp.where(given, queue[jnp.clip(position, 0, n_experiments - 1)], n_experiments), lane_of)
        row = jnp.minimum(lane_of, n_experiments - 1)
        # A lane left empty keeps its stopped experiment's copy (done: never written back).
        pick = lambda new, old: jnp.where(given.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
        lane_params = jax.tree.map(pick, _take(params, row), lane_params)
        lane_state = jax.tree.map(pick, _take(batch, row), lane_state)
        lane_state = lane_state.replace(done=lane_state.done | (lane_of == n_experiments))
        return lane_of, lane_params, lane_state, taken + jnp.sum(given, dtype=jnp.int32)

    def swap(carry):
        """Stopped lanes' states back to the batch, the next experiments into their lanes."""
        batch, lane_of, lane_params, lane_state, taken = carry
        stopped = (lane_of < n_experiments) & ~_running(lane_state)
        back = jnp.where(stopped, lane_of, n_experiments)  # others: dropped
        batch = jax.tree.map(lambda b, l: b.at[back].set(l, mode="drop"), batch, lane_state)
        return (batch,) + fill(batch, lane_of, lane_params, lane_state, stopped, taken)

    def windows(carry):
        """The lanes' windows until one of their experiments stops. Every occupied lane
        runs in them, so each steps with no select against its old state (4-5 % of a
        window at k=8); an empty lane steps a copy that is never read."""
        batch, lane_of, lane_params, lane_state, taken = carry
        occupied = lane_of < n_experiments
        all_running = lambda p, s: jnp.all(_running(s) | ~occupied)  # noqa: E731
        lane_state = _steps_until_stopped(jax.vmap(step), lane_params, lane_state, True, all_running)
        return batch, lane_of, lane_params, lane_state, taken

    none = jnp.zeros(n_lanes, jnp.int32)  # placeholders: every lane is free and takes from the queue's head
    lanes = fill(state, none, _take(params, none), _take(state, none), jnp.ones(n_lanes, bool), jnp.int32(0))
    carry = (state,) + lanes
    carry = jax.lax.while_loop(lambda c: jnp.any(c[1] < n_experiments), lambda c: swap(windows(c)), carry)
    return carry[0]


LOCKSTEP_SLOTS_ON_CPU = 1 << 18  # packet slots of the experiments a CPU steps in lockstep at once (all their pools)


def lockstep_lanes(static, n_experiments: int) -> int:
    """Experiments a vmap batch of ``n_experiments`` steps in lockstep at once (``_in_lanes``).

    ``Static.lockstep_experiments`` if set, else by backend. An accelerator steps the whole
    batch at once: its width is what fills the device. A CPU steps at most
    ``LOCKSTEP_SLOTS_ON_CPU`` packet slots' worth of experiments at once: a system's pass over
    a pool of a million slots (64 experiments of 16,384) streams its columns from memory, one
    over a quarter of that works in cache (k=8 permutation, E = 64, 20 busy windows on the
    2-core CPU: 2.88 s all at once, 2.38 s in 16 lanes, ``map`` 2.36 s; whole runs in 8 / 16 /
    32 lanes within 4 % of each other).
    """
    if static.lockstep_experiments:
        most = static.lockstep_experiments
    elif jax.default_backend() == "cpu":
        most = max(1, LOCKSTEP_SLOTS_ON_CPU // static.n_slots)
    else:
        most = n_experiments
    return min(most, n_experiments)


# XLA's CPU backend rewrites every reduction over more than 32 entries into reduce-windows
# of 32 and a last reduction (its tree_reduction_rewriter, for the precision of long float
# sums): a ``jnp.any`` over a round's 1,536 class queues is three kernels, not one. The
# engine's long reductions are of integers and booleans, or minima and maxima, whose
# results do not depend on the order (its float sums run over a flow's few rate samples,
# ``hybrid.window``), so the CPU compiles it without the rewrite: on the htsim sweep's
# point (k=8), ~100 fewer kernels a window, 2.69 against 2.76 ms (min of 12 alternating
# repeats of 40 windows in one process), the same final state bit for bit
# (``benchmarks/HISTORY.md``, stop 41). Accelerators keep their own reduction strategies.
CPU_COMPILER_OPTIONS = {"xla_disable_hlo_passes": "tree_reduction_rewriter"}


def compiler_options() -> dict | None:
    """XLA's options for the engine's programs on the default backend (``CPU_COMPILER_OPTIONS``)."""
    return CPU_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None


_advance_compiled = {
    "cpu": jax.jit(_advance, static_argnames=("batching",), compiler_options=CPU_COMPILER_OPTIONS),
    "accelerator": jax.jit(_advance, static_argnames=("batching",)),
}


def _advance_program():
    return _advance_compiled["cpu" if compiler_options() else "accelerator"]


def advance(params: Params, state: State, n_steps, batching: str = "auto") -> State:
    """``_advance`` compiled: one program per shapes (``Static``, E) and batching mode
    (``auto`` resolved first, so that it shares ``map``'s or ``vmap``'s program)."""
    return _advance_program()(params, state, n_steps, batching=resolve_batching(batching))


def lower_advance(params: Params, state: State, n_steps, batching: str = "auto"):
    """``advance``'s program lowered for these arguments (``.compile()``, ``.as_text()``:
    what the profiling benchmarks read); the compiled one takes ``(params, state, n_steps)``."""
    return _advance_program().lower(params, state, n_steps, batching=resolve_batching(batching))


def compiled_programs() -> int:
    """How many ``advance`` programs this process has compiled (a test's guard against
    recompiling per design point)."""
    return sum(program._cache_size() for program in _advance_compiled.values())


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
    return jax.jit(mapped, in_shardings=experiments, out_shardings=experiments, compiler_options=compiler_options())


def run(
    params: Params,
    state: State,
    *,
    steps_per_call: int = STEPS_PER_CALL,
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
