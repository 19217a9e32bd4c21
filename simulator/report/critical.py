"""The critical path of a simulated iteration and the device that set its pace.

`critical_path` walks back from the task that ends last: a task started when the last of
what it waited for ended, so its predecessor on the path is whichever ended exactly at its
start: the previous task on its stream or a dependency (the later one), else the transfer
that held its link, else (a collective under full fidelity) what the last member to arrive
waited for. The walk ends at a task that started at time 0. The path's time is the iteration
time; `pace` names the simulated device with the most kernel (compute-stream) time on it:
the device whose speed the iteration time follows.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from simulator.engine.tasks import Plan
from simulator.engine.trace import Trace

__all__ = ["critical_path", "Pace", "pace"]


class _Walk:
    """Indexes of the plan the walk needs: stream order, link users, collective members."""

    def __init__(self, plan: Plan, trace: Trace) -> None:
        self.plan, self.trace = plan, trace
        self.prev: dict[int, int] = {}
        for _, _, tids in plan.streams:
            self.prev.update(zip(tids[1:], tids[:-1]))
        self._links: dict[tuple[int, str], tuple[list[float], list[int]]] | None = None
        self._groups: dict[int, list[int]] | None = None

    def preds(self, tid: int) -> list[int]:
        before = self.prev.get(tid)
        return list(self.plan.tasks[tid].deps) + ([before] if before is not None else [])

    def latest(self, tids: list[int]) -> int:
        end = self.trace.end
        return max(tids, key=lambda p: (end[p], -p), default=-1)

    def link_holder(self, tid: int, at: float, eps: float) -> int:
        """The other task on tid's link that ended at `at` (-1: none)."""
        if self._links is None:
            users: dict[tuple[int, str], list[tuple[float, int]]] = {}
            for t in self.plan.tasks:
                if t.link:
                    users.setdefault((t.device, t.link), []).append((self.trace.end[t.tid],
                                                                     t.tid))
            self._links = {k: ([e for e, _ in sorted(v)], [i for _, i in sorted(v)])
                           for k, v in users.items()}
        task = self.plan.tasks[tid]
        ends, tids = self._links.get((task.device, task.link), ([], []))
        i = bisect_left(ends, at - eps)
        while i < len(ends) and ends[i] <= at + eps:
            if tids[i] != tid and self.trace.start[tids[i]] < at - eps:
                return tids[i]
            i += 1
        return -1

    def last_arrival(self, tid: int) -> int:
        """Of the members of tid's collective, the predecessor that ended last."""
        if self._groups is None:
            self._groups = {}
            for t in self.plan.tasks:
                if t.group >= 0:
                    self._groups.setdefault(t.group, []).append(t.tid)
        members = self._groups.get(self.plan.tasks[tid].group, [tid])
        return self.latest([p for m in members for p in self.preds(m)])

    def step(self, tid: int) -> int:
        """The task on the path before `tid` (-1: the path starts at tid)."""
        start = self.trace.start[tid]
        eps = 1e-12 * max(1.0, start)
        best = self.latest(self.preds(tid))
        if best >= 0 and self.trace.end[best] >= start - eps:
            return best
        task = self.plan.tasks[tid]
        if task.link:
            holder = self.link_holder(tid, start, eps)
            if holder >= 0:
                return holder
        if task.group >= 0:
            best = self.last_arrival(tid)
            if best >= 0 and self.trace.end[best] >= start - eps:
                return best
        return -1


def critical_path(plan: Plan, trace: Trace) -> tuple[int, ...]:
    """Task ids of the critical path, first to last (empty for an empty plan)."""
    if not plan.tasks:
        return ()
    walk = _Walk(plan, trace)
    tid = max(range(len(plan.tasks)), key=lambda i: (trace.end[i], -i))
    path, seen = [tid], {tid}
    while trace.start[tid] > 0.0:
        tid = walk.step(tid)
        if tid < 0 or tid in seen:
            break
        path.append(tid)
        seen.add(tid)
    return tuple(reversed(path))


@dataclass(frozen=True)
class Pace:
    """device: the simulated device with the most kernel time on the critical path, and
    that time (compute_s); comm_s: time on the path in transfers, on any device; length_s:
    the path's span (the iteration time)."""

    device: int
    compute_s: float
    comm_s: float
    length_s: float
    tasks: int
    # time the transfers on the path ran beyond their own duration (on a non-blocking
    # fabric, `Plan.routes`) because other transfers shared their link or the fat tree's
    # uplinks (`Plan.link_sharing` 'fair'; 0 under 'fifo', where a transfer that waits for
    # its link puts the one holding it on the path instead)
    contention_s: float = 0.0
    # that time split by the link that held the transfers back ('nic', 'fabric', or a tier
    # of the fat tree's uplinks: 'leaf', 'spine', ...; `Trace.stalls`), largest first
    contention_by_link: tuple[tuple[str, float], ...] = ()


def pace(plan: Plan, trace: Trace) -> Pace:
    """Who set the pace of the iteration (see the module docstring)."""
    path = critical_path(plan, trace)
    busy = dict.fromkeys(plan.devices, 0.0)
    comm = shared = 0.0
    stretched: list[tuple[int, float]] = []
    for tid in path:
        task = plan.tasks[tid]
        if task.stream == "compute":
            busy[task.device] += task.duration_s
        else:
            comm += task.duration_s
        if task.link:  # a transfer (a blocking send runs on the compute stream)
            # beyond its time on a non-blocking fabric (`Plan.routes`: the fat tree's
            # share the cost model priced in is contention too)
            alone = task.duration_s / plan.routes[task.route][0] if task.route >= 0 \
                else task.duration_s
            stretch = trace.end[tid] - trace.start[tid] - alone
            if stretch > 1e-9 * max(1.0, trace.end[tid]):  # (not rounding)
                shared += stretch
                stretched.append((tid, stretch))
    device = max(plan.devices, key=lambda d: (busy[d], -d))
    length = trace.end[path[-1]] if path else 0.0
    return Pace(device, busy[device], comm, length, len(path), shared,
                _by_link(trace, stretched))


def _by_link(trace: Trace, stretched: list[tuple[int, float]]
             ) -> tuple[tuple[str, float], ...]:
    """The time the transfers on the path lost to sharing (`stretched`: (tid, seconds)),
    split by the link that held each back, in the proportions of its stalls
    (`Trace.stalls`: a transfer can also run faster than priced for a while, so its
    stalls may add up to more than it lost)."""
    stalls = dict(trace.stalls)
    total: dict[str, float] = {}
    for tid, lost in stretched:
        kinds = stalls.get(tid, ())
        held = sum(s for _, s in kinds)
        for link, seconds in kinds:
            total[link] = total.get(link, 0.0) + lost * seconds / held
    return tuple(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))
