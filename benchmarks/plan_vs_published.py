"""For each bundled published run (scenarios/validation/), plan on the same devices and
compare: the published configuration's simulated iteration time against the planner's
best, whether the planner found one at least as fast (issue 8, "Done when"), how far the
planner's best is from the published configuration (published / best - 1) and whether
the published configuration is within 2% of the planner's best (issue 23's figure).

Where one model was published under several layouts (same model, hardware, devices and
batch), the planner's pick among those layouts (the fastest in simulation) is compared
with the measured best: the measured time of the pick over the measured best's, within
2% or not (issue 23, "Done when").

    python benchmarks/plan_vs_published.py                 # every run
    python benchmarks/plan_vs_published.py --only r001 r005 --json out.json
    python benchmarks/plan_vs_published.py --jobs 2        # runs planned in parallel

Both times come from the same event engine and hardware profile, so the comparison is of
configurations, not of the simulator against the measurement (benchmarks/accuracy.py does
that).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.api import load_hardware, load_scenario  # noqa: E402
from simulator.planner.search import SearchOptions, search, simulate_config  # noqa: E402
from simulator.planner.space import config_of  # noqa: E402
from simulator.report import summary  # noqa: E402
from simulator.simulation.simulate import simulate  # noqa: E402


def _one(path: Path) -> dict:
    loaded = load_scenario(str(path), [])
    sc, hw = loaded.scenario, load_hardware(loaded)
    published = config_of(sc)
    pub = simulate_config(sc, hw, published)
    t0 = time.perf_counter()
    res = search(sc, hw, sc.devices, sc.cluster.devices_per_node, SearchOptions(top_k=3))
    wall = time.perf_counter() - t0
    best = res.best
    row = {"run": path.stem, "devices": sc.devices, "published": str(published),
           "published_s": pub.iteration_time_s, "published_fits": pub.fits,
           "planned": str(best.config) if best else None,
           "planned_s": best.evaluation.iteration_time_s if best else None,
           "plan_wall_s": wall, "simulated": res.simulations}
    row["at_least_as_fast"] = bool(best and (not pub.fits or
                                            row["planned_s"] <= pub.iteration_time_s))
    row["gap"] = pub.iteration_time_s / row["planned_s"] - 1 if best else None
    row["within_2pct"] = bool(best and pub.fits and row["gap"] <= WITHIN)
    row["measured_s"] = _measured(path)
    row["group"] = _group(sc)
    row["layout"] = _layout(sc)
    return row


WITHIN = 0.02  # issue 23: the published configuration within 2% of the planner's best


def _measured(path: Path) -> float | None:
    """The measured iteration time the case file states (`target_iteration_time_s`)."""
    m = re.search(r"^# target_iteration_time_s:\s*([0-9.eE+-]+)", path.read_text(), re.M)
    return float(m.group(1)) if m else None


def _group(sc) -> str:
    """What makes runs of one model comparable: the model, hardware, devices, batch."""
    model = sc.model.model_dump(mode="json", exclude={"name"})
    return json.dumps([model, sc.hardware, sc.devices, sc.training.global_batch_size],
                      sort_keys=True)


def _as_published(path: Path) -> dict:
    """A run's row for the layout comparison alone: its published configuration simulated
    as `run` simulates it (no plan)."""
    loaded = load_scenario(str(path), [])
    sc = loaded.scenario
    s = summary(simulate(sc, load_hardware(loaded)))
    return {"run": path.stem, "published": _layout(sc), "published_s": s["iteration_time_s"],
            "published_fits": bool(s["memory"]["fits"]), "measured_s": _measured(path),
            "group": _group(sc)}


def _layout(sc) -> str:
    """What a run's layout is, as the group comparison tells runs apart."""
    return json.dumps([sc.parallel.model_dump(mode="json"), sc.training.micro_batch_size,
                       sc.framework], sort_keys=True)


