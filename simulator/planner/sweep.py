"""Sweeps: every combination of a grid of `--set` overrides simulated, one row per combination.

    grid {key: values} --expand--> configs (index, overrides) --executor--> rows --sink-->

`simulate` is a black box: each configuration is the scenario with its overrides applied by
the same mechanism as `shardsim run --set` (`simulator.config.yamlio.apply_overrides`), so a sweep
row equals the `run --json` of that command line. A row whose configuration is rejected
(bad combination, an internal error) records the message and the sweep goes on.

Work shared across configurations is reused inside each worker process: the scenario file
is read and parsed once, each hardware profile (with its overrides) is validated once, the
cost model of a profile memoises its pure functions (a collective of the same size on
the same group is priced once for the whole sweep, not once per configuration), and the
model program (`schedule.model_program.memoised_programs`) is derived once per distinct
model, parallel layout and micro-batch size, not once per configuration.
"""

from __future__ import annotations

import functools
import gc
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.config.hardware.load import load_profile
from simulator.config.scenario import parse_scenario, resolve_hardware, split_overrides
from simulator.config.yamlio import blame_override, parse_override, read_yaml_file
from simulator.errors import InputError, ShardsimError
from simulator.lower.costs import CostModel
from simulator.program.model_program import memoised_programs
from simulator.report.html import sweep_page
from simulator.report.summary import summary
from simulator.report.sweep_table import ROW_METRICS, plot_sweep, write_final
from simulator.simulation.simulate import simulate

__all__ = ["SweepSpec", "Config", "ROW_METRICS", "parse_grid", "expand", "evaluate",
           "run_sweep", "sweep_into", "load_sweep_file"]

@dataclass(frozen=True)
class SweepSpec:
    """What a sweep runs. `scenario_path` is the scenario file, `shown` how messages name it;
    `grid` is ((dotted key, (value text, ...)), ...) in the order given; `fixed` are
    overrides applied to every configuration (like `--set`)."""

    scenario_path: str
    shown: str
    grid: tuple[tuple[str, tuple[str, ...]], ...]
    fixed: tuple[str, ...] = ()
    fidelity: str = "representative"

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.grid)

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """(grid key, Arrow type of its column): int64, float64 or bool where every value
        of the key reads as one (as `--set` reads it), else string."""
        return tuple((k, _column_type(values)) for k, values in self.grid)

    @property
    def size(self) -> int:
        n = 1
        for _, values in self.grid:
            n *= len(values)
        return n

    def manifest(self) -> dict[str, Any]:
        """What identifies the sweep (a resumed sweep must have the same)."""
        return {"scenario": self.shown, "grid": {k: list(v) for k, v in self.grid},
                "set": list(self.fixed), "fidelity": self.fidelity}


def _scalar(text: str) -> Any:
    from simulator.config.yamlio import parse_override

    try:
        return parse_override(f"k={text}")[1]
    except InputError:
        return text


def _column_type(values: Sequence[str]) -> str:
    parsed = [_scalar(v) for v in values]
    if all(isinstance(v, bool) for v in parsed):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in parsed):
        return "int64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in parsed):
        return "float64"
    return "string"


def typed(text: str, kind: str) -> Any:
    """A grid value in its column's type."""
    if kind == "string":
        return text
    value = _scalar(text)
    return float(value) if kind == "float64" else value


@dataclass(frozen=True)
class Config:
    """One combination: its position in the grid and its `KEY=VALUE` overrides."""

    index: int
    overrides: tuple[str, ...]

    @property
    def label(self) -> str:
        return " ".join(self.overrides)


