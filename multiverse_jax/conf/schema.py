"""The config schema: the one place where every key, its type, default and meaning are written.

Hydra composes ``conf/config.yaml``, whose defaults list starts with this schema and then
picks one option of each group::

    topology  fattree | leafspine | rail | custom          (conf/topology/*.yaml)
    workload  permutation | incast | cm | llm | astra | simai | chakra | goal
    cc        none | dcqcn | dctcp | hpcc | timely          (sets the top-level key ``cc``)
    lb        ecmp | spray | flowlet                         (sets the top-level key ``lb``)
    switch    default | shallow                              (buffers, PFC, ECN)
    sim       default                                        (seed, packet slots, steps, time series)
    hybrid    default                                        (steady-state detection; see HybridConfig)
    output    default | minimal                              (plots)

Types are checked by OmegaConf as the config is composed: a typo (``switch.bufer_bytes=1``),
a wrong type (``topology.k=four``) or a choice that is not one of its Enum's members
(``cc=reno``, ``sim.batching=fast``) is an error naming the key. Ranges are checked next
to the fields, in each group's ``check`` (run by ``Group.__post_init__``), when the composed config becomes these
dataclasses (``multiverse_jax.config.load_config``): the error is an ``InputError`` that
names the key and says what is valid. The Python API uses the same dataclasses: an
``Experiment`` holds them (``Experiment(topo, flows, switch=SwitchConfig(buffer_bytes=...))``),
so there is no second set of defaults.

Adding a key: add the field here (type, default, comment; a range check in the group's
``check`` if it has one; a choice is an Enum), then read it where it is used (``exp.switch.my_key``).
"""

from __future__ import annotations

import enum
import functools
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

from multiverse_jax.errors import InputError

SCHEMA_NAME = "multiverse_jax_schema"  # the schema's name in Hydra's ConfigStore
# Windows per compiled call by default (``sim.steps_per_call``). A call costs 4-7 ms beyond
# its windows on the htsim sweep's point on one core, about two windows (between calls the
# host reads the done flags and drains the time series; a call enters and leaves the
# per-host live prefix, copying the pool out and back); 256 windows a call ran that sweep in
# 0.94 of 64's time (stop 57, ``benchmarks/HISTORY.md``). A time-series ring holds a call's
# samples: 256 a flow and a port.
STEPS_PER_CALL = 256
MAX_PAYLOAD_BYTES = 1 << 20  # 1 MiB: (payload + header) * 8e12 bits*ps must fit in int64
MAX_HEADER_BYTES = 1 << 16
MAX_PRIORITIES = 8  # data classes per port, as 802.1p's eight traffic classes


