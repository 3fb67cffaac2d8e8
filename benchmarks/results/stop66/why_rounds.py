"""Stop 66: what a lockstep window's residual rounds serve. The htsim sweep's 8 points
(``lockstep_rounds.sweep_batch``, both passes) run to a window, and the next window of some
points replayed round by round (``step_profile.transmit_rounds``): per round the ports that
send, of them NICs, and NICs creating a packet; then the packets the rounds sent by NIC and
by switch ports. Arguments: the NIC pass's WAITING, the FIFO pass's SEARCHED, windows, points.

    python benchmarks/results/stop66/why_rounds.py 16 64 300,600 0,5
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parent))
import jax  # noqa: E402
import numpy as np  # noqa: E402

from lockstep_rounds import sweep_batch  # noqa: E402
from multiverse_jax import engine  # noqa: E402
from multiverse_jax.ops import fifo_pass, nic_pass  # noqa: E402
from step_profile import one_experiment, transmit_rounds  # noqa: E402

nic_pass.WAITING, fifo_pass.SEARCHED = int(sys.argv[1]), int(sys.argv[2])
windows, points = ([int(n) for n in arg.split(",")] for arg in sys.argv[3:5])
batch = sweep_batch(8, "always", "always", 512)
params, state = jax.device_get(batch.params), batch.state
done = 0
for target in windows:
    state = engine.advance(batch.params, state, target - done, "map")
    done = target
    host = jax.device_get(state)
    for e in points:
        rounds, sends, per_round, _ = transmit_rounds(one_experiment(params, e), one_experiment(host, e))
        r, sent = int(rounds[0]), np.asarray(sends[0])
        nic = np.asarray(params.ports.port_host[e]) >= 0
        print(f"window {target} point {e}: {r} rounds; per round (ports sending, NICs of them, NICs creating):", np.asarray(per_round[0][:r]).tolist())
        print(f"   sent in the rounds: {int(sent[nic].sum())} by NIC ports, {int(sent[~nic].sum())} by switch ports; most by one port {int(sent.max())}")
