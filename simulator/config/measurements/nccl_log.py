"""An nccl-tests log (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf)
read into its measured points.

nccl-tests (github.com/NVIDIA/nccl-tests, src/common.cu) prints one row per message size:

    size  count  type  redop  root  time algbw busbw #wrong  time algbw busbw #wrong
    (B)   (elements)                (us) (GB/s) (GB/s)       (us) (GB/s) (GB/s)

out-of-place then in-place; versions before 2.10 have no `root` column, their alltoall rows
leave `redop` empty and their last column is an error value such as `2e-06`; `#wrong` is
`N/A` where nothing was checked. The header says which collective ran (`# Collective test
starting: all_reduce_perf`, nccl-tests 2.13 and later) and lists the ranks (`#  Rank  0 Group
0 Pid 171 on HOST device 0 [0000:41:00] NVIDIA H100 80GB HBM3`). We keep the out-of-place
columns, as nccl-tests' `Avg bus bandwidth` and every figure we cite do. Lines that are not
part of the table (mpirun's and NCCL_DEBUG's) are skipped; a line that starts like a row and
does not read as one is refused with its number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from simulator.config.measurements.text import read_text
from simulator.errors import InputError

__all__ = ["NcclPoint", "NcclLog", "read_nccl_log", "parse_nccl_log", "bus_factor",
           "NCCL_COLLECTIVES"]

# the test's name -> the collective, as shardsim (and simulator.cost.specs) names it
NCCL_COLLECTIVES = {"all_reduce": "all_reduce", "allreduce": "all_reduce",
                    "all_gather": "all_gather", "allgather": "all_gather",
                    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
                    "alltoall": "all_to_all", "all_to_all": "all_to_all"}
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_RANK = re.compile(r"^#\s*Rank\s+([0-9]{1,9})\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+"
                   r"device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_DIGITS = re.compile(r"[0-9]+")  # ASCII: str.isdigit() also takes '²', which int() refuses
_MAX_BYTES = 2**50  # 1 PiB: no buffer a benchmark allocates comes near
_REDOPS = ("sum", "prod", "max", "min", "avg", "none", "premulsum")
_ROW_HELP = ("expected nccl-tests' row: size count type redop root time algbw busbw #wrong "
             "(out-of-place, then in-place)")
MAX_RANKS = 1_000_000


@dataclass(frozen=True)
class NcclPoint:
    """One measured message size: bytes (nccl-tests convention), the out-of-place time (us),
    algbw and busbw (GB/s) as printed, and the line of the log it came from."""

    nbytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    line: int


@dataclass(frozen=True)
class NcclLog:
    """A parsed log: the collective, the ranks, how many share a node (None where the log
    does not list its ranks' hosts), the device name the log gives ('' if none), the points."""

    source: str
    collective: str
    ranks: int
    ranks_per_node: int | None
    device: str
    points: tuple[NcclPoint, ...]


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw (doc/PERFORMANCE.md): 2(n-1)/n all_reduce, (n-1)/n the others."""
    return (2.0 if collective == "all_reduce" else 1.0) * (n - 1) / n


def read_nccl_log(path: str, collective: str | None = None) -> NcclLog:
    """The log at `path`; `collective` where neither the log nor its file name says it."""
    return parse_nccl_log(read_text(path, "nccl-tests log"), path, collective)


@dataclass
class _Header:
    collective: str | None = None
    ranks: dict[int, tuple[str, str]] | None = None


def parse_nccl_log(text: str, source: str, collective: str | None = None) -> NcclLog:
    """Parse the text of an nccl-tests log named `source` (see the module docstring)."""
    header, points = _Header(), []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("#"):
            _header_line(line, header)
        elif line and _DIGITS.fullmatch(line.split()[0]):
            point = _row(line, source, number)
            if point is not None:
                points.append(point)
    if not points:
        raise InputError(source, "", "no nccl-tests result rows found; " + _ROW_HELP +
                         ", as all_reduce_perf, all_gather_perf, reduce_scatter_perf and "
                         "alltoall_perf print it")
    name = _collective(header.collective or collective, source)
    ranks, per_node, device = _ranks(header, name, points, source)
    _check_factor(name, ranks, points, source)
    return NcclLog(source, name, ranks, per_node, device, tuple(points))


def _header_line(line: str, header: _Header) -> None:
    starting = _STARTING.search(line)
    if starting:
        header.collective = starting.group(1)
    rank = _RANK.match(line)
    if rank:
        header.ranks = header.ranks or {}
        header.ranks[int(rank.group(1))] = (rank.group(2), rank.group(3).strip())


def _number(token: str, what: str, source: str, line: int) -> float:
    try:
        value = float(token)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(source, f"line {line}", f"{what} {token[:40]!r} is not a number >= 0; "
                         + _ROW_HELP)
    return value


def _row(line: str, source: str, number: int) -> NcclPoint | None:
    """The out-of-place point of one table row (None for a 0-byte row), or InputError."""
    tokens = line.split()
    rest = tokens[3:]
    if rest and rest[0].lower() in _REDOPS:
        rest = rest[1:]
    if len(rest) in (5, 9) and re.fullmatch(r"-?\d+", rest[0]):
        rest = rest[1:]  # root
    if len(tokens) < 3 or not _DIGITS.fullmatch(tokens[1]) or len(rest) not in (4, 8):
        raise InputError(source, f"line {number}", f"cannot read this row ({line[:100]!r}); "
                         + _ROW_HELP)
    if len(tokens[0]) > 16 or int(tokens[0]) > _MAX_BYTES:
        raise InputError(source, f"line {number}", f"size {tokens[0][:20]} bytes; expected at "
                         f"most {_MAX_BYTES:,} (1 PiB)")
    nbytes = int(tokens[0])
    time_us, algbw, busbw = (_number(t, w, source, number)
                             for t, w in zip(rest[:3], ("time", "algbw", "busbw")))
    if nbytes == 0:
        return None
    if time_us <= 0:
        raise InputError(source, f"line {number}", f"time {rest[0]!r} us for {nbytes} bytes; "
                         "expected a time > 0")
    expected = nbytes / time_us / 1e3
    if abs(algbw - expected) > 0.006 + 0.02 * expected:
        raise InputError(source, f"line {number}", f"algbw {rest[1]} GB/s is not size / time "
                         f"= {expected:.3g} GB/s: the columns are not nccl-tests' ({_ROW_HELP})")
    return NcclPoint(nbytes, time_us, algbw, busbw, number)


def _collective(name: str | None, source: str) -> str:
    stem = Path(source).name.lower()
    if name is None:
        name = next((k for k in NCCL_COLLECTIVES if k in stem), None)
    if name is None or name not in NCCL_COLLECTIVES:
        found = f"'{name}'" if name else "none"
        raise InputError(source, "", f"cannot tell which collective this log measured (found "
                         f"{found}): expected a '# Collective test starting: NAME_perf' line "
                         "or a file name containing all_reduce, all_gather, reduce_scatter "
                         "or alltoall")
    return NCCL_COLLECTIVES[name]


def _ranks(header: _Header, collective: str, points: list[NcclPoint], source: str
           ) -> tuple[int, int | None, str]:
    """(ranks, ranks on the first rank's host or None, device name) from the rank lines, or
    the ranks from busbw / algbw of the largest row where the log lists none."""
    if header.ranks:
        ranks = max(header.ranks) + 1
        host, device = header.ranks.get(0, next(iter(header.ranks.values())))
        on_host = sum(1 for h, _ in header.ranks.values() if h == host)
        # ranks fill nodes in order (mpirun's and srun's default); a log that elides rank
        # lines ('...') does not say how many share a node
        per_node = on_host if len(header.ranks) == ranks else None
        return ranks, per_node, device
    big = max(points, key=lambda p: p.nbytes)
    top = 2.0 if collective == "all_reduce" else 1.0
    algbw = big.nbytes / big.time_us / 1e3
    # busbw is printed to 0.01 GB/s: the rank count must be the same at either end of that
    counts = {round(top / (top - r)) if 0 < r < top else 0
              for r in ((big.busbw_GBps - 0.005) / algbw, (big.busbw_GBps + 0.005) / algbw)}
    if len(counts) != 1 or min(counts) < 2:
        raise InputError(source, "", "the log lists no '#  Rank N ... on HOST' lines and its "
                         "largest row's busbw / algbw does not tell the rank count; keep the "
                         "header nccl-tests prints")
    return counts.pop(), None, ""


def _check_factor(collective: str, ranks: int, points: list[NcclPoint], source: str) -> None:
    """busbw must be algbw times nccl-tests' factor for the log's ranks."""
    if not 2 <= ranks <= MAX_RANKS:
        raise InputError(source, "", f"{ranks} ranks; expected 2 to {MAX_RANKS:,}")
    factor = bus_factor(collective, ranks)
    for p in points:
        if p.algbw_GBps >= 1 and abs(p.busbw_GBps - p.algbw_GBps * factor) > \
                0.01 + 0.02 * p.busbw_GBps:
            raise InputError(source, f"line {p.line}", (
                f"busbw {p.busbw_GBps:g} GB/s is not algbw x {factor:.4g} (nccl-tests' factor "
                f"for {collective} on {ranks} ranks): the log's rank lines and its table "
                "disagree"))
