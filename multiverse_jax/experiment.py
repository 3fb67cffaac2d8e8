"""One design point, as the host describes it: a network, its traffic and the knobs of the
fabric, as the typed config groups of ``conf/schema.py`` (the only place their keys,
defaults and range checks are written).

``config.experiment_from_config`` builds one from a Hydra config; the Python API builds
one directly, e.g. ``Experiment(topo, flows, cc="hpcc", switch=SwitchConfig(buffer_bytes=500_000))``.
``batch.build_batch`` turns a list of them into the arrays of one batched program.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from multiverse_jax.conf.schema import (
    MAX_PRIORITIES,
    CcKind,
    DcqcnConfig,
    DctcpConfig,
    HpccConfig,
    HybridConfig,
    LbKind,
    PacketConfig,
    SimConfig,
    SwitchConfig,
    TimelyConfig,
    WorkloadConfig,
    choice,
)
from multiverse_jax.errors import InputError
from multiverse_jax.topology.graph import Topology
from multiverse_jax.topology.link_events import LinkEpoch, LinkEvent, as_link_events, link_epochs
from multiverse_jax.topology.routing import UNREACHABLE, EcmpTable, ecmp_table
from multiverse_jax.workload.flows import FlowSet, check_hosts
from multiverse_jax.workload.routes import PinnedRoutes
from multiverse_jax.workload.tasks import TaskGraph
from multiverse_jax.workload.triggers import check_triggers, trigger_tables


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One design point: a network, its traffic and the knobs of the fabric."""

    topology: Topology
    flows: FlowSet  # a task experiment's flows are its graph's (``TaskGraph.flow_set()``)
    routes: PinnedRoutes | None = None  # pinned paths (None: ECMP for every flow)
    tasks: TaskGraph | None = None  # a task DAG in host ids (``workload/placement.py``), started by the scheduler
    packet: PacketConfig = dataclasses.field(default_factory=PacketConfig)  # packet.*
    switch: SwitchConfig = dataclasses.field(default_factory=SwitchConfig)  # switch.*: buffers, PFC, ECN, flowlets
    cc: CcKind = CcKind.none  # cc
    lb: LbKind = LbKind.ecmp  # lb
    dcqcn: DcqcnConfig = dataclasses.field(default_factory=DcqcnConfig)  # dcqcn.*
    dctcp: DctcpConfig = dataclasses.field(default_factory=DctcpConfig)  # dctcp.*
    hpcc: HpccConfig = dataclasses.field(default_factory=HpccConfig)  # hpcc.*
    timely: TimelyConfig = dataclasses.field(default_factory=TimelyConfig)  # timely.*
    workload: WorkloadConfig = dataclasses.field(default_factory=WorkloadConfig)  # workload.compute_slowdown
    sim: SimConfig = dataclasses.field(default_factory=SimConfig)  # sim.seed, max_time_us, sample_interval_us, mode
    hybrid: HybridConfig = dataclasses.field(default_factory=HybridConfig)  # hybrid.*: steady-state detection
    ecmp: EcmpTable | None = None  # the routing of ``topology`` if already built (shared between experiments)
    link_events: tuple[LinkEvent, ...] = ()  # topology.link_events: timed failures, recoveries, rate changes

    def __post_init__(self):
        object.__setattr__(self, "cc", choice(CcKind, "cc", self.cc))
        object.__setattr__(self, "lb", choice(LbKind, "lb", self.lb))
        object.__setattr__(self, "link_events", as_link_events(self.link_events))

    @functools.cached_property
    def epochs(self) -> tuple[LinkEpoch, ...]:
        """The fabric between link events (``topology/link_events.py``): epoch 0 is ``topology``."""
        return link_epochs(self.topology, self.link_events)

    @functools.cached_property
    def epoch_routing(self) -> tuple[EcmpTable, ...]:
        """The ECMP tables of each epoch (epoch 0's is ``routing``)."""
        return (self.routing,) + tuple(ecmp_table(epoch.topology) for epoch in self.epochs[1:])

    @functools.cached_property
    def routing(self) -> EcmpTable:
        """The ECMP routing table of ``topology``, built once per experiment (or ``ecmp`` if given)."""
        return self.ecmp if self.ecmp is not None else ecmp_table(self.topology)

    @functools.cached_property
    def triggers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``trigger_tables(flows)``: (T, A) activators, (T, A) activation at the receiver, (F,) rank."""
        return trigger_tables(self.flows)

    def validate(self) -> None:
        """Check what the config groups cannot check alone: flows against the topology and the
        task graph. An InputError names the file and line, or the key."""
        flows = self.flows
        if len(flows) and (flows.prio.min() < 0 or flows.prio.max() >= MAX_PRIORITIES):
            bad = int(np.flatnonzero((flows.prio < 0) | (flows.prio >= MAX_PRIORITIES))[0])
            raise InputError(
                f"flow {int(flows.flow_id[bad])}: priority {int(flows.prio[bad])} is out of range "
                f"(valid: 0 = highest .. {MAX_PRIORITIES - 1})",
                source=flows.source,
                line=int(flows.line[bad]) if flows.line is not None else None,
            )
        if len(flows) == 0 and self.tasks is None:
            raise InputError("the workload has no flows", source=flows.source)
        if self.tasks is not None:
            self._validate_tasks()
        topo = self.topology
        check_hosts(flows, topo.n_hosts, self.routing.hops, topo.node_names, topo.links_down())
        for epoch, routing in zip(self.epochs[1:], self.epoch_routing[1:]):
            self._validate_epoch(epoch, routing)
        if self.routes is not None:
            for epoch in self.epochs:
                self._validate_pinned_links(epoch)
        check_triggers(flows)

    def _validate_epoch(self, epoch: LinkEpoch, routing: EcmpTable) -> None:
        """After a link event, every flow's hosts still reach each other, and every switch
        that could reach a flow's host before it still can (a packet on its way there when
        the event happens must find a route on)."""
        after = f"after {'; '.join(e.describe() for e in epoch.events)} (topology.link_events): "
        topo = epoch.topology
        try:
            check_hosts(self.flows, topo.n_hosts, routing.hops, topo.node_names, topo.links_down())
        except InputError as exc:
            raise InputError(after + exc.message, source=exc.source, line=exc.line) from None
        hosts = np.unique(np.concatenate([self.flows.src, self.flows.dst]))
        before = self.routing.hops[:, hosts] < UNREACHABLE
        stranded = before & (routing.hops[:, hosts] >= UNREACHABLE)
        stranded[: topo.n_hosts] = False  # hosts never forward
        if stranded.any():
            node, h = (int(i[0]) for i in np.nonzero(stranded))
            raise InputError(
                after + f"switch {topo.node_names[node]} can no longer reach host {topo.node_names[hosts[h]]}, "
                "so a packet on its way through it would have no route (links down: "
                f"{', '.join(topo.links_down())})"
            )

    def _validate_pinned_links(self, epoch: LinkEpoch) -> None:
        """No pinned route crosses a link that is down (from the start, or after an event)."""
        topo, flows = epoch.topology, self.flows
        when = f" after {'; '.join(e.describe() for e in epoch.events)}" if epoch.events else ""
        for kind, ports in (("data", self.routes.data_ports), ("ack", self.routes.ack_ports)):
            bad = (ports >= 0) & ~topo.link_up[np.maximum(ports, 0)]
            if bad.any():
                f, hop = (int(i[0]) for i in np.nonzero(bad))
                src, dst = (topo.node_names[h] for h in (flows.src[f], flows.dst[f]))
                raise InputError(
                    f"flow {int(flows.flow_id[f])} ({src}->{dst}): its pinned {kind} path (workload.routes) "
                    f"crosses {topo.port_names()[ports[f, hop]]}, a link that is down{when} "
                    f"(links down: {', '.join(topo.links_down())})"
                )

    def _validate_tasks(self) -> None:
        tasks, flows = self.tasks, self.flows
        if len(flows) != tasks.flow_tasks.size or np.any(flows.flow_id != tasks.flow_tasks):
            raise InputError(
                "the flows of a task experiment must be its task graph's flows (use tasks.flow_set())",
                source=tasks.source,
            )
        if tasks.n_gpus > self.topology.n_hosts:
            raise InputError(
                f"the task graph runs on {tasks.n_gpus} GPUs but topology {self.topology.name} has only "
                f"{self.topology.n_hosts} hosts (place the graph on the hosts, or choose a larger topology)",
                source=tasks.source,
            )
