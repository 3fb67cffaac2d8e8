"""From a Hydra config (``conf/config.yaml``) to an :class:`Experiment` and run options.

``experiment_from_config(cfg)`` accepts an OmegaConf ``DictConfig`` or a plain nested
dict; keys it does not give take the shipped defaults. Every bad value raises an
:class:`InputError` that names the config key (or the file and line) and what is valid,
before any JAX work starts.

Workloads (``workload.kind``):

* ``permutation``: every host sends ``workload.flow_bytes`` to another host, the
  destinations a random derangement drawn with ``sim.seed``; all start at ``start_us``;
* ``incast``: hosts 1..``workload.senders`` each send ``flow_bytes`` to host 0 at ``start_us``;
* ``cm``: the htsim connection matrix at ``workload.path``.

``workload.routes`` (optional, any kind) pins paths from a CSV (see ``workload/routes.py``).
Relative paths are resolved against the directory the program was started in (Hydra may
change the working directory; ``hydra.utils.to_absolute_path`` undoes that).

Congestion control: ``cc`` is one of ``none``, ``dcqcn``, ``dctcp``, ``hpcc``, ``timely``;
the parameter groups ``dcqcn.*``, ``dctcp.*``, ``hpcc.*`` and ``timely.*`` hold the fields
of the dataclasses of the same names in ``cc/config.py`` (key for key), and the RED/ECN
marking of the switches is ``switch.ecn_kmin_bytes``, ``switch.ecn_kmax_bytes`` and
``switch.ecn_pmax`` (``EcnConfig``). Every group is checked whichever ``cc`` is chosen.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import numbers
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from multiverse_jax.engine import BATCHING_MODES
from multiverse_jax.batch import CC_KINDS, Experiment
from multiverse_jax.conf import schema
from multiverse_jax.cc.config import DcqcnConfig, DctcpConfig, EcnConfig, HpccConfig, TimelyConfig
from multiverse_jax.errors import InputError
from multiverse_jax.topology import KINDS as TOPOLOGY_KINDS, build_topology
from multiverse_jax.topology.graph import Topology
from multiverse_jax.units import PS_PER_US
from multiverse_jax.workload.flows import FlowSet, make_flows
from multiverse_jax.workload.htsim_cm import load_cm
from multiverse_jax.workload.collectives import CommConfig
from multiverse_jax.workload.placement import STRATEGIES as PLACEMENTS, place, placement
from multiverse_jax.workload.routes import load_routes
from multiverse_jax.workload.tasks import TASK_FLOW, TaskGraph

CONFIG_PATH = Path(__file__).parent / "conf" / "config.yaml"


def _import_astra(path, gpus, comm, mp_group=None, dialect="auto"):
    from multiverse_jax.workload import astra

    return astra.to_tasks(astra.load_layers(path, dialect=dialect), gpus, comm_cfg=comm, mp_group=mp_group)


def _import_simai(path, gpus, comm, mp_group=None):
    return _import_astra(path, gpus, comm, mp_group, dialect="simai")


def _import_chakra(path, gpus, comm):
    from multiverse_jax.workload import chakra

    return chakra.load_et(path, comm_cfg=comm)


def _import_goal(path, gpus, comm):
    from multiverse_jax.workload import goal

    return goal.load_goal(path)


# workload.kind=astra reads the layer format as ASTRA-sim 1.0 does (auto-detecting SimAI
# files); simai forces SimAI's conventions (e.g. all-gather sizes are the gathered output).
_IMPORTERS = {"astra": _import_astra, "simai": _import_simai, "chakra": _import_chakra, "goal": _import_goal}
WORKLOAD_KINDS = ("permutation", "incast", "cm", "llm", "astra", "simai", "chakra", "goal")
HYBRID_MODES = ("packet",)  # flow-level fast-forward modes will join "packet" here
OPEN_GROUPS = ("workload.priorities",)  # groups whose keys are not fixed by the schema
DEFAULT_PRIORITIES = ("tp", "pp", "dp", "ep")  # workload.priorities keys every config has
TASK_KINDS = ("llm", "astra", "simai", "chakra", "goal")  # workloads that are task graphs
# Config group (and key prefix inside it) of each congestion-control dataclass: key
# ``{group}.{prefix}{field}`` holds ``field``.
CC_GROUPS = (
    ("dcqcn", "", DcqcnConfig),
    ("dctcp", "", DctcpConfig),
    ("hpcc", "", HpccConfig),
    ("timely", "", TimelyConfig),
    ("switch", "ecn_", EcnConfig),
)


@functools.cache
def _defaults() -> dict:
    return schema.defaults()


def _merge(defaults: dict, given: dict, prefix: str) -> dict:
    """``given`` over ``defaults``; unknown keys are errors that list the known ones."""
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        full = f"{prefix}{key}"
        if key not in defaults:
            known = ", ".join(f"{prefix}{k}" for k in defaults)
            raise InputError(f"unknown config key {full!r} (valid keys: {known})")
        if full in OPEN_GROUPS:  # any keys (checked by meaning later)
            out[key] = {**defaults[key], **value} if isinstance(value, dict) else value
        elif isinstance(defaults[key], dict):
            if not isinstance(value, dict):
                raise InputError(f"{full} must be a group of keys ({', '.join(defaults[key])}), got {value!r}")
            out[key] = _merge(defaults[key], value, f"{full}.")
        else:
            out[key] = value
    return out


def resolve_config(cfg) -> dict:
    """The full config as a plain dict: ``cfg`` (DictConfig or dict) over the shipped defaults."""
    try:
        if isinstance(cfg, DictConfig):  # every node but Hydra's own (its run-time values may be unset)
            given = {}
            for key in cfg:
                if key != "hydra":
                    node = cfg._get_node(key)
                    given[key] = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else cfg[key]
        else:
            given = copy.deepcopy(dict(cfg))
    except OmegaConfBaseException as exc:
        raise InputError(f"cannot resolve the config: {exc}") from None
    given.pop("hydra", None)
    return _merge(_defaults(), given, "")


def _get(c: dict, key: str):
    section, _, name = key.partition(".")
    return c[section][name] if name else c[section]


def _integer(c: dict, key: str, minimum: int | None = None) -> int:
    """The integer at ``key`` (integral floats such as 2e6 accepted), at least ``minimum``."""
    value = _get(c, key)
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value != int(value) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise InputError(f"{key} must be an integer{bound}, got {value!r}")
    return int(value)


def _number(c: dict, key: str, *, positive: bool) -> float:
    """The finite number at ``key``: > 0 when ``positive``, else >= 0."""
    value = _get(c, key)
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise InputError(f"{key} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _choice(c: dict, key: str, valid) -> str:
    value = _get(c, key)
    if value not in valid:
        raise InputError(f"{key} must be one of {', '.join(valid)}, got {value!r}")
    return value


def _params(c: dict, group: str, prefix: str, cls):
    """The ``cls`` dataclass built from keys ``group.{prefix}{field}``, checked.

    Numbers (NumPy scalars too) reach ``cls.check`` as plain ``int`` or ``float``, anything
    else (strings, booleans, lists) unchanged, so every bad value raises an InputError that
    names the key and quotes the value. Once valid, integer fields hold ``int`` (2e6 ->
    2000000) and the others ``float``.
    """

    def plain(value):
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            return int(value) if isinstance(value, numbers.Integral) else float(value)
        return value

    fields = dataclasses.fields(cls)
    given = {f.name: plain(c[group][prefix + f.name]) for f in fields}
    cls(**given).check(group)
    for field in fields:
        value = given[field.name]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            given[field.name] = int(value) if field.type in ("int", int) else float(value)
    return cls(**given)


def _path(c: dict, key: str) -> str | None:
    """The file named at ``key`` (absolute, relative to the original working directory), or None."""
    value = _get(c, key)
    if value is None or value == "":
        return None
    if not isinstance(value, (str, Path)):
        raise InputError(f"{key} must be a file path, got {value!r}")
    from hydra.utils import to_absolute_path

    return to_absolute_path(str(value))


def derangement(n: int, seed: int) -> np.ndarray:
    """(n,) a uniformly random permutation without fixed points (n >= 2), fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    while True:  # rejection sampling: about e draws on average
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            return perm


