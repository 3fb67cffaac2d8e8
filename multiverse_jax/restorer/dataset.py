"""The restorer's dataset: packet-level traces cut at steady-phase boundaries (HyGra §IV-C).

``multiverse-jax-restorer-dataset`` runs a catalogue of packet-level scenarios — staggered
elephants sharing a bottleneck, incasts, permutations, ring all-reduces and small LLM
iterations, under every congestion control, on k=4 fat-trees and 2:1 oversubscribed
leaf-spines at 100 and 200 Gb/s with 1-4 MB buffers, each family's variants as one batched
program — and reads their time series (``sim.sample_interval_us`` set to the hybrid
sample interval of the experiment's CC, so the depths are sampled exactly as the
engine's depth ring samples them at run time).

The trace is the engine's own time series (``components/samples.py``): each port's queue
depth and each flow's delivered bytes every sample; the context comes from the
experiment (link rate, buffer, CC) and the flows' paths.

Cuts (``cut_pairs``), per switch port, where hybrid mode would freeze it: at a sample where
every flow whose data path crosses the port has been steady (delivered rate spread below
θ of its mean, ``hybrid.theta``) over the last l samples and none started or ended, a
phase begins (and again every l samples while that lasts). It can end at any later sample
before the set of flows crossing the port changes (a flow starting or finishing is what
ends a phase in the engine); ends are taken at 1, 2, 4, ... samples and just before the
change. Each pair: the depth history before the phase and its context → the depth at the
phase's end (``restorer/features.py``). Pairs whose history and target are all empty are
kept at most as often as the others.

Splits are by scenario, never by sample: of every family and CC's variants, every fifth
(v % 5 == 3) is validation and the next (v % 5 == 4) test.

    multiverse-jax-restorer-dataset --out restorer_dataset.npz

Progress goes to stderr (``progress.py``): scenarios done of total with an ETA, simulated
time and windows per second; off a terminal a line every ``--progress-interval-s`` (10).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from multiverse_jax.batch import build_batch, with_flow_paths
from multiverse_jax.components.experiment import CC_CODES
from multiverse_jax.components.steady import sample_interval_ps
from multiverse_jax.conf.schema import CcKind, SimConfig, SwitchConfig
from multiverse_jax.config import experiment_from_config
from multiverse_jax.experiment import Experiment
from multiverse_jax.peers.scenarios import ring_allreduce
from multiverse_jax.progress import DEFAULT_INTERVAL_S, Progress, SimulationProgress
from multiverse_jax.restorer.features import N_CONTEXT, N_HISTORY, context_features, history_features
from multiverse_jax.simulate import simulate
from multiverse_jax.topology.fattree import fattree
from multiverse_jax.topology.leafspine import leafspine
from multiverse_jax.units import PS_PER_US
from multiverse_jax.workload.flows import make_flows

MB = 10**6
CCS = ("none", "dcqcn", "dctcp", "hpcc")
N_VARIANTS = 5  # per family and CC: v % 5 == 3 validation, v % 5 == 4 test
SPLIT_TRAIN, SPLIT_VALIDATION, SPLIT_TEST = 0, 1, 2
TINY_MODEL = {"layers": 4, "hidden": 512, "heads": 8, "seq_len": 256, "vocab": 1000}


def split_of(variant: int) -> int:
    return {3: SPLIT_VALIDATION, 4: SPLIT_TEST}.get(variant % N_VARIANTS, SPLIT_TRAIN)


LEAFSPINE = {"kind": "leafspine", "leaves": 4, "hosts_per_leaf": 4, "oversubscription": 2.0}  # 16 hosts, 2 spines


def _fabric(variant: int) -> tuple[float, int, dict]:
    """(link rate in Gb/s, switch buffer in bytes, ``topology.*``) of a variant: rates,
    buffers and fabrics vary (variants 1 and 4, one trained on and one held out, run on a
    2:1 oversubscribed leaf-spine, the others on a k=4 fat-tree; both have 16 hosts)."""
    topology = LEAFSPINE if variant % 3 == 1 else {"kind": "fattree", "k": 4}
    return (100.0, 200.0)[variant % 2], (1_000_000, 2_000_000, 4_000_000)[variant % 3], topology


def _flows_experiment(variant: int, cc: str, src, dst, size_bytes, start_ps=0) -> Experiment:
    rate_gbps, buffer_bytes, topology = _fabric(variant)
    if topology["kind"] == "leafspine":
        fabric = leafspine(topology["leaves"], topology["hosts_per_leaf"], topology["oversubscription"], rate_gbps, 1.0)
    else:
        fabric = fattree(topology["k"], rate_gbps, 1.0)
    flows = make_flows(src, dst, size_bytes, start_ps)
    return Experiment(fabric, flows, cc=cc, switch=SwitchConfig(buffer_bytes=buffer_bytes))


def staggered_elephants(variant: int, cc: str) -> Experiment:
    """2-4 flows of 10-40 MB into one host, each starting 0.2-0.6 ms after the last (queues
    move as flows join and leave the bottleneck)."""
    rng = np.random.default_rng(100 + variant)
    n = 2 + variant % 3
    src = rng.choice(np.arange(4, 16), n, replace=False)
    start_ps = np.cumsum(np.r_[0, rng.integers(200, 600, n - 1)]) * PS_PER_US
    return _flows_experiment(variant, cc, src, 0, rng.integers(10, 41, n) * MB, start_ps)


def incast(variant: int, cc: str) -> Experiment:
    """4-8 hosts send 2-4 MB each to host 0 at once."""
    rng = np.random.default_rng(200 + variant)
    n = 4 + variant % 5
    return _flows_experiment(variant, cc, rng.choice(np.arange(1, 16), n, replace=False), 0, int((2 + 0.5 * variant) * MB))


def permutation(variant: int, cc: str) -> Experiment:
    """Every host sends 4-8 MB to another (a random derangement)."""
    rng = np.random.default_rng(300 + variant)
    dst = rng.permutation(16)
    while np.any(dst == np.arange(16)):
        dst = rng.permutation(16)
    return _flows_experiment(variant, cc, np.arange(16), dst, int((4 + variant) * MB))


def ring(variant: int, cc: str) -> Experiment:
    """A triggered ring all-reduce of 32-64 MB over 4 or 8 hosts."""
    n = (4, 8)[variant % 2]
    hosts = list(range(0, 16, 16 // n))[:n]
    scenario = ring_allreduce(f"ring{n}", 16, hosts, (32 + 8 * variant) * MB)
    path = scenario.write(Path(tempfile.mkdtemp()) / f"ring{n}.cm")
    rate_gbps, buffer_bytes, topology = _fabric(variant)
    return experiment_from_config(
        {
            "workload": {"kind": "cm", "path": path},
            "topology": topology,
            "cc": cc,
            "link": {"rate_gbps": rate_gbps},
            "switch": {"buffer_bytes": buffer_bytes},
        }
    )


def llm(variant: int, cc: str) -> Experiment:
    """A small LLM iteration (TP=2, PP=2, DP=4 on the variant's fabric; 2-4 microbatches, ECMP
    hashes seeded by the variant)."""
    rate_gbps, buffer_bytes, topology = _fabric(variant)
    workload = {"kind": "llm", "model": TINY_MODEL, "tp": 2, "pp": 2, "dp": 4, "microbatches": 2 + variant % 3}
    return experiment_from_config(
        {
            "workload": workload,
            "topology": topology,
            "cc": cc,
            "link": {"rate_gbps": rate_gbps},
            "switch": {"buffer_bytes": buffer_bytes},
            "sim": {"seed": variant},
        }
    )


FAMILIES = {
    "elephants": staggered_elephants,
    "incast": incast,
    "permutation": permutation,
    "ring": ring,
    "llm": llm,
}


def sampled_like_hybrid(experiment: Experiment) -> Experiment:
    """The experiment in packet mode, its time series sampled at the hybrid sample interval
    (of its CC: ``components/steady.sample_interval_ps``)."""
    interval_us = sample_interval_ps(experiment) / PS_PER_US
    return dataclasses.replace(experiment, sim=dataclasses.replace(experiment.sim, mode="packet", sample_interval_us=interval_us))


def data_paths(experiment: Experiment) -> np.ndarray:
    """(F, Hp) int32 every flow's data path (egress ports, -1 padded), as the engine routes it."""
    hybrid = dataclasses.replace(experiment, sim=dataclasses.replace(experiment.sim, mode="hybrid"))  # sizes whole paths
    batch = build_batch([hybrid])
    return np.asarray(with_flow_paths(batch.params).flows.flow_data_path[0, : len(experiment.flows)])


