"""Intra-server communication: the calibrated alpha-beta model of Multiverse (NSDI'25, §4.1).

A collective among the GPUs of one server (NVLink / NVSwitch) is not simulated packet by
packet: it takes ``alpha + size / beta``, with ``alpha`` (latency, including NCCL's software
overhead) and ``beta`` (bandwidth) fitted per GPU type, number of GPUs and collective --
Multiverse found that one static pair of parameters is 20-72% off, and per-(collective, n,
GPU type) fits are within ~1%.

Conventions (the same as ``collectives.py`` and nccl-tests):

* ``size`` -- ``all_reduce`` and ``broadcast``: the buffer; ``all_gather``: the gathered
  output; ``reduce_scatter``: each rank's input; ``all_to_all``: what each rank sends in
  total; ``p2p``: one message between two GPUs of the server.
* ``beta`` is the *algorithm* bandwidth (size / time) in GB/s, 1 GB = 1e9 bytes. nccl-tests
  reports *bus* bandwidth; NCCL's factors convert: all_reduce busbw = algbw * 2(n-1)/n;
  all_gather, reduce_scatter, all_to_all busbw = algbw * (n-1)/n; broadcast, p2p busbw = algbw.

Where the shipped numbers come from (``multiverse_jax/data/intra_server.csv``, each row's
``source`` column says it too): approximate PUBLIC figures, not a measurement of one machine.
NVLink per-GPU bandwidth is NVIDIA's published 600 GB/s bidirectional (300 GB/s per
direction) for A100 / NVLink3 and 900 GB/s (450 GB/s per direction) for H100 / NVLink4. Bus
bandwidths are typical nccl-tests results on DGX A100 (~230 GB/s for all_reduce, all_gather,
reduce_scatter, broadcast; ~200 for all_to_all; ~250 GB/s p2p) and DGX H100 (~450 GB/s
all_reduce with NVLink SHARP / NVLS -- ~370 with rings only; ~360 all_gather, reduce_scatter,
broadcast; ~330 all_to_all; ~370 p2p); they are taken as independent of the number of GPUs
(NVSwitch gives each GPU its full bandwidth), so only NCCL's factors make beta depend on n.
``alpha`` is a small-message latency of 8-25 us growing with n. Multiverse reports that
fitting over 2-2560 MB gives alphas of 70-200 us (NCCL overheads folded in), so for real
studies measure your servers and replace the rows with :func:`fit_alpha_beta` /
``multiverse-jax-calibrate`` (see :func:`main`).

Lookup: rows exist for some GPU counts (2, 4, 8 shipped); a request for another ``n`` uses
the row of the nearest ``n`` for that GPU type and collective (a tie -- e.g. 3 between 2 and
4 -- takes the larger ``n``, the slower, more conservative row). GPU types are matched
case-insensitively.

Compute/communication overlap (Multiverse §4.1, second part): compute that overlaps
communication runs slower (SM and HBM contention). :func:`compute_slowdown` returns a
multiplicative factor per GPU type from :data:`COMPUTE_SLOWDOWN` (assumed values of 1.05 for
A100 and 1.10 for H100, not measurements; pass your own table, or 1.0 to switch it off). The
generator that builds compute tasks decides where it applies.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import io
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from multiverse_jax.errors import InputError
from multiverse_jax.textfile import parse_int, read_text, split_lines
from multiverse_jax.units import PS_PER_US

PROG = "multiverse-jax-calibrate"
EXIT_BAD_INPUT = 2
DEFAULT_MODEL_PATH = Path(__file__).resolve().parent.parent / "data" / "intra_server.csv"
DEFAULT_GPU = "H100"
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p")
COLUMNS = ("gpu", "n_gpus", "collective", "alpha_us", "beta_gbytes_per_s", "source")

# Compute slowdown when compute overlaps communication, per GPU type (multiplicative on the
# compute duration). ASSUMED values in the range reported for SM / HBM contention; configurable.
COMPUTE_SLOWDOWN: dict[str, float] = {"A100": 1.05, "H100": 1.10}


def compute_slowdown(gpu_type: str = DEFAULT_GPU, table: Mapping[str, float] | None = None) -> float:
    """Factor (>= 1 normally) by which compute overlapping communication is stretched on ``gpu_type``."""
    table = COMPUTE_SLOWDOWN if table is None else table
    known = {str(k).upper(): float(v) for k, v in table.items()}
    key = str(gpu_type).upper()
    if key not in known:
        raise InputError(f"compute slowdown: unknown GPU type {gpu_type!r} (known: {', '.join(sorted(known))})")
    if not known[key] > 0:
        raise InputError(f"compute slowdown for {gpu_type!r} must be > 0, got {known[key]}")
    return known[key]


@dataclasses.dataclass(frozen=True)
class Row:
    """One fitted (gpu, n_gpus, collective): ``time = alpha_us + size / beta``."""

    gpu: str
    n_gpus: int
    collective: str
    alpha_us: float
    beta_gbytes_per_s: float
    source: str = ""

    @property
    def alpha_ps(self) -> int:
        return int(round(self.alpha_us * PS_PER_US))

    def time_ps(self, size_bytes: int) -> int:
        # size / (beta * 1e9 B/s) seconds = size * 1e3 / beta picoseconds
        return self.alpha_ps + int(round(size_bytes * 1e3 / self.beta_gbytes_per_s))


@dataclasses.dataclass(frozen=True)
class IntraServerModel:
    """alpha-beta rows per (GPU type, n_gpus, collective); ``gpu_type`` is the default GPU type.

    ``collectives.collective`` prices with ``gpu_type`` (set it with :meth:`for_gpu`).
    """

    rows: Mapping[tuple[str, int, str], Row]
    gpu_type: str = DEFAULT_GPU
    source: str = "<python>"

    def __post_init__(self):
        object.__setattr__(self, "gpu_type", str(self.gpu_type).upper())
        if self.gpu_type not in self.gpu_types:
            raise InputError(
                f"intra-server model: no rows for GPU type {self.gpu_type!r} (known: {', '.join(self.gpu_types)})",
                source=self.source,
            )

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({g for g, _, _ in self.rows}))

    def for_gpu(self, gpu_type: str) -> IntraServerModel:
        """The same model pricing ``gpu_type`` by default."""
        return dataclasses.replace(self, gpu_type=str(gpu_type).upper())

    def row(self, kind: str, gpu_type: str | None = None, n_gpus: int = 2) -> Row:
        """The row used for (kind, gpu_type, n_gpus): the exact n, else the nearest (ties: larger n)."""
        gpu = (gpu_type or self.gpu_type).upper()
        if kind not in KINDS:
            raise InputError(f"intra-server model: unknown collective {kind!r} (valid: {', '.join(KINDS)})", source=self.source)
        if gpu not in self.gpu_types:
            raise InputError(
                f"intra-server model: unknown GPU type {gpu_type!r} (known: {', '.join(self.gpu_types)})", source=self.source
            )
        if n_gpus < 1:
            raise InputError(f"intra-server model: n_gpus must be >= 1, got {n_gpus}", source=self.source)
        ns = sorted(n for g, n, k in self.rows if g == gpu and k == kind)
        if not ns:
            raise InputError(f"intra-server model: no {kind} rows for GPU type {gpu}", source=self.source)
        best = min(ns, key=lambda n: (abs(n - n_gpus), -n))
        return self.rows[(gpu, best, kind)]

    def time_ps(self, kind: str, gpu_type: str | None, n_gpus: int, size_bytes: int) -> int:
        """alpha + size/beta in picoseconds (``gpu_type`` None: the model's default GPU type)."""
        if size_bytes < 0:
            raise InputError(f"intra-server model: size must be >= 0 bytes, got {size_bytes}", source=self.source)
        return self.row(kind, gpu_type, n_gpus).time_ps(size_bytes)

    def compute_slowdown(self, gpu_type: str | None = None, table: Mapping[str, float] | None = None) -> float:
        return compute_slowdown(gpu_type or self.gpu_type, table)


# ----------------------------------------------------------------------------- CSV


def _data_lines(text: str):
    """(line number, fields) of the non-blank, non-comment lines of a CSV text."""
    for lineno, raw in enumerate(split_lines(text), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        yield lineno, next(csv.reader([raw]))


def _parse_row(fields: list[str], header: list[str], source: str, lineno: int) -> Row:
    if len(fields) != len(header):
        raise InputError(f"expected {len(header)} fields ({','.join(header)}), got {len(fields)}", source=source, line=lineno)
    v = dict(zip(header, (f.strip() for f in fields)))
    gpu = v["gpu"].upper()
    if not gpu:
        raise InputError("empty gpu", source=source, line=lineno)
    kind = v["collective"]
    if kind not in KINDS:
        raise InputError(f"unknown collective {kind!r} (valid: {', '.join(KINDS)})", source=source, line=lineno)
    n = parse_int(v["n_gpus"], "n_gpus", source, lineno, minimum=1)
    nums = {}
    for col in ("alpha_us", "beta_gbytes_per_s"):
        try:
            nums[col] = float(v[col])
        except ValueError:
            raise InputError(f"{col} must be a number, got {v[col]!r}", source=source, line=lineno) from None
        if not math.isfinite(nums[col]):
            raise InputError(f"{col} must be finite, got {v[col]!r}", source=source, line=lineno)
    if nums["alpha_us"] < 0:
        raise InputError(f"alpha_us must be >= 0, got {nums['alpha_us']}", source=source, line=lineno)
    if nums["beta_gbytes_per_s"] <= 0:
        raise InputError(f"beta_gbytes_per_s must be > 0, got {nums['beta_gbytes_per_s']}", source=source, line=lineno)
    return Row(gpu, n, kind, nums["alpha_us"], nums["beta_gbytes_per_s"], v.get("source", ""))


def parse_model(text: str, source: str = "<text>", gpu_type: str | None = None) -> IntraServerModel:
    """A model from CSV text (header ``gpu,n_gpus,collective,alpha_us,beta_gbytes_per_s[,source]``; ``#`` comments).

    ``gpu_type``: the default GPU type to price (None: H100 when the file has it, else its first type).
    """
    header = None
    rows: dict[tuple[str, int, str], Row] = {}
    first_line: dict[tuple[str, int, str], int] = {}
    for lineno, fields in _data_lines(text):
        if header is None:
            header = [f.strip() for f in fields]
            missing = [c for c in COLUMNS[:5] if c not in header]
            if missing:
                raise InputError(
                    f"header must name the columns {','.join(COLUMNS)}; missing: {', '.join(missing)}", source=source, line=lineno
                )
            continue
        row = _parse_row(fields, header, source, lineno)
        key = (row.gpu, row.n_gpus, row.collective)
        if key in rows:
            raise InputError(
                f"duplicate row for {row.gpu}, {row.n_gpus} GPUs, {row.collective} (first at line {first_line[key]})",
                source=source,
                line=lineno,
            )
        rows[key], first_line[key] = row, lineno
    if not rows:
        raise InputError("the intra-server model has no rows", source=source)
    if gpu_type is None:
        types = sorted({g for g, _, _ in rows})
        gpu_type = DEFAULT_GPU if DEFAULT_GPU in types else types[0]
    return IntraServerModel(rows, gpu_type=gpu_type, source=source)


def load_model(path: str | Path | None = None, gpu_type: str | None = None) -> IntraServerModel:
    """The model in ``path`` (default: the shipped ``multiverse_jax/data/intra_server.csv``).

    ``gpu_type``: the GPU type ``collectives`` prices with (None: H100 when present, else the first).
    """
    if path is None:
        return _default_model().for_gpu(gpu_type or DEFAULT_GPU)
    text = read_text(path, "intra-server model")
    return parse_model(text, source=str(path), gpu_type=gpu_type)


@functools.lru_cache(maxsize=1)
def _default_model() -> IntraServerModel:
    return parse_model(read_text(DEFAULT_MODEL_PATH, "intra-server model"), source=str(DEFAULT_MODEL_PATH))


def default_model(gpu_type: str = DEFAULT_GPU) -> IntraServerModel:
    """The shipped model, pricing ``gpu_type`` (cached)."""
    return _default_model().for_gpu(gpu_type)


# ----------------------------------------------------------------------------- calibration


class Fit(NamedTuple):
    alpha_us: float
    beta_gbytes_per_s: float
    rms_residual_us: float
    alpha_clamped: bool  # the unconstrained fit gave alpha < 0: refitted with alpha = 0


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> Fit:
    """Least-squares fit of ``time_us = alpha_us + size_bytes / beta`` (numpy.linalg.lstsq on [1, size]).

    ``sizes`` in bytes, ``times`` in microseconds; beta comes back in GB/s (1e9 bytes/s).
    Needs >= 2 distinct sizes and a positive fitted beta. A negative fitted alpha (noise on
    points far from size 0) is refitted through the origin and flagged ``alpha_clamped``.
    """
    s = np.asarray(sizes, dtype=np.float64).reshape(-1)
    t = np.asarray(times, dtype=np.float64).reshape(-1)
    if s.shape != t.shape:
        raise InputError(f"calibrate: {s.size} sizes but {t.size} times")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))):
        raise InputError("calibrate: sizes and times must be finite numbers")
    if np.any(s < 0) or np.any(t < 0):
        raise InputError("calibrate: sizes and times must be >= 0")
    if np.unique(s).size < 2:
        raise InputError(f"calibrate: need at least 2 distinct sizes to fit alpha and beta, got {np.unique(s).size}")
    a = np.stack([np.ones_like(s), s], axis=1)
    (alpha, slope), *_ = np.linalg.lstsq(a, t, rcond=None)
    clamped = False
    if alpha < 0:
        clamped, alpha = True, 0.0
        slope = float(s @ t / (s @ s))
    if not slope > 0:
        raise InputError(
            f"calibrate: the fitted time does not grow with size (slope {slope:.3g} us/byte): beta would be <= 0; "
            "check the points (time_us must increase with size_bytes)"
        )
    residual = t - (alpha + slope * s)
    # slope is us per byte; bytes/us = 1/slope; GB/s = bytes/us * 1e6 / 1e9
    return Fit(float(alpha), float(1e-3 / slope), float(np.sqrt(np.mean(residual**2))), clamped)