def _workload(c: dict, topology: Topology) -> FlowSet:
    kind = c["workload"]["kind"]
    n_hosts = topology.n_hosts
    if kind == "cm":
        path = _path(c, "workload.path")
        if path is None:
            raise InputError("workload.path must name an htsim connection matrix (.cm) when workload.kind is 'cm'")
        flows = load_cm(path)
        if flows.n_hosts > n_hosts:
            raise InputError(
                f"the connection matrix has Nodes {flows.n_hosts} but topology {topology.name} has only {n_hosts} hosts "
                f"(workload.path needs at most {n_hosts} nodes, or choose a larger topology)",
                source=path,
            )
        return flows
    size = _integer(c, "workload.flow_bytes", 1)
    start_ps = round(_number(c, "workload.start_us", positive=False) * PS_PER_US)
    if kind == "permutation":
        if n_hosts < 2:
            raise InputError(f"workload.kind=permutation needs at least 2 hosts; topology {topology.name} has {n_hosts}")
        src = np.arange(n_hosts)
        return make_flows(src, derangement(n_hosts, _integer(c, "sim.seed", 0)), size, start_ps)
    senders = _integer(c, "workload.senders", 1)
    if senders >= n_hosts:
        raise InputError(
            f"workload.senders must be < the host count {n_hosts} of topology {topology.name} "
            f"(valid: 1..{n_hosts - 1}), got {senders}"
        )
    return make_flows(np.arange(1, senders + 1), 0, size, start_ps)


