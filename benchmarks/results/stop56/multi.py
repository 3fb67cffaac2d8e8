"""Several variants of engine.SYSTEMS compiled in one process, timed alternately on one core."""
import sys, os, time, json, random, importlib.util, concurrent.futures as cf
sys.path.insert(0, "benchmarks")
import dataclasses, jax, numpy as np
from kernel_profile import sweep_point
from multiverse_jax import engine

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

def variants_from(spec_file):
    return load("variants", spec_file).VARIANTS  # label -> {system name: function}

def main():
    spec_file, warm_windows, n_windows, repeats, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    variants = variants_from(spec_file)
    batch = sweep_point(8, 4_000_000, 512)
    warm = jax.block_until_ready(engine.advance(batch.params, batch.state, warm_windows))
    lowered = {}
    own = engine.SYSTEMS
    params_of = {}
    for label, swap in variants.items():
        swap = dict(swap)
        over = swap.pop("__static__", {})
        patches = swap.pop("__patch__", {})
        saved = {(m, n): getattr(m, n) for (m, n) in patches}
        for (m, n), v in patches.items(): setattr(m, n, v)
        params_of[label] = batch.params.replace(static=dataclasses.replace(batch.params.static, **over))
        engine.SYSTEMS = tuple((n, swap.get(n, f)) for n, f in own)
        jax.clear_caches()
        lowered[label] = engine.lower_advance(params_of[label], warm, n_windows)
        for (m, n), v in saved.items(): setattr(m, n, v)
    engine.SYSTEMS = own
    t = time.perf_counter()
    with cf.ThreadPoolExecutor(2) as pool:
        programs = dict(zip(lowered, pool.map(lambda l: l.compile(), lowered.values())))
    print(f"compiled {len(programs)} in {time.perf_counter() - t:.0f} s", flush=True)
    ends = {label: p(params_of[label], warm, n_windows) for label, p in programs.items()}
    first = list(ends)[0]
    if len(sys.argv) > 6: ends = {}
    for label in ends:
        for a, b in zip(jax.tree.leaves(ends[first]), jax.tree.leaves(ends[label])):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    ms = {label: [] for label in programs}
    labels = list(programs)
    for _ in range(repeats):
        random.shuffle(labels)
        for label in labels:
            began = time.perf_counter()
            jax.block_until_ready(programs[label](params_of[label], warm, n_windows))
            ms[label].append((time.perf_counter() - began) / n_windows * 1e3)
    base = list(programs)[0]
    print(f"{'variant':12s} {'min':>6s} {'p25':>6s} {'median':>7s} {'paired ratio to ' + base:>24s}")
    for label, v in ms.items():
        ratio = np.median(np.array(v) / np.array(ms[base]))
        print(f"{label:12s} {min(v):6.3f} {np.percentile(v, 25):6.3f} {np.median(v):7.3f} {ratio:24.3f}")
    json.dump({"warm_windows": warm_windows, "windows": n_windows, "ms": ms}, open(out, "w"), indent=1)

main()
