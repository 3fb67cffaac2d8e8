"""The two objects that go through the step: ``Params`` (what an experiment is) and
``State`` (what changes). Unbatched shapes are documented; a batch adds a leading E axis
to every array leaf (``Params.static`` is not a leaf: one value for the whole batch).
"""

from __future__ import annotations

import chex
import numpy as np
from flax import struct

from multiverse_jax.components.cc import CcParams, CcState, cc_params, initial_cc_state
from multiverse_jax.components.flows import FlowParams, FlowState, flow_params, flow_start_ps, initial_flow_state
from multiverse_jax.components.link_events import LinkEventParams, link_event_params
from multiverse_jax.components.links import LinkParams, LinkState, initial_link_state, link_params
from multiverse_jax.components.nodes import NicParams, NodeParams, nic_params, node_params
from multiverse_jax.components.order import OrderState, initial_order_state
from multiverse_jax.components.packets import PacketState, PoolLayout, initial_packet_state
from multiverse_jax.components.ports import PortParams, PortState, initial_port_state, port_params
from multiverse_jax.components.samples import SampleState, initial_sample_state
from multiverse_jax.components.static import Static
from multiverse_jax.components.steady import SteadyParams, SteadyState, initial_steady_state, steady_params
from multiverse_jax.components.tasks import TaskParams, TaskState, initial_task_state, task_params
from multiverse_jax.conf.schema import AckClass, CcKind, LbKind, Overflow, PfcRelease, SwitchPipeline
from multiverse_jax.experiment import Experiment
from multiverse_jax.units import NEVER, PS_PER_US, ps_from_us

# Bits of the per-experiment error word (checked on the host after every call).
ERROR_POOL_FULL = 1 << 0  # a host had more unacknowledged packets than sim.packets_per_host
ERROR_BUFFER_OVERFLOW = 1 << 1  # an egress queue exceeded switch.buffer_bytes
ERROR_TIME_LIMIT = 1 << 2  # the clock passed sim.max_time_us before every flow finished
ERROR_STALLED = 1 << 3  # nothing left that could happen, yet some flows never finished
ERROR_PFC_TOGGLES = 1 << 4  # PFC paused and resumed one link more than twice within one window
ERROR_MESSAGES = {
    ERROR_POOL_FULL: "a host had more unacknowledged packets in the network than sim.packets_per_host allows; raise it",
    ERROR_BUFFER_OVERFLOW: "an egress queue exceeded switch.buffer_bytes",  # simulate.py names the ports
    ERROR_TIME_LIMIT: "simulated time passed sim.max_time_us before every flow finished",
    ERROR_STALLED: "the experiment stalled: nothing in flight and no flow can send, yet some flows never finished",
    ERROR_PFC_TOGGLES: (
        "PFC paused and resumed a link more than twice within one lookahead window; widen the gap between "
        "switch.pfc_xoff_bytes and switch.pfc_xon_bytes (at least one link delay of traffic at line rate)"
    ),
}

# Congestion control (a per-experiment value; ``cc/`` holds the algorithms).
CC_NONE = 0  # line rate, held back only by backpressure (PFC)
CC_DCQCN = 1  # rate-based, ECN -> CNP (Zhu et al. 2015)
CC_DCTCP = 2  # window-based, ECN echo (Alizadeh et al. 2010)
CC_HPCC = 3  # window + pacing from in-band telemetry (Li et al. 2019)
CC_TIMELY = 4  # rate-based, RTT gradient (Mittal et al. 2015)

# Load balancing (a per-experiment value): which equal-cost next hop a packet takes.
LB_ECMP = 0  # per flow: every packet of a flow takes the same path
LB_SPRAY = 1  # per packet: each packet hashes its own path
LB_FLOWLET = 2  # per flowlet: a new path when the flow pauses longer than the flowlet gap


@struct.dataclass
class Params:
    static: Static = struct.field(pytree_node=False)  # the shapes: compile-time, shared by the batch
    links: LinkParams
    ports: PortParams
    nodes: NodeParams
    nics: NicParams
    flows: FlowParams
    tasks: TaskParams
    window_ps: chex.Array  # () int64 lookahead: the smallest link delay
    payload_bytes: chex.Array  # () int32 payload of a full data packet
    header_bytes: chex.Array  # () int32 header bytes added to every data packet
    ack_bytes: chex.Array  # () int32 wire size of an ACK
    ack_in_data_class: chex.Array  # () bool ACKs queue in their flow's data class, paused by PFC (packet.ack_class=data)
    max_time_ps: chex.Array  # () int64 the run stops with ERROR_TIME_LIMIT past this time
    pfc_count_until_sent: chex.Array  # () bool PFC counts a packet until its last bit left (switch.pfc_release=sent)
    overflow_is_error: chex.Array  # () bool a queue past its buffer sets ERROR_BUFFER_OVERFLOW (switch.overflow=error)
    switch_serial: chex.Array  # () bool simultaneous arrivals at a switch pass it one at a time (switch.pipeline=serial)
    cc_kind: chex.Array  # () int32 congestion control (CC_*)
    cc: CcParams  # constants of every algorithm (and of ECN marking)
    lb_kind: chex.Array  # () int32 load balancing (LB_ECMP | LB_SPRAY | LB_FLOWLET)
    flowlet_gap_ps: chex.Array  # () int64 idle time after which a flow starts a new flowlet
    sample_interval_ps: chex.Array  # () int64 time between time-series samples (> 0)
    steady: SteadyParams  # hybrid mode: steady-state detection (components/steady.py)
    link_events: LinkEventParams  # the fabric of each epoch between timed link events (components/link_events.py)
    pool_layout: PoolLayout | None = None  # a per-host prefix's places (ops/pool.py); None: the first columns of every host


