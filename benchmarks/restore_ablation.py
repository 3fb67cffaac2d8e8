"""Queue restoration at re-entry, policy by policy, against packet mode (HyGra Table IV).

Two measurements, both on scenarios the restorer was not trained on:

* **depth**: on the test split of the restorer's dataset (``--dataset``; scenarios held
  out by name, ``restorer/dataset.py``), the error of each policy's depth against the
  depth packet mode had at the phase's end: ``freeze`` (the depth at the freeze: a
  partition freezes right after a sample, so the newest sample), ``empty`` (0), ``last``
  (the newest sample: the same here), ``mean`` (of the last l samples) and
  ``transformer`` (the shipped model). MAE and p99 in shares of the buffer and in KB.
* **end to end**: each case in hybrid mode under each policy, per-flow FCT error (mean,
  max) and job-time error against packet mode, windows, re-entries, packets the restorer
  put back or drained, and the wall time of one re-entry's restoration of every port
  (jitted, timed alone). Next to them, the case's own sensitivity: the largest FCT change
  in packet mode when one flow starts 10 ns, 100 ns or 1 µs later (DCQCN's synchronised
  sawtooth and HPCC's slow convergence to fairness turn that into percents: no policy
  can be judged below it). Cases: the
  acceptance case, staggered elephants sharing a bottleneck under DCQCN
  (``staggered_dcqcn``), and the test-split elephants of the catalogue under every CC.

    PYTHONPATH=. python benchmarks/restore_ablation.py --dataset restorer_dataset.npz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from machine import machine_info
from multiverse_jax.batch import build_batch
from multiverse_jax.components.steady import RESTORE_CODES
from multiverse_jax.conf.schema import HybridRestore, SwitchConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.restorer import dataset as catalogue
from multiverse_jax.restorer.checkpoint import load_shipped
from multiverse_jax.restorer.model import predict
from multiverse_jax.restorer.train import load_dataset
from multiverse_jax.simulate import simulate
from multiverse_jax.systems.steady import _restore
from multiverse_jax.topology.fattree import fattree
from multiverse_jax.units import PS_PER_US
from multiverse_jax.workload.flows import make_flows

MB = 10**6
POLICIES = ("freeze", "empty", "last", "mean", "transformer")


def staggered_dcqcn() -> Experiment:
    """Four flows of 15-30 MB into host 0 from four pods' hosts, starting 0, 0.4, 0.9 and
    1.5 ms: each start and finish moves the bottleneck's queue (DCQCN, 100 Gb/s, 2 MB buffers)."""
    flows = make_flows([4, 8, 12, 5], 0, np.array([30, 20, 25, 15]) * MB, np.array([0, 400, 900, 1500]) * PS_PER_US)
    return Experiment(fattree(4, 100.0, 1.0), flows, cc="dcqcn", switch=SwitchConfig(buffer_bytes=2_000_000))


def cases() -> dict[str, Experiment]:
    loose = dataclasses.replace(staggered_dcqcn().hybrid, theta=0.2)
    out = {
        "staggered_dcqcn": staggered_dcqcn(),
        # θ = 0.2 lets the DCQCN sawtooth (a 19 % spread) pass as steady: phases freeze
        # queues that move, the case restoration is for.
        "staggered_dcqcn_theta20": dataclasses.replace(staggered_dcqcn(), hybrid=loose),
    }
    for cc in catalogue.CCS:
        out[f"elephants_{cc}"] = catalogue.staggered_elephants(4, cc)  # v % 5 == 4: the test split
    return out


def depth_errors(dataset: dict) -> list[dict]:
    """Each policy's depth error on the test split (shares of the buffer and KB)."""
    test = dataset["split"] == catalogue.SPLIT_TEST
    history, context, target = dataset["history"][test], dataset["context"][test], dataset["target"][test]
    config, weights, _ = load_shipped()
    guesses = {
        "freeze": history[:, 0],
        "empty": np.zeros_like(target),
        "last": history[:, 0],
        "mean": history.mean(axis=1),
        "transformer": np.asarray(predict(config, weights, history, context)),
    }
    buffer_mb = 2.0 ** context[:, 1]  # features.context_features: log2(buffer / 1 MB)
    rows = []
    for policy, guess in guesses.items():
        error = np.abs(guess - target)
        rows.append(
            {
                "policy": policy,
                "pairs": int(test.sum()),
                "mae_share": float(error.mean()),
                "p99_share": float(np.percentile(error, 99)),
                "mae_kb": float(np.mean(error * buffer_mb * 1e3)),
            }
        )
    return rows


def with_policy(experiment: Experiment, mode: str, policy: str = "freeze") -> Experiment:
    hybrid = dataclasses.replace(experiment.hybrid, restore=HybridRestore(policy))
    return dataclasses.replace(experiment, sim=dataclasses.replace(experiment.sim, mode=mode, sample_interval_us=0), hybrid=hybrid)


NUDGES_PS = (10_000, 100_000, 1_000_000)  # 10 ns, 100 ns, 1 µs


def shifted(experiment: Experiment, shift_ps: int) -> Experiment:
    """The experiment with its second flow starting ``shift_ps`` later."""
    start_ps = experiment.flows.start_ps.copy()
    start_ps[min(1, len(start_ps) - 1)] += shift_ps
    return dataclasses.replace(experiment, flows=dataclasses.replace(experiment.flows, start_ps=start_ps))


