"""Assembling a Plan's tasks: stable ids reserved by key, tasks appended to their streams.

A task may depend on one that is emitted later (a backward depends on the gradient sent by
the next stage, emitted with that stage's device); `Ids` hands out the tid the first time a
key is asked for, whether by the task itself or by a dependant, so every plan numbers its
tasks the same way for the same scenario.
"""

from __future__ import annotations

from collections.abc import Hashable

from simulator.engine.tasks import STREAMS, Task

__all__ = ["Ids", "Builder"]


class Ids:
    """Key -> tid, assigned in order of first request (per plan, never global)."""

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}

    def __getitem__(self, key: Hashable) -> int:
        tid = self._ids.get(key)
        if tid is None:
            tid = self._ids[key] = len(self._ids)
        return tid

    def __len__(self) -> int:
        return len(self._ids)


class Builder:
    """Collects tasks by tid and the order of each (device, stream)."""

    def __init__(self) -> None:
        self.ids = Ids()
        self.groups = Ids()  # rendezvous keys of collectives, numbered apart from tasks
        self._tasks: dict[int, Task] = {}
        self.streams: dict[tuple[int, str], list[int]] = {}

    def add(self, key: Hashable, *, device: int, stream: str, name: str, phase: str,
            duration_s: float, micro: int = -1, chunk: int = -1, comm_s: float = 0.0,
            deps: tuple[int, ...] = (), link: str = "", group: int = -1, group_size: int = 1,
            comm: tuple = (), alloc: tuple = (), free: tuple = (), units: int = 1,
            route: int = -1) -> int:
        """Append a task to the end of (device, stream); returns its tid. Every field but
        the key is named (see `Task` for their meaning)."""
        ids = self.ids._ids  # Ids.__getitem__ inlined: one call per task less
        tid = ids.get(key)
        if tid is None:
            tid = ids[key] = len(ids)
        assert tid not in self._tasks, f"task {key} emitted twice"
        # positional tuple construction: several times cheaper than keyword arguments
        self._tasks[tid] = tuple.__new__(Task, (tid, device, stream, name, phase, micro, chunk,
                                                duration_s, comm_s, deps, link, group,
                                                group_size, comm, alloc, free, units,
                                                route))
        stream_tids = self.streams.get((device, stream))
        if stream_tids is None:
            assert stream in STREAMS, f"stream {stream!r} is not one of {STREAMS}"
            stream_tids = self.streams[(device, stream)] = []
        stream_tids.append(tid)
        return tid

    def tasks(self) -> tuple[Task, ...]:
        """Every task by tid; each key asked for must have been emitted."""
        missing = [k for k, tid in self.ids._ids.items() if tid not in self._tasks]
        assert not missing, f"dependencies on tasks never emitted: {missing[:5]}"
        return tuple(self._tasks[tid] for tid in range(len(self.ids)))
