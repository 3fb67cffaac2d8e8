"""From experiment descriptions (host, NumPy) to one padded batch of ``Params`` / ``State``.

Experiments of one batch may differ in everything that does not set a shape: rates,
delays, buffers, thresholds, flows, seeds, and even topology. Shapes are padded to the
largest experiment: padded ports are never routed to, padded flows count as finished,
padded hosts own packet slots that stay empty.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from multiverse_jax.components.experiment import Params, State, experiment_params, initial_state
from multiverse_jax.components.static import RUN_PACKETS, RUN_PACKETS_SINGLE_CLASS, RUN_PORTS_SINGLE_CLASS, Static
from multiverse_jax.components.flows import ADMIT_ENTRIES
from multiverse_jax.components.links import PFC_ENTRIES_PER_WINDOW
from multiverse_jax.conf.schema import STEPS_PER_CALL, AckClass, CcKind, HpccIntQueue, HpccPacing, HybridRestore, ByBackend, LivePrefix, SimMode, SwitchPipeline
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops import paths
from multiverse_jax.ops.link_events import with_epoch_flow_paths
from multiverse_jax.ops.packets import PS_BITS_PER_BYTE
from multiverse_jax.ops.pool import default_prefix_columns
from multiverse_jax.restorer.features import N_HISTORY


@dataclasses.dataclass(frozen=True)
class Batch:
    params: Params  # every leaf has a leading experiment axis E
    state: State
    experiments: tuple[Experiment, ...]

    @property
    def static(self) -> Static:
        """The shapes the batch is padded to (they travel with the params)."""
        return self.params.static


def _stack(trees):
    """One pytree whose leaves stack the experiments' leaves along a new leading axis E."""
    return jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *trees)


def _validate(experiments) -> None:
    for exp in experiments:
        exp.validate()


def _static_of(experiments, slots_per_host: int, n_samples: int) -> Static:
    """The smallest shapes that hold every experiment of the batch."""

    def biggest(f):
        return max(f(e) for e in experiments)

    def longest(e, hops_of):
        """The largest ``hops_of(table)`` over the experiment's epochs' ECMP tables."""
        return max(int(hops_of(table)) for table in e.epoch_routing)

    def switch_hops(e):
        """Switch hops of the experiment's longest flow path in any epoch (0 unless it runs HPCC)."""
        if e.cc != "hpcc":
            return 0
        hops = longest(e, lambda t: t.hops[e.flows.src, e.flows.dst].max(initial=1)) - 1
        pinned = e.routes.max_links - 1 if e.routes is not None else 0
        return max(hops, pinned)

    def path_len(e):
        """Links of the experiment's longest data or ACK path in any epoch (1 unless it runs
        at flow level or hybrid, whose partitions are the flows that share a port)."""
        if e.sim.mode == SimMode.packet:
            return 1
        there = longest(e, lambda t: t.hops[e.flows.src, e.flows.dst].max(initial=1))
        back = longest(e, lambda t: t.hops[e.flows.dst, e.flows.src].max(initial=1))
        pinned = e.routes.max_links if e.routes is not None else 1
        return int(max(there, back, pinned))

    def inexact(e):
        """Some link rate of some epoch does not divide 8e12 bit-ps/s."""
        return any(bool(np.any(PS_BITS_PER_BYTE % epoch.topology.link_rate_bps != 0)) for epoch in e.epochs)

    # PFC decisions still travelling cover the longest link delay: that many windows and two
    # more, each window appending PFC_ENTRIES_PER_WINDOW entries per link.
    # A window cut short at a timed link event is one window more within a link delay.
    windows = biggest(lambda e: math.ceil(int(e.topology.link_delay_ps.max()) / int(e.topology.link_delay_ps.min())) + 2)
    windows += biggest(lambda e: len(e.epochs) - 1)
    history = PFC_ENTRIES_PER_WINDOW * windows
    flow_level = _flow_level(experiments)  # no packets and no samples: a pool and a ring of one
    sampling = any(e.sim.sample_interval_us > 0 for e in experiments) and not flow_level
    static = Static(
        n_nodes=biggest(lambda e: e.topology.n_nodes),
        n_hosts=biggest(lambda e: e.topology.n_hosts),
        n_ports=biggest(lambda e: e.topology.n_links),
        n_flows=max(1, biggest(lambda e: len(e.flows))),
        n_triggers=max(1, biggest(lambda e: len(e.flows.triggers))),
        n_activators=max(1, biggest(lambda e: e.triggers[0].shape[1])),
        route_width=biggest(lambda e: max(table.width for table in e.epoch_routing)),
        pinned_len=max(1, biggest(lambda e: (e.routes.max_links if e.routes is not None else 1))),
        n_data_classes=_priorities(experiments),
        slots_per_host=1 if flow_level else slots_per_host,
        pfc_history=history,
        # Telemetry only for HPCC: without it, no INT columns (transmit records nothing).
        int_hops=max(1, biggest(switch_hops)) if any(e.cc == CcKind.hpcc for e in experiments) else 0,
        n_samples=n_samples if sampling else 1,
        n_tasks=max(1, biggest(lambda e: len(e.tasks) if e.tasks is not None else 0)),
        task_deps=max(1, biggest(lambda e: e.tasks.deps.shape[1] if e.tasks is not None else 0)),
        path_len=biggest(path_len),
        flow_level=flow_level,
        steady_window=max(1, biggest(lambda e: e.hybrid.window if e.sim.mode == SimMode.hybrid else 1)),
        n_link_epochs=biggest(lambda e: len(e.epochs)),
        restorer_history=N_HISTORY if any(_learned_restore(e) for e in experiments) else 1,
        window_bits=biggest(lambda e: int(e.topology.link_delay_ps.min()).bit_length()),
        inexact_rates=any(inexact(e) for e in experiments),
        admit_entries=ADMIT_ENTRIES if any(e.cc == CcKind.hpcc and e.hpcc.pacing == HpccPacing.ticks for e in experiments) else 1,
        switch_serial=any(e.switch.pipeline == SwitchPipeline.serial for e in experiments),
        congestion_control=any(e.cc != CcKind.none for e in experiments),
        int_queue_with_packet=any(e.cc == CcKind.hpcc and e.hpcc.int_queue == HpccIntQueue.with_packet for e in experiments),
        run_packets=_run_packets(experiments),
        lockstep_experiments=max(e.sim.lockstep_experiments for e in experiments),
        rival_classes=any(e.packet.ack_class != AckClass.data for e in experiments) or _priorities(experiments) > 1,
    )
    return static if flow_level else _by_backend(static, experiments)