def _per_sample(series: dict, key: str, n: int) -> np.ndarray:
    """(T, n) a long-format column (``Result.flow_series`` / ``port_series``) as a matrix."""
    return np.asarray(series[key]).reshape(-1, n)


def _steady(delivered, window: int, theta: float) -> np.ndarray:
    """(T, F) bool each flow's delivered rate (T, F) spread by less than θ of its mean over
    the ``window`` samples ending at each sample (False before that many): Wormhole eq. 6,
    as ``ops/steady.py`` applies it to the engine's rings."""
    steady = np.zeros(delivered.shape, bool)
    if delivered.shape[0] < window:
        return steady
    blocks = np.lib.stride_tricks.sliding_window_view(delivered, window, axis=0)  # (T - window + 1, F, window)
    low, high = blocks.min(axis=2), blocks.max(axis=2)
    steady[window - 1 :] = (low > 0) & (high - low < theta * blocks.mean(axis=2))
    return steady


def _phase_ends(start: int, change: int) -> list[int]:
    """Sample indices where a phase begun at ``start`` may end, before ``change`` (the first
    sample at which the flows crossing the port differ): 1, 2, 4, ... samples later, and
    the last sample before the change."""
    ends = [start + k for k in (1 << np.arange(12)) if start + k < change]
    if change - 1 > start and (not ends or ends[-1] != change - 1):
        ends.append(change - 1)
    return ends


