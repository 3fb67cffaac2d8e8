#!/usr/bin/env bash
# Issue 14's tables on a lent GPU, in one call of the workplace's device tool (15 minutes of
# device time a session, start included): every step is bounded by `timeout` and writes its
# JSON under $OUT as it goes, so a slow step costs its own rows only.
#
#   device run: bash benchmarks/gpu_tables.sh      (carry: .whl)
#   STEPS=passes bash benchmarks/gpu_tables.sh      (issue 14's open measurement: the passes on a GPU, ~8 min)
#   STEPS="sweep sweep256" SWEEP_PREFIX=columns,per_host SWEEP_S=235 SWEEP256_S=300 bash benchmarks/gpu_tables.sh
#
# The device image has JAX with CUDA but no Hydra: hydra-core, omegaconf and
# antlr4-python3-runtime travel as wheels in .whl/ (pip download / pip wheel here; the
# device has no registry). On any other machine with the package installed, the wheel step
# is skipped and the same steps run on whatever backend JAX finds.
set -u
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ! python3 -c "import hydra" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}.:benchmarks
export JAX_COMPILATION_CACHE_DIR=/tmp/jax_cache  # one E=1 program serves both modes' baselines
log="$OUT/log.txt"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv 2>&1
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
} 2>&1 | tee "$log"
python3 -c "import jax" 2>/dev/null || { echo "no jax for $(command -v python3)" | tee -a "$log"; exit 1; }  # (an exit inside the pipe above ends only its subshell)

step() {  # step SECONDS ARGS...: one benchmark, bounded, logged
  local limit=$1; shift
  echo "== $(date -u +%T) $*" | tee -a "$log"
  timeout "$limit" python3 "$@" 2>&1 | tee -a "$log"
}
want() { [[ " ${STEPS:-passes et_vmap long_runs sweep sweep256 et_map} " == *" $1 "* ]]; }  # STEPS: which steps, in this order
# the sweep (32 points, vmap) with no pass, the FIFO pass alone, and the FIFO and NIC passes
# (sim.fifo_pass, sim.nic_pass: an accelerator's defaults, never timed on a GPU), two rounds each,
# FCTs compared bit for bit; the variants alternate, so the second round's rows are the comparison.
# Its compiles: ~70 s at stop 43 without a pass; with them 1.6x and 2.2x as long on this CPU (stop 66),
# so ~350 s of compiling and ~90 s of runs: a call of its own (the rows of round 0 come back if cut)
want passes && step ${PASSES_S:-540} benchmarks/sweep_vs_htsim.py --points ${SWEEP_POINTS:-32} --modes vmap --devices 1 \
  --fifo-pass never,always --nic-pass never,always --rounds 2 --htsim-points 0 --out "$OUT/sweep_passes.json"
# k=8 permutation, the README's table: vmap (the whole batch in lockstep on an accelerator)
want et_vmap && step ${ET_VMAP_S:-230} benchmarks/engine_throughput.py --ks 8 --experiments ${ET_E:-64,1024} --batching vmap \
  --baseline-max 2 --round-samples 0 --htsim-points 0 --min-time 1 --max-repeats 3 --out "$OUT/et_vmap.json"
# long single-class runs off and on (sim.long_runs; on by default here), one process, final states compared
want long_runs && step ${LONG_S:-300} benchmarks/long_runs_ab.py --points ${LONG_POINTS:-64} --batching vmap --out "$OUT/long_runs_ab.json"
# the sweep: 32 points of 128-host permutations, 4 MB flows, 9000 B MTU, for each
# sim.live_prefix in SWEEP_PREFIX (e.g. columns,per_host: FCTs compared, bit for bit); then 256 points
want sweep && step ${SWEEP_S:-150} benchmarks/sweep_vs_htsim.py --points ${SWEEP_POINTS:-32} --modes vmap --devices 1 \
  --live-prefix ${SWEEP_PREFIX:-auto} --htsim-points 0 --out "$OUT/sweep_vmap.json"
want sweep256 && step ${SWEEP256_S:-200} benchmarks/sweep_vs_htsim.py --points 256 --modes vmap --devices 1 \
  --live-prefix ${SWEEP_PREFIX:-auto} --htsim-points 0 --out "$OUT/sweep_vmap_256.json"
# map (one experiment after another inside the program) at E = 64, for vmap / map on this device
want et_map && step ${ET_MAP_S:-100} benchmarks/engine_throughput.py --ks 8 --experiments 64 --batching map \
  --baseline-max 1 --round-samples 0 --htsim-points 0 --min-time 0 --max-repeats 1 --out "$OUT/et_map.json"
echo "== $(date -u +%T) done" | tee -a "$log"
