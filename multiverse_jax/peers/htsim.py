"""htsim (csg-htsim) as a peer: build it, run a connection matrix, read its flows and routes.

What this module does, so that one ``.cm`` runs in htsim and here on the same network:

* ``build_htsim`` builds the plain htsim with ``../shared/peers/build-htsim`` (for
  ``fixtime.so``, which makes its ECMP salts deterministic) and, once per version of
  ``htsim-print-routes.patch``, a patched copy of its source that prints each flow's next
  hops, carries the ``.cm`` flow id in flow names and prints times to the picosecond
  (the patch's header says what it changes). Everything raises ``PeerUnavailable`` (a
  reason to skip) when the peers folder, g++, make or patch is missing.
* ``run_htsim`` runs the patched ``htsim_roce`` or ``htsim_hpcc`` with the flags of
  ``HtsimNetwork`` and parses its stdout (``parse_output``): start and finish times per
  flow id, and the next hop each switch chose per (flow id, destination host).
* ``routes_csv`` chains those hops into this project's pinned-route CSV
  (``workload/routes.py``): a data path per flow from its source to its destination and an
  ACK path back (htsim hashes ACKs with their own path id, so the ACK path is in general
  not the reverse of the data path). htsim's queue names give the hops: ``LS<t>`` is ToR
  t, ``US<a>`` aggregation switch a, ``CS<c>`` core c and ``DST<h>`` host h -- the same
  indices as ``tor<t>``, ``agg<a>``, ``core<c>`` and ``h<h>`` of ``topology/fattree.py``,
  which is wired as htsim wires its fat tree.
* ``our_config`` is the config that describes htsim's network here (topology, links,
  packet sizes, PFC, buffers, and HPCC's constants), and ``compare`` lines up per-flow FCTs.
"""

from __future__ import annotations

import dataclasses
import decimal
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from multiverse_jax.config import experiment_from_config
from multiverse_jax.experiment import Experiment
from multiverse_jax.units import PS_PER_US
from multiverse_jax.workload.flows import FlowSet
from multiverse_jax.workload.htsim_cm import load_cm

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PEERS_DIR = REPO_ROOT.parent / "shared" / "peers"  # ../shared/peers beside the checkout
PATCH = Path(__file__).with_name("htsim-print-routes.patch")
BINARIES = {"roce": "htsim_roce", "hpcc": "htsim_hpcc"}  # mode -> htsim binary
CC_OF_MODE = {"roce": "none", "hpcc": "hpcc"}  # mode -> our cc
TOOLS = ("g++", "gcc", "make", "patch")
HEADER_BYTES = 64  # htsim: data packet = -mtu payload + 64 B header; ACKs and pauses 64 B
HTSIM_HPCC_BASE_RTT_US = 12.0  # hpcc.cpp: HPCCSrc::_T
# How htsim's network differs from our defaults (issue 11): ACKs queue with data and are
# paused with it; a packet holds its PFC ingress bytes until its last bit has left
# (completedService); a lossless queue past -q packets is only reported. (PFC decides at
# the crossing instants in both.)
PEER_OPTIONS = {"packet.ack_class": "data", "switch.pfc_release": "sent", "switch.overflow": "report"}


class PeerUnavailable(RuntimeError):
    """htsim cannot be built or run here; the message says why (a reason to skip)."""


class HtsimOutputError(RuntimeError):
    """htsim's output is not what this module expects (names the flow or the line)."""