def cut_pairs(experiment: Experiment, result) -> dict[str, np.ndarray]:
    """The (history, context, target) pairs of one packet-mode run (see the module docstring)."""
    topo, flows = experiment.topology, experiment.flows
    n_flows, n_ports = len(flows), len(topo.link_src)
    queue = _per_sample(result.port_series, "queue_bytes", n_ports).astype(np.float64)  # (T, P)
    times_us = _per_sample(result.port_series, "time_us", n_ports)[:, 0]
    rx = _per_sample(result.flow_series, "rx_bytes", n_flows).astype(np.float64)  # (T, F)
    # Samples are taken at window ends, up to a window after their due time: divide by
    # the time actually between them.
    between_us = np.diff(times_us, prepend=0.0)
    delivered = np.diff(rx, axis=0, prepend=0.0) / np.maximum(between_us, 1e-9)[:, None]  # (T, F) bytes/µs
    window, theta = experiment.hybrid.window, experiment.hybrid.theta
    steady = _steady(delivered, window, theta)
    start_us, finish_us = result.flows["start_us"], result.flows["finish_us"]
    active = (start_us[None, :] <= times_us[:, None]) & ~(finish_us[None, :] <= times_us[:, None])  # (T, F)
    paths = data_paths(experiment)
    columns = {"history": [], "context": [], "target": []}
    for port in np.flatnonzero(topo.link_src >= topo.n_hosts):  # switch ports: a finite buffer
        crossing = np.any(paths == port, axis=1)  # (F,)
        if not crossing.any():
            continue
        members = active[:, crossing]  # (T, C)
        changed = np.r_[True, np.any(members[1:] != members[:-1], axis=1)]  # the set of flows moved here
        since_change = np.arange(len(times_us)) - np.maximum.accumulate(np.where(changed, np.arange(len(times_us)), 0))
        ok = members.any(axis=1) & np.all(steady[:, crossing] | ~members, axis=1) & (since_change >= window)
        starts = np.flatnonzero(ok & ((since_change - window) % window == 0) & (np.arange(len(times_us)) >= N_HISTORY - 1))
        next_change = np.r_[np.flatnonzero(changed), len(times_us)]
        for start in starts:
            change = next_change[np.searchsorted(next_change, start, side="right")]
            load_bytes_per_us = delivered[start - window + 1 : start + 1][:, crossing & active[start]].mean(axis=0).sum()
            for end in _phase_ends(start, change):
                columns["history"].append(queue[start - N_HISTORY + 1 : start + 1][::-1, port])
                columns["context"].append((port, members[start].sum(), load_bytes_per_us, end - start))
                columns["target"].append(queue[end, port])
    return _to_features(experiment, columns)


