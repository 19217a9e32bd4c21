"""`shardsim plan`: the best configurations of a scenario on a cluster, the fewest devices
that meet an iteration-time (or tokens-in-days) target within an optional budget, or the
soonest training within a budget.

Exit status: 0 a configuration fits (and meets the target); 1 none fits or none meets the
target up to --max-devices; 2 bad input; 130 interrupted (what was ranked is printed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from simulator.api import (
    InputError,
    at_most,
    check_model,
    check_request,
    cluster_for,
    frameworks_for,
    options_for,
    positive,
)
from simulator.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    check_out_name,
    emit_json,
    guarded,
    load_scenario,
    stderr_console,
)
from simulator.cli.plan_emit import emit_best, print_emitted
from simulator.cli.run import JsonOpt, ScenarioArg, SetOpt

__all__ = ["plan"]

EXIT_INTERRUPTED = 130



@contextlib.contextmanager
def _progress(quiet: bool) -> Iterator[Any]:
    """A rich progress bar on stderr; yields the search's progress callback."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = stderr_console()
    if quiet or not console.is_terminal:
        yield None  # piped stderr: no bar, no stray newline before an error line
        return
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}"
                   "/{task.total}"), TimeElapsedColumn(), console=console,
                   transient=True)
    with bar:
        task = bar.add_task("planning", total=1)

        def update(phase: str, done: int, total: int) -> None:
            bar.update(task, description=phase, completed=done, total=max(total, 1))

        yield update


def _replayer(loaded: Any, per_node: int) -> Any:
    """Configuration -> the complete scenario `run` takes as is (planner.replay)."""
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator.api import replay_scenario

    def replay(cfg: Any) -> dict[str, Any]:
        return replay_scenario(loaded.scenario, cfg, per_node, loaded.hardware_path)

    return replay


def _devices_mode(loaded: Any, hw: Any, n: int, per_node: int, opts: Any,
                  price: float | None, out_dir: Path | None, quiet: bool) -> dict[str, Any]:
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator.api import pareto_front, search
    from simulator.cli._common import make_out_dir
    from simulator.cli.plan_output import pareto_png, row

    with _progress(quiet) as progress:
        res = search(loaded.scenario, hw, n, per_node, opts, progress)
    objective, top = opts.objective, opts.top_k
    front = pareto_front(res.ranked)
    replay = _replayer(loaded, per_node)
    report: dict[str, Any] = {
        "scenario": loaded.scenario.name, "mode": "devices", "devices": n,
        "objective": objective, "headroom": opts.headroom,
        "hardware_overrides": list(loaded.hardware_overrides),
        "interrupted": res.interrupted,
        "search": {"configurations": res.space, "pruned_by_memory": res.pruned,
                   "simulated": res.simulations, "probe_simulations": res.probes,
                   "wall_s": res.wall_s},
        "best": row(res.best, n, price, res.best, replay) if res.best else None,
        "top": [row(c, n, price, res.best, replay) for c in res.ranked[:top]],
        "pareto": [row(c, n, price, res.best) for c in front], "files": {}}
    if out_dir is not None and res.ranked:
        path = make_out_dir(out_dir) / "pareto.png"
        pareto_png(list(res.ranked), front, f"{loaded.scenario.name}: {n} devices", path)
        report["files"]["pareto_png"] = str(path)
    return report


