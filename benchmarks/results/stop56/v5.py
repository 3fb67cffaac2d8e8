from multiverse_jax.ops import runs
def k(n): return {(runs, "run_ports"): lambda static: n}
VARIANTS = {
    "k96": {},
    "k8": {"__patch__": k(8)},
    "k16": {"__patch__": k(16)},
    "k32": {"__patch__": k(32)},
    "k8r24": {"__patch__": k(8), "__static__": {"run_packets": 24}},
    "k16r24": {"__patch__": k(16), "__static__": {"run_packets": 24}},
}
