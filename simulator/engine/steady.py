"""Is one simulated run the other with one steady period inserted? (`splice`)

A pipeline schedule in its steady state repeats one period (`lower.pipeline.
steady_window`): a run of m + P micro-batches is the run of m with one more period on every
stream. `simulator.simulation.simulate` extends a shortened run to the scenario's micro-batch count
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

`insertions=2` is GPipe's form (all forwards, then all backwards: Huang et al. 2019, Fig.
2c): a micro-batch more inserts one forward at the end of the forward phase and one
backward at the end of the backward phase, so each stream of B is

    A's prefix | inserted 1 | A's middle, T1 later | inserted 2 | A's rest, T later, +P

where each inserted run repeats the tasks before it on its stream (its own period there:
a stage ahead of the slowest one forwards at its own pace), T1 (how much later the
backward phase starts) is the same on every stream, and T (how much later the stream
ends) is the stream's own. Every task is still checked against its counterpart's times
and blocker, as above.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter

from simulator.engine.tasks import Plan, Task
from simulator.engine.trace import Trace

__all__ = ["Splice", "splice"]

REL_TOL = 1e-9  # time agreement, relative to the iteration time (sums of float durations)

# what B's task at a position is: (its counterpart's tid, the counterpart is in B (an
# inserted task repeating an earlier one), how much later B's task runs)
Counterpart = tuple[int, bool, float]


@dataclass(frozen=True)
class Splice:
    """B is A with one period inserted: `period_s` later after the insertion point on every
    stream; `inserted` tasks per stream ((device, stream name) -> count). With two
    insertion points (GPipe), `middle_s` is how much later B's middle sections run (T1)."""

    period_s: float
    micro_period: int
    inserted: tuple[tuple[tuple[int, str], int], ...]
    middle_s: float | None = None


# What must agree between corresponding tasks: device, stream, name, phase, chunk,
# duration_s, comm_s, link, group_size, comm, alloc, free (all but tid, micro and deps,
# which are renumbered, and group; the times and blockers are compared from the traces).
# By position in the Task tuple: an itemgetter builds the tuple without a Python call.
_fields: Callable[[Task], tuple] = itemgetter(*(Task._fields.index(f) for f in (
    "device", "stream", "name", "phase", "chunk", "duration_s", "comm_s", "link",
    "group_size", "comm", "alloc", "free")))


