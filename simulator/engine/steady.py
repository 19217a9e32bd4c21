"""Is one simulated run the other with one steady period inserted? (`splice`)

A pipeline schedule in its steady state repeats one period (`schedule.pipeline.
steady_window`): a run of m + P micro-batches is the run of m with one more period on every
stream. `simulator.simulate` extends a shortened run to the scenario's micro-batch count
only where the two simulated runs A (m micro-batches) and B (m + P) show exactly that, task
by task, on every stream:

- a prefix of each stream is the same in both runs (same task fields, same start and end,
  the same blocker),
- the rest of A reappears at the end of B's stream with every time later by one period T
  (the same T on every stream) and micro-batch indices larger by P,
- the tasks of B matched by neither (the inserted period) repeat the period before them,
  T later.

Then every task after the insertion point waits for the same things, T later, and each
further period adds the same T, the same busy and idle time and the same bytes; a run whose
traces differ in any other way is not extended. This checks the traces the engine
produced, so it holds for whatever the engine models (links, rendezvous, blockers); the
tests compare extended runs with full simulations.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.engine.trace import Trace
from simulator.schedule.tasks import Plan, Task

__all__ = ["Splice", "splice"]

REL_TOL = 1e-9  # time agreement, relative to the iteration time (sums of float durations)


@dataclass(frozen=True)
class Splice:
    """B is A with one period inserted: `period_s` later after the insertion point on every
    stream; `inserted` tasks per stream ((device, stream name) -> count)."""

    period_s: float
    micro_period: int
    inserted: tuple[tuple[tuple[int, str], int], ...]


def _fields(task: Task) -> tuple:
    """What must agree between corresponding tasks (all but tid, micro and deps, which are
    renumbered; the times and blockers are compared from the traces)."""
    return (task.device, task.stream, task.name, task.phase, task.chunk, task.duration_s,
            task.comm_s, task.link, task.group_size, task.comm, task.alloc, task.free)


class _Match:
    """The comparison of A's and B's traces, stream by stream."""

    def __init__(self, a: Plan, ta: Trace, b: Plan, tb: Trace) -> None:
        self.a, self.ta, self.b, self.tb = a, ta, b, tb
        self.shift = b.micro_batches - a.micro_batches
        self.tol = REL_TOL * max(1.0, max(tb.end, default=0.0))
        self.sa = {(d, n): tids for d, n, tids in a.streams}
        self.sb = {(d, n): tids for d, n, tids in b.streams}
        self.pos_a = {t: (k, i) for k, tids in self.sa.items() for i, t in enumerate(tids)}
        self.pos_b = {t: (k, i) for k, tids in self.sb.items() for i, t in enumerate(tids)}
        self.pre: dict[tuple[int, str], int] = {}
        self.extra: dict[tuple[int, str], int] = {}

    def same(self, x: int, y: int, tx: Trace, ty: Trace, px: Plan, py: Plan, dt: float,
             dmicro: int) -> bool:
        """Task y (of py/ty) is task x (of px/tx), `dt` later and `dmicro` micro-batches on.
        (The ready time is the end of the task before on the stream, or 0 for the first:
        it follows from the ends.)"""
        a, b = px.tasks[x], py.tasks[y]
        if _fields(a) != _fields(b) or (b.micro - a.micro) != (dmicro if a.micro >= 0 else 0):
            return False
        tol = self.tol
        return (abs(ty.start[y] - tx.start[x] - dt) <= tol
                and abs(ty.end[y] - tx.end[x] - dt) <= tol)

    def streams(self, period: float) -> bool:
        """Prefix, suffix and inserted period of every stream (times and fields)."""
        if self.sa.keys() != self.sb.keys():
            return False
        for key, ta_ids in self.sa.items():
            tb_ids = self.sb[key]
            la, k = len(ta_ids), len(tb_ids) - len(ta_ids)
            if k < 0:
                return False
            pre = 0
            while pre < la and self.same(ta_ids[pre], tb_ids[pre], self.ta, self.tb, self.a,
                                         self.b, 0.0, 0):
                pre += 1
            suf = 0
            while suf < la and self.same(ta_ids[la - 1 - suf], tb_ids[-1 - suf], self.ta,
                                         self.tb, self.a, self.b, period, self.shift):
                suf += 1
            if pre + suf < la or (k and pre < k):
                return False
            for i in range(pre, len(tb_ids) - suf):  # the inserted period repeats the last
                if not self.same(tb_ids[i - k], tb_ids[i], self.tb, self.tb, self.b, self.b,
                                 period, self.shift):
                    return False
            self.pre[key], self.extra[key] = pre, k
        return True

    def _same_blocker(self, mine: int, y: int, theirs: int, x: int, tx: Trace, px: Plan,
                      dt: float) -> bool:
        """B's task y waited for `mine` as its counterpart x (of px/tx) waited for `theirs`,
        `dt` later, as far as the breakdown's walk back along blockers can tell: a compute
        task ending `dt` later (where the walk stops: another stage's compute), or the same
        kind of transfer, started and ended `dt` later. A blocker that ended when its task
        became ready charges nothing: there, with none on the other side, rounding chose."""
        tol, tb = self.tol, self.tb
        if mine < 0 or theirs < 0:
            if mine >= 0:
                return tb.end[mine] <= tb.ready[y] + tol
            return theirs < 0 or tx.end[theirs] <= tx.ready[x] + tol
        a, b = px.tasks[theirs], self.b.tasks[mine]
        if abs(tb.end[mine] - tx.end[theirs] - dt) > tol:
            return False
        if a.stream == "compute" or b.stream == "compute":
            return a.stream == b.stream and a.device == b.device
        return (_fields(a) == _fields(b)
                and abs(tb.start[mine] - tx.start[theirs] - dt) <= tol)

    def blockers(self, period: float) -> bool:
        """Each task of B waited for what its counterpart waited for: A's task in the
        prefix (at the same time) and after it (a period earlier), and for an inserted
        task, what its copy one period earlier waited for."""
        for key, tb_ids in self.sb.items():
            ta_ids, pre, k = self.sa[key], self.pre[key], self.extra[key]
            for i, y in enumerate(tb_ids):
                if pre <= i < pre + k:
                    x, tx, px, dt = tb_ids[i - k], self.tb, self.b, period
                else:
                    x, tx, px = ta_ids[i if i < pre else i - k], self.ta, self.a
                    dt = 0.0 if i < pre else period
                if not self._same_blocker(self.tb.blocker[y], y, tx.blocker[x], x, tx, px, dt):
                    return False
        return True


def splice(a: Plan, ta: Trace, b: Plan, tb: Trace) -> Splice | None:
    """The Splice that turns run A into run B, or None when B is not A with one steady
    period inserted (see the module docstring)."""
    if b.micro_batches <= a.micro_batches or a.devices != b.devices or not a.tasks:
        return None
    m = _Match(a, ta, b, tb)
    first = a.streams[0][:2]
    last_a, last_b = m.sa[first][-1], m.sb.get(first, (None,))[-1]
    if last_b is None:
        return None
    period = tb.end[last_b] - ta.end[last_a]
    if not (period >= 0.0 and m.streams(period) and m.blockers(period)):
        return None
    return Splice(period, m.shift, tuple(sorted(m.extra.items())))
