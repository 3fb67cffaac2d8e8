"""Stop 61, ad hoc: a batch whose experiments have different host counts (k=4, k=2, k=4: the k=2 one padded
to 16 hosts, so the NIC view has padding hosts), sim.fifo_pass never against always, map and vmap: FCTs and
packet-hops equal.  python benchmarks/results/stop61/pad_check.py"""
import tempfile
from pathlib import Path
import numpy as np
from multiverse_jax.simulate import simulate
from multiverse_jax.config import experiment_from_config
from multiverse_jax.peers import htsim
from multiverse_jax.peers.scenarios import permutation
folder = Path(tempfile.mkdtemp())
def exps(fp):
    out = []
    for k, seed in ((4, 0), (2, 1), (4, 2)):
        net = htsim.HtsimNetwork(k=k)
        cfg = htsim.our_config(net, "roce", permutation(seed, net.n_hosts, 200_000).write(folder / f"p{k}{seed}.cm"))
        cfg.setdefault("sim", {})["fifo_pass"] = fp
        out.append(experiment_from_config(cfg))
    return out
for batching in ("map", "vmap"):
    a = simulate(exps("never"), batching=batching)
    b = simulate(exps("always"), batching=batching)
    for x, y in zip(a, b):
        assert x.summary["status"] == "ok" and y.summary["status"] == "ok", (x.summary, y.summary)
        assert np.array_equal(x.flows["fct_ps"], y.flows["fct_ps"])
        assert x.summary["n_packet_hops"] == y.summary["n_packet_hops"]
    print(batching, "equal", [int(r.summary["n_packet_hops"]) for r in b], [len(r.flows["fct_ps"]) for r in b])
