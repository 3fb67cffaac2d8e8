from multiverse_jax.ops import runs
VARIANTS = {
    "k96": {},
    "k8": {"__patch__": {(runs, "run_ports"): lambda static: 8}},
    "k32": {"__patch__": {(runs, "run_ports"): lambda static: 32}},
    "k192": {"__patch__": {(runs, "run_ports"): lambda static: 192}},
}
