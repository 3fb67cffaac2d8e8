"""The experiment library (``experiments/``): every design point of every sweep config is a
valid experiment, the README agrees with the configs, and ``topology_search.py`` runs.

Each ``experiments/*.yaml`` is composed with Hydra's compose API the way
``multiverse-jax --config-dir experiments --config-name NAME -m`` composes it; its
``hydra.sweeper.params`` are expanded as Hydra's basic sweeper expands them (Hydra's own
override parser: comma lists, ``range(...)``, ``choice(...)``; the cartesian product of
the parameters, in order), and every point must be accepted by
``multiverse_jax.config.experiment_from_config``. A point whose LLM does not fit in GPU
memory (``OutOfMemory``) counts as a valid "oom" result, as ``experiments/README.md``
says; any other ``InputError`` fails the test with the point and the reason.

Keeping this fast (the full-size configs have ~1200 points, and an LLM task graph of
128 GPUs takes up to a second to build):

* a config group choice (``topology=...``, ``workload=...``, ``parallel=...``, ``cc=...``,
  ``lb=...``) is composed once on its own and a point's config assembled from the nodes
  its choices change; its ``key=value`` overrides are applied with
  ``OmegaConf.update(..., merge=True)``, as Hydra's config loader applies them
  (``Composer``); three points per config are composed for real and compared;
* ``_small`` configs: ``experiment_from_config`` on every point;
* full-size configs: ``experiment_from_config`` checks a point in two independent parts,
  each checked once per distinct input: (a) everything but the workload (topology, link,
  packet, switch, cc groups, lb, sim), with the point's workload replaced by a tiny
  permutation, once per distinct non-workload config; (b) the workload on its topology
  (generation, memory, placement, flows vs hosts: it reads only the ``workload`` and
  ``topology`` sections and ``sim.seed``), the point's whole config once per distinct
  (topology, workload, seed where the workload uses it). ``llm.generate`` (a pure
  function) is memoized, since many points share a task graph on different topologies.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import itertools
import json
import math
import re
import sys
import time
from pathlib import Path

import pytest

import multiverse_jax.conf.schema  # noqa: F401  (registers the config schema with Hydra)
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from multiverse_jax.config import experiment_from_config, resolve_config
from multiverse_jax.errors import InputError
from multiverse_jax.workload import llm
from multiverse_jax.workload.llm import OutOfMemory

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
README = EXPERIMENTS / "README.md"
CONFIGS = sorted(p.stem for p in EXPERIMENTS.glob("*.yaml"))
SMALL = [name for name in CONFIGS if name.endswith("_small")]
FULL = [name for name in CONFIGS if not name.endswith("_small")]
MAX_SMALL_POINTS = 30
CHECKED_AGAINST_COMPOSE = 3  # points per config composed for real and compared with the fast path (first, last, one inside)
TINY_WORKLOAD = {"kind": "permutation", "flow_bytes": 1000}

_parser = OverridesParser.create()


# ------------------------------------------------------------------------------- composing


@pytest.fixture(scope="module")
def hydra_experiments():
    """Hydra initialised on experiments/ (the configs add the package's conf to the search path)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(EXPERIMENTS), version_base=None):
        yield
    GlobalHydra.instance().clear()


@functools.lru_cache(maxsize=None)
def _sweep_axes(name: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(axis) for axis in sweep_axes(name))


def sweep_axes(name: str) -> list[list[str]]:
    """The sweep of config ``name`` as Hydra's basic sweeper sees it: one list of
    ``key=value`` overrides per swept parameter (a fixed parameter gives a list of one)."""
    cfg = compose(config_name=name, return_hydra_config=True)
    params = cfg.hydra.sweeper.params or {}
    axes = []
    for override in _parser.parse_overrides([f"{key}={value}" for key, value in params.items()]):
        key = override.get_key_element()
        if override.is_sweep_override():
            axes.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            axes.append([f"{key}={override.get_value_element_as_str()}"])
    return axes


def sweep_points(name: str) -> list[tuple[str, ...]]:
    return list(itertools.product(*_sweep_axes(name)))


def is_group(name: str, key: str) -> bool:
    """Whether override ``key`` chooses an option of a config group (topology=..., cc=...)."""
    if "." in key or "/" in key:
        return False
    loader = GlobalHydra.instance().config_loader()
    return bool(loader.get_group_options(key, config_name=name, overrides=[]))


def _value(cfg, key: str):
    node = cfg._get_node(key)
    return OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else cfg[key]


class Composer:
    """Configs of the points of one sweep config, without one Hydra ``compose`` per point.

    A group choice (``topology=h16_fattree_k4``) is composed once on its own; the top-level
    nodes it changes relative to the config's defaults are its *diff*. A point's config is
    the defaults with the diffs of its group choices put in (when two of them change the
    same node, the point is composed for real instead), resolved, then its ``key=value``
    overrides set. Each distinct override is applied once with ``OmegaConf.update(...,
    merge=True)`` -- what Hydra's config loader does with it: the schema checks the key and
    converts the value -- and the value it leaves is what the point gets (dict or list
    values, which merge rather than replace, compose the point for real).
    ``test_every_point_is_valid`` compares this with real ``compose`` calls on a sample.
    """

    def __init__(self, name: str):
        self.name = name
        self.base = compose(config_name=name)
        self.diffs: dict[str, dict] = {}  # group choice -> the top-level nodes it changes
        self.assembled: dict[tuple, dict | None] = {}  # group choices -> resolved config
        self.typed: dict[str, object] = {}  # "key=value" -> the value as the schema stores it
        self.groups: dict[str, bool] = {}
        self.composed_for_real = 0

    def _is_group(self, key: str) -> bool:
        if key not in self.groups:
            self.groups[key] = is_group(self.name, key)
        return self.groups[key]

    def _diff(self, text: str) -> dict:
        if text not in self.diffs:
            cfg = compose(config_name=self.name, overrides=[text])
            assert set(cfg) == set(self.base), f"{self.name}: {text} adds or removes top-level keys"
            self.diffs[text] = {k: cfg[k] for k in cfg if _value(cfg, k) != _value(self.base, k)}
        return self.diffs[text]

    def _typed(self, override) -> object:
        """The value of a ``key=value`` override as the schema stores it (``100`` -> ``100.0``
        for a float key); a wrong type or an unknown key raises, as in Hydra."""
        text = override.input_line
        if text not in self.typed:
            cfg = copy.deepcopy(self.base)
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
            value = OmegaConf.select(cfg, override.key_or_group, throw_on_missing=True)
            self.typed[text] = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        return self.typed[text]

    def config(self, point: tuple[str, ...]) -> dict:
        """The resolved plain config (no ``hydra`` node) of the point with these overrides."""
        chosen, values = [], []
        for text in point:
            override = _parser.parse_override(text)
            (chosen if self._is_group(override.key_or_group) else values).append(override)
        key = tuple(o.input_line for o in chosen)
        if key not in self.assembled:
            cfg = copy.deepcopy(self.base)
            owner: dict[str, str] = {}
            for override in chosen:
                for node, value in self._diff(override.input_line).items():
                    if node in owner:  # two choices change one node: let Hydra merge them
                        cfg = None
                        break
                    owner[node] = override.input_line
                    cfg[node] = copy.deepcopy(value)
                if cfg is None:
                    break
            self.assembled[key] = resolve_config(cfg) if cfg is not None else None
        if self.assembled[key] is None or any(isinstance(self._typed(o), (dict, list)) for o in values):
            self.composed_for_real += 1
            return real_config(self.name, point)
        config = copy.deepcopy(self.assembled[key])
        for override in values:  # a leaf each: set it (what OmegaConf.update(..., merge=True) does to a leaf)
            *path, leaf = override.key_or_group.split(".")
            node = config
            for part in path:
                node = node[part]
            assert leaf in node, f"{self.name}: unknown key {override.key_or_group}"
            node[leaf] = self._typed(override)
        return config


def real_config(name: str, point: tuple[str, ...]) -> dict:
    return resolve_config(compose(config_name=name, overrides=list(point)))


# ------------------------------------------------------------------------------ validating


@pytest.fixture
def memoized_generate(monkeypatch):
    """``llm.generate`` memoized on its (frozen, hashable) arguments for one test."""
    real = llm.generate
    cache: dict = {}

    def generate(model, parallel, *, n_gpus, comm_cfg=llm.CommConfig()):
        key = (model, parallel, n_gpus, comm_cfg)
        if key not in cache:
            cache[key] = real(model, parallel, n_gpus=n_gpus, comm_cfg=comm_cfg)
        return cache[key]

    monkeypatch.setattr(llm, "generate", generate)
    return cache


def _freeze(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def check(config: dict) -> str:
    """'ok' or 'oom' for a valid config; an InputError (with the reason) for an invalid one."""
    try:
        experiment_from_config(config)
    except OutOfMemory:
        return "oom"
    return "ok"


def validate_all(name: str, points, configs: list[dict], *, exhaustive: bool) -> dict[str, int]:
    """Status counts over the points; fails naming the first invalid point."""
    statuses: list[str | None] = [None] * len(points)

    def fail(i: int, exc: Exception):
        pytest.fail(f"{name}: point {i} ({' '.join(points[i])}) is invalid: {exc}")

    if exhaustive:
        for i, config in enumerate(configs):
            try:
                statuses[i] = check(config)
            except InputError as exc:
                fail(i, exc)
    else:
        # (a) everything but the workload, once per distinct non-workload config
        rest_checked: set[str] = set()
        for i, config in enumerate(configs):
            rest = dict(config, workload=TINY_WORKLOAD)
            key = _freeze(rest)
            if key in rest_checked:
                continue
            rest_checked.add(key)
            try:
                experiment_from_config(rest)
            except InputError as exc:
                fail(i, exc)
        # (b) the workload on its topology, once per distinct (topology, workload, seed);
        # sim.seed reaches the workload only through a permutation's destinations and a
        # random placement (config._workload, config._placed)
        done: dict[str, str] = {}
        for i, config in enumerate(configs):
            workload = config["workload"]
            seeded = workload["kind"] == "permutation" or workload.get("placement") == "random"
            key = _freeze([config["topology"], workload, config["sim"]["seed"] if seeded else None])
            if key not in done:
                try:
                    done[key] = check(config)
                except InputError as exc:
                    fail(i, exc)
            statuses[i] = done[key]
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts


# ----------------------------------------------------------------------------------- tests


def test_there_are_small_and_full_versions():
    assert SMALL, "no *_small.yaml in experiments/"
    for use_case in ("topology", "collective", "parallelism", "cc"):
        assert f"{use_case}_small" in SMALL and use_case in FULL, f"missing {use_case}(_small).yaml"
    for name in SMALL:
        assert name.removesuffix("_small") in FULL, f"{name} has no full-size version"


@pytest.mark.parametrize("name", CONFIGS)
def test_header_comment(name):
    """Every config starts with a comment block: the question, how to run it, what to look at."""
    text = (EXPERIMENTS / f"{name}.yaml").read_text()
    header = list(itertools.takewhile(lambda line: line.startswith("#"), text.splitlines()))
    block = "\n".join(header)
    assert len(header) >= 5, f"{name}.yaml: the comment block at the top is missing"
    for needle in ("Question", "Run", "Look at", f"--config-name {name} -m", "multiverse-jax-report"):
        assert needle in block, f"{name}.yaml: the header comment does not mention {needle!r}"
    assert "# @package _global_" in block


# The full-size sweeps' points are slow to check (10-20 s each for topology and parallelism,
# whose LLM workloads are built per point): CI checks every point of the small versions, and
# the full ones' headers and Hydra composition; ``pytest -m slow`` checks their points too.
@pytest.mark.parametrize("name", [name if name in SMALL else pytest.param(name, marks=pytest.mark.slow) for name in CONFIGS])
def test_every_point_is_valid(name, hydra_experiments, memoized_generate):
    start = time.perf_counter()
    points = sweep_points(name)
    assert points and all(points), f"{name}: no sweep (hydra.sweeper.params)"
    assert len(set(points)) == len(points), f"{name}: a point appears twice"
    composer = Composer(name)
    configs = [composer.config(point) for point in points]
    # The fast path composes what Hydra composes: a sample of points for real.
    for i in sorted({0, len(points) - 1, (7 * len(points)) // 11})[:CHECKED_AGAINST_COMPOSE]:
        assert configs[i] == real_config(name, points[i]), f"{name}: point {i} composes differently"
    # The header's "Points: ... = N" is the sweep's size.
    header = (EXPERIMENTS / f"{name}.yaml").read_text().split("# @package")[0]
    stated = re.search(r"Points:[^=]*=\s*(\d+)", header)
    assert stated and int(stated.group(1)) == len(points), f"{name}.yaml header states {stated and stated.group(1)} points, the sweep has {len(points)}"
    # No two points are the same experiment (a sweep over keys some points ignore would be).
    distinct = {_freeze(c) for c in configs}
    assert len(distinct) == len(points), f"{name}: {len(points) - len(distinct)} points repeat another one"
    counts = validate_all(name, points, configs, exhaustive=name in SMALL)
    if name in SMALL:
        assert len(points) <= MAX_SMALL_POINTS, f"{name}: {len(points)} points; a small version has <= {MAX_SMALL_POINTS}"
    else:
        small = f"{name}_small"
        assert len(points) > len(sweep_points(small)), f"{name} has no more points than {small}"
    assert counts.get("ok", 0) > 0
    print(f"{name}: {len(points)} points {counts} ({time.perf_counter() - start:.1f} s)")


def _options(group: str) -> list[Path]:
    return sorted((EXPERIMENTS / group).glob("*.yaml"))


def test_topology_options_have_their_host_count():
    """experiments/topology/h{N}_*.yaml build a topology of exactly N hosts."""
    from multiverse_jax.topology import build_topology

    assert _options("topology")
    for path in _options("topology"):
        match = re.fullmatch(r"h(\d+)_(fattree|leafspine|rail)_.*", path.stem)
        assert match, f"{path.name}: name must be h<hosts>_<kind>_..."
        spec = OmegaConf.to_container(OmegaConf.load(path))
        assert spec["kind"] == match.group(2), path.name
        assert build_topology(**spec).n_hosts == int(match.group(1)), path.name


def test_parallel_options_split_their_gpus():
    """experiments/parallel/g{N}_tp{a}_pp{b}_dp{c}.yaml set tp=a, pp=b, dp=c with a*b*c = N,
    and every option of one N has the same global batch (dp x microbatches)."""
    batches: dict[int, set[int]] = {}
    assert _options("parallel")
    for path in _options("parallel"):
        match = re.fullmatch(r"g(\d+)_tp(\d+)_pp(\d+)_dp(\d+)", path.stem)
        assert match, f"{path.name}: name must be g<gpus>_tp<a>_pp<b>_dp<c>"
        gpus, tp, pp, dp = map(int, match.groups())
        text = path.read_text()
        assert text.startswith("# @package workload"), f"{path.name}: must be '# @package workload'"
        spec = OmegaConf.to_container(OmegaConf.load(path))
        assert (spec["tp"], spec["pp"], spec["dp"]) == (tp, pp, dp), path.name
        assert tp * pp * dp == gpus, f"{path.name}: {tp} * {pp} * {dp} != {gpus}"
        batches.setdefault(gpus, set()).add(dp * spec["microbatches"])
    for gpus, sizes in batches.items():
        assert len(sizes) == 1, f"g{gpus}_* options have different global batches {sorted(sizes)}"


def _readme_rows() -> dict[str, str]:
    """The rows of the table under "## The experiments", by config name."""
    text = README.read_text()
    assert "## The experiments" in text, "README has no '## The experiments' section"
    section = text.split("## The experiments", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`?([a-z_]+)(?:\.yaml)?`?\s*\|", line)
        if match and (EXPERIMENTS / f"{match.group(1)}.yaml").exists():
            rows[match.group(1)] = line
    return rows


def test_readme_table_matches_the_configs(hydra_experiments):
    """experiments/README.md's table has a row per config giving its number of points."""
    rows = _readme_rows()
    assert set(rows) == set(CONFIGS), f"README table rows {sorted(rows)} != configs {CONFIGS}"
    for name, row in rows.items():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        n = len(sweep_points(name))
        assert str(n) in cells, f"README row of {name} does not give its {n} points: {row}"
    assert "oom" in README.read_text(), "README must say that an 'oom' point is a valid result"


# ------------------------------------------------------------------------- topology search


@pytest.fixture(scope="module")
def topology_search():
    spec = importlib.util.spec_from_file_location("topology_search", EXPERIMENTS / "topology_search.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["topology_search"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("topology_search", None)


@pytest.mark.parametrize("hosts", [16, 64, 128])
def test_topology_search_variants_are_valid(topology_search, hosts):
    from multiverse_jax.topology import build_topology

    args = topology_search.parse_args(["--hosts", str(hosts)])
    variants = [v for generate in topology_search.GENERATORS for v in generate(hosts, args)]
    names = [v.name for v in variants]
    assert len(set(names)) == len(names), "variant names must be unique"
    kinds = {v.topology["kind"] for v in variants}
    assert {"leafspine", "rail"} <= kinds and (hosts != 128 or "fattree" in kinds)
    for variant in variants:
        topology = build_topology(**variant.topology)
        assert topology.n_hosts == hosts, variant


def test_topology_cost(topology_search):
    from multiverse_jax.topology import build_topology

    # k=4 fat-tree: 8 ToR + 8 agg + 4 core; 16 host + 16 ToR-agg + 16 agg-core cables
    assert topology_search.topology_cost(build_topology("fattree", k=4)) == {
        "switches": 20, "switch_ports": 80, "cables": 48, "max_radix": 4,
    }
    # leaf-spine 4 x 4 at 2:1: 4 leaves of 4 + 2 ports, 2 spines of 4 ports
    assert topology_search.topology_cost(build_topology("leafspine", leaves=4, hosts_per_leaf=4, oversubscription=2)) == {
        "switches": 6, "switch_ports": 32, "cables": 24, "max_radix": 6,
    }


def test_pareto_front(topology_search):
    points = [
        {"name": "a", "status": "ok", "switch_ports": 10, "job_time_us": 50.0},
        {"name": "b", "status": "ok", "switch_ports": 20, "job_time_us": 40.0},
        {"name": "c", "status": "ok", "switch_ports": 20, "job_time_us": 45.0},  # dominated by b
        {"name": "d", "status": "ok", "switch_ports": 30, "job_time_us": 40.0},  # as fast as b, dearer
        {"name": "e", "status": "ok", "switch_ports": 40, "job_time_us": 10.0},
        {"name": "f", "status": "failed", "switch_ports": 1, "job_time_us": math.nan},
    ]
    front = topology_search.pareto_front(points, "switch_ports")
    assert [p["name"] for p in front] == ["a", "b", "e"]


def test_topology_search_quick(topology_search, tmp_path):
    assert topology_search.main(["--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "topology_search.json").read_text())
    points = report["points"]
    assert len(points) == report["n_variants"] >= 3
    assert all(p["status"] == "ok" for p in points), [(p["name"], p["reason"]) for p in points if p["status"] != "ok"]
    times = [p["job_time_us"] for p in points]
    assert all(t > 0 and math.isfinite(t) for t in times)
    assert times == sorted(times), "points must be ranked by job time"
    assert [p["rank"] for p in points] == list(range(1, len(points) + 1))
    assert {p["kind"] for p in points} == {"leafspine", "rail"}
    assert report["n_groups"] == 1, "the quick variants should share one compiled program"
    # The front: cheapest point and fastest point are on it; costs rise as job times fall.
    front = [p for p in points if p["pareto"]]
    assert [p["name"] for p in sorted(front, key=lambda p: p["switch_ports"])] == report["pareto_front"]
    assert points[0]["pareto"], "the fastest point is on the front (cheapest among the fastest)"
    assert min(p["switch_ports"] for p in points) == min(p["switch_ports"] for p in front)
    ordered = sorted(front, key=lambda p: p["switch_ports"])
    assert all(a["job_time_us"] > b["job_time_us"] for a, b in zip(ordered, ordered[1:]))
    # Costs from the Topology: leaf-spine 2x8 at 4:1 has 2 leaves + 2 spines, 16 + 4 cables.
    cheap = next(p for p in points if p["name"] == "leafspine 2x8 4:1")
    assert (cheap["switches"], cheap["cables"], cheap["switch_ports"], cheap["max_radix"]) == (4, 20, 24, 10)
    # The 4:1 fabric (fewest ports) is the slowest and the cheapest end of the front.
    assert points[-1]["name"] == "leafspine 2x8 4:1" and report["pareto_front"][0] == "leafspine 2x8 4:1"
    assert (tmp_path / "topology_search.png").stat().st_size > 10_000

    # Search mode over the same variants and two load balancers: Optuna's asks of 3 trials,
    # each one batched call of the same compiled program; a point it evaluates has the
    # enumeration's metrics (batched == alone), and its front is drawn from what it saw.
    pytest.importorskip("optuna", reason="search mode needs the optional extra: pip install 'multiverse-jax[search]'")
    out = tmp_path / "search"
    assert topology_search.main(["--quick", "--search", "6", "--batch", "3", "--lbs", "ecmp", "spray", "--out", str(out)]) == 0
    found = json.loads((out / "topology_search.json").read_text())
    assert found["mode"] == "search" and found["n_asks"] == 2
    enumerated = {p["name"]: p["job_time_us"] for p in points}
    for p in found["points"]:
        assert p["status"] == "ok" and p["lb"] in ("ecmp", "spray")
        if p["lb"] == "ecmp":
            assert p["job_time_us"] == enumerated[p["name"].removesuffix(" lb=ecmp")]
    ok = [p for p in found["points"] if p["status"] == "ok"]
    assert set(found["pareto_front"]) == {p["name"] for p in topology_search.pareto_front(ok, "switch_ports")}