def restore_cost_ms(hybrid: Experiment, static, repeats: int = 20) -> dict[str, float]:
    """Wall ms of one re-entry's restoration of every port (``systems.steady._restore``,
    jitted, on the case's initial state), per policy: its cost depends on shapes, not on
    what the queues hold."""
    batch = build_batch([hybrid], static=static)
    params, state = jax.tree.map(lambda x: x[0], (batch.params, batch.state))
    n_ports, n_flows = static.n_ports, static.n_flows
    ports, flows = jnp.ones(n_ports, bool), jnp.ones(n_flows, bool)
    now_ps, phase_ps = jnp.full(n_ports, 10**9), jnp.full(n_ports, 10**9)
    restore = jax.jit(_restore)
    costs = {}
    for policy in POLICIES:
        p = params.replace(steady=params.steady.replace(restore=jnp.int32(RESTORE_CODES[HybridRestore(policy)])))
        args = (p, state, ports, now_ps, phase_ps, flows, jnp.full(n_flows, 100, jnp.int32))
        jax.block_until_ready(restore(*args))
        start = time.perf_counter()
        for _ in range(repeats):
            jax.block_until_ready(restore(*args))
        costs[policy] = (time.perf_counter() - start) * 1e3 / repeats
    return costs


def run_case(name: str, experiment: Experiment, slots: int) -> list[dict]:
    """Packet mode (and again with one flow starting 10 ns, 100 ns, 1 µs later: the case's
    own sensitivity, below which no policy can be judged), then hybrid under each policy,
    one at a time with one compiled program (warmed up first: wall times exclude compilation)."""
    hybrids = [with_policy(experiment, "hybrid", p) for p in POLICIES]
    static = build_batch(hybrids, slots_per_host=slots).params.static
    packets = [with_policy(experiment, "packet")] + [with_policy(shifted(experiment, s), "packet") for s in NUDGES_PS]
    packet, *nudged = simulate(packets, slots_per_host=slots, steps_per_call=256)
    simulate(hybrids[:1], static=static, steps_per_call=256)  # compile
    reference = packet.flows["fct_ps"].astype(np.float64)
    noise_pct = max(float(np.max(np.abs(n.flows["fct_ps"] - reference) / reference) * 100) for n in nudged)
    cost_ms = restore_cost_ms(hybrids[0], static)
    rows = []
    for policy, hybrid in zip(POLICIES, hybrids):
        start = time.perf_counter()
        result = simulate([hybrid], static=static, steps_per_call=256)[0]
        wall_s = time.perf_counter() - start
        s = result.summary
        error = np.abs(result.flows["fct_ps"] - reference) / reference * 100
        rows.append(
            {
                "case": name,
                "policy": policy,
                "status": s["status"],
                "fct_err_mean_pct": float(error.mean()),
                "fct_err_max_pct": float(error.max()),
                "job_err_pct": float((s["job_time_ps"] - packet.summary["job_time_ps"]) / packet.summary["job_time_ps"] * 100),
                "windows": s["n_windows"],
                "packet_windows": packet.summary["n_windows"],
                "reentries": s["steady_exits"],
                "added_packets": s["restore_added_packets"],
                "drained_packets": s["restore_drained_packets"],
                "wall_s": wall_s,
                "packet_noise_max_pct": noise_pct,
                "restore_ms_per_reentry": cost_ms[policy],
            }
        )
        print(f"{name} {policy}: max FCT error {rows[-1]['fct_err_max_pct']:.2f} %", file=sys.stderr, flush=True)
    return rows


def table(depth_rows: list[dict], e2e_rows: list[dict]) -> str:
    lines = [f"{'policy':12} {'pairs':>6} {'MAE %buf':>9} {'p99 %buf':>9} {'MAE KB':>8}"]
    for r in depth_rows:
        lines.append(f"{r['policy']:12} {r['pairs']:6d} {r['mae_share'] * 100:9.2f} {r['p99_share'] * 100:9.2f} {r['mae_kb']:8.1f}")
    lines.append("")
    lines.append(
        f"{'case':18} {'policy':12} {'FCT err mean/max %':>19} {'job err %':>9} {'windows':>8} {'re-entries':>10} "
        f"{'added/drained':>14} {'ms/re-entry':>11} {'noise %':>7}"
    )
    for r in e2e_rows:
        lines.append(
            f"{r['case']:18} {r['policy']:12} {r['fct_err_mean_pct']:9.2f}/{r['fct_err_max_pct']:<9.2f} {r['job_err_pct']:9.2f} "
            f"{r['windows']:8d} {r['reentries']:10d} {r['added_packets']:>6d}/{r['drained_packets']:<7d} {r['restore_ms_per_reentry']:11.2f} "
            f"{r['packet_noise_max_pct']:7.2f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="restorer_dataset.npz", help="the restorer's dataset (its test split)")
    parser.add_argument("--cases", default=",".join(cases()), help="end-to-end cases")
    parser.add_argument("--slots", type=int, default=512, help="sim.packets_per_host")
    parser.add_argument("--out", default="benchmarks/results/restore_ablation.json")
    args = parser.parse_args(argv)
    depth_rows = depth_errors(load_dataset(args.dataset))
    all_cases = cases()
    e2e_rows = [row for name in args.cases.split(",") for row in run_case(name, all_cases[name], args.slots)]
    print(table(depth_rows, e2e_rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine_info(), "args": vars(args), "depth": depth_rows, "end_to_end": e2e_rows}
    out.write_text(json.dumps(payload, indent=2))
    return 0 if all(r["status"] == "ok" for r in e2e_rows) else 1


if __name__ == "__main__":
    sys.exit(main())
