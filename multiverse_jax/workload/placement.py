"""Placing task graphs on a topology's hosts, one job or several.

A GPU is a network host (its own NIC, as in rail-optimised clusters); a server is
``gpus_per_server`` consecutive GPUs (their traffic goes over NVLink, see
``collectives.py``) and is placed as a block of consecutive hosts, so that intra-server
pairs stay together:

* ``packed``: server s of the job on host block s (after the job's offset);
* ``random``: the job's servers on a seeded random choice of the free host blocks;
* ``rail``: GPU i of every server on the host of rail i of its block -- with this
  package's rail-optimised topology (host = server * gpus_per_server + rail) that is
  the packed layout; on other topologies it is packed too.

Several jobs (``combine``) share one experiment: each is placed on its own hosts
(disjoint) or on hosts another job uses too (shared: they contend for the NICs).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.workload.tasks import TaskGraph

STRATEGIES = ("packed", "random", "rail")


def placement(
    strategy: str, n_gpus: int, n_hosts: int, *, gpus_per_server: int = 1, seed: int = 0, first_host: int = 0
) -> np.ndarray:
    """(n_gpus,) the host of each GPU of a job placed from ``first_host`` on."""
    if strategy not in STRATEGIES:
        raise InputError(f"workload.placement must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if gpus_per_server < 1 or n_gpus % gpus_per_server:
        raise InputError(
            f"workload.gpus_per_server ({gpus_per_server}) must divide the job's GPU count ({n_gpus})"
        )
    free = n_hosts - first_host
    if n_gpus > free:
        raise InputError(
            f"the job needs {n_gpus} GPUs but the topology has {free} free hosts from host {first_host} "
            f"(of {n_hosts}); choose a larger topology or fewer GPUs"
        )
    servers = n_gpus // gpus_per_server
    blocks = np.arange(servers)
    if strategy == "random":
        blocks = np.random.default_rng(seed).choice(free // gpus_per_server, servers, replace=False)
    hosts = first_host + (blocks[:, None] * gpus_per_server + np.arange(gpus_per_server)[None, :])
    return hosts.reshape(-1).astype(np.int32)


def place(graph: TaskGraph, gpu_to_host: np.ndarray, n_hosts: int) -> TaskGraph:
    """The graph with GPU ids replaced by host ids (its ``n_gpus`` becomes ``n_hosts``)."""
    host = np.asarray(gpu_to_host, np.int32)
    if host.shape != (graph.n_gpus,):
        raise InputError(f"a placement must give a host for each of the {graph.n_gpus} GPUs, got {host.shape}")
    if np.unique(host).size != host.size:
        raise InputError("a placement puts two GPUs of one job on the same host")
    peer = np.where(graph.peer >= 0, host[np.maximum(graph.peer, 0)], -1).astype(np.int32)
    return dataclasses.replace(graph, gpu=host[graph.gpu], peer=peer, n_gpus=n_hosts)


def combine(graphs: list[TaskGraph]) -> TaskGraph:
    """Several placed jobs (same ``n_gpus`` = host count) as one graph; names get a job prefix."""
    if not graphs:
        raise InputError("combine needs at least one job")
    n_hosts = graphs[0].n_gpus
    if any(g.n_gpus != n_hosts for g in graphs):
        raise InputError("every job must be placed on the same topology before combining")
    width = max(g.deps.shape[1] for g in graphs)
    offsets = np.cumsum([0] + [len(g) for g in graphs[:-1]])
    deps = []
    for g, off in zip(graphs, offsets):
        d = np.full((len(g), width), -1, np.int32)
        d[:, : g.deps.shape[1]] = np.where(g.deps >= 0, g.deps + off, -1)
        deps.append(d)

    def cat(field):
        return np.concatenate([getattr(g, field) for g in graphs])

    names = np.concatenate([np.array([f"job{j}/{n}" for n in g.name], dtype=object) for j, g in enumerate(graphs)])
    return TaskGraph(
        kind=cat("kind"),
        gpu=cat("gpu"),
        peer=cat("peer"),
        size_bytes=cat("size_bytes"),
        duration_ps=cat("duration_ps"),
        stream=cat("stream"),
        prio=cat("prio"),
        deps=np.concatenate(deps),
        category=cat("category"),
        name=names,
        line=cat("line"),
        n_gpus=n_hosts,
        source=" + ".join(dict.fromkeys(g.source for g in graphs)),
    )
