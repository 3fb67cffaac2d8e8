"""Stop 60: the FIFO pass (ops/fifo_pass.py) on and off, the htsim sweep's 8 points in map on 2 devices.

Run with stop 57's script: python benchmarks/results/stop57/sweep_ab.py benchmarks/results/stop60/v_fifo_pass.py 3 OUT.json"""
from multiverse_jax.ops import fifo_pass

def on(static):  # the pass wherever it can run (sim.fifo_pass=auto is off on a CPU since 1eb89d3)
    return static.class_queues == 1 and not static.int_queue_with_packet


VARIANTS = {
    "pass": {"__patch__": {(fifo_pass, "applies"): on}, "__kwargs__": {"steps_per_call": 256}},
    "rounds": {"__patch__": {(fifo_pass, "applies"): lambda static: False}, "__kwargs__": {"steps_per_call": 256}},
}