def _target_mode(loaded: Any, hw: Any, target: float | None, per_node: int,
                 max_devices: int, opts: Any, price: float | None, out_dir: Path | None,
                 quiet: bool, budget: Any = None) -> dict[str, Any]:
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator.api import fewest_devices, soonest_within
    from simulator.cli._common import make_out_dir
    from simulator.cli.plan_output import row, scaling_png

    objective, top = opts.objective, opts.top_k
    with _progress(quiet) as progress:
        if target is None:
            cap = soonest_within(loaded.scenario, hw, budget, per_node, max_devices, opts,
                                 progress)
        else:
            cap = fewest_devices(loaded.scenario, hw, target, per_node, max_devices, opts,
                                 progress, budget)
    scaling: list[dict[str, Any]] = []
    pts: list[tuple[int, float | None]] = []
    for n, res in cap.points:
        best = res.best
        time_s = best.ev.iteration_time_s if best else None
        cost = budget.cost(n, time_s) if budget is not None and time_s is not None else None
        scaling.append({"devices": n, "configurations": res.space,
                        "best": row(best, n, price, best) if best else None,
                        "training_cost": cost,
                        "meets": time_s is not None and (target is None or time_s <= target)
                        and (cost is None or cost <= budget.limit)})
        pts.append((n, time_s))
    chosen_n = cap.chosen
    chosen = cap.result(chosen_n) if chosen_n else None
    replay = _replayer(loaded, per_node)
    report: dict[str, Any] = {
        "scenario": loaded.scenario.name, "mode": "target", "objective": objective,
        "headroom": opts.headroom, "hardware_overrides": list(loaded.hardware_overrides),
        "target_iteration_time_s": target, "devices": chosen_n,
        "budget": None if budget is None else {
            "limit": budget.limit, "iterations": budget.iterations,
            "unit": "device-hours" if budget.price is None else "money"},
        "counts_without_configuration": cap.no_configuration,
        "interrupted": cap.interrupted,
        "best": row(chosen.best, chosen_n, price, chosen.best, replay)
        if chosen_n and chosen and chosen.best
        else None,
        "top": [row(c, chosen_n, price, chosen.best, replay) for c in chosen.ranked[:top]]
        if chosen_n and chosen
        else [],
        "scaling": scaling, "files": {}}
    if out_dir is not None and cap.points:
        path = make_out_dir(out_dir) / "scaling.png"
        shown = target if target is not None else \
            chosen.best.ev.iteration_time_s if chosen and chosen.best else None
        scaling_png(pts, shown, chosen_n, f"{loaded.scenario.name}", path)
        report["files"]["scaling_png"] = str(path)
    return report


def _print(report: dict[str, Any], out: IO[str]) -> None:
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator.cli.plan_output import print_table

    if report["mode"] == "target":
        _print_scaling(report, out)
    title = f"{report['scenario']}: best configurations on {report['devices']} devices " \
            f"(objective: {report['objective']})"
    if report["top"]:
        print_table(report["top"], title, out)
    if report.get("search"):
        s = report["search"]
        out.write(f"searched {s['configurations']} configurations: {s['pruned_by_memory']} "
                  f"pruned by their floors, {s['simulated']} simulated "
                  f"(+{s['probe_simulations']} probes) in {s['wall_s']:.1f} s\n")
    for name, path in report["files"].items():
        out.write(f"{name}: {path}\n")


def _print_scaling(report: dict[str, Any], out: IO[str]) -> None:
    """The capacity search: each device count searched, and the answer."""
    budget = report["budget"]
    unit = " device-hours" if budget and budget["unit"] == "device-hours" else ""
    for s in report["scaling"]:
        best = s["best"]
        text = (f"{best['iteration_time_s']:.4g} s ({best['label']})" if best else "none fits")
        if s["training_cost"] is not None:
            text += f", training {s['training_cost']:.4g}{unit}"
        out.write(f"{s['devices']:>7} devices: {text}{'  meets' if s['meets'] else ''}\n")
    if report["counts_without_configuration"]:
        out.write(f"({report['counts_without_configuration']} device counts between have no "
                  "configuration: the model or global batch does not split that way)\n")
    n, target = report["devices"], report["target_iteration_time_s"]
    head = [f"target {target:.4g} s/iteration"] if target is not None else []
    if budget is not None:
        head.append(f"budget {budget['limit']:.4g}{unit}")
    what = "fewest devices" if target is not None else "soonest within budget:"
    out.write(", ".join(head) + ": " + (f"{what} {n}\n" if n else "not met\n"))


def _exit_code(report: dict[str, Any]) -> int:
    if report["interrupted"]:
        stderr_console().print("interrupted: showing what was ranked so far", style="yellow")
        return EXIT_INTERRUPTED
    return EXIT_OK if report["best"] else EXIT_FAILED


def _budget(sc: Any, tokens: float | None, limit: float | None, price: float | None) -> Any:
    """The planner.capacity.Budget of --budget (None without it)."""
    if limit is None or tokens is None:
        return None
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator.api import Budget

    iterations = tokens / (sc.training.global_batch_size * sc.model.seq_length)
    return Budget(limit, iterations, price)


