"""From a Hydra config (``conf/config.yaml``) to an :class:`Experiment` and run options.

The keys, their types, defaults and range checks are the dataclasses of ``conf/schema.py``;
this module only turns a composed config into them (``load_config``) and builds what they
describe: the topology, the traffic (flows or a placed task graph) and pinned routes.

``experiment_from_config(cfg)`` accepts an OmegaConf ``DictConfig``, a plain nested dict
(keys it does not give take the schema's defaults) or a ``schema.Config``. Every bad value
raises an :class:`InputError` that names the config key (or the file and line) and what
is valid, before any JAX work starts.

Workloads (``workload.kind``):

* ``permutation``: every host sends ``workload.flow_bytes`` to another host, the
  destinations a random derangement drawn with ``sim.seed``; all start at ``start_us``;
* ``incast``: hosts 1..``workload.senders`` each send ``flow_bytes`` to host 0 at ``start_us``;
* ``cm``: the htsim connection matrix at ``workload.path`` (its failure lines fail
  fat-tree cables, with those of ``topology.links_down``);
* ``llm``, ``astra``, ``simai``, ``chakra``, ``goal``: a training iteration (a task graph),
  placed on the hosts by ``workload.placement``.

``workload.routes`` (optional, any kind) pins paths from a CSV (see ``workload/routes.py``).
Relative paths are resolved against the directory the program was started in (Hydra may
change the working directory; ``_original_cwd`` undoes that).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from enum import Enum
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from multiverse_jax.conf.schema import TASK_WORKLOADS, Config, TopologyKind, WorkloadKind
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.topology import build_topology
from multiverse_jax.topology.failures import DOWN_KEY, htsim_failed_cables, with_link_changes
from multiverse_jax.topology.graph import Topology
from multiverse_jax.units import PS_PER_US
from multiverse_jax.workload.collectives import CommConfig
from multiverse_jax.workload.flows import FlowSet, make_flows
from multiverse_jax.workload.htsim_cm import read_cm
from multiverse_jax.workload.placement import place, placement
from multiverse_jax.workload.routes import load_routes
from multiverse_jax.workload.tasks import TASK_FLOW, TaskGraph

CONFIG_PATH = Path(__file__).parent / "conf" / "config.yaml"
DEFAULT_PRIORITIES = ("tp", "pp", "dp", "ep")  # workload.priorities keys every config has


# --- The typed config ----------------------------------------------------------------------


def _node_at(root, dotted: str):
    """The value at ``dotted`` in a nested dict or config (None where absent)."""
    node = root
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, IndexError, OmegaConfBaseException):
            return None
    return node


def _schema_type(dotted: str):
    """The type the schema declares for ``dotted`` (a dataclass for a group), or None."""
    declared = Config
    for part in dotted.split(".") if dotted else ():
        if not dataclasses.is_dataclass(declared):
            return None
        declared = typing.get_type_hints(declared).get(part)
    return declared


_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _input_error(exc: OmegaConfBaseException, given) -> InputError:
    """OmegaConf's type or key error as an InputError that names the key and what is valid."""
    key = str(getattr(exc, "full_key", "") or "")
    if not key:  # a merge error names no key: a group given a plain value
        key = next((k for k, v in given.items() if dataclasses.is_dataclass(_schema_type(k)) and not hasattr(v, "keys")), "")
    parent, _, _ = key.rpartition(".")
    declared, value = _schema_type(key), _node_at(given, key)
    if isinstance(exc, ConfigKeyError) and dataclasses.is_dataclass(_schema_type(parent)):
        valid = ", ".join(f"{parent}.{f.name}" if parent else f.name for f in dataclasses.fields(_schema_type(parent)))
        return InputError(f"unknown config key {key!r} (valid keys: {valid})")
    if isinstance(declared, type) and issubclass(declared, Enum):
        return InputError(f"{key} must be one of {', '.join(m.value for m in declared)}, got {value!r}")
    if dataclasses.is_dataclass(declared):
        keys = ", ".join(f.name for f in dataclasses.fields(declared))
        return InputError(f"{key} must be a group of keys ({keys}), got {value!r}")
    if declared in _TYPE_NAMES or typing.get_origin(declared) is typing.Union:
        kinds = [_TYPE_NAMES.get(t, "null") for t in typing.get_args(declared) or (declared,)]
        return InputError(f"{key} must be {' or '.join(kinds)}, got {value!r}")
    reason = str(exc).split("\n")[0]
    return InputError(f"{key}: {reason}" if key else f"cannot resolve the config: {reason}")


