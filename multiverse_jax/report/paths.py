"""Each flow's data path by node names, on the host: ``h0->tor0->agg1->core2->agg3->tor5->h12``.

The path is the one the engine routes every data packet of the flow on
(``ops.routing.route`` with path salt 0, which ``ops.paths.flow_paths`` walks on the
device): its pinned route (``workload.routes``) where it has one, otherwise per-flow
ECMP, the flow's seeded hash picking one of the equal-cost ports at each switch
(``ops.routing.ecmp_choice``, the same bits in NumPy). Under ``lb=spray`` and
``lb=flowlet`` every packet (flowlet) hashes a salt of its own, so a flow that is not
pinned has no one path: its path is the empty string.

With timed link events (``topology.link_events``) routing changes at each event: a flow's
path is the one of the epoch it starts in, followed by `` then `` and each different path
a later epoch gives it before its last byte arrives (packets that change path mid-way
cross parts of both).
"""

from __future__ import annotations

import numpy as np

from multiverse_jax.components.flows import flow_hash
from multiverse_jax.conf.schema import LbKind
from multiverse_jax.experiment import Experiment
from multiverse_jax.ops.hashing import mix32
from multiverse_jax.ops.routing import ecmp_choice
from multiverse_jax.workload.routes import PinnedRoutes


def data_path_ports(experiment: Experiment, epoch: int = 0) -> np.ndarray:
    """(F, K) int32 the egress ports of each flow's data packets from its source NIC to
    its destination host, -1 padded: the engine's route at every hop (``ops.paths._walk``),
    on the ECMP tables of link epoch ``epoch`` (0: the configured fabric)."""
    topo, routing, flows = experiment.topology, experiment.epoch_routing[epoch], experiment.flows
    n = len(flows)
    pinned = (experiment.routes or PinnedRoutes.none(n)).data_ports  # (F, M)
    hashes = flow_hash(experiment.sim.seed, n)
    data_salt = mix32(np.zeros(n, np.uint32))  # data packets (no ACK salt), path salt 0
    port = topo.host_port()[flows.src].astype(np.int32)
    ports = [port]
    for hop in range(1, topo.n_nodes):  # a path visits each node at most once
        node = topo.link_dst[np.maximum(port, 0)]
        arrived = (port < 0) | (node < topo.n_hosts)
        if arrived.all():
            break
        n_next = np.maximum(routing.n_next[node, flows.dst], 1)
        ecmp = routing.next_port[node, flows.dst, ecmp_choice(hashes, node, data_salt, n_next).astype(np.intp)]
        pin = pinned[:, hop] if hop < pinned.shape[1] else np.full(n, -1)
        port = np.where(arrived, -1, np.where(pin >= 0, pin, ecmp)).astype(np.int32)
        ports.append(port)
    return np.stack(ports, axis=1)


def flow_path_names(experiment: Experiment, start_ps=None, end_ps=None) -> np.ndarray:
    """(F,) str each flow's data path as node names joined by ``->`` (see the module
    docstring; empty for a flow that is not pinned under spraying or flowlets). With link
    events, the paths of the epochs that overlap each flow's [``start_ps``, ``end_ps``]
    ((F,) int64 ps, -1: not known; None: the first epoch only), joined by `` then ``."""
    topo, flows = experiment.topology, experiment.flows
    names = np.asarray(topo.node_names, dtype=object)
    one_path = experiment.lb == LbKind.ecmp
    pinned = np.zeros(len(flows), bool) if experiment.routes is None else (experiment.routes.data_ports >= 0).any(axis=1)
    starts = np.array([e.start_ps for e in experiment.epochs] + [np.iinfo(np.int64).max])
    by_epoch = []  # [epoch][flow] the path by names
    for k in range(len(experiment.epochs) if start_ps is not None else 1):
        ports = data_path_ports(experiment, k)
        hops = names[topo.link_dst[np.maximum(ports, 0)]]
        by_epoch.append(["->".join([names[flows.src[f]], *hops[f, ports[f] >= 0]]) for f in range(len(flows))])
    paths = np.empty(len(flows), dtype=object)
    for f in range(len(flows)):
        if not (one_path or pinned[f]):
            paths[f] = ""
            continue
        lo, hi = (0, 0) if start_ps is None else _epoch_span(starts, start_ps[f], end_ps[f])
        seen = [by_epoch[k][f] for k in range(lo, hi + 1)]
        paths[f] = " then ".join(p for i, p in enumerate(seen) if i == 0 or p != seen[i - 1])
    return paths


def _epoch_span(starts: np.ndarray, start_ps: int, end_ps: int) -> tuple[int, int]:
    """The first and last epoch (``starts``: their start times, then a sentinel) that
    overlap [start_ps, end_ps] (-1: unknown: from the first epoch, to the last)."""
    last = len(starts) - 2
    lo = 0 if start_ps < 0 else int(np.searchsorted(starts, start_ps, side="right")) - 1
    hi = last if end_ps < 0 else int(np.searchsorted(starts, end_ps, side="right")) - 1
    return lo, max(lo, min(hi, last))