def parse_grid(items: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`['parallel.tensor=1,2,4', ...]` -> (('parallel.tensor', ('1', '2', '4')), ...).

    Each value is parsed later as YAML, as `--set` parses it; a key may appear once."""

    grid: dict[str, tuple[str, ...]] = {}
    for item in items:
        parse_override(item)  # the same KEY=VALUE checks and messages as --set
        key, _, text = item.partition("=")
        key = key.strip()
        values = tuple(v.strip() for v in text.split(","))
        if not text.strip() or any(not v for v in values):
            raise InputError("--grid", key, f"found {text!r}; expected comma-separated values "
                             "such as parallel.tensor=1,2,4,8")
        if key in grid:
            raise InputError("--grid", key, "the key is given twice; give each key once")
        grid[key] = values
    return tuple(grid.items())


def expand(spec: SweepSpec) -> list[Config]:
    """Every combination, the last grid key varying fastest (itertools.product order)."""
    keys = spec.keys
    combos = itertools.product(*(values for _, values in spec.grid))
    return [Config(i, spec.fixed + tuple(f"{k}={v}" for k, v in zip(keys, combo)))
            for i, combo in enumerate(combos)]


# ---- evaluation (runs in worker processes; caches live per process) ------------------------

@functools.lru_cache(maxsize=8)
def _scenario_data(path: str, shown: str) -> dict[str, Any]:

    return read_yaml_file(Path(path), shown)


@functools.lru_cache(maxsize=64)
def _profile(hw_path: str, hw_overrides: tuple[str, ...]) -> Any:

    try:
        return load_profile(hw_path, hw_overrides)
    except InputError as err:
        raise blame_override(err, hw_overrides, "hardware.") from None


_PROGRAMS: dict[Any, Any] = {}  # this process's memoised model programs


@functools.lru_cache(maxsize=64)
def _costs(hw_path: str, hw_overrides: tuple[str, ...]) -> Any:
    """The profile's cost model with each pure function memoised across configurations;
    every other field kept (a model rebuilt from the functions alone lost `hardware` and
    `overlap_slowdown`, and rows differed from `run` by up to 2%)."""
    import dataclasses


    base = CostModel.from_hardware(_profile(hw_path, hw_overrides))
    memo = functools.lru_cache(maxsize=None)
    return dataclasses.replace(base, compute_s=memo(base.compute_s),
                               collective_s=memo(base.collective_s),
                               send_recv_s=memo(base.send_recv_s))


# keys that change the devices a replica spans, or the devices: parallel.data follows them
_LAYOUT_KEYS = frozenset({"parallel.tensor", "parallel.pipeline", "parallel.context",
                          "parallel.tensor_nd", "cluster.nodes", "cluster.devices_per_node"})


def with_data(spec: SweepSpec, overrides: tuple[str, ...]) -> tuple[str, ...]:
    """`overrides` with `parallel.data=N` added, as `plan` derives it, when they change the
    layout (tensor, pipeline, context or the cluster) but not parallel.data: the devices
    over tensor*pipeline*context, where that divides and differs from the scenario's.
    Unchanged otherwise (an operator graph, or values validation refuses with its own
    message)."""
    from simulator.config.yamlio import apply_overrides

    keys = {o.partition("=")[0].strip() for o in overrides}
    if "parallel.data" in keys or not keys & _LAYOUT_KEYS:
        return overrides
    try:
        raw = apply_overrides(_scenario_data(spec.scenario_path, spec.shown),
                              [o for o in overrides if not o.startswith("hardware.")])
    except InputError:
        return overrides
    par, cl = raw.get("parallel") or {}, raw.get("cluster") or {}
    model = raw.get("model")
    sizes = [par.get("tensor", 1), par.get("pipeline", 1), par.get("context", 1),
             cl.get("nodes", 1), cl.get("devices_per_node", 1)]
    if (isinstance(model, dict) and model.get("type") == "graph" or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes)):
        return overrides
    per_replica, devices = sizes[0] * sizes[1] * sizes[2], sizes[3] * sizes[4]
    if devices % per_replica or par.get("data", 1) == devices // per_replica:
        return overrides
    return (*overrides, f"parallel.data={devices // per_replica}")


def _load(spec: SweepSpec, overrides: tuple[str, ...]) -> tuple[Any, str, tuple[str, ...]]:
    """(validated scenario, profile path, hardware overrides) of one configuration."""

    path = Path(spec.scenario_path)
    scen_o, hw_o = split_overrides(overrides)
    scenario = parse_scenario(_scenario_data(str(path), spec.shown), spec.shown, scen_o)
    hw_path = resolve_hardware(scenario, path.parent, scen_o)
    return scenario, str(hw_path), tuple(hw_o)


def _metrics(summ: dict[str, Any]) -> dict[str, Any]:
    parts = summ["breakdown_s"]
    return {"iteration_time_s": summ["iteration_time_s"], "samples_per_s": summ["samples_per_s"],
            "tokens_per_s": summ["tokens_per_s"], "tflops_per_device": summ["tflops_per_device"],
            "mfu": summ["mfu"], "peak_memory_bytes": float(summ["memory"]["peak_bytes"]),
            "capacity_bytes": float(summ["memory"]["capacity_bytes"]),
            **{f"{k}_s": v for k, v in parts.items()},
            "comm_bytes_per_device": float(summ["communication"]["bytes_per_device"])}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while one configuration runs: a simulation
    allocates hundreds of thousands of tuples (tasks, events) that reference counting
    frees on its own, and the collector's passes over them took a quarter of a
    configuration's time (benchmarks/sweep_speed.py). Whatever cycles it leaves are
    collected once the collector runs again, after the configuration."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _simulated(spec: SweepSpec, overrides: tuple[str, ...]) -> dict[str, Any]:
    """The metrics of one configuration's simulation (its plan and trace are dropped on
    return, before the collector runs again: it then finds little left to scan)."""

    scenario, hw_path, hw_o = _load(spec, overrides)
    # simulated as `run` simulates it (the same steady-state extension and event limit),
    # so that a row equals `run --json` of its configuration to the last digit (extending
    # GPipe's steady state too, as sweeps did, was 40% faster but differed from `run` in
    # the 15th digit: benchmarks/sweep_speed.py, tests/test_sweep_rows.py); only what
    # the reports alone show (critical path, jitter) is left out, and the pure cost
    # functions and model programs are memoised across configurations
    with memoised_programs(_PROGRAMS):
        result = simulate(scenario, _profile(hw_path, hw_o), spec.fidelity,
                          costs=_costs(hw_path, hw_o), reports=False)
    return _metrics(summary(result))


def evaluate(spec: SweepSpec, config: Config) -> dict[str, Any]:
    """The row of one configuration: `run --json` figures, or status 'error' and why."""
    overrides = with_data(spec, config.overrides)
    # the `--set` items that reproduce the row with `run` (a derived parallel.data too)
    row: dict[str, Any] = {"index": config.index, "config": " ".join(overrides)}
    row.update({k: typed(v.partition("=")[2], kind) for (k, kind), v in
                zip(spec.columns, config.overrides[len(spec.fixed):])})
    row.update(status="ok", error=None, fits=None, **dict.fromkeys(ROW_METRICS))
    try:
        with _collector_paused():
            row.update(_simulated(spec, overrides))
        row["fits"] = row["peak_memory_bytes"] <= row["capacity_bytes"]
    except ShardsimError as exc:
        row.update(status="error", error=str(exc))
    except Exception as exc:  # an internal error of one configuration must not end the sweep
        row.update(status="error", error=f"internal error: {type(exc).__name__}: {exc}")
    return row


def _evaluate_packed(job: tuple[SweepSpec, Config]) -> dict[str, Any]:
    return evaluate(*job)


def _warm(spec: SweepSpec, first: Config) -> None:
    """Import the simulator and load the scenario file and the first configuration's
    hardware profile in this process, before a process pool forks: its workers inherit
    them instead of each importing (most of a second) and loading its own. A failure is
    left to the configuration's row to report."""
    import simulator.report.summary  # noqa: F401
    import simulator.simulation.simulate  # noqa: F401

    try:
        _, hw_path, hw_o = _load(spec, with_data(spec, first.overrides))
        _costs(hw_path, hw_o)
    except Exception:  # evaluate records it in the row
        return


