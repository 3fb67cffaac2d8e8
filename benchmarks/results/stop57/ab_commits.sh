#!/bin/bash
# The session's start (e80495d, worktree /tmp/start) and end (main) alternating, each in its own process.
set -u
OUT=/work/main/benchmarks/results/stop57
for i in 1 2; do
  cd /tmp/start && PYTHONPATH=/tmp/start /work/main/.venv/bin/python benchmarks/sweep_vs_htsim.py --modes map --devices 2 --htsim-points 4 --rounds 3 --out $OUT/ab_start_$i.json > $OUT/ab_start_$i.log 2>&1
  cd /work/main && /work/main/.venv/bin/python benchmarks/sweep_vs_htsim.py --modes map --devices 2 --htsim-points 4 --rounds 3 --out $OUT/ab_end_$i.json > $OUT/ab_end_$i.log 2>&1
done
