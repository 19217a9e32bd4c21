"""Progress on stderr for work that may run long (`verify`): nothing at all while the work
is younger than AFTER_S seconds (2; the environment variable SHARDSIM_PROGRESS_AFTER_S
overrides it, tests set 0), then what it is doing and how far it is (done/total): a rich
progress bar on a terminal (gone when the work ends), or, on a pipe or a file, a line per
step (`verify: sharded run on 8 numpy devices, micro-batch 2/4: 96/192 [3.1 s]`), at most
one a second within a step. stdout is never written.

    with LateProgress("verify") as progress:
        api.verify(scenario, hw, progress=progress)   # progress(what, done, total)
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from simulator.cli._common import printable, stderr_console

__all__ = ["LateProgress", "AFTER_ENV", "AFTER_S"]

AFTER_ENV = "SHARDSIM_PROGRESS_AFTER_S"
AFTER_S = 2.0
_LINE_EVERY_S = 1.0  # within one step, a line at most this often


def _after_s() -> float:
    try:
        return max(float(os.environ.get(AFTER_ENV, AFTER_S)), 0.0)
    except ValueError:
        return AFTER_S


class LateProgress:
    """A `progress(what, done, total)` callback that shows nothing before `after_s` (default
    `_after_s()`) and then the latest state, updated as calls come; a timer shows it at
    `after_s` even while no call comes (a long step)."""

    def __init__(self, title: str, after_s: float | None = None) -> None:
        self.title = title
        self.after_s = _after_s() if after_s is None else after_s
        self._lock = threading.Lock()
        self._state: tuple[str, int, int] | None = None
        self._shown = False
        self._closed = False
        self._line: tuple[str, float] = ("", 0.0)  # the step of the last line, and when
        self._bar: Any = None
        self._task: Any = None
        self._timer: threading.Timer | None = None
        self._start = time.monotonic()
        self._pid = os.getpid()

    def __enter__(self) -> LateProgress:
        self._start = time.monotonic()
        self._timer = threading.Timer(self.after_s, self._reveal)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None
            self._shown = self._closed = True  # nothing more after the work

    def __call__(self, what: str, done: int, total: int) -> None:
        if os.getpid() != self._pid:  # a forked child reports nothing
            return
        with self._lock:
            if self._closed:
                return
            self._state = (what, done, total)
            if not self._shown and time.monotonic() - self._start >= self.after_s:
                self._show()
            elif self._bar is not None:
                self._bar.update(self._task, description=printable(what), completed=done,
                                 total=max(total, 1))
            elif self._shown:
                self._print_line()

    def _reveal(self) -> None:
        with self._lock:
            if not self._shown:
                self._show()

    def _show(self) -> None:
        """Called with the lock held: the bar on a terminal, else the first line."""
        self._shown = True
        console = stderr_console()
        if console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn(f"{printable(self.title)}: "
                                            "{task.description}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total}"),
                                 TimeElapsedColumn(), console=console, transient=True)
            what, done, total = self._state or ("starting", 0, 1)
            self._task = self._bar.add_task(printable(what), completed=done,
                                            total=max(total, 1))
            self._bar.start()
        else:
            self._print_line()

    def _print_line(self) -> None:
        what, done, total = self._state or ("starting", 0, 1)
        now = time.monotonic()
        last_what, last_t = self._line
        if what == last_what and now - last_t < _LINE_EVERY_S and done < total:
            return
        self._line = (what, now)
        sys.stderr.write(f"{printable(self.title)}: {printable(what)}: {done}/{total} "
                         f"[{now - self._start:.1f} s]\n")
        sys.stderr.flush()