def plan(
    scenario: ScenarioArg,
    devices: Annotated[int | None, typer.Option(
        "--devices", metavar="N", help="Plan for N devices (default: the scenario's).",
        show_default=False)] = None,
    nodes: Annotated[int | None, typer.Option(
        "--nodes", metavar="N", help="Plan for N nodes of cluster.devices_per_node.",
        show_default=False)] = None,
    target_time: Annotated[float | None, typer.Option(
        "--target-time", metavar="S", help="Find the fewest devices whose best "
        "configuration takes at most S seconds per iteration.", show_default=False)] = None,
    tokens: Annotated[float | None, typer.Option(
        "--tokens", metavar="T", help="With --days: the target is T tokens in D days.",
        show_default=False)] = None,
    days: Annotated[float | None, typer.Option(
        "--days", metavar="D", help="With --tokens.", show_default=False)] = None,
    budget: Annotated[float | None, typer.Option(
        "--budget", metavar="B", help="With --tokens: at most B device-hours (money with "
        "--price-per-device-hour) for the training; with --days the fewest devices within "
        "it, without the soonest training within it.", show_default=False)] = None,
    objective: Annotated[str, typer.Option(
        "--objective", metavar="time|memory|cost", help="Rank by iteration time, peak "
        "memory, or device-hours (with --price-per-device-hour: money).")] = "time",
    price: Annotated[float | None, typer.Option(
        "--price-per-device-hour", metavar="P", help="Price of one device for one hour, "
        "for the cost column.", show_default=False)] = None,
    top: Annotated[int, typer.Option("--top", metavar="K", help="Rows in the table.")] = 10,
    max_devices: Annotated[int, typer.Option(
        "--max-devices", metavar="N", help="Largest cluster a target search tries.")] = 16384,
    max_micro_batch: Annotated[int, typer.Option(
        "--max-micro-batch", metavar="B", help="Largest micro-batch size tried.")] = 8,
    max_virtual_stages: Annotated[int, typer.Option(
        "--max-virtual-stages", metavar="V", help="Most model chunks per device tried "
        "(interleaved 1f1b).")] = 8,
    max_optimizer_shard: Annotated[int, typer.Option(
        "--max-optimizer-shard", metavar="Z", help="Highest ZeRO stage tried (0..3).")] = 3,
    framework: Annotated[str | None, typer.Option(
        "--framework", metavar="NAMES", help="Software stacks to try on the best "
        "configurations too: framework profile names, comma-separated, or all.",
        show_default=False)] = None,
    headroom: Annotated[float, typer.Option(
        "--headroom", metavar="H", help="Share of device memory a plan leaves free (0.1: "
        "its peak is at most 90% of the device's memory).")] = 0.0,
    json_out: JsonOpt = False,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="DIR", help="Write the plots here. Default: reports/<stem>-plan/ "
        "(with --json: none unless --out is given).", show_default=False)] = None,
    overrides: SetOpt = None,
    emit: Annotated[str | None, typer.Option(
        "--emit", metavar="FORMAT", help="Also print the best configuration as a launch: "
        "megatron (Megatron-LM arguments), torchtitan (a job config TOML), mindformers (a "
        "run config YAML) or bridge / nemo (Megatron-Bridge overrides); with --devices or "
        "--nodes.",
        show_default=False)] = None,
) -> None:
    """Search parallel configurations: the best on a cluster, or the fewest devices for a
    target."""
    with guarded() as stdout:
        check_request(devices, nodes, target_time, tokens, days, objective, budget)
        positive("--price-per-device-hour", price)
        opts = options_for(objective, top, max_micro_batch, max_virtual_stages,
                           max_optimizer_shard, headroom, frameworks_for(framework))
        positive("--max-devices", max_devices, "an integer >= 1")
        at_most("--max-devices", max_devices)
        loaded = load_scenario(scenario, overrides or [])
        check_model(loaded.scenario)
        # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
        from simulator.api import load_hardware

        hw = load_hardware(loaded)
        out_dir = out if out is not None or json_out else Path("reports") / f"{loaded.stem}-plan"
        if out_dir is not None:  # refused before the search, not after it
            check_out_name(out_dir)
        if target_time is not None or tokens is not None:
            if emit is not None:
                raise InputError("--emit", "", "takes the best configuration of --devices "
                                 "or --nodes (a fixed cluster), not of --target-time/--tokens")
            sc = loaded.scenario
            if tokens is not None and days is not None:
                # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
                from simulator.api import target_time_s

                target_time = target_time_s(tokens, days, sc.training.global_batch_size,
                                            sc.model.seq_length)
            per_node = sc.cluster.devices_per_node
            report = _target_mode(loaded, hw, target_time, per_node, max_devices, opts,
                                  price, out_dir, False,
                                  _budget(sc, tokens, budget, price))
        else:
            n, per_node = cluster_for(loaded.scenario, devices, nodes)
            report = _devices_mode(loaded, hw, n, per_node, opts, price, out_dir, False)
            emit_best(loaded, report, n, per_node, emit)
        if json_out:
            emit_json(report, stdout)
        else:
            _print(report, stdout)
            print_emitted(report, stdout)
        code = _exit_code(report)
    raise typer.Exit(code)