@dataclasses.dataclass(frozen=True)
class HtsimNetwork:
    """The network both simulators get: htsim's flags and the config keys that match them."""

    k: int = 4  # fat-tree arity: -nodes k^3/4
    rate_gbps: float = 100.0  # -linkspeed (Mb/s) / link.rate_gbps
    delay_us: float = 1.0  # -hop_latency / link.delay_us
    mtu_bytes: int = 9000  # -mtu / packet.payload_bytes
    queue_packets: int = 100  # -q (packets of mtu bytes) / switch.buffer_bytes
    pfc_low_packets: int = 50  # -pfc_thresholds LOW / switch.pfc_xon_bytes
    pfc_high_packets: int = 70  # -pfc_thresholds HIGH / switch.pfc_xoff_bytes
    end_us: int = 10_000_000  # -end / sim.max_time_us

    @property
    def n_hosts(self) -> int:
        return self.k**3 // 4

    def flags(self) -> list[str]:
        """htsim's command-line flags for this network (``-paths`` is required but ignored)."""
        return [
            "-nodes", str(self.n_hosts), "-strat", "ecmp_host", "-paths", "64",
            "-linkspeed", f"{self.rate_gbps * 1000:g}", "-hop_latency", f"{self.delay_us:g}",
            "-mtu", str(self.mtu_bytes), "-q", str(self.queue_packets),
            "-pfc_thresholds", str(self.pfc_low_packets), str(self.pfc_high_packets), "-end", str(self.end_us),
        ]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class HtsimBuild:
    """Where the built binaries are."""

    plain_dir: Path  # build-htsim's output: htsim_roce, htsim_hpcc, fixtime.so
    routes_dir: Path  # the patched copy's htsim_roce, htsim_hpcc

    def binary(self, mode: str) -> Path:
        if mode not in BINARIES:
            raise ValueError(f"mode must be one of {', '.join(BINARIES)}, got {mode!r}")
        return self.routes_dir / BINARIES[mode]

    @property
    def fixtime(self) -> Path:
        return self.plain_dir / "fixtime.so"


@dataclasses.dataclass(frozen=True)
class HtsimRun:
    """What one htsim run printed, by .cm flow id; times in integer ps."""

    start_ps: dict[int, int]  # flow id -> its "startflow" time
    finish_ps: dict[int, int]  # flow id -> its "Flow ... finished at" time (sender has the last ACK)
    hops: dict[tuple[int, int], dict[str, str]]  # (flow id, packet's destination host) -> {node: next node}
    wall_s: float  # wall-clock seconds of the htsim process


# --- Building ----------------------------------------------------------------------------------


def _require_tools(peers_dir: Path) -> Path:
    script = peers_dir / "build-htsim"
    if not script.is_file():
        raise PeerUnavailable(f"no htsim build script at {script} (the peers folder ../shared/peers is absent)")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise PeerUnavailable(
            f"cannot build htsim: {', '.join(missing)} not found (Debian: apt-get install -y g++ make patch)"
        )
    return script


def _run_build(command: list[str], what: str, cwd: Path | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(command)}):\n{done.stderr[-4000:]}")
    return done.stdout


def build_patched(source_sim: Path, out: Path, patches: tuple[Path, ...] = (PATCH,)) -> None:
    """A copy of htsim's ``sim/`` with ``patches`` applied in turn, built; binaries moved to ``out``."""
    jobs = str(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="htsim-routes-") as work:
        sim = Path(work) / "sim"
        shutil.copytree(source_sim, sim)
        for patch in patches:
            _run_build(["patch", "-p1", "--quiet", "-i", str(patch)], f"applying {patch.name}", cwd=sim)
        _run_build(["make", "-s", "-j", jobs, "libhtsim.a"], "building the patched libhtsim.a", cwd=sim)
        _run_build(["make", "-s", "-j", jobs, *BINARIES.values()], "building the patched htsim", cwd=sim / "datacenter")
        staging = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
        for name in BINARIES.values():
            shutil.copy2(sim / "datacenter" / name, staging / name)
        try:
            staging.rename(out)  # whole or not at all: a half-built folder never looks done
        except OSError:  # another process finished the same build first
            shutil.rmtree(staging, ignore_errors=True)