def _by_backend(static: Static, experiments) -> Static:
    """The packet step's choices that depend on the backend (not shapes).

    ``sim.live_prefix=auto``: per-host prefixes in three levels on a CPU, where a window's
    passes cost the places they cover; on a GPU, where a window is bound by its kernels'
    latency, one level of the first columns, which ties with them at 256 points and compiles
    faster (``pool.default_prefix_columns``). An experiment that asks for another layout sets
    it for the batch (its first such choice). Long
    single-class runs (``ops/runs.py``) off the CPU only: they cut a window's rounds, which
    cost kernel latency on an accelerator; in ``map``, a CPU's default, they paid nothing here
    (``vmap`` 8-10 % on a CPU) and every program compiles 12-25 % longer. On a CPU, a batch
    without rival classes (``Static.rival_classes``) runs ``RUN_PACKETS_SINGLE_CLASS``
    packets a round, unless ``sim.run_packets`` asks: its runs take a closed form there,
    whose longer runs cost little (the htsim sweep 7 % faster than way 3 at 8, stop 44),
    at ``RUN_PORTS_SINGLE_CLASS`` ports a round: a round's runs cost their cells, and the
    htsim sweep ran 6 % faster with 8 runners than with 96 (stop 56)."""
    on_cpu = jax.default_backend() == "cpu"
    layout = next((str(e.sim.live_prefix) for e in experiments if e.sim.live_prefix != LivePrefix.auto), "auto")
    outer, inner, per_host = default_prefix_columns(static.n_hosts, static.slots_per_host, on_cpu, layout)
    return dataclasses.replace(
        static, prefix_columns=outer, prefix_inner_columns=inner, prefix_per_host=per_host,
        long_runs=_by_backend_choice([e.sim.long_runs for e in experiments], on_cpu),
        fifo_pass=_by_backend_choice([e.sim.fifo_pass for e in experiments], on_cpu),
        nic_pass=_by_backend_choice([e.sim.nic_pass for e in experiments], on_cpu),
        run_packets=_run_packets(experiments, single_class=on_cpu and not static.rival_classes),
        run_ports=RUN_PORTS_SINGLE_CLASS if on_cpu and not static.rival_classes else 0,
    )  # fmt: skip


def _priorities(experiments) -> int:
    """C: the data classes a port needs, one per flow priority of the batch."""
    return 1 + max(int(e.flows.prio.max(initial=0)) for e in experiments)


def _by_backend_choice(asked, on_cpu: bool) -> bool:
    """``Static.long_runs``, ``fifo_pass`` or ``nic_pass`` from the experiments' ``sim.long_runs``,
    ``sim.fifo_pass`` or ``sim.nic_pass`` (``asked``): on where one asks ``always``, else off where one asks
    ``never``, else (``auto``) off the CPU only."""
    return ByBackend.always in asked or (ByBackend.never not in asked and not on_cpu)


