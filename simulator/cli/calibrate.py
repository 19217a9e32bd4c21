"""`shardsim calibrate`: a hardware profile fitted to your own nccl-tests logs and GEMM sweep
(issue 27; docs/calibrate.md)."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Annotated, Any

import typer

from simulator.cli._common import (
    emit_json,
    guarded,
    printable,
    stderr_console,
    write_out_file,
)

__all__ = ["calibrate"]


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)) and len(value) > 2:
        return f"curve of {len(value)} points"
    return "-" if value is None else printable(f"{value:g}" if isinstance(value, float)
                                               else str(value))


def _report(result: dict[str, Any]) -> str:
    """The replaced fields, then the error of the written profile on each file's points."""
    out = [f"base: {result['base']}   written: {result['name']}", "",
           f"{'field':<38} {'base':>10} {'calibrated':>12}  from"]
    for f in result["fields"]:
        files = ", ".join(Path(s).name for s in f["sources"])
        out.append(f"{f['key']:<38} {_value(f['base']):>10} {_value(f['value']):>12}  {files}")
    out += ["", f"{'measurements priced on the written profile':<48} {'points':>6} "
            f"{'median err':>10} {'worst err':>10}"]
    for row in result["summary"]:
        out.append(f"{Path(str(row['file'])).name:<48} {row['points']:>6} "
                   f"{row['median_error_pct']:>9.1f}% {row['worst_error_pct']:>9.1f}%")
    out += [f"note: {n}" for n in result["notes"]]
    return "\n".join(out)


def _emit(result: dict[str, Any], out: Path | None, json_out: bool, stdout: IO[str]) -> None:
    if out is not None:
        write_out_file(out, result["yaml"], "the profile")
    if json_out:
        emit_json({k: v for k, v in result.items() if k != "checks" or out is None}
                  | {"out": str(out) if out else None}, stdout)
        return
    if out is None:
        stderr_console().print(_report(result), soft_wrap=True, highlight=False)
        stdout.write(result["yaml"])
        return
    stdout.write(_report(result) + f"\n\nprofile written: {out}; `shardsim comm ... --hardware "
                 f"{out}` and a scenario's `hardware: {out}` use it\n")


def calibrate(
    logs: Annotated[list[str] | None, typer.Argument(
        metavar="[NCCL_LOG]...", help="nccl-tests output (all_reduce_perf, all_gather_perf, "
        "reduce_scatter_perf, alltoall_perf), one file per run.", show_default=False)] = None,
    gemm: Annotated[list[str] | None, typer.Option(
        "--gemm", metavar="FILE", help="A GEMM sweep: CSV of m, n, k, dtype, TFLOP/s, or the "
        "MAMF finder's output (repeatable).", show_default=False)] = None,
    base: Annotated[str | None, typer.Option(
        "--base", metavar="NAME", help="The profile to start from, a bundled name or a YAML "
        "path (default: the one the measured device's name matches).",
        show_default=False)] = None,
    name: Annotated[str | None, typer.Option(
        "--name", metavar="NAME", help="The written profile's name (default: BASE-calibrated).",
        show_default=False)] = None,
    collective: Annotated[str | None, typer.Option(
        "--collective", metavar="NAME", help="The collective of logs that do not say it (no "
        "'Collective test starting' line, no collective in the file name).",
        show_default=False)] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="FILE", help="Write the profile here (default: print it on stdout).",
        show_default=False)] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", metavar="", help="Print exactly one JSON object on stdout and nothing else.")
    ] = False,
) -> None:
    """Write a hardware profile fitted to your nccl-tests logs and GEMM sweep."""
    with guarded() as stdout:
        from simulator import api  # the cost model loads here, not at start-up

        result = api.calibrate_profile(logs or [], gemm or [], base, name, collective)
        _emit(result, out, json_out, stdout)
