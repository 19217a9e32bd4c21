"""`shardsim run` and `shardsim verify`: one scenario in, a result out (docs/contract.md 1,3,5)."""

from __future__ import annotations

import contextlib
import sys
from enum import Enum
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from simulator.api import InputError
from simulator.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    emit_json,
    guarded,
    load_checked,
    make_out_dir,
    stderr_console,
    stdout_console,
)
from simulator.cli.progress import LateProgress

__all__ = ["run", "verify"]


class Fidelity(str, Enum):
    representative = "representative"
    full = "full"


ScenarioArg = Annotated[str, typer.Argument(
    metavar="SCENARIO", help="A scenario YAML file, or the name of a bundled scenario "
    "(see `shardsim scenarios`).", show_default=False)]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="KEY=VALUE", help="Override one scenario key (dotted path, value parsed "
    "as YAML); `hardware.KEY=VALUE` overrides a field of the hardware profile. Repeatable.",
    show_default=False)]
JsonOpt = Annotated[bool, typer.Option(
    "--json", metavar="", help="Print exactly one JSON object on stdout and nothing else.")]


# the defaults of simulator.simulation.budget, written here so that `shardsim --help` stays light
DEFAULT_MAX_EVENTS = 500_000
DEFAULT_MAX_VERIFY_DEVICES = 1024
DEFAULT_MAX_VERIFY_GFLOP = 20
DEFAULT_MAX_VERIFY_GB = 4
MaxEventsOpt = Annotated[int, typer.Option(
    "--max-events", metavar="N", min=1, help="Refuse scenarios estimated to need more than N "
    "simulation events (10-20 s per 500,000).")]


