from multiverse_jax.ops import runs
from multiverse_jax import batch
def k(n): return {(runs, "run_ports"): lambda static: n}
VARIANTS = {
    "k8": {},
    "k4": {"__patch__": k(4)},
    "k16": {"__patch__": k(16)},
    "k8r8": {"__patch__": {(batch, "RUN_PACKETS_SINGLE_CLASS"): 8}},
}