def _run_packets(experiments, single_class: bool = False) -> int:
    """``Static.run_packets``: the largest ``sim.run_packets`` asked for, or by default
    RUN_PACKETS (RUN_PACKETS_SINGLE_CLASS where ``single_class``: see ``_by_backend``). A run
    follows a port's class queues merged by strict priority, so control ACKs and data leave
    in one run as they do in one FIFO with ACKs queued with data (htsim's configuration);
    with control-class ACKs (k=8 permutations, 64 points) rounds per window fall from 9.8
    to 4.0, and ``vmap`` runs 14 % faster, ``map`` 2 % (``benchmarks/HISTORY.md``, stop 36)."""
    return max(e.sim.run_packets for e in experiments) or (RUN_PACKETS_SINGLE_CLASS if single_class else RUN_PACKETS)


def _learned_restore(e: Experiment) -> bool:
    """The experiment runs the learned restorer (hybrid mode, ``hybrid.restore=transformer``)."""
    return e.sim.mode == SimMode.hybrid and e.hybrid.restore == HybridRestore.transformer


def _flow_level(experiments) -> bool:
    """Whether the batch runs the flow-level step: all its experiments, or none, have
    ``sim.mode=flow`` (packet and hybrid experiments share the packet step)."""
    flow = {e.sim.mode == SimMode.flow for e in experiments}
    if len(flow) > 1:
        raise InputError(
            "sim.mode=flow experiments cannot share a batch with packet or hybrid ones "
            "(run them as separate batches; simulate_many groups them apart)"
        )
    return flow.pop()


def needed_static(experiments, *, slots_per_host: int = 256, n_samples: int = STEPS_PER_CALL) -> Static:
    """The shapes ``build_batch`` gives ``experiments`` (validated) when no ``static`` is passed."""
    experiments = tuple(experiments)
    _validate(experiments)
    return _static_of(experiments, slots_per_host, n_samples)


def build_batch(
    experiments,
    *,
    slots_per_host: int = 256,
    static: Static | None = None,
    n_samples: int = STEPS_PER_CALL,
    batch_size: int = 1,
) -> Batch:
    """Validate and pad ``experiments`` into one batch (leading axis E on every leaf).

    Pass ``static`` to pad to given shapes (it must be at least as large as the batch
    needs), so that batches of different experiments reuse one compiled program.
    ``n_samples``: time-series ring size when an experiment samples (at least the windows
    per compiled call, so the host drains the ring before it wraps).
    ``batch_size``: pad the experiment axis to at least this many with copies of the last
    experiment, so that batches of different sizes share one program too. A copy starts
    marked done: it never steps (in ``map`` batching it costs memory, not time).
    ``Batch.experiments`` holds the given experiments only, so ``results`` ignores copies.
    """
    experiments = tuple(experiments)
    if not experiments:
        raise InputError("a batch needs at least one experiment")
    if slots_per_host < 1:
        raise InputError(f"sim.packets_per_host must be >= 1, got {slots_per_host}")
    _validate(experiments)
    needed = _static_of(experiments, slots_per_host, n_samples)
    if static is None:
        static = needed
    else:
        if static.flow_level != needed.flow_level:
            raise InputError(
                f"the given shapes are for the {'flow' if static.flow_level else 'packet'}-level step, "
                f"but this batch runs sim.mode={'flow' if needed.flow_level else 'packet or hybrid'}"
            )
        # Not shapes an experiment needs (ops/pool.py, systems/transmit.py, engine.py).
        choices = {"prefix_columns", "prefix_inner_columns", "prefix_per_host", "run_packets", "run_ports", "long_runs", "lockstep_experiments", "fifo_pass", "nic_pass"}
        small = [
            f.name for f in dataclasses.fields(Static)
            if f.name not in choices and getattr(static, f.name) < getattr(needed, f.name)
        ]  # fmt: skip
        if small:
            raise InputError(f"the given shapes are too small for this batch: {', '.join(small)}")
    params = [experiment_params(exp, static) for exp in experiments]
    states = [initial_state(exp, p) for exp, p in zip(experiments, params)]
    n_copies = max(0, batch_size - len(experiments))
    stacked = _stack(params + params[-1:] * n_copies)
    if static.flow_level or static.steady_window > 1:  # flow mode's rates, hybrid mode's partitions
        stacked = with_flow_paths(stacked)
    state = _stack(states + states[-1:] * n_copies)
    if n_copies:
        state = state.replace(done=state.done.at[len(experiments) :].set(True))
    return Batch(params=stacked, state=state, experiments=experiments)


@jax.jit
def with_flow_paths(params: Params) -> Params:
    """``params`` (a batch) with every flow's data and ACK path and their idle-path times
    filled in (``ops.paths``): the flow-level step reads them at every event, and the hybrid
    step at every rate sample (partitions, port loads), so they are routed once, here (for
    each epoch between link events: ``ops.link_events``)."""

    def flow_paths(p: Params):
        data, ack = paths.flow_paths(p)
        return data, ack, paths.data_tail_ps(p, data), paths.ack_path_ps(p, ack)

    return jax.vmap(lambda p: with_epoch_flow_paths(p, flow_paths))(params)
