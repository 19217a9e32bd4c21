"""Plumbing the commands share: exit statuses, error reporting, JSON output, input loading.

Only this package touches files and streams. Heavy modules (the simulator, pandas, rich)
are imported inside the functions that need them so that `shardsim` starts fast.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

import typer

from simulator.api import InfeasibleError, InputError, ShardsimError

__all__ = [
    "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "EXIT_INTERNAL",
    "guarded", "fail", "emit_json", "to_jsonable", "load_scenario", "stderr_console",
    "stdout_console", "load_checked", "make_out_dir", "check_out_name", "printable",
    "write_out_file",
]

EXIT_OK = 0
EXIT_FAILED = 1       # infeasible (run --strict) or a failed check (verify)
EXIT_BAD_INPUT = 2    # the user's input is wrong; the message says where and how
EXIT_INTERNAL = 3     # a bug in shardsim; the message asks for a report
DEBUG_ENV = "SHARDSIM_DEBUG"


def printable(text: str) -> str:
    """`text` with each control character but newline and tab written as its escape
    (`\\x1b`), so that an ANSI or window-title sequence in a name reaches the terminal as
    text."""
    return "".join(c if c in "\n\t" or unicodedata.category(c) != "Cc"
                   else repr(c)[1:-1] for c in text)


def fail(message: str, code: int) -> NoReturn:
    """Print `error: message` on stderr (control characters escaped: a file name or value
    it quotes cannot drive the terminal) and leave with `code`."""
    sys.stderr.write(f"error: {printable(message)}\n")
    sys.stderr.flush()
    raise typer.Exit(code)


# the scenario `--set` overrides of the command running now (set by load_scenario): an
# InputError raised later, by work the scenario drives (an estimate, a plan), is blamed on
# the override of its key as errors of the scenario file itself are
_SCENARIO_OVERRIDES: list[str] = []


def _blamed(exc: InputError) -> InputError:
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator import api

    if not _SCENARIO_OVERRIDES or " with --set " in exc.source:
        return exc
    return api.blame_override(exc, _SCENARIO_OVERRIDES)


@contextlib.contextmanager
def guarded() -> Iterator[IO[str]]:
    """Run a command body: yield the real stdout, send stray prints to stderr, and turn
    expected failures into an exit status with a one-line message (never a traceback).

    Set SHARDSIM_DEBUG=1 to see the traceback of an internal error.
    """
    out = sys.stdout
    _SCENARIO_OVERRIDES.clear()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield out
    except typer.Exit:
        raise
    except InputError as exc:
        fail(str(_blamed(exc)), EXIT_BAD_INPUT)
    except InfeasibleError as exc:
        fail(str(exc), EXIT_FAILED)
    except ShardsimError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        fail(f"internal error: {type(exc).__name__}: {exc} (a bug in shardsim; "
             f"run with {DEBUG_ENV}=1 to see the traceback)", EXIT_INTERNAL)


def to_jsonable(value: Any) -> Any:
    """Plain JSON values: numpy scalars unwrapped, tuples as lists, NaN and inf as null."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "to_dict"):
        return to_jsonable(value.to_dict())
    return str(value)


def emit_json(obj: Any, out: IO[str]) -> None:
    """Write exactly one JSON document (and a newline) on `out`."""
    out.write(json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n")
    out.flush()


def stderr_console() -> Any:
    """A rich console on stderr, for progress and notes."""
    from rich.console import Console

    # markup off: names and values from the user's files are printed as they are
    # (`[/]` is a name, not a closing tag); styles go through Text objects
    return Console(stderr=True, highlight=False, markup=False)


def stdout_console(out: IO[str]) -> Any:
    """A rich console writing the command's real output to `out`."""
    from rich.console import Console

    # Piped output is not squeezed into 80 columns; tables keep their natural width.
    wide = None if getattr(out, "isatty", lambda: False)() else 160
    return Console(file=out, highlight=False, width=wide, markup=False)


def load_scenario(arg: str, overrides: Sequence[str]) -> Any:
    """`api.load_scenario`, remembering the command's scenario overrides so that a later
    InputError is blamed on the `--set` of its key (`guarded`)."""
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator import api

    loaded = api.load_scenario(arg, overrides)
    _SCENARIO_OVERRIDES[:] = loaded.scenario_overrides
    return loaded


def load_checked(arg: str, overrides: Sequence[str]) -> tuple[Any, Any]:
    """The scenario, its hardware profile and the checks `run` and `verify` share."""
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator import api

    loaded = load_scenario(arg, overrides)
    hw = api.load_hardware(loaded)
    api.check_supported(loaded, hw)
    return loaded, hw


_NAME_MAX_BYTES = 255  # a file or folder name, on every common file system
_MAX_OUT_DEPTH = 64  # folders in an --out path; a real one has a dozen


def _shorten(text: str, keep: int = 80) -> str:
    return text if len(text) <= keep else f"{text[:keep - 30]}...{text[-27:]}"


def write_out_file(path: Path, text: str, what: str) -> None:
    """Write `text` into the `--out` file `path` whole (a temporary sibling, then one
    rename), or InputError saying it cannot write `what` (the scenario, the profile)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError("--out", str(path), f"cannot write {what} ({exc.strerror})"
                         ) from None


def check_out_name(out: Path) -> str:
    """InputError for an `--out` path no file system holds (a name too long, a path nested
    too deep), which a command checks before its work; else the path as messages show it."""
    shown = _shorten(str(out))
    long = [p for p in out.parts if len(os.fsencode(p)) > _NAME_MAX_BYTES]
    if long:
        raise InputError("--out", shown, f"a folder name of {len(os.fsencode(long[0])):,} "
                         f"bytes; a file system allows at most {_NAME_MAX_BYTES}")
    if len(out.parts) > _MAX_OUT_DEPTH:
        raise InputError("--out", shown, f"{len(out.parts):,} folders deep; at most "
                         f"{_MAX_OUT_DEPTH}")
    return shown


def make_out_dir(out: Path) -> Path:
    """Create `--out` (and its parents), or InputError saying why it cannot be: a name no
    file system holds, a path nested too deep, a file in its place, a read-only folder."""
    shown = check_out_name(out)
    try:
        if out.exists() and not out.is_dir():
            raise InputError("--out", shown, "is a file; expected a folder (new or existing)")
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError("--out", shown, f"cannot create the folder ({exc.strerror})"
                         ) from None
    if not os.access(out, os.W_OK):
        raise InputError("--out", shown, "the folder is read-only; choose a writable one")
    return out
