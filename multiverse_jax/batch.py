"""From experiment descriptions (host, NumPy) to one padded batch of ``Params`` / ``State``.

Experiments of one batch may differ in everything that does not set a shape: rates,
delays, buffers, thresholds, flows, seeds, and even topology. Shapes are padded to the
largest experiment: padded ports are never routed to, padded flows count as finished,
padded hosts own packet slots that stay empty.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from multiverse_jax.conf.schema import CcKind, LbKind
from multiverse_jax.components.cc import cc_params, initial_cc_state
from multiverse_jax.components.experiment import (
    CC_DCQCN,
    CC_DCTCP,
    CC_HPCC,
    CC_NONE,
    CC_TIMELY,
    LB_ECMP,
    LB_FLOWLET,
    LB_SPRAY,
    Params,
    State,
)
from multiverse_jax.components.flows import FlowParams, FlowState
from multiverse_jax.components.links import LinkParams, LinkState
from multiverse_jax.components.nodes import NicParams, NodeParams
from multiverse_jax.components.packets import PacketState
from multiverse_jax.components.ports import PortParams, PortState
from multiverse_jax.components.samples import SampleState
from multiverse_jax.components.static import Static
from multiverse_jax.components.tasks import TaskParams, TaskState
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops.hashing import mix32
from multiverse_jax.topology.graph import Topology
from multiverse_jax.topology.routing import EcmpTable
from multiverse_jax.units import NEVER, PS_PER_US
from multiverse_jax.workload.routes import PinnedRoutes
from multiverse_jax.workload.tasks import TASK_FLOW, TaskGraph
from multiverse_jax.workload.triggers import trigger_tables

UNLIMITED_BYTES = 1 << 62  # NIC egress queues hold only ACKs and are never the bottleneck
CC_CODES = {CcKind.none: CC_NONE, CcKind.dcqcn: CC_DCQCN, CcKind.dctcp: CC_DCTCP, CcKind.hpcc: CC_HPCC, CcKind.timely: CC_TIMELY}
LB_CODES = {LbKind.ecmp: LB_ECMP, LbKind.spray: LB_SPRAY, LbKind.flowlet: LB_FLOWLET}


@dataclasses.dataclass(frozen=True)
class Batch:
    static: Static
    params: Params  # every leaf has a leading experiment axis E
    state: State
    experiments: tuple[Experiment, ...]


def flow_hash(seed: int, n_flows: int) -> np.ndarray:
    """(F,) uint32 seeded per-flow ECMP hash: the switches' hash of (seed, flow index)."""
    flows = np.arange(n_flows, dtype=np.uint32)
    seed_hash = mix32(jnp.uint32((seed + 0x9E3779B9) & 0xFFFFFFFF))  # never 0, even for seed 0
    return np.asarray(mix32(seed_hash ^ jnp.asarray(flows)))


def _pad(array: np.ndarray, shape: tuple[int, ...], fill) -> np.ndarray:
    out = np.full(shape, fill, dtype=array.dtype)
    out[tuple(slice(0, n) for n in array.shape)] = array
    return out


class _Derived(NamedTuple):
    """What each experiment's arrays are built from, computed once per experiment."""

    ecmp: EcmpTable
    triggers: tuple[np.ndarray, np.ndarray, np.ndarray]  # trigger_tables(flows)


def _static_of(experiments, derived, slots_per_host: int, n_samples: int) -> Static:
    def biggest(f):
        return max(f(e, d) for e, d in zip(experiments, derived))

    def switch_hops(e, d):
        """Switch hops of the experiment's longest flow path (0 unless it runs HPCC)."""
        if e.cc != "hpcc":
            return 0
        hops = int(d.ecmp.hops[e.flows.src, e.flows.dst].max(initial=1)) - 1
        pinned = e.routes.max_links - 1 if e.routes is not None else 0
        return max(hops, pinned)

    history = biggest(
        lambda e, t: math.ceil(int(e.topology.link_delay_ps.max()) / int(e.topology.link_delay_ps.min())) + 2
    )
    return Static(
        n_nodes=biggest(lambda e, t: e.topology.n_nodes),
        n_hosts=biggest(lambda e, t: e.topology.n_hosts),
        n_ports=biggest(lambda e, t: e.topology.n_links),
        n_flows=max(1, biggest(lambda e, t: len(e.flows))),
        n_triggers=max(1, biggest(lambda e, t: len(e.flows.triggers))),
        n_activators=max(1, biggest(lambda e, d: d.triggers[0].shape[1])),
        route_width=biggest(lambda e, d: d.ecmp.width),
        pinned_len=max(1, biggest(lambda e, t: (e.routes.max_links if e.routes is not None else 1))),
        n_data_classes=1 + biggest(lambda e, t: int(e.flows.prio.max(initial=0))),
        slots_per_host=slots_per_host,
        pfc_history=history,
        int_hops=max(1, biggest(switch_hops)),
        n_samples=n_samples if any(e.sim.sample_interval_us > 0 for e in experiments) else 1,
        n_tasks=max(1, biggest(lambda e, d: len(e.tasks) if e.tasks is not None else 0)),
        task_deps=max(1, biggest(lambda e, d: e.tasks.deps.shape[1] if e.tasks is not None else 0)),
    )