def check_number(key: str, value, *, low=None, high=None, low_open=False, integer=False) -> None:
    """``key`` must hold a finite number in [low, high] ((low, high] if ``low_open``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer:
        ok = value == int(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        lo = "" if low is None else (f"> {low}" if low_open else f">= {low}")
        hi = "" if high is None else f"<= {high}"
        bounds = " and ".join(b for b in (lo, hi) if b)
        kind = "an integer" if integer else "a finite number"
        raise InputError(f"{key} must be {kind}{' ' + bounds if bounds else ''}, got {value!r}")


def check_not_above(low_key: str, low, high_key: str, high) -> None:
    """``low_key`` must not exceed ``high_key`` (two thresholds of one group)."""
    if low > high:
        raise InputError(f"{low_key} ({low}) must not exceed {high_key} ({high})")


@functools.cache
def _choice_fields(cls) -> tuple[tuple[str, type[enum.Enum]], ...]:
    """The fields of config dataclass ``cls`` whose type is an Enum (a choice)."""
    hints = typing.get_type_hints(cls)
    return tuple((name, kind) for name, kind in hints.items() if isinstance(kind, type) and issubclass(kind, enum.Enum))


class Group:
    """A config group: ``group_name`` is its name in the config (``""`` for the top level). After
    construction every choice becomes its Enum member (a Python string too: OmegaConf checks
    the command line's) and ``check`` tests the ranges; both name the key and what is valid."""

    group_name = ""

    def __post_init__(self):
        prefix = f"{self.group_name}." if self.group_name else ""
        for name, kind in _choice_fields(type(self)):
            setattr(self, name, choice(kind, prefix + name, getattr(self, name)))
        self.check()

    def check(self) -> None:
        """Range checks of the group's fields (none by default)."""


# --- Choices -------------------------------------------------------------------------------


def choice(kind: type[enum.Enum], key: str, value):
    """``value`` as a member of the Enum ``kind`` (config key ``key``); an InputError naming
    the key and the valid values otherwise (the Python API's strings: OmegaConf checks the CLI's)."""
    try:
        return kind(value)
    except ValueError:
        raise InputError(f"{key} must be one of {', '.join(m.value for m in kind)}, got {value!r}") from None


class TopologyKind(enum.StrEnum):
    fattree = "fattree"  # k-ary fat-tree (htsim's numbering)
    leafspine = "leafspine"  # two-tier Clos
    rail = "rail"  # rail-optimised: GPU i of every server on rail i
    custom = "custom"  # a topology file (topology.path)


class WorkloadKind(enum.StrEnum):
    permutation = "permutation"  # every host sends to another (a random derangement)
    incast = "incast"  # hosts 1..senders send to host 0
    cm = "cm"  # an htsim connection matrix
    llm = "llm"  # a generated training iteration (model, TP/PP/DP/EP)
    astra = "astra"  # ASTRA-sim layer file
    simai = "simai"  # SimAI / aicb layer file
    chakra = "chakra"  # Chakra execution traces
    goal = "goal"  # GOAL schedule (ATLAHS / LogGOPSim)


TASK_WORKLOADS = (WorkloadKind.llm, WorkloadKind.astra, WorkloadKind.simai, WorkloadKind.chakra, WorkloadKind.goal)


class CcKind(enum.StrEnum):
    none = "none"  # line rate, held back only by PFC
    dcqcn = "dcqcn"  # rate-based, ECN -> CNP (Zhu et al. 2015)
    dctcp = "dctcp"  # window-based, ECN echo (Alizadeh et al. 2010)
    hpcc = "hpcc"  # window + pacing from in-band telemetry (Li et al. 2019)
    timely = "timely"  # rate-based, RTT gradient (Mittal et al. 2015)


class LbKind(enum.StrEnum):
    ecmp = "ecmp"  # per flow: every packet of a flow takes the same path
    spray = "spray"  # per packet: each packet hashes its own path
    flowlet = "flowlet"  # a new path when the flow was idle longer than switch.flowlet_gap_us


class Batching(enum.StrEnum):
    auto = "auto"  # map on a CPU, vmap on an accelerator
    vmap = "vmap"  # experiments as wide arrays, in lockstep (GPUs)
    map = "map"  # a loop over experiments inside the compiled program (CPUs)


class ByBackend(enum.StrEnum):
    """A step choice that cuts a window's kernels (sim.long_runs, sim.fifo_pass, sim.nic_pass)."""

    auto = "auto"  # on an accelerator, off on a CPU
    always = "always"
    never = "never"


class LivePrefix(enum.StrEnum):
    auto = "auto"  # per_host on a CPU, columns on an accelerator (pools of at least pool.PREFIX_MIN_SLOTS slots)
    per_host = "per_host"  # each host's own columns in use: half the pool's places, a quarter and an eighth inside that
    columns = "columns"  # the first half of every host's columns, one level
    none = "none"  # every window on the whole pool


class Placement(enum.StrEnum):
    packed = "packed"  # server s on the s-th block of hosts
    random = "random"  # servers on random host blocks (sim.seed)
    rail = "rail"  # GPU i of every server on rail i


class AckClass(enum.StrEnum):
    control = "control"  # ACKs (and CNPs) in a strict-priority class PFC never pauses (the HPCC authors' ns-3 code)
    data = "data"  # an ACK joins the FIFO of its flow's data class at every hop and is paused with it (htsim)


class PfcRelease(enum.StrEnum):
    """Until when a packet counts towards its ingress's PFC bytes."""

    dequeue = "dequeue"  # until it starts leaving its egress port (the HPCC authors' ns-3 code)
    sent = "sent"  # until its last bit has left (htsim's completedService)


class Overflow(enum.StrEnum):
    """What a lossless egress queue that grows past switch.buffer_bytes does (it never drops)."""

    report = "report"  # go on; count the port's overflows in the results (htsim's behaviour)
    error = "error"  # stop the experiment with an error naming the port


class SwitchPipeline(enum.StrEnum):
    """How a switch takes packets that reach it at the same instant (over different links)."""

    parallel = "parallel"  # each goes to its egress queue at once; ties between their later events go to the older chain
    # one at a time, in the order they arrived: htsim's FatTreeSwitch passes every packet through
    # one CallbackPipe (the switching latency, 0), whose event for the next packet is scheduled
    # only when the previous one leaves it, so the second packet of a switch's instant has its
    # egress events after every switch's first packet of that instant (and so on)
    serial = "serial"


class HpccWindowUpdate(enum.StrEnum):
    """Which window HPCC's ComputeWind starts from on an ACK."""

    round = "round"  # W_c, set once per RTT; the ACKs between react from it (paper, ns-3)
    ack = "ack"  # the window the last ACK set, in whole bytes (htsim: W_c is the window itself)


class HpccIntReference(enum.StrEnum):
    """The telemetry an ACK's is compared with (txRate, min(qlen), tau)."""

    last = "last"  # the previous ACK's (paper, ns-3)
    first = "first"  # the first ACK's on this path, kept for the flow's life (htsim never updates it)


class HpccUUpdate(enum.StrEnum):
    """How a sample u moves HPCC's U."""

    ewma = "ewma"  # U = (1 - tau/T) U + tau/T u (paper, ns-3)
    whole_rtt = "whole_rtt"  # tau/T in integers (htsim): U stays until tau reaches T, then U = u


class HpccFirstAck(enum.StrEnum):
    """What an ACK without a usable telemetry sample (the first) does."""

    record = "record"  # only records the telemetry; the window stays (ns-3)
    update = "update"  # U starts at eta and ComputeWind runs with the U the flow has (htsim)


class HpccIntQueue(enum.StrEnum):
    """The queue length a switch writes into a data packet's telemetry as it leaves."""

    behind = "behind"  # the queue it leaves behind (ns-3)
    with_packet = "with_packet"  # the queue with the departing packet still in it (htsim's completeService)


class HpccWindowCap(enum.StrEnum):
    """HPCC's largest window (and pacing rate = window / T)."""

    line_rate = "line_rate"  # line rate x T (ns-3)
    none = "none"  # no cap (htsim): the NIC still sends at most at line rate


class HpccWindowGate(enum.StrEnum):
    """When HPCC's window lets a flow send its next packet."""

    open = "open"  # while the bytes in flight are below the window (ns-3)
    whole_packet = "whole_packet"  # only if a full packet more still fits (htsim: cwnd >= flight + mss)


class HpccPacing(enum.StrEnum):
    """How HPCC's sender paces its packets (rate = window / T)."""

    rate = "rate"  # a rate change moves the next send by the change of the gap; a flow held by
    #   its window sends when the ACK that opens it arrives (ns-3)
    ticks = "ticks"  # the sender polls once per gap (htsim's doNextEvent): a faster rate does not
    #   bring the pending poll forward, and a flow held by its window waits for its next poll


class SimMode(enum.StrEnum):
    """Granularity (DESIGN.md "Hybrid granularity")."""

    packet = "packet"  # every packet simulated: the ground truth
    hybrid = "hybrid"  # packet level, but steady phases jump forward at their measured flow rates
    flow = "flow"  # max-min fair flow rates only (no packets): the flow-level baseline


class HybridRate(enum.StrEnum):
    """The rate a steady flow advances at during a jump."""

    measured = "measured"  # the mean of its last hybrid.window rate samples (Wormhole eq. 7)
    maxmin = "maxmin"  # the max-min fair share of its partition, priority classes first (HyGra eq. 2-3)


class HybridRestore(enum.StrEnum):
    """How a queue is rebuilt when its partition returns to packet level."""

    freeze = "freeze"  # as it was when the phase began (its packets stayed where they were)
    empty = "empty"  # drained: its packets are delivered at re-entry
    last = "last"  # the depth last sampled before the phase (a partition freezes at a sample: = freeze)
    mean = "mean"  # the mean depth of the last hybrid.window samples (averages a sawtooth queue)
    transformer = "transformer"  # the learned restorer's prediction (restorer/, HyGra Alg. 2)


# --- Groups --------------------------------------------------------------------------------


@dataclass
class TopologyConfig(Group):
    """topology.*: which fabric (each builder checks its own arguments, naming these keys)."""

    group_name = "topology"

    kind: TopologyKind = TopologyKind.fattree
    k: int = 4  # fattree: even arity; k^3/4 hosts
    path: Optional[str] = None  # custom: topology file
    leaves: int = 4  # leafspine
    hosts_per_leaf: int = 4  # leafspine
    oversubscription: float = 1.0  # leafspine: hosts_per_leaf / spines
    servers: int = 4  # rail
    gpus_per_server: int = 4  # rail
    servers_per_leaf: int = 2  # rail
    spines: int = 2  # rail
    # Cables failed or degraded from the start (topology/failures.py), named 'a-b' by their
    # nodes' names or ids (agg0-core2, tor1-h3): down cables are never routed over.
    links_down: List[str] = field(default_factory=list)  # e.g. [agg0-core0]
    # {cable: Gb/s}, e.g. {agg0-core0: 25}; null: none. Typed Any (checked by
    # topology/failures.py): Hydra merges a dict override into a typed dict key by key,
    # which its struct mode refuses for keys the default does not have.
    link_rates_gbps: Any = None
    # Timed events (topology/link_events.py): a list of {at_us, link, action: down|up|rate,
    # gbps (rate only)}, e.g. [{at_us: 50, link: agg0-core0, action: down}]; null: none.
    link_events: Any = None


@dataclass
class LinkConfig(Group):
    """link.*: every link (custom topologies: the links whose line gives none)."""

    group_name = "link"

    rate_gbps: float = 100.0
    delay_us: float = 1.0  # propagation delay


@dataclass
class PacketConfig(Group):
    """packet.*: wire sizes."""

    group_name = "packet"

    payload_bytes: int = 4096  # data packet = payload + header
    header_bytes: int = 64
    ack_bytes: int = 64
    ack_class: AckClass = AckClass.control  # how ACKs queue: control (priority, never paused) | data (htsim)

    def check(self) -> None:
        check_number("packet.payload_bytes", self.payload_bytes, low=1, high=MAX_PAYLOAD_BYTES, integer=True)
        check_number("packet.header_bytes", self.header_bytes, low=0, high=MAX_HEADER_BYTES, integer=True)
        check_number("packet.ack_bytes", self.ack_bytes, low=1, integer=True)


@dataclass
class SwitchConfig(Group):
    """switch.*: buffers, PFC, ECN marking and flowlets of every switch port."""

    group_name = "switch"

    buffer_bytes: int = 2_000_000  # per egress port; a queue past it is never dropped (see overflow)
    # A lossless queue fed by several ingresses can outgrow the buffer (PFC holds each
    # ingress near XOFF + headroom, not their sum). error: stop there, because a real
    # switch would have dropped; report: count it and go on, as htsim does ("LOSSLESS not
    # working"). A per-experiment value: one batch can mix both.
    overflow: Overflow = Overflow.error
    pfc_xoff_bytes: int = 200_000  # per ingress: pause the upstream port above this
    pfc_xon_bytes: int = 100_000  # per ingress: resume it below this
    pfc_release: PfcRelease = PfcRelease.dequeue  # a packet counts for its ingress until dequeued | sent
    pipeline: SwitchPipeline = SwitchPipeline.parallel  # simultaneous arrivals at a switch (see SwitchPipeline)
    flowlet_gap_us: float = 50.0  # lb=flowlet: a flow idle this long starts a new flowlet (new path)
    # RED/ECN marking at egress: probability 0 below Kmin, rising to Pmax at Kmax, 1 above.
    # Defaults: the HPCC authors' ns-3 run.py at 25 Gb/s, below PFC XOFF plus headroom so
    # ECN acts before PFC (the DCQCN paper: 5 KB, 200 KB, 1 % at 40 Gb/s). DCTCP's step
    # marking at K: Kmin = Kmax = K, Pmax = 1.
    ecn_kmin_bytes: int = 100_000
    ecn_kmax_bytes: int = 400_000
    ecn_pmax: float = 0.2

    def check(self) -> None:
        check_number("switch.buffer_bytes", self.buffer_bytes, low=1, integer=True)
        check_number("switch.pfc_xoff_bytes", self.pfc_xoff_bytes, low=1, integer=True)
        check_number("switch.pfc_xon_bytes", self.pfc_xon_bytes, low=0, integer=True)
        check_not_above("switch.pfc_xon_bytes", self.pfc_xon_bytes, "switch.pfc_xoff_bytes", self.pfc_xoff_bytes)
        check_not_above("switch.pfc_xoff_bytes", self.pfc_xoff_bytes, "switch.buffer_bytes", self.buffer_bytes)
        check_number("switch.flowlet_gap_us", self.flowlet_gap_us, low=0, low_open=True)
        check_number("switch.ecn_kmin_bytes", self.ecn_kmin_bytes, low=0, integer=True)
        check_number("switch.ecn_kmax_bytes", self.ecn_kmax_bytes, low=0, integer=True)
        check_number("switch.ecn_pmax", self.ecn_pmax, low=0, high=1)
        check_not_above("switch.ecn_kmin_bytes", self.ecn_kmin_bytes, "switch.ecn_kmax_bytes", self.ecn_kmax_bytes)


# Congestion control. "ns-3" is the HPCC authors' ns-3 code (simulation/run.py at 100 Gb/s
# NICs, and rdma-hw.cc defaults); the papers are the algorithms' own.


@dataclass
class DcqcnConfig(Group):
    """dcqcn.*: DCQCN (Zhu et al. 2015), the Mellanox rules of the ns-3 code."""

    group_name = "dcqcn"

    g: float = 1 / 256  # alpha gain (paper, ns-3 EWMA_GAIN)
    alpha_timer_us: float = 1.0  # alpha update period (ns-3 ALPHA_RESUME_INTERVAL; paper 55)
    decrease_interval_us: float = 4.0  # at most one rate cut per interval (ns-3 RATE_DECREASE_INTERVAL)
    increase_timer_us: float = 300.0  # rate-increase timer (ns-3 RP_TIMER; paper 55)
    byte_counter_bytes: int = 10_000_000  # bytes per byte-counter increase event (paper B = 10 MB)
    fast_recovery_steps: int = 1  # F: increase events of fast recovery (ns-3 FAST_RECOVERY_TIMES; paper 5)
    rate_ai_mbps: float = 20.0  # additive increase (ns-3 RATE_AI = 5 Mb/s x 100/25)
    rate_hai_mbps: float = 200.0  # hyper increase (ns-3 RATE_HAI = 50 Mb/s x 100/25)
    min_rate_mbps: float = 1000.0  # (ns-3 MIN_RATE)
    cnp_interval_us: float = 4.0  # receiver: at most one CNP per flow per interval (Mellanox
    #   min_time_between_cnps; paper N = 50)
    rate_on_first_cnp: float = 1.0  # rate kept on the first CNP (ns-3 RateOnFirstCnp)

    def check(self) -> None:
        check_number("dcqcn.g", self.g, low=0, high=1, low_open=True)
        for key in ("alpha_timer_us", "decrease_interval_us", "increase_timer_us"):
            check_number(f"dcqcn.{key}", getattr(self, key), low=0, low_open=True)
        check_number("dcqcn.byte_counter_bytes", self.byte_counter_bytes, low=1, integer=True)
        check_number("dcqcn.fast_recovery_steps", self.fast_recovery_steps, low=0, integer=True)
        for key in ("rate_ai_mbps", "rate_hai_mbps", "min_rate_mbps"):
            check_number(f"dcqcn.{key}", getattr(self, key), low=0, low_open=True)
        check_number("dcqcn.cnp_interval_us", self.cnp_interval_us, low=0)
        check_number("dcqcn.rate_on_first_cnp", self.rate_on_first_cnp, low=0, high=1, low_open=True)


@dataclass
class DctcpConfig(Group):
    """dctcp.*: DCTCP (Alizadeh et al. 2010)."""

    group_name = "dctcp"

    g: float = 1 / 16  # alpha gain (paper)
    init_window_packets: float = 10.0  # initial window, in full packets (TCP IW10, RFC 6928)
    min_window_packets: float = 1.0  # the window never shrinks below this

    def check(self) -> None:
        check_number("dctcp.g", self.g, low=0, high=1, low_open=True)
        check_number("dctcp.init_window_packets", self.init_window_packets, low=0, low_open=True)
        check_number("dctcp.min_window_packets", self.min_window_packets, low=0, low_open=True)
        check_not_above(
            "dctcp.min_window_packets", self.min_window_packets, "dctcp.init_window_packets", self.init_window_packets
        )


@dataclass
class HpccConfig(Group):
    """hpcc.*: HPCC (Li et al. 2019)."""

    group_name = "hpcc"

    eta: float = 0.95  # target utilisation (paper, ns-3 U_TARGET)
    max_stage: int = 5  # additive steps before a multiplicative one (paper maxStage)
    rate_ai_mbps: float = 40.0  # W_AI = rate_ai x T (ns-3 RATE_AI for HPCC = 10 Mb/s x 100/25)
    min_rate_mbps: float = 1000.0  # lowest window = min_rate x T (ns-3 MIN_RATE)
    base_rtt_us: Optional[float] = None  # T; None: the largest unloaded RTT of the experiment's
    #   flows (ns-3 GLOBAL_T: one T for all flows; htsim: 12 us)
    w_ai_bytes: Optional[float] = None  # W_AI in bytes; None: rate_ai_mbps x T (ns-3). htsim: one MTU (9000)
    init_window_bytes: Optional[float] = None  # initial window and W_c; None: line rate x T (ns-3 and htsim)
    # How htsim's hpcc.cpp differs from the HPCC authors' ns-3 code (defaults: ns-3; htsim's in brackets):
    window_update: HpccWindowUpdate = HpccWindowUpdate.round  # ComputeWind starts from W_c of the
    #   last per-RTT update | the window the last ACK set, in whole bytes [ack]
    int_reference: HpccIntReference = HpccIntReference.last  # telemetry compared with: the previous
    #   ACK's | the first ACK's on the path, never updated [first]
    u_update: HpccUUpdate = HpccUUpdate.ewma  # U = (1 - tau/T) U + tau/T u | tau/T in integers: U = u
    #   once tau reaches T, else unchanged [whole_rtt]
    first_ack: HpccFirstAck = HpccFirstAck.record  # an ACK without a sample only records telemetry |
    #   U starts at eta and every ACK runs ComputeWind [update]
    int_queue: HpccIntQueue = HpccIntQueue.behind  # qlen in the telemetry: the queue the packet leaves
    #   behind | with the departing packet [with_packet]
    window_cap: HpccWindowCap = HpccWindowCap.line_rate  # largest window: line rate x T | none [none]
    window_gate: HpccWindowGate = HpccWindowGate.open  # send while in flight < window | only if
    #   in flight + one full payload <= window [whole_packet]
    pacing: HpccPacing = HpccPacing.rate  # next send moves with the rate; window waits end at the
    #   ACK | polls once per gap: window waits end at the next poll [ticks]

    def check(self) -> None:
        check_number("hpcc.eta", self.eta, low=0, high=1, low_open=True)
        check_number("hpcc.max_stage", self.max_stage, low=0, integer=True)
        check_number("hpcc.rate_ai_mbps", self.rate_ai_mbps, low=0)
        check_number("hpcc.min_rate_mbps", self.min_rate_mbps, low=0, low_open=True)
        for key in ("base_rtt_us", "w_ai_bytes", "init_window_bytes"):
            if getattr(self, key) is not None:
                check_number(f"hpcc.{key}", getattr(self, key), low=0, low_open=True)


@dataclass
class TimelyConfig(Group):
    """timely.*: TIMELY (Mittal et al. 2015)."""

    group_name = "timely"

    alpha: float = 0.875  # EWMA weight of new RTT differences (ns-3 TimelyAlpha)
    beta: float = 0.8  # multiplicative decrease (paper, ns-3)
    t_low_us: float = 50.0  # (paper, ns-3)
    t_high_us: float = 500.0  # (paper, ns-3)
    min_rtt_us: float = 20.0  # normalises the gradient (paper, ns-3)
    rate_ai_mbps: float = 100.0  # delta (ns-3 RATE_AI = 10 Mb/s x 100/10)
    rate_hai_mbps: float = 500.0  # N x delta after hai_after increases (ns-3 RATE_HAI = 50 Mb/s x 100/10)
    hai_after: int = 5  # consecutive increases before hyper-active increase (paper N = 5)
    min_rate_mbps: float = 1000.0  # (ns-3 MIN_RATE)

    def check(self) -> None:
        check_number("timely.alpha", self.alpha, low=0, high=1, low_open=True)
        check_number("timely.beta", self.beta, low=0, high=1, low_open=True)
        for key in ("t_low_us", "t_high_us", "min_rtt_us", "rate_ai_mbps", "rate_hai_mbps", "min_rate_mbps"):
            check_number(f"timely.{key}", getattr(self, key), low=0, low_open=True)
        check_number("timely.hai_after", self.hai_after, low=0, integer=True)
        if self.t_low_us >= self.t_high_us:
            raise InputError(f"timely.t_low_us ({self.t_low_us}) must be below timely.t_high_us ({self.t_high_us})")


def _default_priorities() -> Dict[str, int]:
    return {"tp": 0, "pp": 0, "dp": 0, "ep": 0}


@dataclass
class WorkloadConfig(Group):
    """workload.*: the traffic. Flow workloads (permutation, incast, cm) or a training
    iteration (llm and the importers), whose GPUs are hosts placed server by server."""

    group_name = "workload"

    kind: WorkloadKind = WorkloadKind.permutation
    path: Optional[str] = None  # cm: .cm; astra/simai: layer file; chakra: .et prefix; goal: .goal
    routes: Optional[str] = None  # optional CSV of pinned routes (id,kind,path)
    flow_bytes: int = 2_000_000  # permutation / incast: bytes per flow
    senders: int = 8  # incast: hosts 1..senders send to host 0
    start_us: float = 0.0  # permutation / incast: start time of every flow
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
    placement: Placement = Placement.packed  # servers onto host blocks
    compute_slowdown: float = 1.0  # compute that starts while its GPU communicates takes this x longer
    # Task workloads: priority class (0 highest .. 7) of the flows of each traffic category,
    # e.g. workload.priorities.dp=1 puts gradient sync behind TP/PP traffic. Other categories
    # of imported workloads (e.g. Chakra's "coll"): +workload.priorities.coll=1.
    priorities: Dict[str, int] = field(default_factory=_default_priorities)

    def check(self) -> None:
        check_number("workload.flow_bytes", self.flow_bytes, low=1, integer=True)
        check_number("workload.senders", self.senders, low=1, integer=True)
        check_number("workload.start_us", self.start_us, low=0)
        for key in ("tp", "pp", "dp", "ep", "microbatches", "micro_batch_size", "layers_per_chunk", "gpus"):
            check_number(f"workload.{key}", getattr(self, key), low=1, integer=True)
        check_number("workload.gpus_per_server", self.gpus_per_server, low=1, integer=True)
        check_number("workload.channels", self.channels, low=1, integer=True)
        if self.mp_group is not None:
            check_number("workload.mp_group", self.mp_group, low=1, integer=True)
        if not (isinstance(self.compute_slowdown, (int, float)) and 0 < self.compute_slowdown < 100):
            raise InputError(f"workload.compute_slowdown must be a number in (0, 100), 1 = off, got {self.compute_slowdown!r}")
        for category, value in self.priorities.items():
            if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_PRIORITIES):
                raise InputError(
                    f"workload.priorities.{category} must be a class 0..{MAX_PRIORITIES - 1} (0 highest), got {value!r}"
                )