def build_htsim(build_dir: str | Path | None = None, peers_dir: str | Path | None = None) -> HtsimBuild:
    """Build (once; later calls reuse the binaries) htsim and its route-printing copy.

    ``build_dir``: where build-htsim puts the plain build (its default when None, under
    ``~/.cache``); the patched build goes in a subfolder named after the patch's hash, so
    a changed patch builds again. ``peers_dir``: the peers folder (default
    ``../shared/peers`` beside the repository). Raises ``PeerUnavailable`` when htsim
    cannot be built here, ``RuntimeError`` when a build step fails.
    """
    peers = Path(peers_dir) if peers_dir is not None else DEFAULT_PEERS_DIR
    script = _require_tools(peers)
    command = [str(script)] + ([str(build_dir)] if build_dir is not None else [])
    plain = Path(_run_build(command, "build-htsim").strip().splitlines()[-1])
    digest = hashlib.sha256(PATCH.read_bytes()).hexdigest()[:12]
    routes = plain / f"print-routes-{digest}"
    if not all((routes / name).is_file() for name in BINARIES.values()):
        build_patched(peers / "csg-htsim" / "sim", routes)
    return HtsimBuild(plain_dir=plain, routes_dir=routes)


# --- Running and parsing -------------------------------------------------------------------------

CLOCK_TICKS = ".|"  # htsim's Clock prints these every 50 ms of simulated time, mid-line
_FINISH = re.compile(r"^Flow (\S+) (?:\d+ )?finished at (\S+) total bytes \d+")
_START = re.compile(r"^startflow (\S+) at (\S+)")
_HOP = re.compile(r"^nexthop (\d+) (\d+) (.+)$")
_FLOW_NAME = re.compile(r"^(?:Roce|HPCC)_\d+_\d+_(\d+)$")
# An egress queue's name ends in "<switch>-><next node>(<bundle>)", e.g.
# "queue lossless output(100000Mb/s,900000bytes)US1->CS2(0)".
_QUEUE = re.compile(r"\b(LS|US|CS)(\d+)->(DST|LS_|US|CS)(\d+)\(\d+\)$")
_NODE_PREFIX = {"LS": "tor", "LS_": "tor", "US": "agg", "CS": "core", "DST": "h"}


def _time_ps(text: str, line: int) -> int:
    try:
        return int(round(decimal.Decimal(text) * PS_PER_US))
    except decimal.InvalidOperation:
        raise HtsimOutputError(f"htsim output line {line}: bad time {text!r}") from None


def _flow_id(name: str, line: int) -> int:
    match = _FLOW_NAME.match(name)
    if match is None:
        raise HtsimOutputError(
            f"htsim output line {line}: flow name {name!r} carries no flow id; "
            f"run the build patched with {PATCH.name} (build_htsim)"
        )
    return int(match.group(1))


def _hop(queue: str, line: int) -> tuple[str, str]:
    """htsim's egress queue name as (this node, next node) in our fat-tree's names."""
    match = _QUEUE.search(queue)
    if match is None:
        raise HtsimOutputError(f"htsim output line {line}: unexpected egress queue name {queue!r}")
    here, a, there, b = match.groups()
    return f"{_NODE_PREFIX[here]}{a}", f"{_NODE_PREFIX[there]}{b}"


def parse_output(lines) -> tuple[dict[int, int], dict[int, int], dict[tuple[int, int], dict[str, str]]]:
    """(start ps, finish ps, hops) by flow id from the patched htsim's stdout lines."""
    start, finish, hops = {}, {}, {}
    for number, text in enumerate(lines, start=1):
        text = text.lstrip(CLOCK_TICKS)
        if (match := _HOP.match(text)) is not None:
            flow, dst, queue = match.groups()
            here, there = _hop(queue, number)
            chosen = hops.setdefault((int(flow), int(dst)), {})
            if chosen.setdefault(here, there) != there:
                raise HtsimOutputError(
                    f"htsim output line {number}: flow {flow} towards host {dst} left {here} "
                    f"both to {chosen[here]} and to {there} (not one ECMP path per flow)"
                )
        elif (match := _FINISH.match(text)) is not None:
            finish[_flow_id(match.group(1), number)] = _time_ps(match.group(2), number)
        elif (match := _START.match(text)) is not None:
            start[_flow_id(match.group(1), number)] = _time_ps(match.group(2), number)
    return start, finish, hops


