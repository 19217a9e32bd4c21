"""Keep freed numpy buffers in the process heap while verify runs (glibc only).

Verify's temporaries are arrays of tens to hundreds of MB (a data-parallel stack of 1024
ranks' activations). glibc serves an allocation above its mmap threshold (at most 32 MiB,
mallopt(3)) with a fresh mapping and unmaps it on free, so every such temporary faults in
new pages the kernel must zero first: at 512 data-parallel devices that zeroing
(`clear_page_erms` under `do_huge_pmd_anonymous_page` in `perf`) took about as much
system time as the computation took user time (8.2 s system, 9.3 s user). Raising the
mmap and trim thresholds for the run (mallopt M_MMAP_THRESHOLD, M_TRIM_THRESHOLD) lets a
freed buffer be reused by the next temporary without a fault; afterwards glibc's usual
thresholds are set again and `malloc_trim` hands the kept memory back. numpy's own
madvise(MADV_HUGEPAGE) on large buffers is turned off for the run as well (measured at
256 devices with the heap kept: 2.2 s system time with it, 1.3 s without, which is the
heap's growth faulted in once in 4 KiB pages). Elsewhere (no glibc) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["kept_heap"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc malloc.h
# after the block: the thresholds glibc's own dynamic adjustment settles at once a freed
# mmapped buffer of 32 MiB or more raised them (mmap threshold at most 32 MiB on 64-bit,
# trim threshold twice it: malloc.c, DEFAULT_MMAP_THRESHOLD_MAX); setting a threshold
# ends that adjustment, so its usual end state is restored rather than the initial 128 KiB
_AFTER_MMAP, _AFTER_TRIM = 32 << 20, 64 << 20
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
        libc.mallopt(_M_MMAP_THRESHOLD, _AFTER_MMAP)
        libc.mallopt(_M_TRIM_THRESHOLD, _AFTER_TRIM)
        libc.malloc_trim(0)
