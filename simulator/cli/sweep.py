"""`shardsim sweep`: every combination of a grid of overrides, one table row each."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from simulator.api import InputError
from simulator.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    emit_json,
    fail,
    guarded,
    make_out_dir,
    stderr_console,
    stdout_console,
)

__all__ = ["sweep"]


class Executor(str, Enum):
    local = "local"
    serial = "serial"
    ray = "ray"


# A grid is a product: three keys of 100 values are 10^6 configurations, a day of work.
DEFAULT_MAX_CONFIGS = 10_000


def _check_size(spec: Any, limit: int) -> None:
    """InputError for a grid of more than `limit` configurations, saying the product."""
    if spec.size <= limit:
        return
    counts = " x ".join(f"{len(v)} {k}" for k, v in spec.grid)
    raise InputError("--grid", "", f"{spec.size:,} configurations ({counts}), above the "
                     f"limit of {limit:,}; give fewer values or raise the limit with "
                     f"--max-configs {spec.size}")


def _progress() -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=stderr_console(), transient=False)


_SHOWN = 20


def _print_summary(rows: list[dict[str, Any]], keys: tuple[str, ...], out: IO[str]) -> None:
    """The fastest configurations that fit (at most _SHOWN rows), then counts."""
    from rich import box
    from rich.table import Table

    ok = [r for r in rows if r["status"] == "ok"]
    fit = sorted((r for r in ok if r["fits"]),
                 key=lambda r: r["iteration_time_s"])
    table = Table(title=f"fastest configurations that fit ({min(len(fit), _SHOWN)} of "
                  f"{len(fit)})", box=box.SIMPLE_HEAD)
    for col in (*keys, "iteration s", "tokens/s", "MFU", "peak GB"):
        table.add_column(col, justify="right")
    for r in fit[:_SHOWN]:
        table.add_row(*(str(r[k]) for k in keys), f"{r['iteration_time_s']:.4g}",
                      f"{r['tokens_per_s']:.4g}", f"{r['mfu']:.1%}",
                      f"{r['peak_memory_bytes'] / 1e9:.1f}")
    console = stdout_console(out)
    console.print(table)
    failed = [r for r in rows if r["status"] != "ok"]
    console.print(f"{len(rows)} configurations: {len(fit)} fit, {len(ok) - len(fit)} do not "
                  f"fit, {len(failed)} failed", highlight=False)
    for r in failed[:3]:
        console.print(f"  failed: {r['config']}: {r['error']}", highlight=False, markup=False)


def sweep(
    scenario: Annotated[str, typer.Argument(
        metavar="SCENARIO", help="A scenario (file or bundled name), or a sweep file whose "
        "`sweep:` block names the scenario and its grid.", show_default=False)],
    grid: Annotated[list[str] | None, typer.Option(
        "--grid", metavar="KEY=V1,V2,...", help="Values of one key (dotted path as for "
        "--set; `hardware.KEY` for a profile field). Repeatable: every combination runs.",
        show_default=False)] = None,
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE", help="Override applied to every configuration.",
        show_default=False)] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="DIR", help="Folder for sweep.parquet, sweep.csv, sweep.png, "
        "report.html and the journal. Default: reports/<scenario-stem>-sweep/.",
        show_default=False)] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", metavar="", help="Continue the sweep in --out: configurations already "
        "there are skipped.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", metavar="", help="With --resume: continue even though the scenario file "
        "or shardsim's version changed since the sweep began (the old rows are kept).")
        ] = False,
    executor: Annotated[Executor, typer.Option(
        "--executor", help="local: a process pool on this machine; ray: Ray tasks; serial: "
        "this process.")] = Executor.local,
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster address ('auto', 'ray://HOST:PORT'); default: start "
        "a local Ray instance.", show_default=False)] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, help="Processes of the local executor (default: the cores).",
        show_default=False)] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", metavar="",
        help="Print the rows as one JSON list on stdout and nothing else.")] = False,
    max_configs: Annotated[int, typer.Option(
        "--max-configs", metavar="N", min=1, help="Refuse grids of more than N "
        "configurations (about 10 per second on 2 cores).")] = DEFAULT_MAX_CONFIGS,
) -> None:
    """Simulate every combination of a grid of overrides; a table row per combination."""
    with guarded() as stdout:
        from simulator import api  # the simulator loads here, not at start-up

        if force and not resume:
            raise InputError("--force", "", "only resumes a changed sweep; give it with "
                             "--resume")
        spec = api.sweep_spec(scenario, grid or [], overrides or [])
        _check_size(spec, max_configs)
        ex = api.sweep_executor(executor.value, address, workers)
        folder = out or Path("reports") / f"{Path(spec.scenario_path).stem}-sweep"
        make_out_dir(folder)  # before the first configuration: a bad --out fails at once
        with _progress() as bar:
            task = bar.add_task("sweep", total=spec.size, failed=0)
            failed = [0]

            def on_row(row: dict[str, Any]) -> None:
                failed[0] += row["status"] != "ok"
                bar.update(task, advance=1, failed=failed[0])

            rows = api.sweep_rows(spec, folder, ex, resume, force, on_row=on_row,
                                  on_note=_note,
                                  on_start=lambda total, done: bar.update(task,
                                                                          completed=done))
        if json_out:
            emit_json(rows, stdout)
        else:
            _print_summary(rows, spec.keys, stdout)
            stdout.write(f"sweep files: {folder}/ (sweep.parquet, sweep.csv, sweep.png, "
                         "report.html)\n")
    failed_rows = sum(r["status"] != "ok" for r in rows)
    if failed_rows:
        fail(f"{failed_rows} of {len(rows)} configurations failed; the error column of "
             f"{folder / 'sweep.csv'} says why", EXIT_FAILED)
    raise typer.Exit(EXIT_OK)


def _note(text: str) -> None:
    stderr_console().print(f"note: {text}", markup=False, highlight=False)