class _Match:
    """The comparison of A's and B's traces, stream by stream."""

    def __init__(self, a: Plan, ta: Trace, b: Plan, tb: Trace) -> None:
        self.a, self.ta, self.b, self.tb = a, ta, b, tb
        self.shift = b.micro_batches - a.micro_batches
        self.tol = REL_TOL * max(1.0, max(tb.end, default=0.0))
        self.sa = {(d, n): tids for d, n, tids in a.streams}
        self.sb = {(d, n): tids for d, n, tids in b.streams}
        self.extra: dict[tuple[int, str], int] = {}
        self.of: dict[tuple[int, str], list[Counterpart]] = {}
        self.middle: list[float] = []

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

    def _prefix(self, ta_ids: tuple[int, ...], tb_ids: tuple[int, ...]) -> int:
        pre, la = 0, len(ta_ids)
        while pre < la and self.same(ta_ids[pre], tb_ids[pre], self.ta, self.tb, self.a,
                                     self.b, 0.0, 0):
            pre += 1
        return pre

    def streams(self, period: float) -> bool:
        """Prefix, suffix and inserted period of every stream (times and fields)."""
        if self.sa.keys() != self.sb.keys():
            return False
        for key, ta_ids in self.sa.items():
            tb_ids = self.sb[key]
            la, k = len(ta_ids), len(tb_ids) - len(ta_ids)
            if k < 0:
                return False
            pre = self._prefix(ta_ids, tb_ids)
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
            self.extra[key] = k
            self.of[key] = [(ta_ids[i], False, 0.0) if i < pre else
                            (tb_ids[i - k], True, period) if i < pre + k else
                            (ta_ids[i - k], False, period) for i in range(len(tb_ids))]
        return True

    def _repeats(self, tb_ids: tuple[int, ...], at: int, k: int) -> float | None:
        """The k tasks of B from `at` repeat the k before them, all equally later (returned),
        P micro-batches on; None otherwise."""
        if not k:
            return 0.0
        if at < k:
            return None
        tb = self.tb
        dt = tb.end[tb_ids[at]] - tb.end[tb_ids[at - k]]
        ok = all(self.same(tb_ids[i - k], tb_ids[i], tb, tb, self.b, self.b, dt, self.shift)
                 for i in range(at, at + k))
        return dt if ok else None

    def _two(self, ta_ids: tuple[int, ...], tb_ids: tuple[int, ...], pre: int, k1: int,
             k2: int) -> tuple[list[Counterpart], float | None] | None:
        """The counterparts of B's stream split as prefix | k1 inserted | middle | k2
        inserted | rest (see the module docstring), and the middle's shift; None where B's
        stream is not that."""
        la, lb, ta, tb, a, b = len(ta_ids), len(tb_ids), self.ta, self.tb, self.a, self.b
        d1 = self._repeats(tb_ids, pre, k1)
        if d1 is None:
            return None
        mid, t1 = 0, None
        if pre < la and pre + k1 < lb:
            t1 = tb.end[tb_ids[pre + k1]] - ta.end[ta_ids[pre]]
            while pre + mid < la and pre + k1 + mid < lb and self.same(
                    ta_ids[pre + mid], tb_ids[pre + k1 + mid], ta, tb, a, b, t1, 0):
                mid += 1
        s2, rest = pre + k1 + mid, la - pre - mid
        d2 = self._repeats(tb_ids, s2, k2)
        if d2 is None or s2 + k2 + rest != lb:
            return None
        tend = tb.end[tb_ids[-1]] - ta.end[ta_ids[-1]] if rest else 0.0
        if not all(self.same(ta_ids[pre + mid + j], tb_ids[s2 + k2 + j], ta, tb, a, b, tend,
                             self.shift) for j in range(rest)):
            return None
        of: list[Counterpart] = [(ta_ids[i], False, 0.0) for i in range(pre)]
        of += [(tb_ids[i - k1], True, d1) for i in range(pre, pre + k1)]
        of += [(ta_ids[pre + j], False, t1 or 0.0) for j in range(mid)]
        of += [(tb_ids[i - k2], True, d2) for i in range(s2, s2 + k2)]
        of += [(ta_ids[pre + mid + j], False, tend) for j in range(rest)]
        # a middle that nothing follows is the stream's end, later by its own time
        return of, (t1 if mid and (k2 or rest) else None)

    def two_point_streams(self) -> bool:
        """Every stream of B as A with up to two insertion points (GPipe), the middle
        sections of all streams equally later."""
        if self.sa.keys() != self.sb.keys():
            return False
        for key, ta_ids in self.sa.items():
            tb_ids = self.sb[key]
            k = len(tb_ids) - len(ta_ids)
            if k < 0:
                return False
            pre = self._prefix(ta_ids, tb_ids)
            found = next((got for k1 in range(k + 1)
                          if (got := self._two(ta_ids, tb_ids, pre, k1, k - k1)) is not None),
                         None)
            if found is None:
                return False
            self.of[key], self.extra[key] = found[0], k
            if found[1] is not None:
                self.middle.append(found[1])
        return all(abs(t - self.middle[0]) <= self.tol for t in self.middle)

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

    def blockers(self) -> bool:
        """Each task of B waited for what its counterpart waited for: A's task in a section
        A and B share (at the same time, or that section's shift later), and for an
        inserted task, what its copy earlier on the stream waited for."""
        blocker, a_blocker, b_blocker = self.tb.blocker, self.ta.blocker, self.tb.blocker
        for key, tb_ids in self.sb.items():
            for y, (x, in_b, dt) in zip(tb_ids, self.of[key]):
                theirs = b_blocker[x] if in_b else a_blocker[x]
                if blocker[y] < 0 and theirs < 0:  # neither waited for a dependency
                    continue
                tx, px = (self.tb, self.b) if in_b else (self.ta, self.a)
                if not self._same_blocker(blocker[y], y, theirs, x, tx, px, dt):
                    return False
        return True


def splice(a: Plan, ta: Trace, b: Plan, tb: Trace, insertions: int = 1) -> Splice | None:
    """The Splice that turns run A into run B, or None when B is not A with one steady
    period inserted (see the module docstring); `insertions=2`: at up to two points of
    every stream (GPipe)."""
    if b.micro_batches <= a.micro_batches or a.devices != b.devices or not a.tasks:
        return None
    m = _Match(a, ta, b, tb)
    first = a.streams[0][:2]
    last_a, last_b = m.sa[first][-1], m.sb.get(first, (None,))[-1]
    if last_b is None:
        return None
    period = tb.end[last_b] - ta.end[last_a]
    matched = m.streams(period) if insertions == 1 else m.two_point_streams()
    if not (period >= 0.0 and matched and m.blockers()):
        return None
    return Splice(period, m.shift, tuple(sorted(m.extra.items())),
                  m.middle[0] if insertions == 2 and m.middle else None)
