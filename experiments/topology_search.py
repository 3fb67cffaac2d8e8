"""Topology search: generate many fabrics for one cluster size, simulate them all in one go,
rank them by job time and by cost, and find the Pareto front.

What it does
------------
1. Generates every valid variant with exactly ``--hosts`` hosts (GPU NICs) of

   * the 3-tier k-ary fat-tree, when k^3/4 equals the host count (16: k=4, 54: k=6,
     128: k=8, 250: k=10, 432: k=12);
   * the 2-tier leaf-spine: every split leaves x hosts_per_leaf of the host count (at least
     2 leaves and 2 hosts per leaf) at each oversubscription of ``--oversubscription``
     that gives a whole number of spines (spines = hosts_per_leaf / oversubscription);
   * the rail-optimised fabric: for each ``--gpus-per-server`` (rails) that divides the
     host count, servers = hosts / gpus_per_server, servers_per_leaf among the largest
     divisors of the server count (at least 2), and spines = servers_per_leaf /
     oversubscription;

   and drops those that need a switch with more than ``--max-radix`` ports.
2. Builds one ``Experiment`` per variant with ``experiment_from_config`` (the same path
   as a config file: every value is checked) and the same workload on all of them:

   * ``--workload permutation`` (default): every host sends ``--flow-bytes`` to another
     host, the destinations a random derangement fixed by ``--seed`` (the same flows on
     every variant, since they all have the same host count);
   * ``--workload llm``: one training iteration of a small GPT with TP = the server size
     (inside a server), PP=1 and DP = hosts / server size across servers: an all-reduce-
     heavy job. Rail variants are kept only where their GPUs per server equal the job's
     server size (``--llm-gpus-per-server``).
3. Simulates all of them through ``multiverse_jax.sweep.groups.simulate_many``: points
   are grouped by their array shapes and every group runs as one batched, compiled
   program (on a GPU in lockstep; ``--max-batch-size`` bounds a batch).
4. Computes the cost of each fabric from its ``Topology`` (hosts are node ids 0..n_hosts-1,
   switches the others, each cable two directed links): ``switches``, ``switch_ports``
   (cable ends on switches), ``cables`` (host and switch cables) and ``max_radix`` (ports
   of the biggest switch); ``--cost`` picks the one the front uses (default switch_ports).
5. Ranks the variants by ``job_time_us`` (the last flow's completion; for ``llm`` the
   ``iteration_time_us``), finds the Pareto front (no other variant is both cheaper or as
   cheap and faster), prints the front and the top ``--top`` as tables, and writes
   ``topology_search.json`` (every variant, best first, with its rank, cost and metrics)
   and ``topology_search.png`` (cost against job time, the front highlighted) into
   ``--out``.

Search mode (``--search TRIALS``)
--------------------------------
Instead of simulating every variant, Optuna (NSGA-II, two objectives: job time and
``--cost``) explores the product of the variants, ``--lbs`` and ``--buffers`` with ask/tell:
each ask of ``--batch`` trials becomes one ``simulate_many`` call (many trials per compiled
program; each call padded to ``--batch`` points so every ask reuses the programs of the
first), and the front is drawn from the distinct points it evaluated.

Which to use: enumeration when the whole space can be simulated (up to a few hundred
points: one batched program per shape, the exact front, nothing missed); search when the
product of choices is too large for that (thousands of points and up: trials go where the
front is, at the price of maybe missing a point of it -- run more trials, or enumerate the
neighbourhood of what it found). ``multiverse-jax -m hydra/sweeper=optuna`` is the same
search for any config key, without a script.

    python experiments/topology_search.py                 # 128 hosts, permutation of 256 KB flows
    python experiments/topology_search.py --quick         # 16 hosts, 3 variants (the test)
    python experiments/topology_search.py --hosts 64 --oversubscription 1 2 4 8 --cost cables
    python experiments/topology_search.py --workload llm --hosts 64 --llm-gpus-per-server 8
    python experiments/topology_search.py --search 64 --lbs ecmp spray flowlet --buffers 500000 2000000

How to extend it
----------------
* Another family: write a generator ``def my_variants(n_hosts, args) -> list[Variant]``
  (a ``Variant`` is a name and the ``topology`` section of a config, e.g. ``{"kind":
  "custom", "path": "net.topo"}``) and add it to ``GENERATORS``; the rest (validation,
  batching, cost, ranking, plot) works for any topology ``experiment_from_config`` builds.
* Another cost model: add a column in ``topology_cost`` (e.g. a price per port by radix,
  optics for the upper tiers) and a ``--cost`` choice.
* Another workload or metric: change ``workload_config`` (any ``workload`` section of a
  config) and ``metric_of``.
* Other knobs per variant (link rate, buffers, cc, lb): extend ``base_config``; each
  variant is a whole config, so a variant may as well change them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

from multiverse_jax.topology.cost import COST_COLUMNS, topology_cost  # noqa: F401 (topology_cost: also for tests)

DEFAULT_OUT = Path("outputs/topology_search")  # outputs/ is git-ignored
# --quick: 16 hosts, 100 KB flows, three 2-tier variants (leaf-spine and rail) whose
# bucketed shapes are the same, so one compiled program runs them all: about 8 s on a
# 2-core CPU. (A fat-tree, k=4 for 16 hosts, would be a second program: --only adds it.)
QUICK = dict(
    hosts=16,
    flow_bytes=100_000,
    oversubscription=[2, 4],
    gpus_per_server=[4],
    only=["leafspine 4x4 2:1", "leafspine 2x8 4:1", "rail 4x4 spl4 2:1"],
)


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str  # readable, unique
    topology: dict  # the config's topology section


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def fattree_variants(n_hosts: int, args) -> list[Variant]:
    return [
        Variant(f"fattree k={k}", {"kind": "fattree", "k": k})
        for k in range(2, 65, 2)
        if k**3 // 4 == n_hosts
    ]


def leafspine_variants(n_hosts: int, args) -> list[Variant]:
    out = []
    for leaves in divisors(n_hosts):
        per_leaf = n_hosts // leaves
        if leaves < 2 or per_leaf < 2:
            continue
        for over in args.oversubscription:
            if per_leaf % over:
                continue
            out.append(
                Variant(
                    f"leafspine {leaves}x{per_leaf} {over}:1",
                    {"kind": "leafspine", "leaves": leaves, "hosts_per_leaf": per_leaf, "oversubscription": over},
                )
            )
    return out


def rail_variants(n_hosts: int, args) -> list[Variant]:
    out = []
    for gpus in args.gpus_per_server:
        if gpus < 2 or n_hosts % gpus:
            continue
        servers = n_hosts // gpus
        per_leaf_options = [d for d in divisors(servers) if d >= 2][-args.rail_leaf_sizes :]
        for per_leaf in per_leaf_options:
            for over in args.oversubscription:
                if per_leaf % over:
                    continue
                spines = per_leaf // over
                out.append(
                    Variant(
                        f"rail {servers}x{gpus} spl{per_leaf} {over}:1",
                        {
                            "kind": "rail",
                            "servers": servers,
                            "gpus_per_server": gpus,
                            "servers_per_leaf": per_leaf,
                            "spines": spines,
                        },
                    )
                )
    return out


GENERATORS = (fattree_variants, leafspine_variants, rail_variants)


def workload_config(args) -> dict:
    if args.workload == "permutation":
        return {"kind": "permutation", "flow_bytes": args.flow_bytes}
    gps = args.llm_gpus_per_server
    if args.hosts % gps:
        raise SystemExit(f"--llm-gpus-per-server {gps} must divide --hosts {args.hosts}")
    return {
        "kind": "llm",
        "model": {"layers": 2, "hidden": 512, "heads": 16, "seq_len": 512, "vocab": 4096},
        "tp": gps,
        "pp": 1,
        "dp": args.hosts // gps,
        "microbatches": 2,
        "gpus_per_server": gps,
    }


def base_config(args) -> dict:
    """Everything but the topology: the same for every variant."""
    return {
        "workload": workload_config(args),
        "lb": args.lb,
        "sim": {"seed": args.seed, "sample_interval_us": 0},
        "output": {"plots": False},
    }


def metric_of(summary: dict, workload: str) -> float:
    key = "iteration_time_us" if workload == "llm" else "job_time_us"
    value = summary.get(key)
    return float(value) if value is not None else math.nan


def pareto_front(points: list[dict], cost: str, metric: str = "job_time_us") -> list[dict]:
    """The ok points that no other ok point beats on both ``cost`` and ``metric`` (lower is
    better; ``multiverse_jax.sweep.search.pareto_front``), cheapest first."""
    from multiverse_jax.sweep.search import pareto_front as front_indices

    ok = sorted((p for p in points if p["status"] == "ok"), key=lambda p: (p[cost], p[metric]))
    return [ok[i] for i in front_indices([[p[cost], p[metric]] for p in ok], ["minimize", "minimize"])]


def _json_safe(value):
    """``value`` with NaN and infinities as null (standard JSON) and NumPy scalars as Python."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="topology_search.py",
        description="Generate topology variants, simulate them batched, rank by job time and cost (Pareto front).",
    )
    p.add_argument("--quick", action="store_true", help="a tiny search: 16 hosts, 100 KB flows, 3 variants (the test)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    p.add_argument("--hosts", type=int, default=128, help="hosts (GPU NICs) of every variant (default 128)")
    p.add_argument("--workload", choices=("permutation", "llm"), default="permutation")
    p.add_argument("--flow-bytes", type=int, default=256_000, help="permutation: bytes per flow (default 256000)")
    p.add_argument("--llm-gpus-per-server", type=int, default=8, help="llm: GPUs per server = TP (default 8)")
    p.add_argument("--oversubscription", type=int, nargs="+", default=[1, 2, 4], help="leaf oversubscriptions (default 1 2 4)")
    p.add_argument("--gpus-per-server", type=int, nargs="+", default=[2, 4, 8], help="rail: GPUs (rails) per server (default 2 4 8)")
    p.add_argument("--rail-leaf-sizes", type=int, default=3, help="rail: the N largest servers-per-leaf choices (default 3)")
    p.add_argument("--max-radix", type=int, default=64, help="drop variants needing a switch with more ports (default 64)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="keep only the variants whose name contains one of these (e.g. 'fattree' 'leafspine 4x4')")
    p.add_argument("--lb", choices=("ecmp", "spray", "flowlet"), default="ecmp")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cost", choices=COST_COLUMNS, default="switch_ports", help="cost axis of the front (default switch_ports)")
    p.add_argument("--top", type=int, default=10, help="rows of the top table (default 10)")
    p.add_argument("--max-batch-size", type=int, default=None, help="points per batched call (default: what fits in memory)")
    p.add_argument("--search", type=int, default=0, metavar="TRIALS",
                   help="search mode: Optuna (NSGA-II, job time and --cost) over variant x --lbs x --buffers with this "
                   "many trials, instead of simulating every variant (default 0: enumeration)")
    p.add_argument("--batch", type=int, default=16, help="search: trials per ask, simulated as one batched call (default 16)")
    p.add_argument("--lbs", nargs="+", choices=("ecmp", "spray", "flowlet"), default=None,
                   help="search: load balancers to search over (default: --lb only)")
    p.add_argument("--buffers", type=int, nargs="+", default=None, metavar="BYTES",
                   help="search: switch.buffer_bytes values to search over (default: the config's)")
    p.add_argument("--compile-cache", default="auto", metavar="FOLDER",
                   help="compiled programs kept between runs, as sim.compile_cache: auto, none or a folder (default auto)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if args.quick:
        defaults = parser().parse_args([])
        for key, value in QUICK.items():  # quick sets what the user left at its default
            if getattr(args, key) == getattr(defaults, key):
                setattr(args, key, value)
    return args


def build(args):
    """(variants, experiments, invalid) -- invalid: [(variant, reason)] rejected by the config layer."""
    from multiverse_jax.config import experiment_from_config
    from multiverse_jax.errors import InputError

    base = base_config(args)
    variants, experiments, invalid = [], [], []
    for generate in GENERATORS:
        for variant in generate(args.hosts, args):
            if args.only and not any(text in variant.name for text in args.only):
                continue
            if args.workload == "llm" and variant.topology["kind"] == "rail":
                if variant.topology["gpus_per_server"] != args.llm_gpus_per_server:
                    continue
            try:
                experiment = experiment_from_config(dict(base, topology=variant.topology))
            except InputError as exc:
                invalid.append((variant, str(exc)))
                continue
            if topology_cost(experiment.topology)["max_radix"] > args.max_radix:
                continue
            variants.append(variant)
            experiments.append(experiment)
    return variants, experiments, invalid


def _table(title: str, rows: list[dict], cost: str):
    from rich.table import Table

    table = Table(title=title)
    for column in ("rank", "topology", "job time µs", "FCT p99 µs", "max queue KB", cost, "switches", "cables", "max radix", "front"):
        table.add_column(column, justify="left" if column == "topology" else "right")
    for p in rows:
        table.add_row(
            str(p["rank"]),
            p["name"],
            f"{p['job_time_us']:,.1f}",
            f"{p['fct_p99_us']:,.1f}",
            f"{p['max_queue_bytes'] / 1e3:,.0f}",
            f"{p[cost]:,}",
            f"{p['switches']:,}",
            f"{p['cables']:,}",
            f"{p['max_radix']:,}",
            "*" if p["pareto"] else "",
        )
    return table


def plot(points: list[dict], front: list[dict], cost: str, metric_label: str, path: Path) -> Path:
    from multiverse_jax.report.figure import new_figure, save

    fig = new_figure(8, 5.5, dpi=120)
    ax = fig.add_subplot()
    markers = {"fattree": "s", "leafspine": "o", "rail": "^"}
    for kind, marker in markers.items():
        pts = [p for p in points if p["kind"] == kind and p["status"] == "ok"]
        if pts:
            ax.scatter([p[cost] for p in pts], [p["job_time_us"] for p in pts], marker=marker, alpha=0.6, label=kind)
    others = [p for p in points if p["kind"] not in markers and p["status"] == "ok"]
    if others:
        ax.scatter([p[cost] for p in others], [p["job_time_us"] for p in others], marker="x", label="other")
    if front:
        ax.step([p[cost] for p in front], [p["job_time_us"] for p in front], where="post", color="crimson", lw=1.5)
        ax.scatter([p[cost] for p in front], [p["job_time_us"] for p in front], s=90, facecolors="none",
                   edgecolors="crimson", lw=1.5, label="Pareto front", zorder=3)
        for p in front:
            ax.annotate(p["name"], (p[cost], p["job_time_us"]), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.set_xlabel(cost.replace("_", " "))
    ax.set_ylabel(metric_label)
    ax.set_title(f"topology search: {len(points)} variants")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)


def make_point(name: str, variant: Variant, experiment, result, args, **knobs) -> dict:
    """One evaluated design point: its name, topology, knobs, cost and metrics."""
    point = {"name": name, "kind": variant.topology["kind"], "topology": variant.topology, **knobs}
    point.update(topology_cost(experiment.topology))
    if isinstance(result, Exception):
        point.update(status="failed", reason=f"{type(result).__name__}: {result}")
        summary = {}
    else:
        summary = result.summary
        point.update(status=summary["status"], reason=summary.get("error") or "")
    point["job_time_us"] = metric_of(summary, args.workload)
    for key in ("fct_mean_us", "fct_p99_us", "max_queue_bytes", "pfc_pauses"):
        value = summary.get(key)
        point[key] = float(value) if value is not None else math.nan
    return point


def enumerate_all(args, variants, experiments, console) -> tuple[list[dict], int]:
    """Enumeration mode: every variant, simulated in one go. Returns (points, batched groups)."""
    from multiverse_jax.sweep.groups import make_groups, simulate_many

    kinds = ", ".join(f"{kind}: {sum(v.topology['kind'] == kind for v in variants)}" for kind in ("fattree", "leafspine", "rail"))
    console.print(
        f"{len(experiments)} topology variants with {args.hosts} hosts ({kinds}); "
        f"workload {args.workload}; simulating them batched ...",
        highlight=False,
    )
    n_groups = len(make_groups(experiments, [{}] * len(experiments)))
    results = simulate_many(experiments, {}, max_batch_size=args.max_batch_size)
    points = [make_point(v.name, v, e, r, args) for v, e, r in zip(variants, experiments, results)]
    return points, n_groups


def search_space(args, variants) -> dict[str, list]:
    """Search mode's parameters and their choices: the topology variant, and lb and the
    switch buffer when more than one value is given."""
    space = {"topology": [v.name for v in variants]}
    if len(args.lbs or []) > 1:
        space["lb"] = list(args.lbs)
    if len(args.buffers or []) > 1:
        space["buffer_bytes"] = list(args.buffers)
    return space


def point_name(params: dict) -> str:
    return " ".join([params["topology"]] + [f"{k}={v}" for k, v in params.items() if k != "topology"])


def search_all(args, variants, console) -> tuple[list[dict], int]:
    """Search mode: Optuna's ask/tell over ``search_space``, two objectives (job time and
    ``--cost``: the Pareto front), ``--batch`` trials per ask, each ask one ``simulate_many``
    call (padded to ``--batch`` points, so one compiled program per shape serves every ask).
    A point asked for again is not simulated again. Returns (the distinct points, asks)."""
    try:
        import optuna
    except ImportError:
        raise SystemExit("--search needs Optuna: pip install 'multiverse-jax[search]'") from None
    from multiverse_jax.config import experiment_from_config
    from multiverse_jax.errors import InputError
    from multiverse_jax.sweep.groups import simulate_many
    from multiverse_jax.sweep.search import batched_ask_tell

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    by_name = {v.name: v for v in variants}
    space = search_space(args, variants)
    size = math.prod(len(choices) for choices in space.values())
    console.print(
        f"searching {size} design points ({' x '.join(f'{len(c)} {k}' for k, c in space.items())}) with "
        f"{args.search} trials, {args.batch} per batched ask; objectives job time and {args.cost}",
        highlight=False,
    )
    points: dict[str, dict] = {}

    def evaluate(asked: list[dict]) -> list:
        new = {point_name(p): p for p in asked if point_name(p) not in points}
        todo = []
        for name, params in new.items():
            variant = by_name[params["topology"]]
            config = dict(base_config(args), topology=variant.topology, lb=params.get("lb", args.lb))
            if "buffer_bytes" in params:
                config["switch"] = {"buffer_bytes": params["buffer_bytes"]}
            try:
                todo.append((name, params, variant, experiment_from_config(config)))
            except InputError as exc:
                points[name] = {"name": name, "kind": variant.topology["kind"], "status": "invalid", "reason": str(exc)}
        results = simulate_many([t[3] for t in todo], {}, max_batch_size=args.max_batch_size, min_batch_size=args.batch)
        for (name, params, variant, experiment), result in zip(todo, results):
            knobs = {k: v for k, v in params.items() if k != "topology"}
            points[name] = make_point(name, variant, experiment, result, args, **knobs)
        values = []
        for params in asked:
            point = points[point_name(params)]
            ok = point["status"] == "ok" and math.isfinite(point["job_time_us"])
            values.append([point["job_time_us"], point[args.cost]] if ok else None)
        return values

    def on_ask(index: int, asked: list[dict], values: list) -> None:
        done = [v for v in values if v is not None]
        console.print(
            f"ask {index + 1}: {len(asked)} trials, {len(points)} distinct points so far"
            + (f", fastest of this ask {min(v[0] for v in done):,.1f} µs" if done else ""),
            highlight=False,
        )

    sampler = optuna.samplers.NSGAIISampler(seed=args.seed, population_size=max(2, args.batch))
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    asks = batched_ask_tell(study, space, args.search, args.batch, evaluate, on_ask)
    return list(points.values()), asks


def main(argv=None) -> int:
    from rich.console import Console

    start = time.perf_counter()
    args = parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=150)  # pipes and logs: wide tables
    from multiverse_jax.compile_cache import use_compile_cache
    from multiverse_jax.errors import InputError

    try:
        use_compile_cache(args.compile_cache, key="--compile-cache")  # a second search of these shapes reads its programs back
    except InputError as exc:
        console.print(f"error: {exc}")
        return 2
    variants, experiments, invalid = build(args)
    if not experiments:
        console.print(f"no valid topology variant with {args.hosts} hosts")
        return 2
    built = time.perf_counter()
    if args.search:
        points, n_groups = search_all(args, variants, console)
    else:
        points, n_groups = enumerate_all(args, variants, experiments, console)
    simulated = time.perf_counter()

    # Rank: ok points by job time (then cost), then the others.
    points.sort(key=lambda p: (p["status"] != "ok", p["job_time_us"] if p["status"] == "ok" else math.inf, p.get(args.cost, 0)))
    for i, p in enumerate(points):
        p["rank"] = i + 1
    front = pareto_front(points, args.cost)
    front_names = {p["name"] for p in front}
    for p in points:
        p["pareto"] = p["name"] in front_names

    args.out.mkdir(parents=True, exist_ok=True)
    metric_label = "iteration time (µs)" if args.workload == "llm" else "job time (µs)"
    png = plot(points, front, args.cost, metric_label, args.out / "topology_search.png")
    wall = time.perf_counter() - start
    report = {
        "hosts": args.hosts,
        "workload": base_config(args)["workload"],
        "lb": args.lb,
        "seed": args.seed,
        "mode": "search" if args.search else "enumeration",
        "trials": args.search or None,
        "metric": "iteration_time_us" if args.workload == "llm" else "job_time_us",
        "note": "job_time_us holds the metric (iteration_time_us for llm)",
        "cost": args.cost,
        "n_variants": len(points),
        "n_groups": n_groups if not args.search else None,
        "n_asks": n_groups if args.search else None,
        "invalid": [{"name": v.name, "reason": r} for v, r in invalid],
        "wall_s": {"build": built - start, "simulate": simulated - built, "total": wall},
        "pareto_front": [p["name"] for p in front],
        "points": points,
    }
    path = args.out / "topology_search.json"
    path.write_text(json.dumps(_json_safe(report), indent=2) + "\n")

    console.print(_table(f"Pareto front: {metric_label} vs {args.cost} (cheapest first)", front, args.cost))
    console.print(_table(f"top {args.top} by {metric_label}", [p for p in points if p["status"] == "ok"][: args.top], args.cost))
    bad = [p for p in points if p["status"] != "ok"]
    for p in bad:
        console.print(f"  {p['name']}: {p['status']} {p['reason']}", highlight=False)
    how = f"{args.search} trials in {n_groups} batched asks" if args.search else f"{n_groups} batched groups"
    console.print(
        f"{len(points)} {'distinct points' if args.search else 'variants'} ({len(points) - len(bad)} ok) in {how}; "
        f"simulated in {simulated - built:.1f} s, {wall:.1f} s in all; wrote {path} and {png}",
        highlight=False,
    )
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
