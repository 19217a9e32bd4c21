"""Keep freed numpy buffers in the process heap while verify runs (glibc only).

Verify's temporaries are arrays of tens to hundreds of MB (a data-parallel stack of 1024
ranks' activations). glibc serves an allocation above its mmap threshold (at most 32 MB,
mallopt(3)) with a fresh mapping and unmaps it on free, so every such temporary faults in
new pages the kernel must zero first: at 512 data-parallel devices that zeroing
(`clear_page_erms` under `do_huge_pmd_anonymous_page` in `perf`) took about as much
system time as the computation took user time. Raising the mmap and trim thresholds for
the run (mallopt M_MMAP_THRESHOLD, M_TRIM_THRESHOLD) lets a freed buffer be reused by the
next temporary without a fault; afterwards the defaults are restored and `malloc_trim`
hands the kept memory back. numpy's own madvise(MADV_HUGEPAGE) on large buffers is turned
off for the run as well: with transparent huge pages the kernel still zeroed and compacted
2 MiB pages for heap reuse (256 devices: 2.2 s system time with it, 1.3 s without, the
latter just the heap's growth faulted in once). Elsewhere (no glibc) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["kept_heap"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc malloc.h
_DEFAULT = 128 * 1024  # both thresholds' glibc default (bytes)
_KEEP = (1 << 31) - 1  # the largest int mallopt takes: 2 GiB


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return None
    return libc


def _hugepage_setter() -> Callable[[bool], bool] | None:
    """numpy's switch for madvise(MADV_HUGEPAGE) on its large buffers (returns the old
    setting); None where this numpy has none."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            setter = getattr(importlib.import_module(module), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if setter is not None:
            return setter  # type: ignore[no-any-return]
    return None


@contextmanager
def kept_heap() -> Iterator[None]:
    """Freed buffers stay in the heap for reuse during the block, in 4 KiB pages (see the
    module doc)."""
    setter = _hugepage_setter()
    before = setter(False) if setter is not None else None
    try:
        with _glibc_kept():
            yield
    finally:
        if setter is not None and before is not None:
            setter(before)


@contextmanager
def _glibc_kept() -> Iterator[None]:
    libc = _glibc()
    if libc is None or not libc.mallopt(_M_MMAP_THRESHOLD, _KEEP):
        yield
        return
    libc.mallopt(_M_TRIM_THRESHOLD, -1)  # -1: never trim (mallopt(3))
    try:
        yield
    finally:
        libc.mallopt(_M_MMAP_THRESHOLD, _DEFAULT)
        libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT)
        libc.malloc_trim(0)
