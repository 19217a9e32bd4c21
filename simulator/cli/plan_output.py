"""What `shardsim plan` prints and writes: result rows, the rich table, the JSON object and
the plots (Pareto front of time against memory; scaling curve against a target)."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from simulator.api import InputError
from simulator.cli._common import stdout_console

__all__ = ["row", "ties", "print_table", "pareto_png", "scaling_png"]


def ties(a: Any, b: Any) -> bool | None:
    """Whether two evaluations' error bars overlap (issue 24: plans whose intervals overlap
    are ties); None when either has no error bar."""
    if a.low_s is None or b.low_s is None:
        return None
    return bool(a.low_s <= b.high_s and b.low_s <= a.high_s)


def row(cand: Any, devices: int, price: float | None, best: Any = None,
        replay: Any = None) -> dict[str, Any]:
    """One ranked configuration as a JSON-ready dict; with `best`, whether its error bar
    overlaps the best configuration's (`ties_best`); with `replay` (configuration ->
    scenario mapping), the complete `scenario` that `run` takes as is, and `overrides`
    that include the cluster."""
    ev = cand.evaluation
    hours = devices * ev.iteration_time_s / 3600.0
    overrides = cand.config.overrides()
    scenario = replay(cand.config) if replay is not None else None
    if scenario is not None:
        cluster = scenario["cluster"]
        overrides = [f"cluster.nodes={cluster['nodes']}",
                     f"cluster.devices_per_node={cluster['devices_per_node']}", *overrides]
    out = {"config": cand.config.to_dict(), "label": str(cand.config),
           "overrides": overrides, "iteration_time_s": ev.iteration_time_s,
           "tokens_per_s": ev.tokens_per_s, "mfu": ev.mfu, "peak_bytes": int(ev.peak_bytes),
           "capacity_bytes": int(ev.capacity_bytes), "fits": ev.fits,
           "estimate_s": cand.estimate_s,
           "estimated_peak_bytes": int(cand.memory.peak_bytes) if cand.memory else None,
           "device_hours_per_iteration": hours,
           "uncertainty": {"low_s": ev.low_s, "high_s": ev.high_s}}
    if best is not None and best.evaluation is not None:
        out["ties_best"] = ties(ev, best.evaluation)
    if price is not None:
        out["cost_per_iteration"] = hours * price
    if scenario is not None:
        out["scenario"] = scenario
    return out


def print_table(rows: list[dict[str, Any]], title: str, out: IO[str]) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, box=box.SIMPLE_HEAD,
                  caption="likely s: error bar (run --json uncertainty); = ties the best")
    cols = ["#", "iteration s", "likely s", "tokens/s", "MFU", "peak GB", "fits",
            "configuration"]
    priced = bool(rows) and "cost_per_iteration" in rows[0]
    if priced:
        cols.insert(6, "cost/iter")
    for col in cols:
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for i, r in enumerate(rows, 1):
        cells = [str(i), f"{r['iteration_time_s']:.4g}", _likely(r, i > 1),
                 f"{r['tokens_per_s']:.4g}",
                 f"{r['mfu']:.1%}", f"{r['peak_bytes'] / 1e9:.3g}",
                 "yes" if r["fits"] else Text("no", style="red"), r["label"]]
        if priced:
            cells.insert(6, f"{r['cost_per_iteration']:.4g}")
        table.add_row(*cells)
    stdout_console(out).print(table)


def _likely(r: dict[str, Any], mark: bool) -> str:
    """The error bar of a row, with ' =' (`mark`: not the best itself) when it overlaps the
    best's: a tie within the measured error of the stack."""
    u = r.get("uncertainty") or {}
    if u.get("low_s") is None:
        return "-"
    tie = " =" if mark and r.get("ties_best") else ""
    return f"{u['low_s']:.3g}-{u['high_s']:.3g}{tie}"


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise InputError("--out", str(path.parent), f"cannot write {path.name} "
                         f"({exc.strerror or exc})") from None
    finally:
        plt.close(fig)


def _finish(fig: Any, ax: Any, xlabel: str, title: str, path: Path) -> Path:
    """Label a plot of iteration time against `xlabel`, add its legend and save it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel("iteration time (s)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    return path


def pareto_png(ranked: list[Any], front: list[Any], title: str, path: Path) -> Path:
    """Simulated configurations (peak memory, iteration time), the Pareto front joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for fits, colour, label in ((True, "tab:blue", "simulated, fits"),
                                (False, "tab:red", "simulated, does not fit")):
        pts = [c.evaluation for c in ranked if c.evaluation.fits == fits]
        if pts:
            ax.scatter([e.peak_bytes / 1e9 for e in pts], [e.iteration_time_s for e in pts],
                       s=14, c=colour, alpha=0.5, label=label)
    if front:
        ax.plot([c.evaluation.peak_bytes / 1e9 for c in front],
                [c.evaluation.iteration_time_s for c in front], "o-", c="black",
                label="Pareto front")
    if ranked and ranked[0].evaluation.capacity_bytes:
        ax.axvline(ranked[0].evaluation.capacity_bytes / 1e9, ls="--", c="grey",
                   label="device memory")
    return _finish(fig, ax, "peak memory per device (GB)", title, path)


def scaling_png(points: list[tuple[int, float | None]], target_s: float | None,
                chosen: int | None,
                title: str, path: Path) -> Path:
    """Best iteration time against devices, with the target and the chosen count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    pts = [(n, t) for n, t in points if t is not None]
    if pts:
        ax.plot([n for n, _ in pts], [t for _, t in pts], "o-", label="best configuration")
    if target_s is not None:
        ax.axhline(target_s, ls="--", c="tab:red", label=f"target {target_s:.3g} s")
    if chosen is not None:
        ax.axvline(chosen, ls=":", c="black", label=f"fewest devices: {chosen}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    return _finish(fig, ax, "devices", title, path)
