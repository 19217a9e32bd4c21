"""Write (or check) simulator/report/validation_errors.csv: the error bars' data.

Every published run of scenarios/validation and scenarios/calibration is simulated once
(`benchmarks.accuracy.evaluate`), and its group (framework, hardware, model family), regime
tags, predicted and measured seconds per iteration become one row. `shardsim run` reads the
rows (simulator.report.uncertainty) instead of simulating 72 runs itself.

    python -m benchmarks.uncertainty_data --check   # exit 1 and list the rows that moved
    python -m benchmarks.uncertainty_data --write   # after a change that moves predictions

Targets are the case headers' `target_iteration_time_s` (what `benchmarks.accuracy` reads
by default), so the file is reproducible from the repository alone. Rewrite it before
`python -m benchmarks.golden --write`: every `run --json` entry carries its band.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from benchmarks.accuracy import evaluate_all
from simulator.report.uncertainty import TABLE_PATH, Measured, read_table, write_table

__all__ = ["current", "differences", "main"]


def current() -> list[Measured]:
    """The rows as the simulator predicts them today."""
    return [r.measured() for r in evaluate_all()]


def differences(stored: Sequence[Measured], now: Sequence[Measured]) -> list[str]:
    """One line per run added, removed or changed between the stored and current rows."""
    old = {m.run: m for m in stored}
    new = {m.run: m for m in now}
    lines = [f"{name}: only in the stored table" for name in sorted(old.keys() - new.keys())]
    lines += [f"{name}: not in the stored table" for name in sorted(new.keys() - old.keys())]
    lines += [f"{name}: stored {old[name]} now {new[name]}" for name in sorted(old.keys()
              & new.keys()) if old[name] != new[name]]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"rewrite {TABLE_PATH.name}")
    mode.add_argument("--check", action="store_true", help="list the rows that moved")
    args = ap.parse_args(argv)
    now = current()
    if args.write:
        write_table(now)
        print(f"wrote {len(now)} runs to {TABLE_PATH}")
        return 0
    lines = differences(read_table(), now)
    print("\n".join(lines) if lines else f"{TABLE_PATH.name}: all {len(now)} runs current")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
