"""`shardsim run` and `shardsim verify`: one scenario in, a result out (CONTRACT.md 1, 3, 5)."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from simulator.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    emit_json,
    guarded,
    load_hardware,
    load_scenario,
    stderr_console,
    stdout_console,
)
from simulator.errors import InputError

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
    "--json", help="Print exactly one JSON object on stdout and nothing else.")]


def _simulate(scenario: Any, hw: Any, fidelity: str) -> tuple[Any, dict[str, Any]]:
    """Simulate and summarise, with a status line on stderr."""
    from simulator.report import summary
    from simulator.simulate import simulate

    with stderr_console().status(f"simulating {scenario.name} on {scenario.devices} devices"):
        result = simulate(scenario, hw, fidelity=fidelity)
        return result, summary(result)


def _write_report(result: Any, out_dir: Path) -> None:
    from simulator.report import write_report

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError("--out", str(out_dir), f"cannot create the folder ({exc.strerror})"
                         ) from None
    with stderr_console().status(f"writing report files to {out_dir}"):
        try:
            write_report(result, out_dir)
        except OSError as exc:
            raise InputError("--out", str(out_dir), f"cannot write the report files "
                             f"({exc.strerror or exc})") from None


def _print_table(summ: dict[str, Any], out: IO[str]) -> None:
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
        "--strict", help="Exit 1 when the scenario does not fit in device memory.")] = False,
) -> None:
    """Simulate one training iteration: time, breakdown, memory, communication."""
    with guarded() as stdout:
        loaded = load_scenario(scenario, overrides or [])
        hw = load_hardware(loaded)
        result, summ = _simulate(loaded.scenario, hw, fidelity.value)
        out_dir = out if out is not None or json_out else Path("reports") / loaded.stem
        if out_dir is not None:
            _write_report(result, out_dir)
        if json_out:
            emit_json(summ, stdout)
        else:
            _print_table(summ, stdout)
            if out_dir is not None:
                stdout.write(f"report files: {out_dir}/\n")
        fits = bool(summ.get("memory", {}).get("fits", True))
        if not fits:
            stderr_console().print("[yellow]the scenario does not fit in device memory "
                                   "(memory.fits is false)[/]")
    raise typer.Exit(EXIT_FAILED if strict and not fits else EXIT_OK)


def verify(
    scenario: ScenarioArg,
    json_out: JsonOpt = False,
    overrides: SetOpt = None,
) -> None:
    """Execute the sharded plan on virtual numpy devices and compare with one device."""
    with guarded() as stdout:
        loaded = load_scenario(scenario, overrides or [])
        load_hardware(loaded)  # not used by the numpy run, but a bad override is an error
        from simulator.numeric.verify import verify_scenario

        with stderr_console().status(f"verifying {loaded.scenario.name}"):
            fused = load_hardware(loaded).software.fused_attention
            res = verify_scenario(loaded.scenario, fused_attention=fused)
        if res.shrunk_note:
            sys.stderr.write(f"note: {res.shrunk_note}\n")
        report = res.to_dict()
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
                          "yes" if check.get("ok") else "[red]NO[/]")
        console.print(table)
        if len(shown) > _MAX_ROWS:
            console.print(f"... and {len(shown) - _MAX_ROWS} more (see --json)")
    verdict = "[green]OK[/]" if report.get("ok") else f"[red]FAILED[/] ({len(failed)} checks)"
    console.print(f"{verdict}: {report.get('scenario', '')}: "
                  f"{report.get('tensors_checked', 0)} tensors on "
                  f"{report.get('devices', '?')} devices, max abs error "
                  f"{report.get('max_abs_error', 0.0):.3g}, max rel error "
                  f"{report.get('max_rel_error', 0.0):.3g}", markup=True, highlight=False)
