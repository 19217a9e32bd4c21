"""The journal of a sweep folder: rows survive a kill, a full disk and a second writer.

    sweep.json                 the manifest: what was swept, the scenario file's sha256 and the
                               shardsim version (a resumed sweep must match it)
    .lock                      held (filelock, an OS lock freed when the process dies) by the
                               one process writing the folder; a second writer is refused
    rows/part-IIIIIIII.parquet rows as they finish, named by the lowest configuration index
                               they hold (never by counting files: a deleted part cannot make
                               a later one overwrite another); each written whole into a
                               temporary file, synced, then renamed (os.replace is atomic)

A kill loses at most the rows not yet in a part, which `--resume` runs again; a part that
cannot be read (truncated or damaged by hand) is set aside as `*.damaged` and its rows run
again; a row present twice is kept once. Every write failure (disk full, a file-size limit,
a read-only folder) is an InputError naming the file and what to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from simulator.errors import InputError

__all__ = ["ROW_METRICS", "SweepJournal", "row_schema", "read_rows", "atomic_write",
           "scenario_sha256", "writing"]

MANIFEST = "sweep.json"
LOCK = ".lock"
FLUSH_S = 0.5  # rows buffered at most this long before a part file is written


# Metric columns of a row (floats; None when the configuration failed), after `index`,
# `config`, one column per grid key (typed: planner.sweep_spec.SweepSpec.columns), `status`,
# `error` and `fits` (peak memory within capacity; None when the configuration failed).
ROW_METRICS: tuple[str, ...] = (
    "iteration_time_s", "samples_per_s", "tokens_per_s", "tflops_per_device", "mfu",
    "peak_memory_bytes", "capacity_bytes", "compute_s", "recompute_s", "comm_exposed_s",
    "bubble_s", "offload_exposed_s", "optimizer_s", "nvme_exposed_s", "comm_bytes_per_device")

Columns = Sequence[tuple[str, str]]  # (grid key, Arrow type name: int64, float64, bool, string)


def row_schema(columns: Columns) -> Any:
    """The Arrow schema of a row: fixed, so that every part file concatenates."""
    import pyarrow as pa

    fields = [pa.field("index", pa.int64()), pa.field("config", pa.string())]
    fields += [pa.field(k, pa.type_for_alias(kind)) for k, kind in columns]
    fields += [pa.field("status", pa.string()), pa.field("error", pa.string()),
               pa.field("fits", pa.bool_())]
    fields += [pa.field(m, pa.float64()) for m in ROW_METRICS]
    return pa.schema(fields)


def scenario_sha256(path: Path) -> str:
    """The sha256 of the scenario file's bytes (what a resumed sweep must still simulate)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def writing(folder: Path, name: str) -> Iterator[None]:
    """Turn an OSError while writing `name` in `folder` into an InputError that says why
    and what to do; the rows already journaled are kept for `--resume`."""
    try:
        yield
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise InputError("--out", str(folder), f"cannot write {name} ({why}); free disk space, "
                         "raise the file-size limit or make the folder writable, then run the "
                         "same command with --resume: the rows already written are kept"
                         ) from None


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """`write(file)` into a temporary sibling of `path`, synced, then renamed onto `path`:
    a reader sees the old file or the whole new one, never a part."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def read_rows(folder: Path, columns: Columns,
              on_note: Callable[[str], None] = lambda note: None) -> list[dict[str, Any]]:
    """Every row journaled in `folder/rows`, once per index, sorted by index. A part that
    cannot be read is renamed `*.damaged` (its rows then count as not done)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: dict[int, dict[str, Any]] = {}
    for part in sorted((folder / "rows").glob("part-*.parquet")):
        try:
            table = pq.read_table(part, schema=row_schema(columns))
        except (OSError, ValueError, pa.ArrowException) as exc:
            with writing(folder, part.name):
                os.replace(part, part.with_name(part.name + ".damaged"))
            on_note(f"{part} cannot be read ({exc}); set aside as {part.name}.damaged, its "
                    "configurations run again")
            continue
        for row in table.to_pylist():
            rows.setdefault(row["index"], row)
    return [rows[i] for i in sorted(rows)]