def _layouts(rows: list[dict]) -> list[dict]:
    """Per group of runs of one model under several layouts: the measured best, the
    planner's pick among the layouts (fastest simulated) and the pick's measured time
    over the best's."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r["measured_s"] and r["published_fits"]:
            groups.setdefault(r["group"], []).append(r)
    out = []
    for runs in groups.values():
        if len({r.get("layout", r["published"]) for r in runs}) < 2:
            continue
        best = min(runs, key=lambda r: r["measured_s"])
        pick = min(runs, key=lambda r: r["published_s"])
        gap = pick["measured_s"] / best["measured_s"] - 1
        out.append({"runs": [r["run"] for r in runs], "measured_best": best["run"],
                    "pick": pick["run"], "gap": gap, "within_2pct": gap <= WITHIN})
    return out


def _print(rows: list[dict], layout_rows: list[dict]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title="plan vs published configurations (simulated)")
    for col in ("run", "devices", "published configuration", "published s", "planned s",
                "speed-up", "as fast", "within 2%", "planned configuration", "plan s"):
        table.add_column(col, justify="left" if "configuration" in col or col == "run"
                         else "right")
    for r in rows:
        planned = r["planned_s"]
        fits = "" if r["published_fits"] else " (does not fit)"
        table.add_row(r["run"], str(r["devices"]), r["published"] + fits,
                      f"{r['published_s']:.3f}", f"{planned:.3f}" if planned else "-",
                      f"{r['published_s'] / planned:.2f}x" if planned else "-",
                      ("same" if r["planned"] == r["published"] else "yes")
                      if r["at_least_as_fast"] else "NO",
                      f"{'yes' if r['within_2pct'] else 'no'} ({r['gap']:+.1%})"
                      if r["gap"] is not None else "-", r["planned"] or "-",
                      f"{r['plan_wall_s']:.1f}")
    Console(width=220).print(table)
    ok = sum(r["at_least_as_fast"] for r in rows)
    same = sum(r["planned"] == r["published"] for r in rows)
    unfit = sum(not r["published_fits"] for r in rows)
    print(f"planner at least as fast on {ok} of {len(rows)} published runs ({same} of them: "
          f"the published configuration is the best found; {unfit} published configurations "
          f"do not fit in simulation)")
    fit = [r for r in rows if r["published_fits"] and r["gap"] is not None]
    near = sum(r["within_2pct"] for r in fit)
    gaps = sorted(r["gap"] for r in fit)
    if gaps:
        print(f"published configuration within 2% of the planner's best on {near} of "
              f"{len(fit)} runs that fit; planner's best faster by a median "
              f"{gaps[len(gaps) // 2]:.1%}, at most {gaps[-1]:.1%}")
    groups = _layouts(layout_rows)
    for g in groups:
        print(f"one model under {len(g['runs'])} layouts ({', '.join(g['runs'])}): measured "
              f"best {g['measured_best']}, planner's pick {g['pick']}, measured "
              f"{g['gap']:+.1%} ({'within' if g['within_2pct'] else 'NOT within'} 2%)")
    if not groups:
        print("no bundled published model was measured under several layouts on the same "
              "devices and batch")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="run names or their prefixes (r001 ...) to keep")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--jobs", type=int, default=1, help="runs planned at once (processes)")
    ap.add_argument("--pending", action="store_true",
                    help="also compare the layouts of the pending published runs "
                         "(benchmarks/data/validation-pending/: simulated, not planned)")
    args = ap.parse_args()
    paths = sorted((ROOT / "scenarios" / "validation").glob("*.yaml"))
    if args.only:
        paths = [p for p in paths if any(p.stem.startswith(o) for o in args.only)]
    rows = []
    with Pool(args.jobs) as pool:
        for row in pool.imap(_one, paths):
            rows.append(row)
            print(f"{row['run']}: {row['published_s']:.3f} s published, "
                  f"{row['planned_s'] or float('nan'):.3f} s planned", flush=True)
            if args.json:  # written after every run: a long benchmark keeps what it measured
                Path(args.json).write_text(json.dumps(rows, indent=2))
    if args.pending:
        pending = sorted((ROOT / "benchmarks" / "data" / "validation-pending").glob("*.yaml"))
        with Pool(args.jobs) as pool:
            extra = pool.map(_as_published, pending)
        rows_all = rows + extra
    else:
        rows_all = rows
    _print(rows, rows_all)


if __name__ == "__main__":
    main()
