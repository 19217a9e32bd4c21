"""Where a collapsed run of identical transfers must be cut (`cuts_needed`).

A task of `units` identical transfers (consecutive gradient buckets of one backward piece,
`Task.units`) stands for transfers that each ask for the device's link when the one
before ends. Run as one task, it holds the link throughout; run one by one, a transfer of
another stream asking for the same link while the run is under way (a pipeline send)
would be served between two of them. So after a simulation, every request for a link
that falls inside a block's run, after the block asked for the link and before its last
unit would have asked, names the unit the block must be cut before; the caller lowers
again with the cuts and simulates until none is needed. With none, each unit would start
when the previous one ends, as the block assumes, and the run equals the one-by-one
simulation: the same link times, the same busy spans, one buffer at a time.

A request at the very instant a later unit would ask is a tie that float rounding decides
in the one-by-one run; `cuts_needed` returns None there and the caller does not collapse.
"""

from __future__ import annotations

import sys

from simulator.engine.tasks import Plan
from simulator.engine.trace import Trace

__all__ = ["cuts_needed"]

REL_TOL = 1e-9  # relative to the iteration time, as engine.steady


def _requests(plan: Plan, trace: Trace) -> dict[tuple[int, str], list[tuple[float, int]]]:
    """Per (device, link), (time the task asked for the link, tid): when its stream reached
    it and its dependencies had finished (representative fidelity: no rendezvous)."""
    out: dict[tuple[int, str], list[tuple[float, int]]] = {}
    end = trace.end
    for task in plan.tasks:
        if task.link:
            asked = max([trace.ready[task.tid], *(end[d] for d in task.deps)])
            out.setdefault((task.device, task.link), []).append((asked, task.tid))
    return out


def _tie_tol(units: int, scale: float) -> float:
    """How far from a unit's ask time a request still ties with it: the rounding by which
    the block's start + k x unit and the one-by-one run's k summed durations can differ
    (k additions, each within one ulp), well above it; a request farther off is ordered
    the same way in both runs."""
    return max(1e-12, 8 * units * sys.float_info.epsilon) * scale


def cuts_needed(plan: Plan, trace: Trace
                ) -> dict[tuple[int, int, int], tuple[int, ...]] | None:
    """For each collapsed block another transfer's request falls inside: (device, virtual
    stage, bucket run) -> the run's unit offsets to cut at (before the first unit that
    would have asked after that request). {}: none; None: a request ties with a unit's."""
    if not plan.blocks:
        return {}
    scale = max(1.0, max(trace.end, default=0.0))
    tol = REL_TOL * scale
    requests = _requests(plan, trace)
    out: dict[tuple[int, int, int], set[int]] = {}
    for tid, (dev, vs, run, first) in plan.blocks:
        task = plan.tasks[tid]
        unit = task.duration_s / task.units
        asked = max([trace.ready[tid], *(trace.end[d] for d in task.deps)])
        start = trace.start[tid]
        last = start + (task.units - 1) * unit  # when its last unit would have asked
        for when, other in requests[(task.device, task.link)]:
            if other == tid or not asked - tol < when < last + tol:
                continue
            if abs(when - asked) <= tol:  # with its first unit: the same event decides
                if trace.start[other] < start + tol:
                    continue  # served first in both runs
                out.setdefault((dev, vs, run), set()).add(first + 1)
                continue
            k = (when - start) / unit
            nearest = round(k)
            if nearest >= 1 and abs(when - start - nearest * unit) <= _tie_tol(nearest, scale):
                return None  # asked together with one of its units
            cut = max(1, int(k) + 1) if when > start else 1
            out.setdefault((dev, vs, run), set()).add(first + cut)
    return {key: tuple(sorted(cuts)) for key, cuts in out.items()}