@struct.dataclass
class State:
    time_ps: chex.Array  # () int64 start of the current window
    links: LinkState
    ports: PortState
    packets: PacketState
    order: OrderState  # the service order the last window left (ops/queues.py)
    flows: FlowState
    cc: CcState
    tasks: TaskState
    samples: SampleState
    steady: SteadyState  # hybrid mode: rate samples, frozen partitions, accounting
    done: chex.Array  # () bool every flow has finished
    error: chex.Array  # () int32 ERROR_* bits
    n_windows: chex.Array  # () int64 windows stepped (the clock may also jump)
    stop_window: chex.Array  # () int64 the running ``engine.advance`` call stops the experiment at this n_windows
    n_packet_hops: chex.Array  # () int64 packet transmissions (one per link a packet crosses)


CC_CODES = {CcKind.none: CC_NONE, CcKind.dcqcn: CC_DCQCN, CcKind.dctcp: CC_DCTCP, CcKind.hpcc: CC_HPCC, CcKind.timely: CC_TIMELY}
LB_CODES = {LbKind.ecmp: LB_ECMP, LbKind.spray: LB_SPRAY, LbKind.flowlet: LB_FLOWLET}


def experiment_params(exp: Experiment, s: Static) -> Params:
    """One experiment's ``Params`` (NumPy, unbatched), padded to ``s``: each component builds its own."""
    return Params(
        static=s,
        links=link_params(exp, s),
        ports=port_params(exp, s),
        nodes=node_params(exp, s),
        nics=nic_params(exp, s),
        flows=flow_params(exp, s),
        tasks=task_params(exp, s),
        window_ps=np.int64(exp.topology.link_delay_ps.min()),
        payload_bytes=np.int32(exp.packet.payload_bytes),
        header_bytes=np.int32(exp.packet.header_bytes),
        ack_bytes=np.int32(exp.packet.ack_bytes),
        ack_in_data_class=np.bool_(exp.packet.ack_class == AckClass.data),
        max_time_ps=ps_from_us(exp.sim.max_time_us),
        pfc_count_until_sent=np.bool_(exp.switch.pfc_release == PfcRelease.sent),
        overflow_is_error=np.bool_(exp.switch.overflow == Overflow.error),
        switch_serial=np.bool_(exp.switch.pipeline == SwitchPipeline.serial),
        cc_kind=np.int32(CC_CODES[exp.cc]),
        cc=cc_params(exp, exp.routing),
        lb_kind=np.int32(LB_CODES[exp.lb]),
        flowlet_gap_ps=ps_from_us(exp.switch.flowlet_gap_us),
        sample_interval_ps=np.int64(max(1, round(exp.sim.sample_interval_us * PS_PER_US))),
        steady=steady_params(exp),
        link_events=link_event_params(exp, s),
    )


def initial_state(exp: Experiment, params: Params) -> State:
    """One experiment's initial ``State`` (NumPy, unbatched), padded to ``params.static``. Its
    clock starts at the first flow that starts by time (0 if every flow waits on a trigger or task)."""
    s, topo, flows = params.static, exp.topology, exp.flows
    start_ps = flow_start_ps(exp)
    line_rate_bps = topo.link_rate_bps[topo.host_port()[flows.src]]
    return State(
        time_ps=np.int64(start_ps.min() if np.any(start_ps != NEVER) else 0),
        links=initial_link_state(s),
        ports=initial_port_state(s),
        packets=initial_packet_state(s),
        order=initial_order_state(s),
        flows=initial_flow_state(exp, s),
        cc=initial_cc_state(exp, params.cc, line_rate_bps, s),
        tasks=initial_task_state(s),
        samples=initial_sample_state(exp, s),
        steady=initial_steady_state(exp, s),
        done=np.bool_(False),
        error=np.int32(0),
        n_windows=np.int64(0),
        stop_window=np.int64(0),
        n_packet_hops=np.int64(0),
    )
