"""Where a sweep's configurations run: a local process pool (default) or a Ray cluster.

An executor has one method, `imap(fn, jobs)`, yielding `fn(job)` for every job in the order
they finish. `fn` must be a module-level function (it is pickled by reference). Executors
are looked up by name in EXECUTORS (a registry, not a branch on names).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.errors import InputError

__all__ = ["usable_cpus", "LocalExecutor", "RayExecutor", "SerialExecutor", "EXECUTORS",
           "make_executor"]


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one (Linux), else
    the machine's count (macOS and Windows have no os.sched_getaffinity). The same as
    simulator.numeric.reference.usable_cpus, without importing the numeric backend."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class SerialExecutor:
    """In this process, one job after another (tests, debugging, one-core machines)."""

    def imap(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> Iterator[Any]:
        for job in jobs:
            yield fn(job)


@dataclass(frozen=True)
class LocalExecutor:
    """A multiprocessing pool of `workers` processes (default: the usable cores). Jobs go out
    in chunks so that each worker keeps its caches warm over many configurations."""

    workers: int | None = None

    def imap(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> Iterator[Any]:
        import multiprocessing as mp

        n = min(self.workers or usable_cpus(), len(jobs))  # no idle forks
        if n <= 1 or len(jobs) <= 1:
            yield from SerialExecutor().imap(fn, jobs)
            return
        chunk = max(1, min(8, len(jobs) // (4 * n)))
        # fork: workers inherit the imported simulator (cheap start, same code as the parent)
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else None)
        with ctx.Pool(n) as pool:
            yield from pool.imap_unordered(fn, jobs, chunksize=chunk)


@dataclass(frozen=True)
class RayExecutor:
    """Ray tasks (https://docs.ray.io/en/latest/ray-core/tasks.html): `address` None starts
    a local instance, 'auto' joins the running cluster, 'ray://HOST:PORT' a remote one.
    Results come back with `ray.wait` as they finish."""

    address: str | None = None

    def imap(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> Iterator[Any]:
        try:
            import ray
        except ImportError:
            raise InputError("--executor", "ray", "Ray is not installed; install the "
                             "optional extra: pip install 'shardsim[sweep]'") from None
        started = not ray.is_initialized()
        if started:
            import logging

            # workers import this checkout: pass the parent's module path on
            env = {"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}}
            ray.init(address=self.address, runtime_env=env, include_dashboard=False,
                     log_to_driver=False, logging_level=logging.ERROR)
        try:
            remote = ray.remote(fn)
            pending = [remote.remote(job) for job in jobs]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                yield ray.get(ready[0])
        finally:
            if started:
                ray.shutdown()


# A process pool forks all its workers at once: `--workers 100000` would start 100,000
# processes. Above a few per core they only queue for the same cores.
MAX_WORKERS_PER_CORE = 4

EXECUTORS: dict[str, Callable[..., Any]] = {
    "local": lambda address, workers: LocalExecutor(workers),
    "serial": lambda address, workers: SerialExecutor(),
    "ray": lambda address, workers: RayExecutor(address),
}


def make_executor(name: str, address: str | None = None, workers: int | None = None) -> Any:
    """The executor registered as `name`; InputError listing the names otherwise."""
    if name not in EXECUTORS:
        raise InputError("--executor", name, f"unknown executor; allowed: "
                         f"{', '.join(EXECUTORS)}")
    if address is not None and name != "ray":
        raise InputError("--address", address, f"only the ray executor takes an address, "
                         f"found --executor {name}")
    limit = MAX_WORKERS_PER_CORE * usable_cpus()
    if workers is not None and not 1 <= workers <= limit:
        raise InputError("--workers", str(workers), f"expected 1 to {limit} processes "
                         f"({MAX_WORKERS_PER_CORE} per usable core of this machine; each "
                         "more only adds memory and switching)")
    return EXECUTORS[name](address, workers)
