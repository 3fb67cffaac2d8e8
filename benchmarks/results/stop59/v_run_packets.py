"""Stop 59: packets a round at one class queue a port on a CPU (RUN_PACKETS_SINGLE_CLASS, 15) at 8 runners.

Run with stop 57's script: python benchmarks/results/stop57/sweep_ab.py benchmarks/results/stop59/v_run_packets.py 3 OUT.json"""
from multiverse_jax import batch

VARIANTS = {
    f"m{m}": {"__patch__": {(batch, "RUN_PACKETS_SINGLE_CLASS"): m}, "__kwargs__": {"steps_per_call": 256}}
    for m in (15, 24, 32, 48)
}
