"""For each bundled published run (scenarios/validation/), plan on the same devices and
compare: the published configuration's simulated iteration time against the planner's
best, and whether the planner found one at least as fast (issue 8, "Done when").

    python benchmarks/plan_vs_published.py                 # every run
    python benchmarks/plan_vs_published.py --only r001 r005 --json out.json

Both times come from the same event engine and hardware profile, so the comparison is of
configurations, not of the simulator against the measurement (benchmarks/accuracy.py does
that).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.api import load_hardware, load_scenario  # noqa: E402
from simulator.planner.search import SearchOptions, search, simulate_config  # noqa: E402
from simulator.planner.space import config_of  # noqa: E402


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
    return row


def _print(rows: list[dict]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title="plan vs published configurations (simulated)")
    for col in ("run", "devices", "published configuration", "published s", "planned s",
                "speed-up", "as fast", "planned configuration", "plan s"):
        table.add_column(col, justify="left" if "configuration" in col or col == "run"
                         else "right")
    for r in rows:
        planned = r["planned_s"]
        fits = "" if r["published_fits"] else " (does not fit)"
        table.add_row(r["run"], str(r["devices"]), r["published"] + fits,
                      f"{r['published_s']:.3f}", f"{planned:.3f}" if planned else "-",
                      f"{r['published_s'] / planned:.2f}x" if planned else "-",
                      ("same" if r["planned"] == r["published"] else "yes")
                      if r["at_least_as_fast"] else "NO", r["planned"] or "-",
                      f"{r['plan_wall_s']:.1f}")
    Console(width=220).print(table)
    ok = sum(r["at_least_as_fast"] for r in rows)
    same = sum(r["planned"] == r["published"] for r in rows)
    unfit = sum(not r["published_fits"] for r in rows)
    print(f"planner at least as fast on {ok} of {len(rows)} published runs ({same} of them: "
          f"the published configuration is the best found; {unfit} published configurations "
          f"do not fit in simulation)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="run names or their prefixes (r001 ...) to keep")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args()
    paths = sorted((ROOT / "scenarios" / "validation").glob("*.yaml"))
    if args.only:
        paths = [p for p in paths if any(p.stem.startswith(o) for o in args.only)]
    rows = []
    for path in paths:
        rows.append(_one(path))
        print(f"{path.stem}: {rows[-1]['published_s']:.3f} s published, "
              f"{rows[-1]['planned_s'] or float('nan'):.3f} s planned", flush=True)
        if args.json:  # written after every run: a long benchmark keeps what it measured
            Path(args.json).write_text(json.dumps(rows, indent=2))
    _print(rows)


if __name__ == "__main__":
    main()