@functools.lru_cache(maxsize=8)
def _generate_llm(model, parallel, n_gpus: int, comm: CommConfig) -> TaskGraph:
    """``llm.generate``, remembered: the points of a sweep that differ only in the network
    (topology, CC, LB, buffers...) share one iteration graph (a 128-GPU one takes 0.3-7 s
    to build). Graphs are never modified in place (placement and priorities copy)."""
    from multiverse_jax.workload import llm

    return llm.generate(model, parallel, n_gpus=n_gpus, comm_cfg=comm)


def _comm_config(c: dict) -> CommConfig:
    gpu = _get(c, "workload.gpu")
    return CommConfig(
        channels=_integer(c, "workload.channels", 1),
        gpus_per_server=_integer(c, "workload.gpus_per_server", 1),
        intra=str(gpu).split("-")[0] if isinstance(gpu, str) else None,
    )


def _task_graph(c: dict, topology: Topology) -> TaskGraph:
    """The workload's task graph (GPU ids), before placement."""
    kind = c["workload"]["kind"]
    comm = _comm_config(c)
    if kind == "llm":
        from multiverse_jax.workload import llm

        spec = _get(c, "workload.model")
        if isinstance(spec, dict):  # any model: {layers, hidden, heads, seq_len, vocab, ...}
            fields = {f.name for f in dataclasses.fields(llm.ModelSpec)} - {"name"}
            unknown = sorted(set(spec) - fields)
            if unknown:
                raise InputError(f"workload.model: unknown key(s) {', '.join(unknown)} (valid: {', '.join(sorted(fields))})")
            try:
                model = llm.ModelSpec(name="custom", **spec)
            except TypeError as exc:
                raise InputError(f"workload.model: {exc}") from None
        else:
            model = llm.get_model(_choice(c, "workload.model", tuple(llm.MODELS)))
        parallel = llm.ParallelConfig(
            tp=_integer(c, "workload.tp", 1),
            pp=_integer(c, "workload.pp", 1),
            dp=_integer(c, "workload.dp", 1),
            ep=_integer(c, "workload.ep", 1),
            microbatches=_integer(c, "workload.microbatches", 1),
            micro_batch_size=_integer(c, "workload.micro_batch_size", 1),
            zero1=_boolean(c, "workload.zero1"),
            gpu=_get(c, "workload.gpu"),
            layers_per_chunk=_integer(c, "workload.layers_per_chunk", 1),
        )
        if parallel.n_gpus > topology.n_hosts:
            raise InputError(
                f"workload.tp * workload.pp * workload.dp = {parallel.n_gpus} GPUs, but topology {topology.name} "
                f"has {topology.n_hosts} hosts (one GPU per host)"
            )
        return _generate_llm(model, parallel, parallel.n_gpus, comm)
    path = _path(c, "workload.path")
    if path is None:
        raise InputError(f"workload.path must name the workload file when workload.kind is {kind!r}")
    gpus = _integer(c, "workload.gpus", 1)
    if gpus > topology.n_hosts:
        raise InputError(f"workload.gpus ({gpus}) exceeds the {topology.n_hosts} hosts of topology {topology.name}")
    if kind in ("astra", "simai"):
        mp_group = None if _get(c, "workload.mp_group") is None else _integer(c, "workload.mp_group", 1)
        return _IMPORTERS[kind](path, gpus, comm, mp_group)
    return _IMPORTERS[kind](path, gpus, comm)


def _boolean(c: dict, key: str) -> bool:
    value = _get(c, key)
    if not isinstance(value, bool):
        raise InputError(f"{key} must be true or false, got {value!r}")
    return value


def _placed(c: dict, graph: TaskGraph, topology: Topology) -> TaskGraph:
    hosts = placement(
        _choice(c, "workload.placement", PLACEMENTS),
        graph.n_gpus,
        topology.n_hosts,
        gpus_per_server=_integer(c, "workload.gpus_per_server", 1),
        seed=_integer(c, "sim.seed", 0),
    )
    return place(graph, hosts, topology.n_hosts)


