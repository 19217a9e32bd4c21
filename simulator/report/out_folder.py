"""A report folder replaced as a whole: its files are written into a temporary sibling
folder, synced, then swapped into place, so that a kill or a full disk at any point leaves
the previous report or the new one, never a mix of the two.

The swap is one atomic `renameat2(RENAME_EXCHANGE)` on Linux (both folders exist at every
instant); elsewhere, or on a file system without it, two renames (the old folder aside,
the new one in place), where a kill between them leaves the old report beside its place
as `.NAME.shardsim-old-PID`. A temporary folder left by a killed process is removed by the
next write into the same place.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TypeVar

from simulator.errors import InputError

__all__ = ["replace_folder"]

T = TypeVar("T")
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def replace_folder(out: Path, names: Collection[str], fill: Callable[[Path], T]) -> T:
    """`fill(folder)` writes the files `names` into a new folder, which then replaces `out`
    as a whole; returns what `fill` returned. InputError when `out` holds anything else
    (replacing it would remove it)."""
    foreign = sorted(set(os.listdir(out)) - set(names)) if out.is_dir() else []
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise InputError("--out", str(out), f"holds files that are not part of a shardsim "
                         f"report ({shown}); choose a new or empty folder (the report "
                         "replaces the folder as a whole, so that a kill cannot leave "
                         "half of it)")
    _remove_stale(out)
    new = out.with_name(f".{out.name}.shardsim-new-{os.getpid()}")
    new.mkdir()
    try:
        value = fill(new)
        _sync(new)
        _swap(new, out)
    finally:
        shutil.rmtree(new, ignore_errors=True)  # after the swap it holds the old report
    return value


def _remove_stale(out: Path) -> None:
    """Temporary siblings of `out` whose process is gone (a kill) removed; an old report
    set aside by the two-rename swap put back where its new one never arrived."""
    for sibling in sorted(out.parent.glob(f".{out.name}.shardsim-*-*")):
        kind, pid = sibling.name.rsplit("-", 2)[1:]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if kind == "old" and not out.exists():
            os.rename(sibling, out)
        else:
            shutil.rmtree(sibling, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _sync(folder: Path) -> None:
    """Every file of `folder` on disk before the swap makes it the report."""
    for path in folder.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _swap(new: Path, out: Path) -> None:
    """`new` becomes `out`; the old `out` (if any) is left at `new`'s name."""
    if not out.exists():
        os.rename(new, out)
        return
    if _exchange(new, out):
        return
    old = out.with_name(f".{out.name}.shardsim-old-{os.getpid()}")
    os.rename(out, old)
    os.rename(new, out)
    os.rename(old, new)


def _exchange(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): swap two paths atomically. False where the C
    library or the file system has no such call."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # no such call: two renames
        return False
    raise OSError(err, os.strerror(err), str(b))