def _to_features(experiment: Experiment, columns) -> dict[str, np.ndarray]:
    """Normalise the raw cuts of ``cut_pairs`` with ``restorer/features.py``."""
    topo = experiment.topology
    if not columns["target"]:
        empty = {"history": (0, N_HISTORY), "context": (0, N_CONTEXT), "target": (0,)}
        return {key: np.zeros(shape, np.float32) for key, shape in empty.items()}
    port, n_flows, load_bytes_per_us, phase_samples = (np.asarray(c) for c in zip(*columns["context"]))
    rate_bps = np.asarray(topo.link_rate_bps, np.float64)[port]
    buffer_bytes = np.full(len(port), experiment.switch.buffer_bytes, np.float64)
    packet = experiment.packet
    wire_per_payload = (packet.payload_bytes + packet.header_bytes) / packet.payload_bytes
    load = load_bytes_per_us * wire_per_payload * 8e6 / rate_bps  # bytes/µs -> bits/s
    interval_us = sample_interval_ps(experiment) / PS_PER_US
    cc_kind = np.full(len(port), CC_CODES[CcKind(experiment.cc)])
    history = np.asarray(history_features(np.stack(columns["history"]), buffer_bytes))
    context = np.asarray(context_features(rate_bps, buffer_bytes, n_flows, load, phase_samples, interval_us, cc_kind))
    target = (np.asarray(columns["target"]) / buffer_bytes).astype(np.float32)
    return {"history": history, "context": context, "target": target}


def scenarios(families=tuple(FAMILIES), ccs=CCS, n_variants: int = N_VARIANTS):
    """[(name, split, experiment)] of the catalogue, family by family."""
    return [
        (f"{family}/{cc}/{v}", split_of(v), sampled_like_hybrid(FAMILIES[family](v, cc)))
        for family in families
        for cc in ccs
        for v in range(n_variants)
    ]


def _balance(parts: dict[str, np.ndarray], rng) -> np.ndarray:
    """Indices to keep: every pair with a queue in its history or target, and at most as
    many of the pairs whose port stayed empty throughout."""
    empty = (parts["target"] == 0) & np.all(parts["history"] == 0, axis=1)
    idle = np.flatnonzero(empty)
    keep_idle = rng.choice(idle, min(len(idle), int(np.sum(~empty))), replace=False) if len(idle) else idle
    return np.sort(np.concatenate([np.flatnonzero(~empty), keep_idle]))


