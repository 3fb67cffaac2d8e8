"""Stop 57's sweep_ab.py with batching="vmap" in place of "map" (the same script otherwise).

    python benchmarks/results/stop60/sweep_ab_vmap.py VARIANTS.py ROUNDS OUT.json"""
from pathlib import Path

source = (Path(__file__).resolve().parents[1] / "stop57" / "sweep_ab.py").read_text()
assert source.count('"map"') == 2
exec(compile(source.replace('"map"', '"vmap"'), "sweep_ab.py (vmap)", "exec"))
