"""What a simulation recorded: when each task of the plan became ready, started and ended.

Plain tuples indexed by tid, so a Trace compares equal (and serialises identically) when
two runs of the same plan agree, and nothing of SimPy survives the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Trace"]


@dataclass(frozen=True)
class Trace:
    """Times in seconds from the start of the iteration, indexed by task id.

    ready    when the task's stream reached it (the previous task on the stream had ended)
    start    when it started (dependencies done, collective members arrived, link free)
    end      start + duration
    blocker  the dependency that finished last, if it finished after `ready`; else -1
    stalls   the transfers that ran slower than priced, by the link that held them back
    events   SimPy events scheduled; wall_s the seconds the simulation took
    """

    start: tuple[float, ...]
    end: tuple[float, ...]
    ready: tuple[float, ...]
    blocker: tuple[int, ...]
    events: int
    wall_s: float = field(compare=False)
    # (tid, ((link, seconds), ...)) of each transfer that ran slower than priced under fair
    # sharing: the time lost, charged to the link that held it back ('nic', 'fabric', or a
    # tier of the fat tree's uplinks: 'leaf', 'spine', ...)
    stalls: tuple[tuple[int, tuple[tuple[str, float], ...]], ...] = ()

    def __str__(self) -> str:
        span = max(self.end, default=0.0)
        return f"Trace({len(self.end)} tasks, {span:.6g} s, {self.events} events)"