def _plain(value):
    """``value`` as plain Python, recursively: NumPy scalars as numbers, config groups
    (dataclasses) as dicts in field order, choices (enums) as their names, sequences as
    lists. OmegaConf takes only Python types (a choice by its name); a loaded config
    comes out as ``OmegaConf.to_container`` of its structured node with ``enum_to_str``
    gives it, without building that node."""
    if dataclasses.is_dataclass(value):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _container(cfg: DictConfig, key: str):
    """``cfg[key]`` as plain Python (a group as a dict: keys Hydra added with ``+`` are kept,
    so that the schema reports them)."""
    node = cfg._get_node(key)
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else cfg[key]


def load_config(cfg) -> Config:
    """``cfg`` (DictConfig, nested dict or Config) as the typed, range-checked ``schema.Config``."""
    if isinstance(cfg, Config):
        return cfg
    given = {}
    try:
        if isinstance(cfg, DictConfig):  # every node but Hydra's own (its run-time values may be unset)
            cfg = {key: _container(cfg, key) for key in cfg if key != "hydra"}
        given = _plain({key: value for key, value in dict(cfg).items() if key != "hydra"})
        merged = OmegaConf.merge(_schema(), given)  # a new node: the schema's is not changed
        return OmegaConf.to_object(merged)  # runs each group's checks (Group.__post_init__)
    except OmegaConfBaseException as exc:
        raise _input_error(exc, given) from None


@functools.cache
def _schema() -> DictConfig:
    """``Config`` as an OmegaConf node, built once: building it takes 12 ms, more than
    half of a ``load_config`` (a sweep loads thousands of points)."""
    return OmegaConf.structured(Config)


def resolve_config(cfg) -> dict:
    """The full config as a plain dict (choices as their names), for tables and summaries."""
    return _plain(load_config(cfg))


def run_options(cfg) -> dict:
    """Keyword arguments of ``simulate`` that the config sets (``sim.*``)."""
    sim = load_config(cfg).sim
    options = {"slots_per_host": sim.packets_per_host, "steps_per_call": sim.steps_per_call, "batching": str(sim.batching)}
    if sim.devices != 1:  # shard the experiment axis over local devices
        options["devices"] = sim.devices
    return options


def compile_cache_setting(cfg) -> str:
    """``sim.compile_cache`` for ``compile_cache.use_compile_cache``: ``auto``, ``none``, or
    the folder, a relative one from the directory the command was started in."""
    value = load_config(cfg).sim.compile_cache.strip()
    return value if value in ("auto", "none") else _path(Path(value).expanduser())


# --- What the config describes ---------------------------------------------------------------


def _path(value) -> str | None:
    """The file named at ``key`` (absolute, relative to the original working directory), or None."""
    if value is None or value == "":
        return None
    path = Path(str(value))
    return str(path if path.is_absolute() else Path(_original_cwd()) / path)


def _original_cwd() -> str:
    """The directory relative paths are read from: the one the command was started in.

    A Hydra job runs in its own output directory (``hydra.job.chdir``); then that is
    Hydra's ``runtime.cwd``. Anywhere else it is the current directory, even where Hydra's
    configuration is still set from a run that has ended in this process (a sweep run from
    Python: its ``runtime.cwd`` is that run's, not the caller's)."""
    import os

    from hydra.core.hydra_config import HydraConfig

    cwd = os.getcwd()
    if HydraConfig.initialized():
        runtime = HydraConfig.get().runtime
        output_dir = OmegaConf.select(runtime, "output_dir", default=None, throw_on_resolution_failure=False)
        if output_dir and os.path.realpath(output_dir) == os.path.realpath(cwd):
            return str(runtime.cwd)
    return cwd


