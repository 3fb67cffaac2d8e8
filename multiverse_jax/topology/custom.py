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


class _Statements:
    """The file's ``host``, ``switch`` and ``link`` lines, in file order."""

    def __init__(self, source: str, default_rate: float, default_delay: float):
        self.source, self.default_rate, self.default_delay = source, default_rate, default_delay
        self.hosts: list[tuple[str, int]] = []  # (name, line)
        self.switches: list[tuple[str, int]] = []
        self.declared: dict[str, int] = {}  # name -> line of its declaration
        self.links: list[tuple[str, str, float, float, int]] = []  # (a, b, rate, delay, line)

    def error(self, message: str, line: int) -> InputError:
        return InputError(message, source=self.source, line=line)

    def read(self, fields: list[str], line: int) -> None:
        keyword = fields[0]
        if keyword in ("host", "switch"):
            self.node(keyword, fields, line)
        elif keyword == "link":
            self.link(fields, line)
        else:
            valid = f"expected one of {', '.join(_KEYWORDS)} (or '#' for a comment)"
            raise self.error(f"unknown keyword {keyword!r}; {valid}", line)

    def node(self, keyword: str, fields: list[str], line: int) -> None:
        if len(fields) != 2:
            usage = f"'{keyword} <name>'"
            raise self.error(f"'{keyword}' takes exactly one name ({usage}), got {len(fields) - 1} fields", line)
        name = fields[1]
        if name in self.declared:
            raise self.error(f"duplicate node name {name!r} (first declared on line {self.declared[name]})", line)
        self.declared[name] = line
        (self.hosts if keyword == "host" else self.switches).append((name, line))

    def link(self, fields: list[str], line: int) -> None:
        if not 3 <= len(fields) <= 5:
            usage = "'link <a> <b> [<rate_gbps> [<delay_us>]]'"
            raise self.error(f"'link' takes 2 to 4 fields ({usage}), got {len(fields) - 1}", line)
        rate = _positive(fields[3], "rate_gbps", 4, self.source, line) if len(fields) > 3 else self.default_rate
        delay = _positive(fields[4], "delay_us", 5, self.source, line) if len(fields) > 4 else self.default_delay
        self.links.append((fields[1], fields[2], rate, delay, line))

    def cables(self) -> tuple[list[str], list[tuple[int, int, float, float]], list[int]]:
        """(node names, cables as (a, b, rate, delay) node indices, the line of each cable);
        every link joins declared nodes and every host has exactly one link."""
        if not self.hosts:
            raise InputError("the topology declares no hosts; add at least one 'host <name>' line", source=self.source)
        names = [n for n, _ in self.hosts] + [n for n, _ in self.switches]
        index = {n: i for i, n in enumerate(names)}
        nic_line: dict[int, int] = {}  # host index -> line of its link
        cables, cable_lines = [], []
        for a, b, rate, delay, line in self.links:
            for name in (a, b):
                if name not in index:
                    declare = f"declare it with 'host {name}' or 'switch {name}'"
                    raise self.error(f"link to undeclared node {name!r}; {declare}", line)
            for i in {index[a], index[b]}:
                if i >= len(self.hosts):
                    continue
                if i in nic_line:
                    nic = f"already has a link (line {nic_line[i]}); every host needs exactly one (its NIC)"
                    raise self.error(f"host {names[i]} {nic}", line)
                nic_line[i] = line
            cables.append((index[a], index[b], rate, delay))
            cable_lines.append(line)
        for i, (name, line) in enumerate(self.hosts):
            if i not in nic_line:
                raise self.error(f"host {name} has no link; every host needs exactly one (its NIC)", line)
        return names, cables, cable_lines


def load_custom(path: str | Path, rate_gbps: float, delay_us: float) -> Topology:
    """Read the topology file at ``path``; links without a rate/delay use the defaults."""
    source = str(path)
    statements = _Statements(source, *check_link(rate_gbps, delay_us))
    for number, raw in enumerate(read_lines(path, "topology file (topology.path)"), start=1):
        fields = raw.split("#", 1)[0].split()
        if fields:
            statements.read(fields, number)
    names, cables, cable_lines = statements.cables()
    return from_cables(
        f"custom({Path(path).name})", names, len(statements.hosts), cables, source=source, cable_lines=cable_lines
    )
