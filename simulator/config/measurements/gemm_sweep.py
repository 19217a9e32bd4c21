"""A GEMM sweep: the TFLOP/s a device reached on matmuls of given shapes.

Two formats:

- CSV with a header naming the columns `m`, `n`, `k`, `dtype` and `tflops` (also spelled
  `TFLOP/s`, `TFLOPS`; case does not matter; other columns are ignored; lines starting
  with `#` are comments), one row per shape, as a PyTorch loop over `torch.matmul` prints it;
- the output of Stas Bekman's MAMF finder (stas00/ml-engineering
  compute/accelerator/benchmarks/mamf-finder.py): its header's `** Dtype: torch.bfloat16`
  and one line per shape, `N | MEAN(mean) MEDIAN(median) MAX(max) @ MxNxK | best: ...`, of
  which we take the median.

dtype names: bf16, fp16, fp32, tf32, fp8, fp4 or PyTorch's (bfloat16, float16,
float8_e4m3fn, ...).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

from simulator.config.measurements.text import read_text
from simulator.errors import InputError

__all__ = ["GemmPoint", "GemmSweep", "read_gemm_sweep", "parse_gemm_sweep", "dtype_name"]

_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
           "half": "fp16", "fp32": "fp32", "float32": "fp32", "float": "fp32", "tf32": "tf32",
           "fp8": "fp8", "float8_e4m3fn": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2": "fp8",
           "e4m3": "fp8", "mxfp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4"}
_MAMF_ROW = re.compile(r"^\s*\d+\s*\|\s*([\d.]+)\(mean\)\s+([\d.]+)\(median\)\s+([\d.]+)\(max\)"
                       r"\s*@\s*(\d+)x(\d+)x(\d+)")
_MAMF_DTYPE = re.compile(r"^\*\*\s*Dtype:\s*(\S+)")
_MAMF_DEVICE = re.compile(r"name='([^']+)'")
_TFLOPS = ("tflops", "tflop/s", "tflops_per_s", "tflop_per_s")
_MAX_DIM = 2**31
_MAX_TFLOPS = 1e6


@dataclass(frozen=True)
class GemmPoint:
    """One measured GEMM: (m x k) @ (k x n) in `dtype`, at `tflops` 10^12 FLOP/s (2mnk
    FLOPs), from line `line` of its file."""

    m: int
    n: int
    k: int
    dtype: str
    tflops: float
    line: int


@dataclass(frozen=True)
class GemmSweep:
    """A parsed sweep: its file, the device it names ('' if none), its points."""

    source: str
    device: str
    points: tuple[GemmPoint, ...]


def dtype_name(text: str) -> str | None:
    """shardsim's dtype for `text` ('torch.bfloat16', 'bf16', ...), None if unknown."""
    return _DTYPES.get(text.strip().lower().removeprefix("torch."))


def read_gemm_sweep(path: str) -> GemmSweep:
    """The sweep at `path` (CSV or MAMF finder output, see the module docstring)."""
    return parse_gemm_sweep(read_text(path, "GEMM sweep"), path)


def parse_gemm_sweep(text: str, source: str) -> GemmSweep:
    lines = text.replace("\r", "\n").split("\n") if "(median)" in text else text.splitlines()
    if any(_MAMF_ROW.match(line) or _MAMF_DTYPE.match(line) for line in lines):
        return _mamf(lines, source)
    return _csv(text, source)


def _dims(values: tuple[str, str, str], source: str, line: int) -> tuple[int, int, int]:
    out = []
    for name, value in zip("mnk", values):
        if not re.fullmatch(r"[0-9]{1,10}", value.strip()) or not 1 <= int(value) <= _MAX_DIM:
            raise InputError(source, f"line {line}", f"{name} = {value[:40]!r}; expected an "
                             f"integer from 1 to {_MAX_DIM:,}")
        out.append(int(value))
    return out[0], out[1], out[2]


def _tflops(value: str, source: str, line: int) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and 0 < number <= _MAX_TFLOPS):
        raise InputError(source, f"line {line}", f"TFLOP/s = {value[:40]!r}; expected a number "
                         f"above 0 and at most {_MAX_TFLOPS:g}")
    return number


def _dtype(value: str, source: str, line: int) -> str:
    name = dtype_name(value)
    if name is None:
        raise InputError(source, f"line {line}", f"dtype {value[:40]!r}; expected one of "
                         f"{', '.join(sorted(set(_DTYPES)))}")
    return name


def _mamf(lines: list[str], source: str) -> GemmSweep:
    dtype, device, points = None, "", []
    for number, line in enumerate(lines, start=1):
        found = _MAMF_DTYPE.match(line)
        if found:
            dtype = _dtype(found.group(1), source, number)
        name = _MAMF_DEVICE.search(line)
        if name and not device:
            device = name.group(1)
        row = _MAMF_ROW.match(line)
        if row:
            if dtype is None:
                raise InputError(source, f"line {number}", "a MAMF finder row before the "
                                 "header's '** Dtype: ...' line")
            m, n, k = _dims((row.group(4), row.group(5), row.group(6)), source, number)
            points.append(GemmPoint(m, n, k, dtype, _tflops(row.group(2), source, number),
                                    number))
    if not points:
        raise InputError(source, "", "a MAMF finder header without any shape row "
                         "('N | MEAN(mean) MEDIAN(median) MAX(max) @ MxNxK | ...')")
    return GemmSweep(source, device, tuple(points))


def _columns(header: list[str], source: str, line: int) -> dict[str, int]:
    names = [h.strip().lower() for h in header]
    found: dict[str, int] = {c: names.index(c) for c in ("m", "n", "k", "dtype") if c in names}
    spelled = [t for t in _TFLOPS if t in names]
    if spelled:
        found["tflops"] = names.index(spelled[0])
    missing = [c for c in ("m", "n", "k", "dtype", "tflops") if c not in found]
    if missing:
        raise InputError(source, f"line {line}", f"the CSV header has no column "
                         f"{', '.join(missing)}; expected columns m, n, k, dtype, TFLOP/s "
                         "(or the output of the MAMF finder)")
    return found


def _csv(text: str, source: str) -> GemmSweep:
    reader = csv.reader(io.StringIO(text))
    try:
        rows = [(reader.line_num, r) for r in reader
                if r and any(c.strip() for c in r) and not r[0].lstrip().startswith("#")]
    except csv.Error as exc:
        raise InputError(source, f"line {reader.line_num}", f"not CSV ({exc})") from None
    if not rows:
        raise InputError(source, "", "no rows: expected a CSV with columns m, n, k, dtype, "
                         "TFLOP/s or the output of the MAMF finder")
    head_line, header = rows[0]
    cols = _columns(header, source, head_line)
    points = []
    for number, row in rows[1:]:
        if len(row) <= max(cols.values()):
            raise InputError(source, f"line {number}", f"{len(row)} fields; the header "
                             f"names {len(header)}")
        m, n, k = _dims((row[cols["m"]], row[cols["n"]], row[cols["k"]]), source, number)
        points.append(GemmPoint(m, n, k, _dtype(row[cols["dtype"]], source, number),
                                _tflops(row[cols["tflops"]], source, number), number))
    if not points:
        raise InputError(source, "", "a header and no rows")
    return GemmSweep(source, "", tuple(points))
