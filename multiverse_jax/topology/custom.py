"""Custom topologies from a plain-text file.

Format, one statement per line::

    # comment lines and blank lines are ignored; '#' also starts a trailing comment
    host <name>                 # declares a host (order of host lines = host index)
    switch <name>               # declares a switch
    link <a> <b> [<rate_gbps> [<delay_us>]]   # undirected cable between nodes a and b

Rules:

* Fields are separated by whitespace; keywords are lower case; a name is any run of
  non-blank characters without ``#`` (``gpu3``, ``tor-1.a``). Every name is declared
  once, hosts and switches sharing one name space.
* A ``link`` may name nodes declared anywhere in the file (before or after it). Its
  optional rate (Gbit/s) and delay (microseconds) must be finite numbers > 0; a missing
  value takes the defaults passed in (``link.rate_gbps`` / ``link.delay_us``). A rate can
  be given without a delay, not the other way round. Each cable carries traffic both
  ways, as two directed links of the same rate and delay.
* Every host has exactly one link (its NIC); there must be at least one host. Switches
  may have any number of links; hosts never forward traffic.
* Node numbering: hosts first, in the order of their ``host`` lines (host i is node i,
  keeping its given name), then switches in the order of their ``switch`` lines. Cables
  keep file order, so cable u is directed links 2u and 2u + 1.

Every error is an InputError naming the file and, where there is one, the line
(``path:LINE: message``).
"""

from __future__ import annotations

import math
from pathlib import Path

from multiverse_jax.errors import InputError
from multiverse_jax.textfile import read_lines
from multiverse_jax.topology.fattree import check_link
from multiverse_jax.topology.graph import Topology, from_cables

_KEYWORDS = ("host", "switch", "link")


def _positive(text: str, field: str, position: int, source: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not value > 0:
        raise InputError(
            f"link {field} (field {position}) must be a number > 0, got {text!r}", source=source, line=line
        )
    return value


def load_custom(path: str | Path, rate_gbps: float, delay_us: float) -> Topology:
    """Read the topology file at ``path``; links without a rate/delay use the defaults."""
    source = str(path)
    default_rate, default_delay = check_link(rate_gbps, delay_us)
    lines = read_lines(path, "topology file (topology.path)")

    hosts: list[tuple[str, int]] = []  # (name, line)
    switches: list[tuple[str, int]] = []
    declared: dict[str, int] = {}  # name -> line of its declaration
    links: list[tuple[str, str, float, float, int]] = []  # (a, b, rate, delay, line)
    for number, raw in enumerate(lines, start=1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        keyword = fields[0]
        if keyword in ("host", "switch"):
            if len(fields) != 2:
                raise InputError(
                    f"'{keyword}' takes exactly one name ('{keyword} <name>'), got {len(fields) - 1} fields",
                    source=source,
                    line=number,
                )
            name = fields[1]
            if name in declared:
                raise InputError(
                    f"duplicate node name {name!r} (first declared on line {declared[name]})",
                    source=source,
                    line=number,
                )
            declared[name] = number
            (hosts if keyword == "host" else switches).append((name, number))
        elif keyword == "link":
            if not 3 <= len(fields) <= 5:
                raise InputError(
                    f"'link' takes 2 to 4 fields ('link <a> <b> [<rate_gbps> [<delay_us>]]'), "
                    f"got {len(fields) - 1}",
                    source=source,
                    line=number,
                )
            rate = _positive(fields[3], "rate_gbps", 4, source, number) if len(fields) > 3 else default_rate
            delay = _positive(fields[4], "delay_us", 5, source, number) if len(fields) > 4 else default_delay
            links.append((fields[1], fields[2], rate, delay, number))
        else:
            raise InputError(
                f"unknown keyword {keyword!r}; expected one of {', '.join(_KEYWORDS)} (or '#' for a comment)",
                source=source,
                line=number,
            )

    if not hosts:
        raise InputError("the topology declares no hosts; add at least one 'host <name>' line", source=source)

    names = [n for n, _ in hosts] + [n for n, _ in switches]
    index = {n: i for i, n in enumerate(names)}
    n_hosts = len(hosts)
    nic_line: dict[int, int] = {}  # host index -> line of its link
    cables, cable_lines = [], []
    for a, b, rate, delay, number in links:
        for name in (a, b):
            if name not in index:
                raise InputError(
                    f"link to undeclared node {name!r}; declare it with 'host {name}' or 'switch {name}'",
                    source=source,
                    line=number,
                )
        ia, ib = index[a], index[b]
        for i in {ia, ib}:
            if i < n_hosts:
                if i in nic_line:
                    raise InputError(
                        f"host {names[i]} already has a link (line {nic_line[i]}); "
                        f"every host needs exactly one (its NIC)",
                        source=source,
                        line=number,
                    )
                nic_line[i] = number
        cables.append((ia, ib, rate, delay))
        cable_lines.append(number)
    for i, (name, number) in enumerate(hosts):
        if i not in nic_line:
            raise InputError(
                f"host {name} has no link; every host needs exactly one (its NIC)", source=source, line=number
            )
    return from_cables(
        f"custom({Path(path).name})", names, n_hosts, cables, source=source, cable_lines=cable_lines
    )