@dataclass
class SimConfig(Group):
    """sim.*: how the simulation runs."""

    group_name = "sim"

    seed: int = 0  # permutation derangement, random placement and ECMP hashes
    packets_per_host: int = 256  # packet slots per host (in-flight capacity)
    steps_per_call: int = STEPS_PER_CALL  # lookahead windows per compiled call
    batching: Batching = Batching.auto
    devices: Any = 1  # local devices the experiment axis is sharded over: a count or "all"
    max_time_us: float = 1_000_000.0  # stop (and fail) an experiment that runs past this
    sample_interval_us: float = 5.0  # time-series period in µs; 0 = off
    mode: SimMode = SimMode.packet  # packet | hybrid (one batch may mix them) | flow
    # Packets a port may start in one transmit round, its class queues merged by strict priority
    # (ops/runs.py; the largest of a batch): 0 chooses 8; 1 turns runs off. Same results, bit
    # for bit; only the speed differs (benchmarks/HISTORY.md, stop 36)
    run_packets: int = 0
    # The FIFO pass (ops/fifo_pass.py): without rival class queues (ACKs queued with data at one
    # priority, htsim's configuration), every switch port's departures of a window in one pass at its
    # start, the transmit rounds serving the NICs and the ports a PFC pause stops, the last of them over
    # the NICs' ports alone (on the htsim sweep's point 3.4 rounds a busy window, not 6.5; the point 1.11x
    # faster on one core). auto: on an accelerator, off on a CPU (where programs compile 1.7x as long,
    # more than most runs save; set always for long CPU sweeps); always | never, as sim.long_runs.
    # Same results, bit for bit
    fifo_pass: ByBackend = ByBackend.auto
    # The NIC pass (ops/nic_pass.py), with the FIFO pass: every NIC's departures of a window, its new
    # packets among them, in a fixed number of rows at its start (the ACKs waiting as its port falls free
    # back to back, then up to 6 one by one), the rounds going on where it stops: on the htsim sweep's
    # point 0.3 rounds a window instead of 3.4. auto: on an accelerator (not yet measured on a GPU), off
    # on a CPU, where its rows' work costs more than the rounds it saves (a window 1.2-1.3x as long,
    # benchmarks/HISTORY.md, stop 63); always | never, as sim.long_runs. Same results, bit for bit
    nic_pass: ByBackend = ByBackend.auto
    # sim.batching=vmap: experiments stepped in lockstep at once, in lanes that each take the next
    # experiment when theirs stops (engine.lockstep_lanes; the largest of a batch): 0 chooses, the
    # whole batch on an accelerator, a cache's worth of packet pools on a CPU. Same results, bit for bit
    lockstep_experiments: int = 0
    # Long single-class runs (ops/runs.py, follow's ways 1 and 2): a round may start many packets of one
    # class queue (84 at k=8) at up to 8 ports, in closed form, and where more ports run, each from one
    # class queue, their runs in the same closed form. auto: on an accelerator, off on a CPU (where they
    # pay in vmap, not in map, and compile 12-25 % longer); always | never. One experiment of a
    # batch asking always turns them on for it, else one asking never off. Same results, bit for bit
    long_runs: ByBackend = ByBackend.auto
    # The live prefix windows run on while the pool's packets fit in it (ops/pool.py): auto
    # (per_host on a CPU, columns on an accelerator, for pools of at least 16384 slots) |
    # per_host | columns | none. A batch runs its first experiment's choice other than auto.
    # Same results, bit for bit; only the speed differs (README, Performance)
    live_prefix: LivePrefix = LivePrefix.auto
    # Compiled programs kept between runs (multiverse_jax/compile_cache.py): auto
    # ($XDG_CACHE_HOME or ~/.cache, /multiverse-jax/xla) | none | a folder. JAX's own
    # JAX_COMPILATION_CACHE_DIR stands. Once per run (a sweep: its first point's); results unchanged
    compile_cache: str = "auto"

    def check(self) -> None:
        check_number("sim.seed", self.seed, low=0, integer=True)
        check_number("sim.run_packets", self.run_packets, low=0, high=64, integer=True)
        check_number("sim.lockstep_experiments", self.lockstep_experiments, low=0, integer=True)
        check_number("sim.packets_per_host", self.packets_per_host, low=1, integer=True)
        check_number("sim.steps_per_call", self.steps_per_call, low=1, integer=True)
        if self.devices != "all":
            check_number("sim.devices", self.devices, low=1, integer=True)
        check_number("sim.max_time_us", self.max_time_us, low=0, low_open=True)
        check_number("sim.sample_interval_us", self.sample_interval_us, low=0)
        if not isinstance(self.compile_cache, str) or not self.compile_cache.strip():
            raise InputError(f"sim.compile_cache must be auto, none or a folder, got {self.compile_cache!r}")


