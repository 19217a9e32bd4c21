"""Sweeps: every combination of a grid of `--set` overrides simulated, one row per combination.

    grid {key: values} --expand--> configs (index, overrides) --executor--> rows --sink-->

What a sweep runs is a `sweep_spec.SweepSpec`; each configuration's row comes from
`sweep_eval.evaluate`. `simulate` is a black box: each configuration is the scenario with its
overrides applied by the same mechanism as `shardsim run --set`
(`simulator.config.yamlio.apply_overrides`), so a sweep row equals the `run --json` of that
command line. A row whose configuration is rejected (bad combination, an internal error)
records the message and the sweep goes on.

Work shared across configurations is reused inside each worker process: the scenario file
is read and parsed once, each hardware profile (with its overrides) is validated once, the
cost model of a profile memoises its pure functions (a collective of the same size on
the same group is priced once for the whole sweep, not once per configuration), and the
model program (`program.model_program.memoised_programs`) is derived once per distinct
model, parallel layout and micro-batch size, not once per configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from simulator import _version
from simulator.planner.sweep_eval import PROGRAMS, evaluate_packed, warm
from simulator.planner.sweep_spec import SweepSpec, expand
from simulator.report.html import sweep_page
from simulator.report.sweep_journal import SweepJournal, atomic_write, scenario_sha256, writing
from simulator.report.sweep_table import plot_sweep, write_final

__all__ = ["run_sweep", "sweep_into"]


def run_sweep(spec: SweepSpec, executor: Any, done: Iterable[int] = (),
              on_row: Callable[[dict[str, Any]], None] = lambda row: None) -> int:
    """Evaluate every configuration whose index is not in `done` on `executor` (see
    sweep_exec), calling `on_row` with each row as it finishes (in completion order).
    Returns the number of rows evaluated."""
    skip = set(done)
    PROGRAMS.clear()  # derived by this code (a forked worker inherits the empty store)
    jobs = [(spec, c) for c in expand(spec) if c.index not in skip]
    if jobs:
        warm(spec, jobs[0][1])
    count = 0
    for row in executor.imap(evaluate_packed, jobs):
        on_row(row)
        count += 1
    return count


def sweep_into(spec: SweepSpec, folder: Path | None, executor: Any, resume: bool = False,
               on_row: Callable[[dict[str, Any]], None] = lambda row: None,
               on_start: Callable[[int, int], None] = lambda total, done: None,
               force: bool = False, on_note: Callable[[str], None] = lambda note: None,
               ) -> list[dict[str, Any]]:
    """Run `spec`, journaling rows into `folder` (None: in memory only), and write the final
    table and plot there. `on_start(total, already_done)` is called once before the first
    configuration runs; `on_note` gets what the journal had to repair. `force` resumes a
    folder whose scenario file or shardsim version changed. Returns every row, sorted by
    index."""
    if folder is None:
        rows: list[dict[str, Any]] = []

        def keep(row: dict[str, Any]) -> None:
            rows.append(row)
            on_row(row)

        on_start(spec.size, 0)
        run_sweep(spec, executor, on_row=keep)
        return sorted(rows, key=lambda r: r["index"])
    journal = SweepJournal(folder, _manifest(spec), spec.columns)
    with journal.open(resume, force, on_note):

        def journaled(row: dict[str, Any]) -> None:
            journal.add(row)
            on_row(row)

        on_start(spec.size, len(journal.done))
        run_sweep(spec, executor, set(journal.done), on_row=journaled)
        journal.flush()
        return _write_tables(spec, folder)


def _manifest(spec: SweepSpec) -> dict[str, Any]:
    """The sweep's manifest with what its rows depend on besides the grid: the scenario
    file's content and the shardsim that simulated them."""
    return {**spec.manifest(), "scenario_sha256": scenario_sha256(Path(spec.scenario_path)),
            "shardsim_version": _version.__version__}  # read now: tests patch it


def _write_tables(spec: SweepSpec, folder: Path) -> list[dict[str, Any]]:
    """sweep.parquet, sweep.csv, sweep.png and report.html of the journaled rows."""
    rows = write_final(folder, spec.columns)
    plot_sweep(rows, spec.keys, folder / "sweep.png")
    page = sweep_page(rows, spec.keys, folder / "sweep.png", f"shardsim sweep: {spec.shown}")
    with writing(folder, "report.html"):
        atomic_write(folder / "report.html", lambda f: f.write(page.encode("utf-8")))
    return rows