def _progress(text: str) -> Any:
    """An indeterminate rich progress bar on stderr with the elapsed time (the work has no
    hook to report its fraction; the text carries the estimate). Gone when done."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = stderr_console()
    if not console.is_terminal:
        return contextlib.nullcontext()  # piped stderr: no bar, no stray newline
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                        console=console, transient=True)
    progress.add_task(text, total=None)
    return progress


def _simulate(scenario: Any, hw: Any, fidelity: str, events: int, max_events: int
              ) -> tuple[Any, dict[str, Any]]:
    """Simulate and summarise, with a progress bar on stderr."""
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator import api
    from simulator.report import summary

    with _progress(f"simulating {scenario.name} on {scenario.devices} devices "
                   f"(about {events:,} events)"):
        result = api.simulate(scenario, hw, fidelity, max_events=max_events)
        return result, summary(result)


def _with_notes(loaded: Any, hw: Any, result: Any, summ: dict[str, Any]
                ) -> tuple[Any, dict[str, Any]]:
    """The result with notes on `--set hardware=` changing the software stack too, and on
    `--set hardware.` overrides that change nothing (or whose role another field takes),
    each also printed on stderr."""
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    import dataclasses

    from simulator import api
    from simulator.report import summary

    with stderr_console().status("checking the --set hardware. overrides") \
            if loaded.hardware_overrides else contextlib.nullcontext():
        notes = api.run_notes(loaded, hw, result)
    for note in notes:
        sys.stderr.write(f"note: {note}\n")
    if not notes:
        return result, summ
    result = dataclasses.replace(result, notes=notes)
    return result, {**summary(result), "simulation": summ["simulation"]}


def _write_report(result: Any, out_dir: Path) -> None:
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator.report import write_report

    with stderr_console().status(f"writing report files to {out_dir}"):
        try:
            write_report(result, out_dir)
        except OSError as exc:
            raise InputError("--out", str(out_dir), f"cannot write the report files "
                             f"({exc.strerror or exc})") from None


def _print_table(summ: dict[str, Any], out: IO[str]) -> None:
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator.report import format_table

    table = format_table(summ)
    if isinstance(table, str):
        out.write(table if table.endswith("\n") else table + "\n")
    else:
        stdout_console(out).print(table)


def run(
    scenario: ScenarioArg,
    json_out: JsonOpt = False,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="DIR", help="Write the report files (table, plots, trace) here. "
        "Default: reports/<scenario-file-stem>/ (with --json: none unless --out is given).",
        show_default=False)] = None,
    overrides: SetOpt = None,
    fidelity: Annotated[Fidelity, typer.Option(
        "--fidelity", help="representative: devices that behave alike are simulated once; "
        "full: every device.")] = Fidelity.representative,
    strict: Annotated[bool, typer.Option(
        "--strict", metavar="", help="Exit 1 when the scenario does not fit in device memory "
        "(saying the peak, the capacity and the cheapest change that fits).")] = False,
    max_events: MaxEventsOpt = DEFAULT_MAX_EVENTS,
) -> None:
    """Simulate one training iteration: time, breakdown, memory, communication."""
    with guarded() as stdout:
        # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
        from simulator import api

        loaded, hw = load_checked(scenario, overrides or [])
        events = api.run_work(loaded, fidelity.value, max_events)  # after the input checks
        out_dir = out if out is not None or json_out else Path("reports") / loaded.stem
        if out_dir is not None:
            make_out_dir(out_dir)  # before simulating: a bad --out fails at once
        result, summ = _simulate(loaded.scenario, hw, fidelity.value, events, max_events)
        result, summ = _with_notes(loaded, hw, result, summ)
        if not json_out:
            _print_table(summ, stdout)  # before the figures, which take seconds to draw
            stdout.flush()
        if out_dir is not None:
            _write_report(result, out_dir)
        if json_out:
            emit_json(summ, stdout)
        elif out_dir is not None:
            stdout.write(f"report files: {out_dir}/\n")
        fits = bool(summ.get("memory", {}).get("fits", True))
        if not fits:
            _explain_no_fit(loaded, hw, summ, fidelity.value, strict)
    raise typer.Exit(EXIT_FAILED if strict and not fits else EXIT_OK)


def _explain_no_fit(loaded: Any, hw: Any, summ: dict[str, Any], fidelity: str,
                    strict: bool) -> None:
    """Say the peak and the capacity; with --strict, also the cheapest remedy that fits."""
    mem = summ.get("memory", {})
    if mem.get("nvme_peak_bytes", 0) > mem.get("nvme_capacity_bytes", 0):  # the drives are
        line = (f"the scenario does not fit on the nodes' NVMe drives: the optimizer states "
                f"take {mem.get('nvme_peak_bytes', 0) / 1e9:.3g} GB per node > "
                f"{mem.get('nvme_capacity_bytes', 0) / 1e9:.3g} GB (hardware.host.nvme_GB)")
    elif mem.get("peak_bytes", 0) <= mem.get("capacity_bytes", 0):  # the host is short
        line = (f"the scenario does not fit in host memory: what it offloads takes "
                f"{mem.get('host_peak_bytes', 0) / 1e9:.3g} GB per node > host capacity "
                f"{mem.get('host_capacity_bytes', 0) / 1e9:.3g} GB (hardware.host.memory_GB)")
    else:
        line = (f"the scenario does not fit in device memory: peak "
                f"{mem.get('peak_bytes', 0) / 1e9:.3g} GB > capacity "
                f"{mem.get('capacity_bytes', 0) / 1e9:.3g} GB")
    if strict:
        # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
        from simulator import api

        line += "; " + api.cheapest_remedy(loaded, hw, fidelity)
    stderr_console().print(line, style="yellow", highlight=False, soft_wrap=True)


def verify(
    scenario: ScenarioArg,
    json_out: JsonOpt = False,
    overrides: SetOpt = None,
    max_devices: Annotated[int, typer.Option(
        "--max-devices", metavar="N", min=1, help="Refuse scenarios whose numpy run needs "
        "more devices than N (data*tensor); the time grows about linearly with them.")
    ] = DEFAULT_MAX_VERIFY_DEVICES,
    max_gflop: Annotated[int, typer.Option(
        "--max-gflop", metavar="N", min=1, help="Refuse operator graphs whose numpy run needs "
        "more than N matrix GFLOP (graphs run at their own shapes; ~15 GFLOP/s at best).")
    ] = DEFAULT_MAX_VERIFY_GFLOP,
    max_gb: Annotated[int, typer.Option(
        "--max-gb", metavar="N", min=1, help="Refuse operator graphs whose numpy run holds "
        "more than N GB of tensors (values and gradients, float64).")
    ] = DEFAULT_MAX_VERIFY_GB,
) -> None:
    """Execute the sharded plan on virtual numpy devices and compare with one device."""
    with guarded() as stdout:
        # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
        from simulator import api

        loaded, hw = load_checked(scenario, overrides or [])
        api.verify_work(loaded, max_devices, max_gflop, max_gb)  # refused before any work
        with LateProgress("verify") as progress:
            res = api.verify(loaded.scenario, hw, progress=progress)
        if res.shrunk_note:
            sys.stderr.write(f"note: {res.shrunk_note}\n")
        report = res.to_dict()
        for note in api.verify_notes(loaded.scenario):  # offload / host placement checked
            report["notes"].append(note)
            sys.stderr.write(f"note: {note}\n")
        if json_out:
            emit_json(report, stdout)
        else:
            _print_verify(report, stdout)
    raise typer.Exit(EXIT_OK if res.ok else EXIT_FAILED)


_MAX_ROWS = 30


def _print_verify(report: dict[str, Any], out: IO[str]) -> None:
    """The failed checks (all checks when few), then one verdict line."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    checks = report.get("checks", [])
    failed = [c for c in checks if not c.get("ok")]
    shown = failed if failed or len(checks) > _MAX_ROWS else checks
    console = stdout_console(out)
    if shown:
        table = Table(title="failed checks" if failed else "checks", box=box.SIMPLE_HEAD)
        for col in ("tensor", "max_abs_error", "max_rel_error", "ok"):
            table.add_column(col, justify="left" if col == "tensor" else "right")
        for check in shown[:_MAX_ROWS]:
            table.add_row(str(check.get("tensor")), f"{check.get('max_abs_error', 0.0):.3g}",
                          f"{check.get('max_rel_error', 0.0):.3g}",
                          "yes" if check.get("ok") else Text("NO", style="red"))
        console.print(table)
        if len(shown) > _MAX_ROWS:
            console.print(f"... and {len(shown) - _MAX_ROWS} more (see --json)")
    verdict = (Text("OK", style="green") if report.get("ok") else
               Text.assemble(("FAILED", "red"), f" ({len(failed)} checks)"))
    console.print(verdict + Text(f": {report.get('scenario', '')}: "
                  f"{report.get('tensors_checked', 0)} tensors on "
                  f"{report.get('devices', '?')} devices, max abs error "
                  f"{report.get('max_abs_error', 0.0):.3g}, max rel error "
                  f"{report.get('max_rel_error', 0.0):.3g}"), highlight=False)
