"""The config schema: structured configs (dataclasses) behind the Hydra config tree.

Hydra composes ``conf/config.yaml``, whose defaults list starts with this schema and then
picks one option of each group::

    topology  fattree | leafspine | rail | custom          (conf/topology/*.yaml)
    workload  permutation | incast | cm | llm | astra | simai | chakra | goal
    cc        none | dcqcn | dctcp | hpcc | timely          (sets the top-level key ``cc``)
    lb        ecmp | spray | flowlet                         (sets the top-level key ``lb``)
    switch    default | shallow                              (buffers, PFC, ECN)
    sim       default                                        (seed, packet slots, steps, time series)
    hybrid    packet                                         (granularity; see HybridConfig)
    output    default | minimal                              (plots)

Every key and its type is declared here, so a typo (``switch.bufer_bytes=1``) or a wrong
type (``topology.k=four``) is an error from Hydra naming the key, before anything runs.
Values are then checked for meaning (ranges, files, sizes that fit the topology) by
``multiverse_jax.config.experiment_from_config``. The defaults below are the defaults of
the program; the group options only change what differs from them.

The congestion-control groups ``dcqcn``, ``dctcp``, ``hpcc`` and ``timely`` are generated
from the dataclasses in ``cc/config.py`` (one source for names, types, defaults and their
sources); every group is present whichever ``cc`` is chosen, so a sweep over ``cc`` can
also vary, say, ``dcqcn.g``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore

from multiverse_jax.cc.config import DcqcnConfig, DctcpConfig, HpccConfig, TimelyConfig

SCHEMA_NAME = "multiverse_jax_schema"  # the schema's name in Hydra's ConfigStore


@dataclass
class TopologyConfig:
    kind: str = "fattree"  # fattree | leafspine | rail | custom
    k: int = 4  # fattree: even arity; k^3/4 hosts
    path: Optional[str] = None  # custom: topology file
    leaves: int = 4  # leafspine
    hosts_per_leaf: int = 4  # leafspine
    oversubscription: float = 1.0  # leafspine: hosts_per_leaf / spines
    servers: int = 4  # rail
    gpus_per_server: int = 4  # rail
    servers_per_leaf: int = 2  # rail
    spines: int = 2  # rail


@dataclass
class LinkConfig:
    rate_gbps: float = 100.0  # every link (custom topologies: links that give none)
    delay_us: float = 1.0  # propagation delay of every link


@dataclass
class PacketConfig:
    payload_bytes: int = 4096
    header_bytes: int = 64
    ack_bytes: int = 64


@dataclass
class SwitchConfig:
    buffer_bytes: int = 2_000_000  # per egress port
    pfc_xoff_bytes: int = 200_000  # per ingress: pause the upstream port above this
    pfc_xon_bytes: int = 100_000  # per ingress: resume it below this
    flowlet_gap_us: float = 50.0  # lb=flowlet: a flow idle this long starts a new flowlet (new path)
    ecn_kmin_bytes: int = 100_000  # RED/ECN: no marking below this egress queue (ns-3 KMIN at 25 Gb/s)
    ecn_kmax_bytes: int = 400_000  # RED/ECN: mark every packet above this (DCTCP step: Kmin = Kmax = K)
    ecn_pmax: float = 0.2  # RED/ECN: marking probability at Kmax, 0..1 (ns-3 PMAX)


@dataclass
class WorkloadConfig:
    kind: str = "permutation"  # permutation | incast | cm | llm | astra | simai | chakra | goal
    path: Optional[str] = None  # cm: .cm; astra/simai: layer file; chakra: .et prefix; goal: .goal
    routes: Optional[str] = None  # optional CSV of pinned routes (id,kind,path)
    flow_bytes: int = 2_000_000  # permutation / incast: bytes per flow
    senders: int = 8  # incast: hosts 1..senders send to host 0
    start_us: float = 0.0  # permutation / incast: start time of every flow
    # Training iterations (llm and the importers): GPUs are hosts, placed server by server.
    model: Any = "gpt3-13b"  # llm: a name (gpt3-13b, gpt3-175b, llama-7b, llama-65b, mixtral-8x7b) or a dict
    tp: int = 4  # llm: tensor parallel (tp * pp * dp GPUs)
    pp: int = 2  # llm: pipeline stages (1F1B)
    dp: int = 2  # llm: data parallel
    ep: int = 1  # llm: expert parallel (MoE models; divides dp)
    microbatches: int = 4  # llm: micro-batches per iteration (per pipeline)
    micro_batch_size: int = 1  # llm: sequences per micro-batch
    zero1: bool = False  # llm: shard optimizer states over DP (ZeRO-1)
    layers_per_chunk: int = 1  # llm: layers per compute task (coarser graphs for big models)
    gpu: str = "A100-80GB"  # llm: A100-80GB | H100-SXM
    gpus: int = 16  # astra / simai / chakra / goal: GPUs to simulate (<= hosts)
    gpus_per_server: int = 1  # GPUs sharing a server (NVLink): traffic between them skips the network
    # astra / simai: model-parallel group size. None: as ASTRA-sim derives it -- the file's
    # model_parallel_NPU_group; else HYBRID_DATA_MODEL / HYBRID_CUSTOMIZED: gpus_per_server
    # (MP on ASTRA-sim's first network dimension, one server); HYBRID_MODEL_DATA:
    # gpus / gpus_per_server (DP on that dimension, MP strided across servers).
    mp_group: Optional[int] = None
    channels: int = 1  # NCCL channels (parallel rings per collective)
    placement: str = "packed"  # packed | random | rail: servers onto host blocks
    compute_slowdown: float = 1.0  # compute that starts while its GPU communicates takes this x longer
    # Task workloads: priority class (0 highest .. 7) of the flows of each traffic category,
    # e.g. workload.priorities.dp=1 puts gradient sync behind TP/PP traffic. Other categories
    # of imported workloads (e.g. Chakra's "coll"): +workload.priorities.coll=1.
    priorities: Dict[str, int] = field(default_factory=lambda: {"tp": 0, "pp": 0, "dp": 0, "ep": 0})


@dataclass
class SimConfig:
    seed: int = 0  # permutation derangement and ECMP hashes
    packets_per_host: int = 256  # packet slots per host (in-flight capacity)
    steps_per_call: int = 64  # lookahead windows per compiled call
    batching: str = "auto"  # auto | vmap | map (auto: map on a CPU, vmap on a GPU)
    devices: Any = 1  # local devices the experiment axis is sharded over: a count or "all"
    max_time_us: float = 1_000_000.0  # stop (and fail) an experiment that runs past this
    sample_interval_us: float = 5.0  # time-series period in µs; 0 = off


@dataclass
class HybridConfig:
    # Granularity. "packet": every packet is simulated (the only mode so far; flow-level
    # fast-forward of steady phases, DESIGN.md "hybrid granularity", will add modes here).
    mode: str = "packet"


@dataclass
class OutputConfig:
    plots: bool = True  # write fct_cdf.png (and timeseries.png, timeline.png)


def _mutable(cls, name: str):
    """A mutable copy of one of the frozen cc dataclasses (OmegaConf makes frozen ones read-only)."""
    fields = [(f.name, f.type, field(default=f.default)) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(name, fields)


DcqcnSchema = _mutable(DcqcnConfig, "DcqcnSchema")
DctcpSchema = _mutable(DctcpConfig, "DctcpSchema")
HpccSchema = _mutable(HpccConfig, "HpccSchema")
TimelySchema = _mutable(TimelyConfig, "TimelySchema")


@dataclass
class Config:
    """The whole config of one design point."""

    topology: TopologyConfig = field(default_factory=TopologyConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    packet: PacketConfig = field(default_factory=PacketConfig)
    switch: SwitchConfig = field(default_factory=SwitchConfig)
    cc: str = "none"  # congestion control: none | dcqcn | dctcp | hpcc | timely
    lb: str = "ecmp"  # load balancing: ecmp (per flow) | spray (per packet) | flowlet
    dcqcn: DcqcnSchema = field(default_factory=DcqcnSchema)
    dctcp: DctcpSchema = field(default_factory=DctcpSchema)
    hpcc: HpccSchema = field(default_factory=HpccSchema)
    timely: TimelySchema = field(default_factory=TimelySchema)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    hybrid: HybridConfig = field(default_factory=HybridConfig)
    output: OutputConfig = field(default_factory=OutputConfig)


def defaults() -> dict:
    """The default config as a plain nested dict."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(Config))


ConfigStore.instance().store(name=SCHEMA_NAME, node=Config)


def sweep_name(overrides) -> str:
    """A directory name for a sweep, from its command-line overrides (order does not matter).

    Readable where it can be (``cc=none,dcqcn__lb=ecmp,spray``), cut at 80 characters, and
    always followed by a hash of the whole list, so the same sweep maps to the same
    directory (and resumes there) while different sweeps never share one.
    """
    import hashlib
    import re

    parts = sorted(str(o) for o in (overrides or []))
    text = " ".join(parts)
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9=,.+_-]+", "_", "__".join(parts))[:80] or "defaults"
    return f"{slug}-{digest}"


def _register_resolver() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("multiverse_jax.sweep_name"):
        OmegaConf.register_new_resolver("multiverse_jax.sweep_name", sweep_name)


_register_resolver()
