"""The text of a measurement file, bounded, as the other readers of this layer read theirs."""

from __future__ import annotations

from pathlib import Path

from simulator.errors import InputError

__all__ = ["MAX_CHARS", "read_text"]

# an nccl-tests log of every size from 1 B to 16 GiB with NCCL_DEBUG=INFO lines is ~1 MB;
# a GEMM sweep of 100,000 shapes ~5 MB
MAX_CHARS = 20_000_000


def read_text(path: str, what: str) -> str:
    """The UTF-8 text of the file `path`; InputError naming it when it cannot be read."""
    file = Path(path)
    if not file.is_file():
        why = "is a directory" if file.is_dir() else "no such file"
        raise InputError(path, "", f"cannot read the {what}: {why}")
    try:
        with file.open("rb") as fh:
            raw = fh.read(MAX_CHARS + 1)
    except OSError as exc:
        raise InputError(path, "", f"cannot read the {what} ({exc.strerror})") from None
    if len(raw) > MAX_CHARS:
        raise InputError(path, "", f"larger than {MAX_CHARS:,} bytes: not one {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, "", f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                         f"{exc.start}); expected the {what} as the benchmark prints it"
                         ) from None