def derangement(n: int, seed: int) -> np.ndarray:
    """(n,) a uniformly random permutation without fixed points (n >= 2), fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    while True:  # rejection sampling: about e draws on average
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            return perm


def _topology(c: Config) -> Topology:
    """The configured fabric, with its cables failed or degraded from the start."""
    t = c.topology
    topology = build_topology(
        str(t.kind),
        k=t.k,
        leaves=t.leaves,
        hosts_per_leaf=t.hosts_per_leaf,
        oversubscription=t.oversubscription,
        servers=t.servers,
        gpus_per_server=t.gpus_per_server,
        servers_per_leaf=t.servers_per_leaf,
        spines=t.spines,
        path=_path(t.path),
        rate_gbps=c.link.rate_gbps,
        delay_us=c.link.delay_us,
    )
    return with_link_changes(topology, t.links_down, t.link_rates_gbps)


def _connection_matrix(c: Config, topology: Topology) -> tuple[FlowSet, Topology]:
    """The flows of the htsim connection matrix, and ``topology`` with its failure lines'
    cables down too (htsim's fat-tree only)."""
    path = _path(c.workload.path)
    if path is None:
        raise InputError("workload.path must name an htsim connection matrix (.cm) when workload.kind is 'cm'")
    cm = read_cm(path)
    flows = cm.flows
    if flows.n_hosts > topology.n_hosts:
        raise InputError(
            f"the connection matrix has Nodes {flows.n_hosts} but topology {topology.name} has only "
            f"{topology.n_hosts} hosts (workload.path needs at most {topology.n_hosts} nodes, or choose a larger topology)",
            source=path,
        )
    if cm.failures and c.topology.kind != TopologyKind.fattree:
        raise InputError(
            f"failure lines name htsim fat-tree links: they need topology.kind=fattree, not {str(c.topology.kind)!r} "
            f"(or fail links with {DOWN_KEY})",
            source=path,
            line=cm.failures[0].line,
        )
    return flows, with_link_changes(topology, htsim_failed_cables(topology, c.topology.k, cm.failures, path))


def _flows(c: Config, topology: Topology) -> FlowSet:
    """The flows of a generated flow workload (permutation, incast)."""
    w, n_hosts = c.workload, topology.n_hosts
    start_ps = round(w.start_us * PS_PER_US)
    if w.kind == WorkloadKind.permutation:
        if n_hosts < 2:
            raise InputError(f"workload.kind=permutation needs at least 2 hosts; topology {topology.name} has {n_hosts}")
        return make_flows(np.arange(n_hosts), derangement(n_hosts, c.sim.seed), w.flow_bytes, start_ps)
    if w.senders >= n_hosts:
        raise InputError(
            f"workload.senders must be < the host count {n_hosts} of topology {topology.name} "
            f"(valid: 1..{n_hosts - 1}), got {w.senders}"
        )
    return make_flows(np.arange(1, w.senders + 1), 0, w.flow_bytes, start_ps)


@functools.lru_cache(maxsize=8)
def _generate_llm(model, parallel, n_gpus: int, comm: CommConfig) -> TaskGraph:
    """``llm.generate``, remembered: the points of a sweep that differ only in the network
    (topology, CC, LB, buffers...) share one iteration graph (a 128-GPU one takes 0.3-7 s
    to build). Graphs are never modified in place (placement and priorities copy)."""
    from multiverse_jax.workload import llm

    return llm.generate(model, parallel, n_gpus=n_gpus, comm_cfg=comm)


def _comm_config(c: Config) -> CommConfig:
    w = c.workload
    return CommConfig(channels=w.channels, gpus_per_server=w.gpus_per_server, intra=str(w.gpu).split("-")[0])


def _model(spec):
    """``workload.model``: a known model's name, or a dict of ModelSpec fields."""
    from multiverse_jax.workload import llm

    if not isinstance(spec, dict):
        if spec not in llm.MODELS:
            raise InputError(f"workload.model must be one of {', '.join(llm.MODELS)}, got {spec!r}")
        return llm.get_model(spec)
    fields = {f.name for f in dataclasses.fields(llm.ModelSpec)} - {"name"}
    unknown = sorted(set(spec) - fields)
    if unknown:
        raise InputError(f"workload.model: unknown key(s) {', '.join(unknown)} (valid: {', '.join(sorted(fields))})")
    try:
        return llm.ModelSpec(name="custom", **spec)
    except TypeError as exc:
        raise InputError(f"workload.model: {exc}") from None


def _llm_graph(c: Config, topology: Topology) -> TaskGraph:
    from multiverse_jax.workload import llm

    w = c.workload
    parallel = llm.ParallelConfig(
        tp=w.tp,
        pp=w.pp,
        dp=w.dp,
        ep=w.ep,
        microbatches=w.microbatches,
        micro_batch_size=w.micro_batch_size,
        zero1=w.zero1,
        gpu=w.gpu,
        layers_per_chunk=w.layers_per_chunk,
    )
    model = _model(w.model)
    if parallel.n_gpus > topology.n_hosts:
        raise InputError(
            f"workload.tp * workload.pp * workload.dp = {parallel.n_gpus} GPUs, but topology {topology.name} "
            f"has {topology.n_hosts} hosts (one GPU per host)"
        )
    return _generate_llm(model, parallel, parallel.n_gpus, _comm_config(c))


def _imported_graph(c: Config, topology: Topology) -> TaskGraph:
    """The task graph of an imported workload file (astra, simai, chakra, goal)."""
    w = c.workload
    path = _path(w.path)
    if path is None:
        raise InputError(f"workload.path must name the workload file when workload.kind is {str(w.kind)!r}")
    if w.gpus > topology.n_hosts:
        raise InputError(f"workload.gpus ({w.gpus}) exceeds the {topology.n_hosts} hosts of topology {topology.name}")
    if w.kind in (WorkloadKind.astra, WorkloadKind.simai):
        from multiverse_jax.workload import astra

        # astra reads the layer format as ASTRA-sim 1.0 does (auto-detecting SimAI files);
        # simai forces SimAI's conventions (e.g. all-gather sizes are the gathered output).
        dialect = "simai" if w.kind == WorkloadKind.simai else "auto"
        layers = astra.load_layers(path, dialect=dialect)
        return astra.to_tasks(layers, w.gpus, comm_cfg=_comm_config(c), mp_group=w.mp_group)
    if w.kind == WorkloadKind.chakra:
        from multiverse_jax.workload import chakra

        return chakra.load_et(path, comm_cfg=_comm_config(c))
    from multiverse_jax.workload import goal

    return goal.load_goal(path)


def _placed(c: Config, graph: TaskGraph, topology: Topology) -> TaskGraph:
    w = c.workload
    hosts = placement(
        str(w.placement), graph.n_gpus, topology.n_hosts, gpus_per_server=w.gpus_per_server, seed=c.sim.seed
    )
    return place(graph, hosts, topology.n_hosts)


def _with_priorities(c: Config, graph: TaskGraph) -> TaskGraph:
    """``workload.priorities`` ({category: class}) applied to the graph's flow tasks.

    The default categories (tp, pp, dp, ep) may be absent from a workload (a sweep over
    workloads sets them once for all); any other key must name a category of its flows.
    """
    is_flow = graph.kind == TASK_FLOW
    categories = sorted(set(graph.category[is_flow]))
    prio = np.array(graph.prio, copy=True)
    for category, value in c.workload.priorities.items():
        if category not in categories and category not in DEFAULT_PRIORITIES:
            raise InputError(
                f"workload.priorities: this workload has no {category!r} traffic "
                f"(its flows' categories: {', '.join(categories) or 'none'})"
            )
        prio[is_flow & (graph.category == category)] = int(value)
    return dataclasses.replace(graph, prio=prio)


def _task_graph(c: Config, topology: Topology) -> TaskGraph:
    """The workload's task graph, placed on the hosts, with its flows' priorities."""
    if c.workload.kind == WorkloadKind.llm:
        graph = _llm_graph(c, topology)
    else:
        graph = _imported_graph(c, topology)
    return _with_priorities(c, _placed(c, graph, topology))


def experiment_from_config(cfg) -> Experiment:
    """The validated experiment that ``cfg`` describes."""
    c = load_config(cfg)
    topology = _topology(c)
    tasks = _task_graph(c, topology) if c.workload.kind in TASK_WORKLOADS else None
    if c.workload.kind == WorkloadKind.cm:
        flows, topology = _connection_matrix(c, topology)
    else:
        flows = tasks.flow_set() if tasks is not None else _flows(c, topology)
    routes_path = _path(c.workload.routes)
    experiment = Experiment(
        topology=topology,
        flows=flows,
        routes=load_routes(routes_path, topology, flows) if routes_path is not None else None,
        tasks=tasks,
        packet=c.packet,
        switch=c.switch,
        cc=c.cc,
        lb=c.lb,
        dcqcn=c.dcqcn,
        dctcp=c.dctcp,
        hpcc=c.hpcc,
        timely=c.timely,
        workload=c.workload,
        sim=c.sim,
        hybrid=c.hybrid,
        link_events=OmegaConf.to_container(v) if OmegaConf.is_config(v := c.topology.link_events) else v,
    )
    experiment.validate()
    return experiment
