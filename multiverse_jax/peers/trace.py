"""Where this simulator and htsim part: per-hop traces of one input in both, compared.

Per-flow FCTs say *that* two simulators differ; a per-hop trace says *where*. A hop is
``(port, flow id, is ACK, packet index)`` -- the port named ``<node>-><next node>`` in
our fat-tree's names (``h6->tor3``, ``tor3->h7``, ``agg2->tor3``), the flow by its
``.cm`` id -- and its value is the instant, in ps, at which the packet's last bit leaves
that port. Both simulators on the same network and routes give the same hops; the
earliest hop at which their instants differ is where they part, and what happened just
before it at that port says why (in issue 11 it was, every time, the order of
simultaneous events).

* ``build_trace`` builds a copy of htsim patched with ``htsim-print-routes.patch`` and
  ``htsim-trace.patch`` (every departure printed; it prints the routes too, so one run
  of it serves ``htsim.run_htsim`` as well);
* ``htsim_hops`` reads those departures from its stdout;
* ``our_hops`` steps this simulator window by window and reads each packet off the wire
  (every link delay is at least a window, so each hop is seen in flight at least once);
* ``divergences`` lists the hops whose instants differ, earliest first.

``benchmarks/vs_htsim_trace.py`` runs it on a scenario of ``peers/scenarios.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

import jax
import numpy as np

from multiverse_jax.batch import build_batch
from multiverse_jax.engine import step
from multiverse_jax.experiment import Experiment
from multiverse_jax.peers import htsim

TRACE_PATCH = Path(__file__).with_name("htsim-trace.patch")
Hop = tuple[str, int, bool, int]  # (port "a->b", .cm flow id, is ACK, packet index in its flow)

_DEPARTURE = re.compile(r"^dep (?:nic|sw) (\S+) (\d+) (\d+) (-?\d+) (\d+)$")
_QUEUE = re.compile(r"^(SRC|LS|US|CS)(\d+)->(DST|LS_|LS|US|CS)(\d+)\(\d+\)$")
_NODE = {"SRC": "h", "LS": "tor", "LS_": "tor", "US": "agg", "CS": "core", "DST": "h"}
_DATA_TYPES = {"roce": 19, "hpcc": 22}  # htsim's packet type numbers (network.h) of data packets


def build_trace(build_dir=None, peers_dir=None) -> htsim.HtsimBuild:
    """htsim built (once per version of the two patches) to print every departure."""
    build = htsim.build_htsim(build_dir, peers_dir)
    peers = Path(peers_dir) if peers_dir is not None else htsim.DEFAULT_PEERS_DIR
    digest = hashlib.sha256(htsim.PATCH.read_bytes() + TRACE_PATCH.read_bytes()).hexdigest()[:12]
    out = build.plain_dir / f"trace-{digest}"
    if not all((out / name).is_file() for name in htsim.BINARIES.values()):
        htsim.build_patched(peers / "csg-htsim" / "sim", out, (htsim.PATCH, TRACE_PATCH))
    return dataclasses.replace(build, routes_dir=out)


def _port(queue: str) -> str | None:
    match = _QUEUE.match(queue)
    if match is None:
        return None
    here, a, there, b = match.groups()
    return f"{_NODE[here]}{a}->{_NODE[there]}{b}"


def htsim_hops(lines, mode: str, mtu_bytes: int = 9000) -> dict[Hop, int]:
    """The departures a trace build printed (``lines``: its stdout), as hops."""
    hops = {}
    for text in lines:
        match = _DEPARTURE.match(text.lstrip(htsim.CLOCK_TICKS).rstrip())
        if match is None:
            continue
        queue, flow, kind, seq, leave_ps = match.groups()
        port = _port(queue)
        if port is None:
            continue
        is_ack = int(kind) != _DATA_TYPES[mode]
        # Data: seq is the packet's first byte, 1-based; an ACK: the bytes acknowledged.
        index = -(-int(seq) // mtu_bytes) - 1 if is_ack else (int(seq) - 1) // mtu_bytes
        hops[(port, int(flow), is_ack, index)] = int(leave_ps)
    return hops


def our_hops(experiment: Experiment, slots_per_host: int = 512, max_windows: int = 1_000_000) -> dict[Hop, int]:
    """Every hop of ``experiment`` here, read off the wire after each window."""
    batch = build_batch([experiment], slots_per_host=slots_per_host)
    params, state = batch.params, batch.state
    topology = experiment.topology
    names = topology.node_names
    port_names = [f"{names[a]}->{names[b]}" for a, b in zip(topology.link_src, topology.link_dst)]
    flow_ids = np.asarray(experiment.flows.flow_id)
    delay_ps = np.asarray(topology.link_delay_ps)
    advance = jax.jit(jax.vmap(step))
    hops = {}
    for _ in range(max_windows):
        state = advance(params, state)
        pkts = jax.device_get(state.packets)
        on_wire = np.nonzero(pkts.pkt_valid[0] & pkts.pkt_in_flight[0])[0]
        for slot in on_wire:
            port = int(pkts.pkt_port[0][slot])
            hop = (port_names[port], int(flow_ids[pkts.pkt_flow[0][slot]]), bool(pkts.pkt_is_ack[0][slot]), int(pkts.pkt_seq[0][slot]))
            hops.setdefault(hop, int(pkts.pkt_time_ps[0][slot]) - int(delay_ps[port]))
        if bool(state.done[0]) or int(state.error[0]) != 0:
            break
    return hops


def divergences(theirs: dict[Hop, int], ours: dict[Hop, int]) -> list[tuple[int, Hop, int | None, int | None]]:
    """The hops whose instants differ (or that only one simulator made): (earlier instant,
    hop, htsim's instant, ours), earliest first."""
    differ = []
    for hop in theirs.keys() | ours.keys():
        a, b = theirs.get(hop), ours.get(hop)
        if a != b:
            differ.append((min(t for t in (a, b) if t is not None), hop, a, b))
    return sorted(differ, key=lambda row: (row[0], row[1]))