def run_sweep(spec: SweepSpec, executor: Any, done: Iterable[int] = (),
              on_row: Callable[[dict[str, Any]], None] = lambda row: None) -> int:
    """Evaluate every configuration whose index is not in `done` on `executor` (see
    sweep_exec), calling `on_row` with each row as it finishes (in completion order).
    Returns the number of rows evaluated."""
    skip = set(done)
    _PROGRAMS.clear()  # derived by this code (a forked worker inherits the empty store)
    jobs = [(spec, c) for c in expand(spec) if c.index not in skip]
    if jobs:
        _warm(spec, jobs[0][1])
    count = 0
    for row in executor.imap(_evaluate_packed, jobs):
        on_row(row)
        count += 1
    return count


def load_sweep_file(path: Path, data: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """(scenario reference, grid items, fixed overrides) of a sweep file (a YAML mapping
    with a `sweep:` block: scenario, grid {key: [values]}, optional set [KEY=VALUE])."""
    src = str(path)
    block = data.get("sweep")
    if not isinstance(block, dict):
        raise InputError(src, "sweep", "expected a mapping with scenario, grid and set")
    unknown = sorted(set(block) - {"scenario", "grid", "set"})
    if unknown:
        raise InputError(src, f"sweep.{unknown[0]}", "unknown key; allowed: scenario, grid, set")
    ref, grid, fixed = block.get("scenario"), block.get("grid"), block.get("set", [])
    if not isinstance(ref, str):
        raise InputError(src, "sweep.scenario", f"found {ref!r}; expected a scenario name or "
                         "a path relative to this file")
    if not isinstance(grid, dict) or not grid:
        raise InputError(src, "sweep.grid", "expected a mapping of dotted keys to lists of "
                         "values, such as {parallel.tensor: [1, 2, 4]}")
    items = []
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise InputError(src, f"sweep.grid.{key}", f"found {values!r}; expected a "
                             "non-empty list of values")
        items.append(f"{key}=" + ",".join(_yaml_scalar(v) for v in values))
    if not isinstance(fixed, list) or not all(isinstance(s, str) for s in fixed):
        raise InputError(src, "sweep.set", "expected a list of KEY=VALUE strings")
    local = path.parent / ref
    return (str(local) if local.is_file() else ref), items, list(fixed)


def _yaml_scalar(value: Any) -> str:
    """A grid value as `--set` text (booleans as YAML writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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
    from simulator.report.sweep_journal import SweepJournal

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
    from simulator._version import __version__
    from simulator.report.sweep_journal import scenario_sha256

    return {**spec.manifest(), "scenario_sha256": scenario_sha256(Path(spec.scenario_path)),
            "shardsim_version": __version__}


def _write_tables(spec: SweepSpec, folder: Path) -> list[dict[str, Any]]:
    """sweep.parquet, sweep.csv, sweep.png and report.html of the journaled rows."""
    from simulator.report.sweep_journal import atomic_write, writing

    rows = write_final(folder, spec.columns)
    plot_sweep(rows, spec.keys, folder / "sweep.png")
    page = sweep_page(rows, spec.keys, folder / "sweep.png", f"shardsim sweep: {spec.shown}")
    with writing(folder, "report.html"):
        atomic_write(folder / "report.html", lambda f: f.write(page.encode("utf-8")))
    return rows