def _task_arrays(graph: TaskGraph | None, s: Static, compute_slowdown: float = 1.0) -> tuple[TaskParams, TaskState]:
    """Padded task arrays (one invalid dummy task without a graph)."""
    n = s.n_tasks
    if graph is None:
        params = TaskParams(
            task_valid=np.zeros(n, bool),
            task_is_flow=np.zeros(n, bool),
            task_duration_ps=np.zeros(n, np.int64),
            task_flow=np.full(n, -1, np.int32),
            task_deps=np.full((n, s.task_deps), -1, np.int32),
            task_gpu=np.zeros(n, np.int32),
            task_is_compute=np.zeros(n, bool),
            task_is_comm=np.zeros(n, bool),
            compute_slowdown=np.float64(compute_slowdown),
        )
    else:
        flow_of_task = np.full(len(graph), -1, np.int32)
        flow_of_task[graph.flow_tasks] = np.arange(graph.flow_tasks.size, dtype=np.int32)
        params = TaskParams(
            task_valid=_pad(np.ones(len(graph), bool), (n,), False),
            task_is_flow=_pad(graph.kind == TASK_FLOW, (n,), False),
            task_duration_ps=_pad(graph.duration_ps.astype(np.int64), (n,), 0),
            task_flow=_pad(flow_of_task, (n,), -1),
            task_deps=_pad(graph.deps.astype(np.int32), (n, s.task_deps), -1),
            task_gpu=_pad(graph.gpu.astype(np.int32), (n,), 0),
            task_is_compute=_pad(graph.category == "compute", (n,), False),
            task_is_comm=_pad((graph.category != "compute") & ((graph.kind == TASK_FLOW) | (graph.duration_ps > 0)), (n,), False),
            compute_slowdown=np.float64(compute_slowdown),
        )
    state = TaskState(task_start_ps=np.full(n, NEVER, np.int64), task_finish_ps=np.full(n, NEVER, np.int64))
    return params, state