def _with_priorities(c: dict, graph: TaskGraph) -> TaskGraph:
    """``workload.priorities`` ({category: class}) applied to the graph's flow tasks.

    The default categories (tp, pp, dp, ep) may be absent from a workload (a sweep over
    workloads sets them once for all); any other key must name a category of its flows.
    """
    from multiverse_jax.batch import MAX_PRIORITIES

    given = _get(c, "workload.priorities")
    if not isinstance(given, dict):
        raise InputError(f"workload.priorities must map traffic categories to classes, e.g. {{dp: 1}}, got {given!r}")
    is_flow = graph.kind == TASK_FLOW
    categories = sorted(set(graph.category[is_flow]))
    prio = np.array(graph.prio, copy=True)
    for category, value in given.items():
        if category not in categories and category not in DEFAULT_PRIORITIES:
            raise InputError(
                f"workload.priorities: this workload has no {category!r} traffic "
                f"(its flows' categories: {', '.join(categories) or 'none'})"
            )
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value < MAX_PRIORITIES
        if not ok:
            raise InputError(f"workload.priorities.{category} must be a class 0..{MAX_PRIORITIES - 1} (0 highest), got {value!r}")
        prio[is_flow & (graph.category == category)] = int(value)
    return dataclasses.replace(graph, prio=prio)


def experiment_from_config(cfg) -> Experiment:
    """The validated experiment that ``cfg`` describes (its ECMP table already built)."""
    c = resolve_config(cfg)
    _choice(c, "workload.kind", WORKLOAD_KINDS)
    _choice(c, "hybrid.mode", HYBRID_MODES)
    cc = _choice(c, "cc", tuple(CC_KINDS))
    dcqcn, dctcp, hpcc, timely, ecn = (_params(c, group, prefix, cls) for group, prefix, cls in CC_GROUPS)
    topo_cfg = c["topology"]
    topology = build_topology(
        _choice(c, "topology.kind", TOPOLOGY_KINDS),
        k=topo_cfg["k"],
        leaves=topo_cfg["leaves"],
        hosts_per_leaf=topo_cfg["hosts_per_leaf"],
        oversubscription=topo_cfg["oversubscription"],
        servers=topo_cfg["servers"],
        gpus_per_server=topo_cfg["gpus_per_server"],
        servers_per_leaf=topo_cfg["servers_per_leaf"],
        spines=topo_cfg["spines"],
        path=_path(c, "topology.path") if topo_cfg["kind"] == "custom" else None,
        rate_gbps=c["link"]["rate_gbps"],
        delay_us=c["link"]["delay_us"],
    )
    tasks = None
    if c["workload"]["kind"] in TASK_KINDS:
        tasks = _with_priorities(c, _placed(c, _task_graph(c, topology), topology))
        flows = tasks.flow_set()
    else:
        flows = _workload(c, topology)
    routes_path = _path(c, "workload.routes")
    experiment = Experiment(
        topology=topology,
        flows=flows,
        routes=load_routes(routes_path, topology, flows) if routes_path is not None else None,
        payload_bytes=_integer(c, "packet.payload_bytes"),
        header_bytes=_integer(c, "packet.header_bytes"),
        ack_bytes=_integer(c, "packet.ack_bytes"),
        buffer_bytes=_integer(c, "switch.buffer_bytes"),
        pfc_xoff_bytes=_integer(c, "switch.pfc_xoff_bytes"),
        pfc_xon_bytes=_integer(c, "switch.pfc_xon_bytes"),
        tasks=tasks,
        compute_slowdown=_number(c, "workload.compute_slowdown", positive=True),
        cc=cc,
        dcqcn=dcqcn,
        dctcp=dctcp,
        hpcc=hpcc,
        timely=timely,
        ecn=ecn,
        lb=c["lb"],
        flowlet_gap_us=_number(c, "switch.flowlet_gap_us", positive=True),
        seed=_integer(c, "sim.seed", 0),
        max_time_us=_number(c, "sim.max_time_us", positive=True),
        sample_interval_us=_number(c, "sim.sample_interval_us", positive=False),
    )
    return dataclasses.replace(experiment, ecmp=experiment.validate())


def run_options(cfg) -> dict:
    """Keyword arguments of ``simulate`` that the config sets (``sim.*``)."""
    c = resolve_config(cfg)
    options = {
        "slots_per_host": _integer(c, "sim.packets_per_host", 1),
        "steps_per_call": _integer(c, "sim.steps_per_call", 1),
        "batching": _choice(c, "sim.batching", BATCHING_MODES),
    }
    devices = c["sim"]["devices"]
    if devices != "all":
        devices = _integer(c, "sim.devices", 1)
    if devices != 1:  # shard the experiment axis over local devices
        options["devices"] = devices
    return options
