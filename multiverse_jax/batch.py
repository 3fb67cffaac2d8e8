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

from multiverse_jax.cc.config import DcqcnConfig, DctcpConfig, EcnConfig, HpccConfig, TimelyConfig
from multiverse_jax.components.cc import GATE_ENTRIES, CcParams, CcState
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
from multiverse_jax.systems.common import mix32
from multiverse_jax.topology.graph import Topology
from multiverse_jax.topology.routing import EcmpTable, ecmp_table
from multiverse_jax.units import NEVER, PS_PER_US
from multiverse_jax.workload.flows import FlowSet, check_hosts
from multiverse_jax.workload.routes import PinnedRoutes
from multiverse_jax.workload.tasks import TASK_FLOW, TaskGraph
from multiverse_jax.workload.triggers import check_triggers, trigger_tables

UNLIMITED_BYTES = 1 << 62  # NIC egress queues hold only ACKs and are never the bottleneck
CC_KINDS = {"none": CC_NONE, "dcqcn": CC_DCQCN, "dctcp": CC_DCTCP, "hpcc": CC_HPCC, "timely": CC_TIMELY}
LB_KINDS = {"ecmp": LB_ECMP, "spray": LB_SPRAY, "flowlet": LB_FLOWLET}
MAX_PAYLOAD_BYTES = 1 << 20  # 1 MiB: (payload + header) * 8e12 bits*ps must fit in int64
MAX_HEADER_BYTES = 1 << 16
MAX_PRIORITIES = 8  # data classes per port, as 802.1p's eight traffic classes


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One design point: a network, its traffic and the knobs of the fabric."""

    topology: Topology
    flows: FlowSet
    routes: PinnedRoutes | None = None  # pinned paths (None: ECMP for every flow)
    payload_bytes: int = 4096  # packet.payload_bytes
    header_bytes: int = 64  # packet.header_bytes
    ack_bytes: int = 64  # packet.ack_bytes
    buffer_bytes: int = 2_000_000  # switch.buffer_bytes, per egress port
    pfc_xoff_bytes: int = 200_000  # switch.pfc_xoff_bytes, per ingress
    pfc_xon_bytes: int = 100_000  # switch.pfc_xon_bytes, per ingress
    cc: str = "none"  # cc: none | dcqcn | dctcp | hpcc | timely
    dcqcn: DcqcnConfig = DcqcnConfig()  # dcqcn.*
    dctcp: DctcpConfig = DctcpConfig()  # dctcp.*
    hpcc: HpccConfig = HpccConfig()  # hpcc.*
    timely: TimelyConfig = TimelyConfig()  # timely.*
    ecn: EcnConfig = EcnConfig()  # switch.ecn_kmin_bytes, switch.ecn_kmax_bytes, switch.ecn_pmax
    lb: str = "ecmp"  # lb: ecmp | spray | flowlet
    flowlet_gap_us: float = 50.0  # switch.flowlet_gap_us: idle time that starts a new flowlet
    sample_interval_us: float = 0.0  # sim.sample_interval_us: time-series period (0: no time series)
    seed: int = 0  # sim.seed
    max_time_us: float = 1e6  # sim.max_time_us
    ecmp: EcmpTable | None = None  # precomputed routing of ``topology`` (built if None)
    compute_slowdown: float = 1.0  # workload.compute_slowdown: factor on compute that starts while its GPU communicates
    tasks: TaskGraph | None = None  # a task DAG in host ids (``workload/placement.py``); its flow
    #   tasks are ``flows`` (``TaskGraph.flow_set()``), started by the scheduler

    def validate(self) -> EcmpTable:
        """Check every value a user sets; returns the routing table. InputError names the key."""
        for key, value, low in (
            ("packet.payload_bytes", self.payload_bytes, 1),
            ("packet.header_bytes", self.header_bytes, 0),
            ("packet.ack_bytes", self.ack_bytes, 1),
            ("switch.buffer_bytes", self.buffer_bytes, 1),
            ("switch.pfc_xoff_bytes", self.pfc_xoff_bytes, 1),
            ("switch.pfc_xon_bytes", self.pfc_xon_bytes, 0),
        ):
            if int(value) != value or value < low:
                raise InputError(f"{key} must be an integer >= {low}, got {value!r}")
        if self.payload_bytes > MAX_PAYLOAD_BYTES or self.header_bytes > MAX_HEADER_BYTES:
            raise InputError(
                f"packet.payload_bytes must be <= {MAX_PAYLOAD_BYTES} and packet.header_bytes <= {MAX_HEADER_BYTES} "
                f"(times are int64 picoseconds), got {self.payload_bytes} and {self.header_bytes}"
            )
        if self.pfc_xon_bytes > self.pfc_xoff_bytes:
            raise InputError(
                f"switch.pfc_xon_bytes ({self.pfc_xon_bytes}) must not exceed switch.pfc_xoff_bytes ({self.pfc_xoff_bytes})"
            )
        if self.pfc_xoff_bytes > self.buffer_bytes:
            raise InputError(
                f"switch.pfc_xoff_bytes ({self.pfc_xoff_bytes}) must not exceed switch.buffer_bytes ({self.buffer_bytes})"
            )
        if self.cc not in CC_KINDS:
            raise InputError(f"cc must be one of {', '.join(CC_KINDS)}, got {self.cc!r}")
        self.dcqcn.check()
        self.dctcp.check()
        self.hpcc.check()
        self.timely.check()
        self.ecn.check()
        if self.lb not in LB_KINDS:
            raise InputError(f"lb must be one of {list(LB_KINDS)}, got {self.lb!r}")
        if not (isinstance(self.compute_slowdown, (int, float)) and 0 < self.compute_slowdown < 100):
            raise InputError(f"workload.compute_slowdown must be a number in (0, 100), 1 = off, got {self.compute_slowdown!r}")
        if not self.flowlet_gap_us > 0:
            raise InputError(f"switch.flowlet_gap_us must be > 0, got {self.flowlet_gap_us!r}")
        if not (isinstance(self.sample_interval_us, (int, float)) and self.sample_interval_us >= 0):
            raise InputError(f"sim.sample_interval_us must be >= 0 (0: no time series), got {self.sample_interval_us!r}")
        if not self.max_time_us > 0:
            raise InputError(f"sim.max_time_us must be > 0, got {self.max_time_us!r}")
        if len(self.flows) and (self.flows.prio.min() < 0 or self.flows.prio.max() >= MAX_PRIORITIES):
            bad = int(np.flatnonzero((self.flows.prio < 0) | (self.flows.prio >= MAX_PRIORITIES))[0])
            raise InputError(
                f"flow {int(self.flows.flow_id[bad])}: priority {int(self.flows.prio[bad])} is out of range "
                f"(valid: 0 = highest .. {MAX_PRIORITIES - 1})",
                source=self.flows.source,
                line=int(self.flows.line[bad]) if self.flows.line is not None else None,
            )
        if len(self.flows) == 0 and self.tasks is None:
            raise InputError("the workload has no flows", source=self.flows.source)
        if self.tasks is not None:
            if len(self.flows) != self.tasks.flow_tasks.size or np.any(self.flows.flow_id != self.tasks.flow_tasks):
                raise InputError(
                    "the flows of a task experiment must be its task graph's flows (use tasks.flow_set())",
                    source=self.tasks.source,
                )
            if self.tasks.n_gpus > self.topology.n_hosts:
                raise InputError(
                    f"the task graph runs on {self.tasks.n_gpus} GPUs but topology {self.topology.name} has only "
                    f"{self.topology.n_hosts} hosts (place the graph on the hosts, or choose a larger topology)",
                    source=self.tasks.source,
                )
        table = self.ecmp if self.ecmp is not None else ecmp_table(self.topology)
        check_hosts(self.flows, self.topology.n_hosts, table.hops)
        check_triggers(self.flows)
        return table


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
        n_samples=n_samples if any(e.sample_interval_us > 0 for e in experiments) else 1,
        n_tasks=max(1, biggest(lambda e, d: len(e.tasks) if e.tasks is not None else 0)),
        task_deps=max(1, biggest(lambda e, d: e.tasks.deps.shape[1] if e.tasks is not None else 0)),
    )


def base_rtt_ps(exp: Experiment, ecmp: EcmpTable) -> int:
    """An upper bound of the unloaded RTT of the experiment's flows (HPCC's T when not given):
    per hop, the longest link delay and a full packet (then an ACK) at the slowest rate."""
    topo, flows = exp.topology, exp.flows
    links = ecmp.hops[flows.src, flows.dst].astype(np.int64)
    slowest, longest = int(topo.link_rate_bps.min()), int(topo.link_delay_ps.max())
    data_ps = -(-(exp.payload_bytes + exp.header_bytes) * 8 * 10**12 // slowest)
    ack_ps = -(-exp.ack_bytes * 8 * 10**12 // slowest)
    return max(1, int(links.max(initial=0))) * (data_ps + ack_ps + 2 * longest)


def _cc_params(exp: Experiment, ecmp: EcmpTable) -> CcParams:
    """Per-experiment constants in engine units (ps, bits per second, bytes)."""
    d, c, h, t, e = exp.dcqcn, exp.dctcp, exp.hpcc, exp.timely, exp.ecn
    rtt_ps = base_rtt_ps(exp, ecmp) if h.base_rtt_us is None else round(h.base_rtt_us * PS_PER_US)

    def ps(us):
        return np.int64(round(us * PS_PER_US))

    def bps(mbps):
        return np.float64(mbps * 1e6)

    return CcParams(
        ecn_kmin_bytes=np.int64(e.kmin_bytes),
        ecn_kmax_bytes=np.int64(e.kmax_bytes),
        ecn_pmax=np.float64(e.pmax),
        dcqcn_g=np.float64(d.g),
        dcqcn_alpha_timer_ps=ps(d.alpha_timer_us),
        dcqcn_decrease_interval_ps=ps(d.decrease_interval_us),
        dcqcn_increase_timer_ps=ps(d.increase_timer_us),
        dcqcn_byte_counter_bytes=np.int64(d.byte_counter_bytes),
        dcqcn_fast_recovery_steps=np.int32(d.fast_recovery_steps),
        dcqcn_rate_ai_bps=bps(d.rate_ai_mbps),
        dcqcn_rate_hai_bps=bps(d.rate_hai_mbps),
        dcqcn_min_rate_bps=bps(d.min_rate_mbps),
        dcqcn_cnp_interval_ps=ps(d.cnp_interval_us),
        dcqcn_rate_on_first_cnp=np.float64(d.rate_on_first_cnp),
        dctcp_g=np.float64(c.g),
        dctcp_init_window_bytes=np.float64(c.init_window_packets * exp.payload_bytes),
        dctcp_min_window_bytes=np.float64(c.min_window_packets * exp.payload_bytes),
        hpcc_eta=np.float64(h.eta),
        hpcc_max_stage=np.int32(h.max_stage),
        hpcc_w_ai_bytes=np.float64(h.rate_ai_mbps * 1e6 * rtt_ps / 1e12 / 8),
        hpcc_base_rtt_ps=np.int64(rtt_ps),
        hpcc_min_rate_bps=bps(h.min_rate_mbps),
        timely_alpha=np.float64(t.alpha),
        timely_beta=np.float64(t.beta),
        timely_t_low_ps=ps(t.t_low_us),
        timely_t_high_ps=ps(t.t_high_us),
        timely_min_rtt_ps=ps(t.min_rtt_us),
        timely_rate_ai_bps=bps(t.rate_ai_mbps),
        timely_rate_hai_bps=bps(t.rate_hai_mbps),
        timely_hai_after=np.int32(t.hai_after),
        timely_min_rate_bps=bps(t.min_rate_mbps),
    )


def _cc_state(exp: Experiment, cp: CcParams, line_rate_bps: np.ndarray, s: Static) -> CcState:
    """Initial congestion-control state: line rate; DCTCP's initial window, HPCC's W = B T."""
    n = s.n_flows
    rate = _pad(line_rate_bps.astype(np.float64), (n,), 1.0)
    bdp = rate * float(cp.hpcc_base_rtt_ps) / 1e12 / 8
    kind = CC_KINDS[exp.cc]
    window = {CC_DCTCP: np.full(n, float(cp.dctcp_init_window_bytes)), CC_HPCC: bdp}.get(kind, np.zeros(n))
    allow0 = window if kind in (CC_DCTCP, CC_HPCC) else np.full(n, np.inf)
    gate_allow = np.full((n, GATE_ENTRIES), np.inf)
    gate_allow[:, 0] = allow0
    gate_ps = np.full((n, GATE_ENTRIES), NEVER, np.int64)
    gate_ps[:, 0] = 0

    def zeros(dtype):
        return np.zeros(n, dtype)

    never = np.full(n, NEVER, np.int64)
    hops = (n, s.int_hops)
    return CcState(
        rate_bps=rate,
        window_bytes=window.astype(np.float64),
        alpha=np.ones(n),
        target_rate_bps=rate.copy(),
        cnp_seen_alpha=zeros(bool),
        cnp_seen_decrease=zeros(bool),
        rate_limited=zeros(bool),
        timer_stage=zeros(np.int32),
        byte_stage=zeros(np.int32),
        bytes_counted=zeros(np.int64),
        alpha_timer_ps=never,
        decrease_timer_ps=never.copy(),
        increase_timer_ps=never.copy(),
        byte_event_ps=never.copy(),
        last_cnp_ps=np.full(n, -(1 << 60), np.int64),
        ecn_marked_packets=zeros(np.int32),
        cnps_sent=zeros(np.int32),
        ssthresh_bytes=np.full(n, np.inf),
        in_cwr=zeros(bool),
        cwr_high_seq=zeros(np.int32),
        acks_in_round=zeros(np.int32),
        marks_in_round=zeros(np.int32),
        last_update_seq=zeros(np.int32),
        started=zeros(bool),
        hpcc_u=zeros(np.float64),
        hpcc_wc_bytes=bdp.astype(np.float64),
        stage=zeros(np.int32),
        int_port=np.full(hops, -1, np.int32),
        int_ts_ps=np.zeros(hops, np.int64),
        int_tx_bytes=np.zeros(hops, np.int64),
        int_qlen_bytes=np.zeros(hops, np.int64),
        last_rtt_ps=zeros(np.int64),
        rtt_diff_ps=zeros(np.float64),
        gate_allow_bytes=gate_allow,
        gate_ps=gate_ps,
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
        link_pfc_xoff_bytes=np.full(s.n_ports, exp.pfc_xoff_bytes, np.int64),
        link_pfc_xon_bytes=np.full(s.n_ports, exp.pfc_xon_bytes, np.int64),
    )
    ports = PortParams(
        port_buffer_bytes=_pad(np.where(port_host >= 0, UNLIMITED_BYTES, exp.buffer_bytes).astype(np.int64), (s.n_ports,), UNLIMITED_BYTES),
        port_host=_pad(port_host, (s.n_ports,), -1),
        port_data_classes=np.arange(s.n_data_classes, dtype=np.int32),
    )
    nodes = NodeParams(
        node_is_host=_pad(np.arange(topo.n_nodes) < topo.n_hosts, (s.n_nodes,), False),
        route_next_port=_pad(derived.ecmp.next_port, (s.n_nodes, s.n_hosts, s.route_width), -1),
        route_n_next=_pad(derived.ecmp.n_next, (s.n_nodes, s.n_hosts), 0),
    )
    nics = NicParams(nic_port=_pad(host_port, (s.n_hosts,), 0))

    activator, activator_is_recv, rank = derived.triggers
    routes = exp.routes if exp.routes is not None else PinnedRoutes.none(n_flows)
    n_packets = -(-flows.size_bytes // exp.payload_bytes)
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
        flow_hash=_pad(flow_hash(exp.seed, n_flows), (s.n_flows,), 0),
        flow_priority=_pad(flows.prio.astype(np.int32), (s.n_flows,), 0),
        flow_trigger=_pad(flows.trigger.astype(np.int32), (s.n_flows,), -1),
        flow_task=_pad(flow_task.astype(np.int32), (s.n_flows,), -1),
        flow_trigger_rank=_pad(rank.astype(np.int32), (s.n_flows,), 0),
        flow_pinned_data=_pad(routes.data_ports.astype(np.int32), (s.n_flows, s.pinned_len), -1),
        flow_pinned_ack=_pad(routes.ack_ports.astype(np.int32), (s.n_flows, s.pinned_len), -1),
        trigger_activator=_pad(activator.astype(np.int32), (s.n_triggers, s.n_activators), -1),
        trigger_activator_is_recv=_pad(activator_is_recv.astype(bool), (s.n_triggers, s.n_activators), False),
    )
    cc_params = _cc_params(exp, derived.ecmp)
    task_params, task_state = _task_arrays(graph, s, exp.compute_slowdown)
    params = Params(
        links=links,
        ports=ports,
        nodes=nodes,
        nics=nics,
        flows=flow_params,
        tasks=task_params,
        window_ps=np.int64(topo.link_delay_ps.min()),
        payload_bytes=np.int32(exp.payload_bytes),
        header_bytes=np.int32(exp.header_bytes),
        ack_bytes=np.int32(exp.ack_bytes),
        max_time_ps=np.int64(round(exp.max_time_us * PS_PER_US)),
        cc_kind=np.int32(CC_KINDS[exp.cc]),
        cc=cc_params,
        lb_kind=np.int32(LB_KINDS[exp.lb]),
        flowlet_gap_ps=np.int64(round(exp.flowlet_gap_us * PS_PER_US)),
        sample_interval_ps=np.int64(max(1, round(exp.sample_interval_us * PS_PER_US))),
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
        cc=_cc_state(exp, cc_params, topo.link_rate_bps[host_port[flows.src]], s),
        tasks=task_state,
        samples=SampleState(
            sample_count=np.int64(0),
            next_sample_ps=np.int64(round(exp.sample_interval_us * PS_PER_US)) if exp.sample_interval_us > 0 else NEVER,
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
    return [_Derived(exp.validate(), trigger_tables(exp.flows)) for exp in experiments]


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
