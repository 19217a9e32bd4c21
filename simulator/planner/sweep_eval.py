"""One configuration of a sweep simulated (`evaluate`: its row), in a worker process, with
the work shared across configurations cached per process (the scenario file, each hardware
profile, the memoised cost model and model programs: `sweep`'s docstring)."""

from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from simulator.config.hardware.load import load_profile
from simulator.config.scenario import parse_scenario, resolve_hardware, split_overrides
from simulator.config.scenario.schema_models import model_class
from simulator.config.yamlio import apply_overrides, blame_override, read_yaml_file
from simulator.errors import InputError, ShardsimError
from simulator.lower.costs import CostModel
from simulator.planner.sweep_spec import Config, SweepSpec, typed
from simulator.program.model_program import memoised_programs
from simulator.report.summary import summary
from simulator.report.sweep_table import ROW_METRICS
from simulator.simulation.simulate import simulate

__all__ = ["evaluate", "evaluate_packed", "warm", "with_data", "PROGRAMS"]


@functools.lru_cache(maxsize=8)
def _scenario_data(path: str, shown: str) -> dict[str, Any]:
    return read_yaml_file(Path(path), shown)


@functools.lru_cache(maxsize=64)
def _profile(hw_path: str, hw_overrides: tuple[str, ...]) -> Any:
    try:
        return load_profile(hw_path, hw_overrides)
    except InputError as err:
        raise blame_override(err, hw_overrides, "hardware.") from None


PROGRAMS: dict[Any, Any] = {}  # this process's memoised model programs


@functools.lru_cache(maxsize=64)
def _costs(hw_path: str, hw_overrides: tuple[str, ...]) -> Any:
    """The profile's cost model with each pure function memoised across configurations;
    every other field kept (a model rebuilt from the functions alone lost `hardware` and
    `overlap_slowdown`, and rows differed from `run` by up to 2%)."""
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
    if (isinstance(model, dict) and _writes_ops(model) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes)):
        return overrides
    per_replica, devices = sizes[0] * sizes[1] * sizes[2], sizes[3] * sizes[4]
    if devices % per_replica or par.get("data", 1) == devices // per_replica:
        return overrides
    return (*overrides, f"parallel.data={devices // per_replica}")


def _writes_ops(model: dict[str, Any]) -> bool:
    """Whether a model section (before validation) writes its operators out, with a mesh
    of its own (`ModelConfig.writes_ops`)."""
    cls = model_class(model.get("type", "transformer"))
    return cls is not None and cls.writes_ops


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
            "comm_bytes_per_device": float(summ["communication"]["bytes_per_device"]),
            # `run`'s verdict: device memory, and host memory where states are offloaded
            "fits": bool(summ["memory"]["fits"])}


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
    with memoised_programs(PROGRAMS):
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
    except ShardsimError as exc:
        row.update(status="error", error=str(exc))
    except Exception as exc:  # an internal error of one configuration must not end the sweep
        row.update(status="error", error=f"internal error: {type(exc).__name__}: {exc}")
    return row


def evaluate_packed(job: tuple[SweepSpec, Config]) -> dict[str, Any]:
    return evaluate(*job)


def warm(spec: SweepSpec, first: Config) -> None:
    """Load the scenario file and the first configuration's hardware profile in this
    process (the simulator is imported with this module), before a process pool forks: its
    workers inherit them instead of each importing (most of a second) and loading its own.
    A failure is left to the configuration's row to report."""
    try:
        _, hw_path, hw_o = _load(spec, with_data(spec, first.overrides))
        _costs(hw_path, hw_o)
    except Exception:  # evaluate records it in the row
        return
