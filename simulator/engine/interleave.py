"""The makespan of identical copies of one step sequence interleaved on shared resources
(multi-copy parallel's inner model, `simulator.lower.multicopy`): each copy runs its steps
in order, each step holding one unit of its resource for its duration; a resource serves
the copies first come, first served (copy order on ties)."""

from __future__ import annotations

from collections.abc import Sequence

import simpy

__all__ = ["interleaved_makespan"]


def interleaved_makespan(steps: Sequence[tuple[str, float]], copies: int) -> float:
    """Seconds until the last of `copies` copies of `steps` ((resource, seconds) in order)
    ends, every resource named in `steps` having one unit."""
    env = simpy.Environment()
    units = {name: simpy.Resource(env, 1) for name, _ in steps}

    def copy(env: simpy.Environment):
        for resource, seconds in steps:
            with units[resource].request() as req:
                yield req
                yield env.timeout(seconds)

    for _ in range(copies):
        env.process(copy(env))
    env.run()
    return float(env.now)