def read_points(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``size_bytes,time_us`` rows (an optional header naming them; ``#`` comments)."""
    text = read_text(path, "points file")
    sizes, times = [], []
    first = True
    for lineno, fields in _data_lines(text):
        cells = [f.strip() for f in fields]
        if first and [c.lower() for c in cells] == ["size_bytes", "time_us"]:
            first = False
            continue
        first = False
        if len(cells) != 2:
            raise InputError(f"expected 2 fields (size_bytes,time_us), got {len(cells)}", source=str(path), line=lineno)
        try:
            size, time = float(cells[0]), float(cells[1])
        except ValueError:
            raise InputError(f"size_bytes and time_us must be numbers, got {','.join(cells)!r}", source=str(path), line=lineno) from None
        if not (math.isfinite(size) and math.isfinite(time)) or size < 0 or time < 0:
            raise InputError(f"size_bytes and time_us must be finite and >= 0, got {','.join(cells)!r}", source=str(path), line=lineno)
        sizes.append(size)
        times.append(time)
    if not sizes:
        raise InputError("no points (expected rows size_bytes,time_us)", source=str(path))
    return np.array(sizes), np.array(times)


def _format_row(row: Row) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(
        [row.gpu, row.n_gpus, row.collective, f"{row.alpha_us:.6g}", f"{row.beta_gbytes_per_s:.6g}", row.source]
    )
    return buf.getvalue()


def replace_row(text: str, row: Row, source: str = "<text>") -> str:
    """CSV text with ``row`` replacing the line of the same (gpu, n_gpus, collective), or appended.

    Every other line (comments included) is kept as it is.
    """
    parse_model(text, source=source)  # validate first: errors name the base file's lines
    lines = text.splitlines()
    header = None
    out, replaced = [], False
    key = (row.gpu.upper(), row.n_gpus, row.collective)
    for lineno, raw in enumerate(lines, start=1):
        if raw.strip() and not raw.lstrip().startswith("#"):
            fields = next(csv.reader([raw]))
            if header is None:
                header = [f.strip() for f in fields]
            else:
                r = _parse_row(fields, header, source, lineno)
                if (r.gpu, r.n_gpus, r.collective) == key:
                    out.append(_format_row(row))
                    replaced = True
                    continue
        out.append(raw)
    if not replaced:
        out.append(_format_row(row))
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Fit the intra-server alpha-beta model (time = alpha + size/beta) to measured points "
        "(e.g. nccl-tests: size in bytes, time in us) and optionally write a model CSV with the fitted row.",
    )
    p.add_argument("points", type=Path, help="CSV of size_bytes,time_us rows (optional header, # comments)")
    p.add_argument("--gpu", required=True, help="GPU type of the row, e.g. H100")
    p.add_argument("--n-gpus", type=int, required=True, help="GPUs in the server taking part")
    p.add_argument("--collective", required=True, choices=KINDS)
    p.add_argument(
        "--out",
        type=Path,
        help="write a model CSV: a copy of --model (else of --out itself when it exists, else the shipped model) "
        "with the row for (gpu, n-gpus, collective) replaced or appended",
    )
    p.add_argument("--model", type=Path, help="base model CSV for --out (default: see --out)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``multiverse-jax-calibrate``; returns the exit code."""
    args = parser().parse_args(argv)
    try:
        if args.n_gpus < 1:
            raise InputError(f"--n-gpus must be >= 1, got {args.n_gpus}")
        if not args.gpu.strip():
            raise InputError("--gpu must name a GPU type")
        sizes, times = read_points(args.points)
        try:
            fit = fit_alpha_beta(sizes, times)
        except InputError as exc:
            raise InputError(str(exc), source=str(args.points)) from None
        print(f"{args.gpu.upper()} {args.n_gpus} GPUs {args.collective}: {sizes.size} points")
        print(f"alpha = {fit.alpha_us:.6g} us" + ("  (fit gave alpha < 0: refitted with alpha = 0)" if fit.alpha_clamped else ""))
        print(f"beta = {fit.beta_gbytes_per_s:.6g} GB/s")
        print(f"rms residual = {fit.rms_residual_us:.6g} us")
        if args.out is not None:
            base = args.model or (args.out if args.out.exists() else DEFAULT_MODEL_PATH)
            text = read_text(base, "base model")
            row = Row(
                args.gpu.strip().upper(),
                args.n_gpus,
                args.collective,
                fit.alpha_us,
                fit.beta_gbytes_per_s,
                f"calibrated from {args.points.name} ({sizes.size} points; rms residual {fit.rms_residual_us:.3g} us)",
            )
            new_text = replace_row(text, row, source=str(base))
            parse_model(new_text, source=str(args.out))  # what we write must load
            try:
                args.out.write_text(new_text)
            except OSError as exc:
                raise InputError(f"cannot write: {exc.strerror or exc}", source=str(args.out)) from None
            print(f"wrote {args.out}")
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