def run_htsim(
    build: HtsimBuild, mode: str, cm_path: str | Path, network: HtsimNetwork, out_dir: str | Path, *, patched: bool = True
) -> HtsimRun:
    """Run the patched htsim (``mode`` roce or hpcc) on ``cm_path``; its stdout is kept in
    ``out_dir/<cm name>_htsim_<mode>.out`` and parsed once the process has ended (so the
    parsing is not in ``wall_s``). ``patched=False`` runs htsim as built, unpatched, for
    timing only: its output names no .cm flow ids, so the run's dicts are empty."""
    out_dir, stem = Path(out_dir), Path(cm_path).stem
    stdout_path = out_dir / f"{stem}_htsim_{mode}.out"
    log_path = out_dir / f"{stem}_htsim_{mode}.log"
    binary = build.binary(mode) if patched else build.plain_dir / BINARIES[mode]
    command = [str(binary), "-tm", str(cm_path), *network.flags(), "-o", str(log_path)]
    env = dict(os.environ, LD_PRELOAD=str(build.fixtime))
    with open(stdout_path, "w") as stdout:
        began = time.perf_counter()
        done = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, cwd=out_dir)
        wall_s = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"htsim failed (exit {done.returncode}): {' '.join(command)}\n{done.stderr[-4000:]}")
    if not patched:  # its flow names carry no .cm ids: nothing to parse
        return HtsimRun(start_ps={}, finish_ps={}, hops={}, wall_s=wall_s)
    with open(stdout_path) as lines:
        start, finish, hops = parse_output(lines)
    return HtsimRun(start_ps=start, finish_ps=finish, hops=hops, wall_s=wall_s)


# --- Routes, config, comparison ------------------------------------------------------------------


def _walk(next_of: dict[str, str], src: int, dst: int, hosts_per_tor: int, what: str) -> list[str]:
    path, target = [f"h{src}", f"tor{src // hosts_per_tor}"], f"h{dst}"
    while path[-1] != target:
        if path[-1] not in next_of or len(path) > len(next_of) + 2:
            raise HtsimOutputError(f"{what}: htsim printed no next hop from {path[-1]} (path so far {' '.join(path)})")
        path.append(next_of[path[-1]])
    return path


def routes_csv(hops: dict[tuple[int, int], dict[str, str]], flows: FlowSet, hosts_per_tor: int) -> str:
    """The pinned-route CSV (``workload/routes.py``) of the paths htsim took: for every flow
    whose first packet htsim sent, its data path and its ACK path (flows htsim never
    started have no row: they stay on our ECMP)."""
    rows = ["id,kind,path"]
    for f in range(len(flows)):
        fid, src, dst = int(flows.flow_id[f]), int(flows.src[f]), int(flows.dst[f])
        for kind, a, b in (("data", src, dst), ("ack", dst, src)):
            if (fid, b) in hops:
                rows.append(f"{fid},{kind},{' '.join(_walk(hops[(fid, b)], a, b, hosts_per_tor, f'flow {fid} {kind}'))}")
    return "\n".join(rows) + "\n"