class SweepJournal:
    """The rows of one sweep in `folder`, under its lock: `open` checks the manifest and
    reads what is done, `add` buffers a row (written at once for the first, then every
    `flush_s` seconds), `close` flushes and frees the lock. Use it as a context manager."""

    def __init__(self, folder: Path, manifest: dict[str, Any], columns: Columns,
                 flush_s: float | None = None) -> None:
        self.folder, self.manifest, self.columns = folder, manifest, tuple(columns)
        self.flush_s = FLUSH_S if flush_s is None else flush_s
        self.last = -math.inf  # the first row is written at once
        self.pending: list[dict[str, Any]] = []
        self.done: set[int] = set()
        self._lock: Any = None

    def open(self, resume: bool, force: bool,
             on_note: Callable[[str], None] = lambda note: None) -> SweepJournal:
        """Take the folder's lock, check its manifest, clear stale temporary files and read
        the rows already there. InputError when another process holds the folder, when it
        holds another sweep, or (without `force`) a changed scenario or shardsim."""
        self._take_lock()
        try:
            with writing(self.folder, MANIFEST):
                self._check_manifest(resume, force)
                (self.folder / "rows").mkdir(exist_ok=True)
                for stale in (self.folder / "rows").glob(".tmp-*"):
                    stale.unlink()
                atomic_write(self.folder / MANIFEST, lambda f: f.write(
                    (json.dumps(self.manifest, indent=2) + "\n").encode()))
            self.done = {r["index"] for r in read_rows(self.folder, self.columns, on_note)}
        except BaseException:
            self.close(flush=False)
            raise
        return self

    def __enter__(self) -> SweepJournal:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self.close(flush=kind is None or not issubclass(kind, InputError))

    def _take_lock(self) -> None:
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.folder / LOCK), timeout=0)
        with writing(self.folder, LOCK):
            try:
                lock.acquire()
            except Timeout:  # an OSError too: told apart before `writing` sees it
                raise InputError("--out", str(self.folder), "another shardsim sweep is "
                                 f"writing into this folder (it holds {self.folder / LOCK}); "
                                 "wait for it to finish, then run with --resume, or choose "
                                 "another --out") from None
        self._lock = lock

    def _check_manifest(self, resume: bool, force: bool) -> None:
        mfile = self.folder / MANIFEST
        parts = list((self.folder / "rows").glob("part-*.parquet"))
        if not mfile.is_file() and not parts:
            return
        if not resume:
            raise InputError("--out", str(self.folder), "the folder already holds a sweep; "
                             "pass --resume to continue it, or choose another --out")
        if force:
            return
        old = _read_manifest(mfile, self.folder)
        fixed = ("scenario", "grid", "set", "fidelity")
        if {k: old.get(k) for k in fixed} != {k: self.manifest[k] for k in fixed}:
            raise InputError("--resume", str(self.folder), "the folder holds a different "
                             "sweep (scenario, grid, --set or fidelity differ); allowed: "
                             f"the sweep of {mfile}")
        for key, what in (("scenario_sha256", "the scenario file changed"),
                          ("shardsim_version", "shardsim's version changed")):
            if old.get(key) != self.manifest[key]:
                raise InputError("--resume", str(self.folder), f"{what} since the sweep "
                                 f"began ({key} {old.get(key)} in {mfile}, now "
                                 f"{self.manifest[key]}): its rows would mix two models; "
                                 "choose another --out, or pass --resume --force to keep "
                                 "the old rows and run the rest with the new one")

    def add(self, row: dict[str, Any]) -> None:
        self.pending.append(row)
        if time.monotonic() - self.last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one part file named by their lowest index."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.last = time.monotonic()
        if not self.pending:
            return
        table = pa.Table.from_pylist(self.pending, schema=row_schema(self.columns))
        first = min(r["index"] for r in self.pending)
        final = self.folder / "rows" / f"part-{first:08d}.parquet"
        # the lock and the skipped indices make a name taken only by this very batch
        assert not final.exists(), final
        with writing(self.folder, f"rows/{final.name}"):
            atomic_write(final, lambda f: pq.write_table(table, f))
        self.done.update(r["index"] for r in self.pending)
        self.pending = []

    def close(self, flush: bool = True) -> None:
        """Flush what is buffered (unless `flush` is False), then free the lock."""
        try:
            if flush:
                self.flush()
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None


def _read_manifest(mfile: Path, folder: Path) -> dict[str, Any]:
    what_to_do = ("choose another --out, or pass --resume --force to keep its rows as "
                  "rows of this sweep")
    try:
        data = json.loads(mfile.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("--resume", str(folder), f"the folder holds rows but no {MANIFEST}, "
                         f"so which sweep they belong to is unknown; {what_to_do}") from None
    except (OSError, ValueError) as exc:
        raise InputError("--resume", str(folder), f"{mfile} cannot be read ({exc}); "
                         f"{what_to_do}") from None
    if not isinstance(data, dict):
        raise InputError("--resume", str(folder), f"{mfile} is not a sweep manifest; "
                         f"{what_to_do}")
    return data
