import dataclasses
from multiverse_jax.ops import runs
from multiverse_jax import batch
def k(n): return {(runs, "run_ports"): lambda static: n}
VARIANTS = {
    "k96": {},
    "k8": {"__patch__": k(8)},
    "k32": {"__patch__": k(32)},
    "k8r24": {"__patch__": {**k(8), (batch, "RUN_PACKETS_SINGLE_CLASS"): 24}},
}