def _experiment_arrays(exp: Experiment, derived: _Derived, s: Static) -> tuple[Params, State]:
    """Unbatched, padded NumPy Params and initial State of one experiment."""
    topo, flows = exp.topology, exp.flows
    n_flows = len(flows)
    into_switch = topo.link_dst >= topo.n_hosts
    host_port = topo.host_port()
    port_host = np.where(topo.link_src < topo.n_hosts, topo.link_src, -1).astype(np.int32)
    links = LinkParams(
        link_dst_node=_pad(topo.link_dst.astype(np.int32), (s.n_ports,), 0),
        link_rate_bps=_pad(topo.link_rate_bps.astype(np.int64), (s.n_ports,), 1),
        link_delay_ps=_pad(topo.link_delay_ps.astype(np.int64), (s.n_ports,), NEVER // 4),
        link_into_switch=_pad(into_switch, (s.n_ports,), False),
        link_pfc_xoff_bytes=np.full(s.n_ports, exp.switch.pfc_xoff_bytes, np.int64),
        link_pfc_xon_bytes=np.full(s.n_ports, exp.switch.pfc_xon_bytes, np.int64),
    )
    ports = PortParams(
        port_buffer_bytes=_pad(np.where(port_host >= 0, UNLIMITED_BYTES, exp.switch.buffer_bytes).astype(np.int64), (s.n_ports,), UNLIMITED_BYTES),
        port_host=_pad(port_host, (s.n_ports,), -1),
    )
    nodes = NodeParams(
        node_is_host=_pad(np.arange(topo.n_nodes) < topo.n_hosts, (s.n_nodes,), False),
        route_next_port=_pad(derived.ecmp.next_port, (s.n_nodes, s.n_hosts, s.route_width), -1),
        route_n_next=_pad(derived.ecmp.n_next, (s.n_nodes, s.n_hosts), 0),
    )
    nics = NicParams(nic_port=_pad(host_port, (s.n_hosts,), 0))

    activator, activator_is_recv, rank = derived.triggers
    routes = exp.routes if exp.routes is not None else PinnedRoutes.none(n_flows)
    n_packets = -(-flows.size_bytes // exp.packet.payload_bytes)
    graph = exp.tasks
    flow_task = graph.flow_tasks if graph is not None else np.full(n_flows, -1)
    triggered = (flows.trigger >= 0) | (flow_task >= 0)  # waits on a trigger or a task
    start_ps = np.where(triggered, NEVER, flows.start_ps).astype(np.int64)
    flow_params = FlowParams(
        flow_valid=_pad(np.ones(n_flows, bool), (s.n_flows,), False),
        flow_src=_pad(flows.src.astype(np.int32), (s.n_flows,), 0),
        flow_dst=_pad(flows.dst.astype(np.int32), (s.n_flows,), 0),
        flow_size_bytes=_pad(flows.size_bytes.astype(np.int64), (s.n_flows,), 0),
        flow_n_packets=_pad(n_packets.astype(np.int32), (s.n_flows,), 0),
        flow_start_ps=_pad(start_ps, (s.n_flows,), NEVER),
        flow_hash=_pad(flow_hash(exp.sim.seed, n_flows), (s.n_flows,), 0),
        flow_priority=_pad(flows.prio.astype(np.int32), (s.n_flows,), 0),
        flow_trigger=_pad(flows.trigger.astype(np.int32), (s.n_flows,), -1),
        flow_task=_pad(flow_task.astype(np.int32), (s.n_flows,), -1),
        flow_trigger_rank=_pad(rank.astype(np.int32), (s.n_flows,), 0),
        flow_pinned_data=_pad(routes.data_ports.astype(np.int32), (s.n_flows, s.pinned_len), -1),
        flow_pinned_ack=_pad(routes.ack_ports.astype(np.int32), (s.n_flows, s.pinned_len), -1),
        trigger_activator=_pad(activator.astype(np.int32), (s.n_triggers, s.n_activators), -1),
        trigger_activator_is_recv=_pad(activator_is_recv.astype(bool), (s.n_triggers, s.n_activators), False),
    )
    cc = cc_params(exp, derived.ecmp)
    task_params, task_state = _task_arrays(graph, s, exp.workload.compute_slowdown)
    params = Params(
        static=s,
        links=links,
        ports=ports,
        nodes=nodes,
        nics=nics,
        flows=flow_params,
        tasks=task_params,
        window_ps=np.int64(topo.link_delay_ps.min()),
        payload_bytes=np.int32(exp.packet.payload_bytes),
        header_bytes=np.int32(exp.packet.header_bytes),
        ack_bytes=np.int32(exp.packet.ack_bytes),
        max_time_ps=np.int64(round(exp.sim.max_time_us * PS_PER_US)),
        cc_kind=np.int32(CC_CODES[exp.cc]),
        cc=cc,
        lb_kind=np.int32(LB_CODES[exp.lb]),
        flowlet_gap_ps=np.int64(round(exp.switch.flowlet_gap_us * PS_PER_US)),
        sample_interval_ps=np.int64(max(1, round(exp.sim.sample_interval_us * PS_PER_US))),
    )
    n_slots = s.n_slots
    state = State(
        time_ps=np.int64(start_ps.min() if np.any(~triggered) else 0),
        links=LinkState(
            pfc_decided_ps=np.full((s.n_ports, s.pfc_history), -1, np.int64),
            pfc_paused=np.zeros((s.n_ports, s.pfc_history), bool),
            pfc_pause_count=np.zeros(s.n_ports, np.int32),
        ),
        ports=PortState(
            port_free_ps=np.zeros(s.n_ports, np.int64),
            port_max_queue_bytes=np.zeros(s.n_ports, np.int64),
            port_tx_bytes=np.zeros(s.n_ports, np.int64),
        ),
        packets=PacketState(
            pkt_valid=np.zeros(n_slots, bool),
            pkt_is_ack=np.zeros(n_slots, bool),
            pkt_flow=np.zeros(n_slots, np.int32),
            pkt_seq=np.zeros(n_slots, np.int32),
            pkt_bytes=np.zeros(n_slots, np.int32),
            pkt_port=np.zeros(n_slots, np.int32),
            pkt_in_flight=np.zeros(n_slots, bool),
            pkt_time_ps=np.zeros(n_slots, np.int64),
            pkt_ingress=np.full(n_slots, -1, np.int32),
            pkt_hop=np.zeros(n_slots, np.int32),
            pkt_path_salt=np.zeros(n_slots, np.uint32),
            pkt_ecn=np.zeros(n_slots, bool),
            pkt_cnp=np.zeros(n_slots, bool),
            pkt_sent_ps=np.zeros(n_slots, np.int64),
            pkt_int_port=np.full((n_slots, s.int_hops), -1, np.int32),
            pkt_int_ts_ps=np.zeros((n_slots, s.int_hops), np.int64),
            pkt_int_tx_bytes=np.zeros((n_slots, s.int_hops), np.int64),
            pkt_int_qlen_bytes=np.zeros((n_slots, s.int_hops), np.int64),
        ),
        flows=FlowState(
            flow_begin_ps=_pad(start_ps, (s.n_flows,), NEVER),
            flow_sent_packets=np.zeros(s.n_flows, np.int32),
            flow_next_send_ps=np.zeros(s.n_flows, np.int64),
            flow_rx_packets=np.zeros(s.n_flows, np.int32),
            flow_rx_bytes=np.zeros(s.n_flows, np.int64),
            flow_acked_packets=np.zeros(s.n_flows, np.int32),
            flow_rx_finish_ps=np.full(s.n_flows, NEVER, np.int64),
            flow_finish_ps=np.full(s.n_flows, NEVER, np.int64),
            flow_last_send_ps=np.full(s.n_flows, -1, np.int64),
            flow_flowlet=np.zeros(s.n_flows, np.uint32),
        ),
        cc=initial_cc_state(exp, cc, topo.link_rate_bps[host_port[flows.src]], s),
        tasks=task_state,
        samples=SampleState(
            sample_count=np.int64(0),
            next_sample_ps=np.int64(round(exp.sim.sample_interval_us * PS_PER_US)) if exp.sim.sample_interval_us > 0 else NEVER,
            sample_time_ps=np.zeros(s.n_samples, np.int64),
            sample_flow_rate_bps=np.zeros((s.n_samples, s.n_flows)),
            sample_flow_window_bytes=np.zeros((s.n_samples, s.n_flows)),
            sample_flow_rx_bytes=np.zeros((s.n_samples, s.n_flows), np.int64),
            sample_port_queue_bytes=np.zeros((s.n_samples, s.n_ports), np.int64),
        ),
        done=np.bool_(False),
        error=np.int32(0),
        n_windows=np.int64(0),
        n_packet_hops=np.int64(0),
    )
    return params, state


def _derive(experiments) -> list[_Derived]:
    for exp in experiments:
        exp.validate()
    return [_Derived(exp.routing, trigger_tables(exp.flows)) for exp in experiments]


def needed_static(experiments, *, slots_per_host: int = 256, n_samples: int = 64) -> Static:
    """The shapes ``build_batch`` gives ``experiments`` (validated) when no ``static`` is passed."""
    return _static_of(tuple(experiments), _derive(experiments), slots_per_host, n_samples)


def build_batch(
    experiments, *, slots_per_host: int = 256, static: Static | None = None, n_samples: int = 64
) -> Batch:
    """Validate and pad ``experiments`` into one batch (leading axis E on every leaf).

    Pass ``static`` to pad to given shapes (it must be at least as large as the batch
    needs), so that batches of different experiments reuse one compiled program.
    ``n_samples``: time-series ring size when an experiment samples (at least the windows
    per compiled call, so the host drains the ring before it wraps).
    """
    experiments = tuple(experiments)
    if not experiments:
        raise InputError("a batch needs at least one experiment")
    if slots_per_host < 1:
        raise InputError(f"sim.packets_per_host must be >= 1, got {slots_per_host}")
    derived = _derive(experiments)
    needed = _static_of(experiments, derived, slots_per_host, n_samples)
    if static is None:
        static = needed
    else:
        small = [f.name for f in dataclasses.fields(Static) if getattr(static, f.name) < getattr(needed, f.name)]
        if small:
            raise InputError(f"the given shapes are too small for this batch: {', '.join(small)}")
    pairs = [_experiment_arrays(exp, d, static) for exp, d in zip(experiments, derived)]
    params = jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *[p for p, _ in pairs])
    state = jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *[st for _, st in pairs])
    return Batch(static=static, params=params, state=state, experiments=experiments)
