"""The single-device references of `verify`, computed beside the sharded run.

The reference of the whole global batch on one device computes as much as all devices of
the sharded run together, and nothing in it depends on the sharded run: `Beside` runs it in
a child process forked at the start (`os.fork`), on another CPU, while this process runs
the sharded devices; its result (the reduced gradients and updated parameters, a few
arrays of parameter size) comes back pickled through a pipe. Where fork is missing, or
no second CPU is free (`os.sched_getaffinity`, less the processes running now), or the
work is too small to pay for a process, it runs in this process after the sharded run
instead, reusing the memory the sharded run freed. Both paths compute the
same numpy operations on the same arrays: the report is the same either way
(tests/test_verify_speed_paths.py).

The first micro-batch's reference forward (every op output, compared with the sharded
run's) is computed op by op as the sharded run produces its outputs (`Streamed`): each
pair is compared at once and dropped, and the reference frees each value after its last
reader, so neither run keeps a micro-batch of activations for the comparison.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from simulator.numeric.compare import Check, compare
from simulator.numeric.dist import DistTensor, assemble, distribute
from simulator.numeric.execution import Execution, forward_op
from simulator.numeric.stacked_saved import not_kept
from simulator.sharding.plan import ShardingPlan

__all__ = ["Beside", "Streamed", "usable_cpus"]

# the reference is forked off only where its inputs and outputs hold at least this many
# elements (the tiny cases of the tests finish in milliseconds, less than a fork costs)
_FORK_MIN_ELEMENTS = 1 << 20


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fork_pays(elements: int) -> bool:
    """Whether a reference of `elements` tensor elements is worth a process of its own:
    on Linux (macOS's Accelerate BLAS is not safe to use in a forked child), with a CPU
    to spare for it. A child holds its own memory, which this virtual machine faults in
    again (at 1024 devices 10.4 CPU s in two processes against 8.9 s in one), so it pays
    only where it gets a CPU of its own: not when other processes keep every CPU busy."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork")
            and elements >= _FORK_MIN_ELEMENTS and usable_cpus() - _others_running() >= 2)


def _others_running(samples: int = 5, gap_s: float = 0.01) -> int:
    """Processes running or runnable besides this one (/proc/loadavg's fourth field counts
    this one too), the fewest of a few samples 10 ms apart (a kernel thread or a shell
    that runs for a moment is not a busy CPU); 0 where the count cannot be read."""
    fewest = None
    for i in range(samples):
        if i:
            time.sleep(gap_s)
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return 0
        fewest = running if fewest is None else min(fewest, running)
    return max(0, (fewest or 1) - 1)


class Beside:
    """`fn()` computed in a forked child while the caller goes on (`fork=True`), or in
    this process when `result()` is asked (`fork=False`). `seconds`: how long `fn` ran.
    Use as a context manager: leaving the block ends a child still running."""

    def __init__(self, fn: Callable[[], Any], fork: bool) -> None:
        self._fn = fn
        self._pid: int | None = None
        self._fd: int | None = None
        self.seconds = 0.0
        if fork:
            self._start()

    def _start(self) -> None:
        r, w = os.pipe()
        with warnings.catch_warnings():  # (3.12+ warns of fork in a threaded process)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: compute, send, and leave without running any cleanup
            code = 1  # (an answer not sent whole)
            try:
                os.close(r)
                _send(w, self._fn)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        self._pid, self._fd = pid, r

    def result(self) -> Any:
        if self._fd is not None:
            with os.fdopen(self._fd, "rb") as f:
                data = f.read()
            self._fd = None
            if self._reap() and data:
                status, value, self.seconds = pickle.loads(data)
                if status == "error":
                    raise value
                return value
            # the child died before its whole answer was sent (killed: out of memory, a
            # signal): computed here instead
        t0 = time.perf_counter()
        value = self._fn()
        self.seconds = time.perf_counter() - t0
        return value

    def _reap(self) -> bool:
        """Wait for the child; whether it exited normally (status 0)."""
        if self._pid is None:
            return False
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            self._reap()


def _send(fd: int, fn: Callable[[], Any]) -> None:
    t0 = time.perf_counter()
    try:
        payload: tuple = ("ok", fn(), 0.0)
    except BaseException as exc:  # noqa: BLE001 - re-raised in the parent
        payload = ("error", exc, 0.0)
    payload = payload[:2] + (time.perf_counter() - t0,)
    try:
        data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an exception that does not pickle: its text
        data = pickle.dumps(("error", RuntimeError(traceback.format_exc()), payload[2]))
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def forward_values(plan: ShardingPlan, params: dict[str, np.ndarray],
                   batch: dict[str, np.ndarray]) -> Iterator[tuple[str, DistTensor]]:
    """Every op output of one forward pass of `plan` (no backward), in op order, each
    value freed after its last reader has run (the consumer keeps what it holds)."""
    ex = Execution(plan)
    ex.values = {n: distribute(v, plan.layouts[n], plan.mesh) for n, v in params.items()}
    for name, full in batch.items():
        ex.values[name] = distribute(full, plan.layouts[name], plan.mesh)
    kept = set(ex.values)
    last: dict[str, int] = {}
    for k, p in enumerate(plan.ops):
        for name in p.op.inputs:
            last[name] = k
    cache: dict = {}
    for k, p in enumerate(plan.ops):
        with not_kept():
            forward_op(ex, p, cache)
        out = p.op.output
        yield out, ex.values[out]
        for name in {*p.op.inputs, out}:
            if name not in kept and last.get(name, k) <= k:
                ex.values.pop(name, None)
                for key in [key for key in cache if key[0] == name]:
                    del cache[key]


class Streamed:
    """Compares the sharded run's op outputs (called as `on_act(name, value)`, in the
    order they are computed) with the reference forward of `plan`, advanced as far as
    each needs; `checks()` lists them in the reference's op order."""

    def __init__(self, plan: ShardingPlan, params: dict[str, np.ndarray],
                 batch: dict[str, np.ndarray], tol: float) -> None:
        self._order = [p.op.output for p in plan.ops]
        self._mesh = plan.mesh
        self._names = set(self._order)
        self._values = forward_values(plan, params, batch)
        self._ahead: dict[str, np.ndarray] = {}  # computed, not yet asked for
        self._tol = tol
        self._checks: dict[str, Check] = {}

    def __call__(self, name: str, got: np.ndarray) -> None:
        if name not in self._names or name in self._checks:
            return  # (an output the reference has not; one recorded twice: the first)
        while name not in self._ahead:
            made, t = next(self._values)
            self._ahead[made] = assemble(t, self._mesh)
        self._checks[name] = compare(name, got, self._ahead.pop(name), self._tol)

    def checks(self) -> list[Check]:
        """Every output of the reference, compared (KeyError names one the sharded run
        never produced)."""
        return [self._checks[name] for name in self._order]
