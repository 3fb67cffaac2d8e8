"""Where we part from htsim on one scenario: both simulators' per-hop traces, compared.

Runs a scenario of ``multiverse_jax/peers/scenarios.py`` in a build of htsim that prints
every packet departure (``peers/trace.build_trace``), pins the routes it took here, steps
this simulator on the same ``.cm`` and lists the hops whose instants differ, earliest
first: the first line is where the two simulators part; the departures just before it at
that port (printed with ``--context``) say why. Writes nothing but what ``--keep`` keeps.

    python benchmarks/vs_htsim_trace.py incast4x2MB-s1 --mode roce
    python benchmarks/vs_htsim_trace.py ring8-8MiB-s0 --mode hpcc --show 20 --keep /tmp/trace
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import multiverse_jax  # noqa: F401  (switches on 64-bit integers)
from multiverse_jax.peers import htsim, trace
from multiverse_jax.peers.scenarios import elephant_suite, quick_suite


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", help="a scenario name of peers/scenarios.py (e.g. incast4x2MB-s1)")
    p.add_argument("--mode", default="roce", choices=tuple(htsim.BINARIES), help="htsim binary to compare with")
    p.add_argument("--show", type=int, default=10, help="how many differing hops to print (default 10)")
    p.add_argument("--context", type=int, default=6, help="departures at the first differing port before it (default 6)")
    p.add_argument("--keep", help="keep the .cm, routes and htsim output in this folder")
    return p.parse_args(argv)


def _row(hop, theirs, ours) -> str:
    port, flow, is_ack, index = hop
    what = f"{'ACK' if is_ack else 'data'} {index}"
    cell = lambda t: "-" if t is None else f"{t / 1e6:.6f}"  # noqa: E731
    return f"  {port:<14} flow {flow:<4} {what:<10} htsim {cell(theirs):>14} us   ours {cell(ours):>14} us"


def report(theirs: dict, ours: dict, show: int, context: int) -> None:
    differ = trace.divergences(theirs, ours)
    print(f"hops: htsim {len(theirs)}, ours {len(ours)}; differing {len(differ)}")
    if not differ:
        print("the traces agree hop for hop")
        return
    first_ps, (port, *_), _, _ = differ[0]
    print(f"first difference at {first_ps / 1e6:.6f} us on {port}; its departures just before, in htsim and here:")
    before = sorted((t, hop) for hop, t in theirs.items() if hop[0] == port and t < first_ps)[-context:]
    for _, hop in before:
        print(_row(hop, theirs.get(hop), ours.get(hop)))
    print(f"the first {min(show, len(differ))} differing hops:")
    for _, hop, a, b in differ[:show]:
        print(_row(hop, a, b))


def main(argv=None) -> int:
    args = parse_args(argv)
    scenarios = {s.name: s for s in quick_suite() + elephant_suite()}
    if args.scenario not in scenarios:
        print(f"vs_htsim_trace: no scenario {args.scenario!r}; one of {', '.join(scenarios)}", file=sys.stderr)
        return 2
    try:
        build = trace.build_trace()
    except htsim.PeerUnavailable as reason:
        print(f"vs_htsim_trace: nothing compared: {reason}", file=sys.stderr)
        return 0
    network = htsim.HtsimNetwork()
    with tempfile.TemporaryDirectory(prefix="vs_htsim_trace-") as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        cm_path = scenarios[args.scenario].write(folder / f"{args.scenario}.cm")
        run = htsim.run_htsim(build, args.mode, cm_path, network, folder)
        with open(folder / f"{args.scenario}_htsim_{args.mode}.out") as lines:
            theirs = trace.htsim_hops(lines, args.mode, network.mtu_bytes)
        ours = trace.our_hops(htsim.pinned_experiment(run, network, args.mode, cm_path, folder))
    report(theirs, ours, args.show, args.context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
