"""The htsim sweep (8 points, map, 2 devices) under several variants (module patches, simulate keywords), alternating in one process."""
import sys, time, json, tempfile, dataclasses
from pathlib import Path
sys.path.insert(0, "benchmarks")
import numpy as np
from multiverse_jax import engine
engine.split_cpu_into_devices(2)
import jax
from multiverse_jax.simulate import simulate
from multiverse_jax.config import experiment_from_config
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import permutation
import importlib.util

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

variants = load("variants", sys.argv[1]).VARIANTS   # label -> {"__patch__": {(module, name): value}}
rounds, out = int(sys.argv[2]), sys.argv[3]
network = htsim.HtsimNetwork(k=8)
folder = Path(tempfile.mkdtemp())
cms = [Path(permutation(s, network.n_hosts, 4_000_000).write(folder / f"p{s}.cm")) for s in range(8)]
exps = [experiment_from_config(htsim.our_config(network, "roce", cm)) for cm in cms]
original = engine.sharded_advance
programs, walls, fcts = {}, {label: [] for label in variants}, {}

def run(label):
    engine.sharded_advance = lambda *a, **k: programs[label]
    patches = variants[label].get("__patch__", {})
    saved = {key: getattr(*key) for key in patches}
    for (m, n), v in patches.items(): setattr(m, n, v)
    try:
        t = time.perf_counter()
        res = simulate(exps, slots_per_host=512, batching="map", devices=2, **variants[label].get("__kwargs__", {}))
        return time.perf_counter() - t, res
    finally:
        engine.sharded_advance = original
        for (m, n), v in saved.items(): setattr(m, n, v)

for label, spec in variants.items():
    programs[label] = original.__wrapped__(engine.resolve_devices(2), spec.get("__kwargs__", {}).get("steps_per_call", 64), "map")
    wall, res = run(label)
    fcts[label] = [r.flows["fct_ps"] for r in res]
    print(f"{label}: first run (compiling) {wall:.1f} s", flush=True)
first = list(fcts)[0]
for label in fcts:
    assert all(np.array_equal(a, b) for a, b in zip(fcts[first], fcts[label])), label
for r in range(rounds):
    for label in variants:
        wall, res = run(label)
        assert all(np.array_equal(a, r.flows["fct_ps"]) for a, r in zip(fcts[first], res)), label
        walls[label].append(wall)
        print(f"round {r} {label}: {wall:.2f} s", flush=True)
base = list(variants)[0]
for label, w in walls.items():
    print(f"{label:10s} min {min(w):6.2f} median {np.median(w):6.2f} paired ratio to {base} {np.median(np.array(w) / np.array(walls[base])):.3f}")
json.dump(walls, open(out, "w"))