@dataclass
class HybridConfig(Group):
    """hybrid.*: steady-state detection and fast-forward (``sim.mode=hybrid``; Wormhole §5,
    DESIGN.md "Hybrid granularity")."""

    group_name = "hybrid"

    theta: float = 0.05  # θ: a flow is steady when (max - min) / mean of its last samples is below this
    window: int = 8  # l: rate samples per flow that the test looks at
    sample_interval_us: float = 20.0  # time between rate samples (covers a few RTTs; Wormhole App. F)
    rate: HybridRate = HybridRate.measured  # the rate a steady flow jumps at
    restore: HybridRestore = HybridRestore.freeze  # queues on re-entry

    def check(self) -> None:
        check_number("hybrid.theta", self.theta, low=0, low_open=True, high=0.5)
        check_number("hybrid.window", self.window, low=2, integer=True)
        check_number("hybrid.sample_interval_us", self.sample_interval_us, low=0, low_open=True)


@dataclass
class OutputConfig(Group):
    """output.*: what a run writes besides its tables."""

    group_name = "output"

    plots: bool = True  # write fct_cdf.png (and timeseries.png, timeline.png)
    flow_paths: bool = True  # flows.parquet: each flow's data path by node names (``path``; report/paths.py)
    progress_interval_s: float = 10.0  # off a terminal, a progress line on stderr this often (0: no progress shown)

    def check(self) -> None:
        check_number("output.progress_interval_s", self.progress_interval_s, low=0)


@dataclass
class Config(Group):
    """The whole config of one design point."""

    topology: TopologyConfig = field(default_factory=TopologyConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    packet: PacketConfig = field(default_factory=PacketConfig)
    switch: SwitchConfig = field(default_factory=SwitchConfig)
    cc: CcKind = CcKind.none  # congestion control
    lb: LbKind = LbKind.ecmp  # load balancing
    dcqcn: DcqcnConfig = field(default_factory=DcqcnConfig)
    dctcp: DctcpConfig = field(default_factory=DctcpConfig)
    hpcc: HpccConfig = field(default_factory=HpccConfig)
    timely: TimelyConfig = field(default_factory=TimelyConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    hybrid: HybridConfig = field(default_factory=HybridConfig)
    output: OutputConfig = field(default_factory=OutputConfig)


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