def pinned_experiment(run: HtsimRun, network: HtsimNetwork, mode: str, cm_path, out_dir) -> Experiment:
    """Our experiment of ``cm_path`` on ``network`` in ``mode``, on the routes htsim took in
    ``run`` (written to ``out_dir/<cm name>_routes_<mode>.csv``)."""
    routes_path = Path(out_dir) / f"{Path(cm_path).stem}_routes_{mode}.csv"
    routes_path.write_text(routes_csv(run.hops, load_cm(cm_path), network.k // 2))
    return experiment_from_config(our_config(network, mode, cm_path, routes_path))


def our_config(network: HtsimNetwork, mode: str, cm_path, routes_path=None) -> dict:
    """The config (for ``experiment_from_config``) of ``network`` and htsim's ``mode`` here."""
    mtu = network.mtu_bytes
    buffer_bytes = network.queue_packets * mtu
    config = {
        "topology": {"kind": "fattree", "k": network.k},
        "link": {"rate_gbps": network.rate_gbps, "delay_us": network.delay_us},
        "packet": {"payload_bytes": mtu, "header_bytes": HEADER_BYTES, "ack_bytes": HEADER_BYTES},
        # htsim's PFC thresholds count -mtu bytes per packet (queued packets are mtu + 64 B).
        "switch": {
            "buffer_bytes": buffer_bytes,
            "pfc_xoff_bytes": network.pfc_high_packets * mtu,
            "pfc_xon_bytes": network.pfc_low_packets * mtu,
            "pipeline": "serial",  # FatTreeSwitch: every packet passes one CallbackPipe (0 us)
        },
        "cc": CC_OF_MODE[mode],
        "lb": "ecmp",
        # hpcc.cpp: T = 12 µs, eta 0.95, maxStage 5, W_AI = one MTU (= rate_ai x T), no window floor.
        "hpcc": {
            "base_rtt_us": HTSIM_HPCC_BASE_RTT_US,
            "eta": 0.95,
            "max_stage": 5,
            "rate_ai_mbps": mtu * 8 / HTSIM_HPCC_BASE_RTT_US,
            "min_rate_mbps": 1e-3,
            # hpcc.cpp's conventions (schema.HpccConfig says what each does):
            "window_update": "ack",  # computeWind starts from _cwnd, which every ACK sets
            "int_reference": "first",  # measureInFlight never updates _link_info after the first ACK
            "u_update": "whole_rtt",  # tau/_T divides two simtime_picosec integers
            "first_ack": "update",  # _U = _eta at start; every ACK runs computeWind
            "int_queue": "with_packet",  # completeService writes _queuesize before subtracting the packet
            "window_cap": "none",  # _cwnd and _pacing_rate have no upper bound
            "window_gate": "whole_packet",  # doNextEvent sends if _cwnd >= _flightsize + _mss
            "pacing": "ticks",  # doNextEvent polls every _packet_spacing, whether it sends or not
        },
        "workload": {"kind": "cm", "path": str(cm_path), "routes": None if routes_path is None else str(routes_path)},
        "sim": {"max_time_us": float(network.end_us), "sample_interval_us": 0.0},
        "output": {"plots": False},
    }
    for dotted, value in PEER_OPTIONS.items():
        group, _, key = dotted.partition(".")
        config[group][key] = value
    return config


def compare(flow_columns: dict[str, np.ndarray], run: HtsimRun) -> dict[str, np.ndarray]:
    """Per flow (ours' order): both start times and FCTs in ps (-1 where that side did not
    start / finish the flow; a triggered flow starts when its trigger fired there) and
    ours' relative FCT error (ours - htsim) / htsim (NaN where either did not finish)."""
    ids = np.asarray(flow_columns["id"], np.int64)
    ours = np.asarray(flow_columns["fct_ps"], np.int64)
    theirs = np.array([run.finish_ps[i] - run.start_ps[i] if i in run.finish_ps else -1 for i in ids], np.int64)
    both = (ours >= 0) & (theirs > 0)
    error = np.full(ids.shape, np.nan)
    error[both] = (ours[both] - theirs[both]) / theirs[both]
    return {
        "id": ids,
        "ours_start_ps": np.asarray(flow_columns["start_ps"], np.int64),
        "htsim_start_ps": np.array([run.start_ps.get(i, -1) for i in ids], np.int64),
        "ours_fct_ps": ours,
        "htsim_fct_ps": theirs,
        "fct_error": error,
    }