def build_dataset(
    out,
    families=tuple(FAMILIES),
    ccs=CCS,
    n_variants: int = N_VARIANTS,
    seed: int = 0,
    log=print,
    progress_interval_s: float = DEFAULT_INTERVAL_S,
) -> dict:
    """Run the catalogue (one batched program per family), cut it, and save the ``.npz``
    that ``multiverse-jax-train-restorer`` reads (``restorer/train.load_dataset``). Each
    family's cuts are kept in ``<out>.parts/`` as they finish; a rerun reuses them.

    Progress on stderr (``progress.py``): scenarios done of total with an ETA, simulated
    time and windows per second; a line every ``progress_interval_s`` off a terminal (0: none)."""
    out = Path(out)
    parts_dir = out.with_name(out.name + ".parts")
    parts_dir.mkdir(parents=True, exist_ok=True)
    catalogue = scenarios(families, ccs, n_variants)
    names = [name for name, _, _ in catalogue]
    chunks = []
    progress = Progress("dataset", total=len(catalogue), unit="scenarios", interval_s=progress_interval_s)
    with SimulationProgress(progress) as scenarios_progress:
        for family in families:
            members = [(i, split, exp) for i, (name, split, exp) in enumerate(catalogue) if name.startswith(family + "/")]
            chunks.append(_family_cuts(parts_dir / f"{family}.npz", family, members, log, scenarios_progress))
    merged = {key: np.concatenate([c[key] for c in chunks]) for key in chunks[0]}
    keep = _balance(merged, np.random.default_rng(seed))
    dataset = {key: value[keep] for key, value in merged.items()}
    dataset["scenario_names"] = np.asarray(names)
    np.savez_compressed(out, **dataset)
    for split, label in ((SPLIT_TRAIN, "train"), (SPLIT_VALIDATION, "validation"), (SPLIT_TEST, "test")):
        log(f"{label}: {int(np.sum(dataset['split'] == split))} pairs")
    return dataset


def _family_cuts(path: Path, family: str, members, log, progress: SimulationProgress) -> dict[str, np.ndarray]:
    """One family's cuts, from ``path`` if a previous run saved them, else simulated (one
    batch) and saved there. A failed experiment is reported and left out."""
    if path.exists():
        log(f"{family}: reusing {path}")
        progress.finished([{}] * len(members))
        return dict(np.load(path))
    start = time.perf_counter()
    experiments = [exp for _, _, exp in members]
    results = simulate(experiments, slots_per_host=512, steps_per_call=256, on_progress=progress.on_state)
    progress.finished([result.summary for result in results])
    pieces = []
    for (index, split, exp), result in zip(members, results):
        if not result.ok:
            log(f"{family}: scenario {index} failed ({result.summary['error']}); left out")
            continue
        cut = cut_pairs(exp, result)
        n = len(cut["target"])
        pieces.append({**cut, "split": np.full(n, split, np.int8), "scenario": np.full(n, index, np.int32)})
    cuts = {key: np.concatenate([p[key] for p in pieces]) for key in pieces[0]}
    np.savez(path, **cuts)
    log(f"{family}: {len(members)} scenarios, {len(cuts['target'])} pairs in {time.perf_counter() - start:.0f} s")
    return cuts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="restorer_dataset.npz", help="the .npz to write")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"of {', '.join(FAMILIES)}")
    parser.add_argument("--ccs", default=",".join(CCS), help="congestion controls")
    parser.add_argument("--variants", type=int, default=N_VARIANTS, help="variants per family and CC")
    parser.add_argument("--seed", type=int, default=0, help="which empty-port pairs are kept")
    parser.add_argument(
        "--progress-interval-s", type=float, default=DEFAULT_INTERVAL_S,
        help="off a terminal, a progress line on stderr this often (0: none)",
    )
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"--families: unknown {', '.join(unknown)}; valid: {', '.join(FAMILIES)}")
    ccs = [c for c in args.ccs.split(",") if c]
    bad_cc = sorted(set(ccs) - {k.value for k in CcKind})
    if bad_cc:
        parser.error(f"--ccs: unknown {', '.join(bad_cc)}; valid: {', '.join(k.value for k in CcKind)}")

    def log(line):
        print(line, file=sys.stderr, flush=True)

    build_dataset(args.out, families, ccs, args.variants, args.seed, log, args.progress_interval_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
