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
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

import typer

from simulator.errors import InfeasibleError, InputError, ShardsimError

__all__ = [
    "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "EXIT_INTERNAL",
    "LoadedScenario", "guarded", "fail", "emit_json", "to_jsonable", "load_scenario",
    "check_overrides", "stderr_console", "stdout_console", "load_hardware", "load_checked",
    "make_out_dir", "shorten",
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
    from simulator.yamlio import blame_override

    if not _SCENARIO_OVERRIDES or " with --set " in exc.source:
        return exc
    return blame_override(exc, _SCENARIO_OVERRIDES)


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


def check_overrides(overrides: Sequence[str]) -> None:
    """InputError for the first `--set` item that is not KEY=VALUE with a dotted key."""
    from simulator.yamlio import parse_override

    for item in overrides:
        parse_override(item)


@dataclass(frozen=True)
class LoadedScenario:
    """A validated scenario, the profile file it names, and the `hardware.` overrides."""

    scenario: Any
    hardware_path: Path
    hardware_overrides: list[str]
    stem: str
    overrides: tuple[str, ...] = ()
    path: Path | None = None  # the scenario file


def _short_list(names: list[str]) -> str:
    """Top-level names in full, each subfolder as `folder/* (N)`, to keep messages short."""
    top = [n for n in names if "/" not in n]
    folders: dict[str, int] = {}
    for n in names:
        if "/" in n:
            folders[n.split("/")[0]] = folders.get(n.split("/")[0], 0) + 1
    return ", ".join(top + [f"{f}/* ({k})" for f, k in folders.items()]) or "(none)"


def _scenario_path(arg: str) -> tuple[Path, str]:
    """The file SCENARIO names and how messages call it; InputError when there is none."""
    from simulator.resources import is_file, list_bundled, resolve_yaml
    from simulator.yamlio import did_you_mean

    long = [p for p in Path(arg).parts if len(os.fsencode(p)) > NAME_MAX_BYTES]
    if long:
        raise InputError(shorten(arg), "", f"a name of {len(os.fsencode(long[0])):,} bytes; "
                         f"a file system allows at most {NAME_MAX_BYTES}")
    path = resolve_yaml(arg, "scenarios")
    if path is None:
        names = list_bundled("scenarios")
        hint = did_you_mean(arg, names)
        raise InputError(shorten(arg), "", f"no such file or bundled scenario{hint}; bundled: "
                         f"{_short_list(names)} (`shardsim scenarios` lists them)")
    shown = arg if is_file(Path(arg)) else f"scenarios/{arg}.yaml"
    return path, shown


NAME_MAX_BYTES = 255  # a file or folder name, on every common file system
MAX_OUT_DEPTH = 64  # folders in an --out path; a real one has a dozen


def shorten(text: str, keep: int = 80) -> str:
    """`text` cut to `keep` characters for a message (a 4,000-character path is unreadable)."""
    return text if len(text) <= keep else f"{text[:keep - 30]}...{text[-27:]}"


def make_out_dir(out: Path) -> Path:
    """Create `--out` (and its parents), or InputError saying why it cannot be: a name no
    file system holds, a path nested too deep, a file in its place, a read-only folder."""
    shown = shorten(str(out))
    long = [p for p in out.parts if len(os.fsencode(p)) > NAME_MAX_BYTES]
    if long:
        raise InputError("--out", shown, f"a folder name of {len(os.fsencode(long[0])):,} "
                         f"bytes; a file system allows at most {NAME_MAX_BYTES}")
    if len(out.parts) > MAX_OUT_DEPTH:
        raise InputError("--out", shown, f"{len(out.parts):,} folders deep; at most "
                         f"{MAX_OUT_DEPTH}")
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


def load_scenario(arg: str, overrides: Sequence[str]) -> LoadedScenario:
    """Read and validate SCENARIO (a path or a bundled name) with `--set` overrides. The
    file is read (and a hostile one refused) before the validation code is imported."""
    from simulator.yamlio import read_yaml_file

    check_overrides(overrides)
    path, shown = _scenario_path(arg)
    data = read_yaml_file(path, shown)
    from simulator.scenario import parse_scenario, resolve_hardware, split_overrides

    scen_o, hw_o = split_overrides(overrides)
    scenario = parse_scenario(data, shown, scen_o)
    hw_path = resolve_hardware(scenario, path.parent, scen_o)
    _SCENARIO_OVERRIDES[:] = list(scen_o)
    return LoadedScenario(scenario, hw_path, hw_o, path.stem, tuple(overrides), path)


def load_hardware(loaded: LoadedScenario) -> Any:
    """The scenario's hardware profile with the `--set hardware.KEY=VALUE` overrides; an
    error caused by one of them names it."""
    from simulator.hardware.load import load_profile
    from simulator.yamlio import blame_override

    try:
        return load_profile(str(loaded.hardware_path), loaded.hardware_overrides)
    except InputError as err:
        raise blame_override(err, loaded.hardware_overrides, "hardware.") from None


def check_supported(loaded: LoadedScenario, hw: Any) -> None:
    """What `run` refuses and a scenario alone cannot tell, checked the same way for every
    command: a dtype the device has no peak for. (Offloads that are not simulated are a
    scenario rule, simulator.scenario.rules.)"""
    from simulator.framework.load import framework_for

    scenario = loaded.scenario
    dtype = scenario.model.dtype
    framework_for(scenario, hw)  # a framework: that is no framework profile, before any work
    err = _no_peak(hw, dtype)
    if err is not None:
        raise InputError(err.source, err.key, f"{err.message} (the scenario's model.dtype "
                         f"is {dtype})")
    if scenario.cluster.node_types is None:
        return
    from simulator.hardware.cluster import cluster_hardware

    # every node kind loads and runs the model's dtype, for `verify` as for `run`
    cluster = cluster_hardware(scenario, hw)
    first_node = 0
    for i, t in enumerate(scenario.cluster.node_types):
        prof = cluster.profiles[cluster.kind[first_node * scenario.cluster.devices_per_node]]
        first_node += t.nodes
        err = _no_peak(prof, dtype)
        if err is not None:
            raise InputError(scenario.source, f"cluster.node_types[{i}].hardware",
                             f"{err.message} (the scenario's model.dtype is {dtype})")


def _no_peak(hw: Any, dtype: str) -> InputError | None:
    """The profile's own refusal of `dtype` when it has no peak for it, else None."""
    if hw.has_dtype(dtype):
        return None
    try:
        hw.peak_flops_per_s(dtype)
    except InputError as err:
        return err
    return None


def load_checked(arg: str, overrides: Sequence[str]) -> tuple[LoadedScenario, Any]:
    """The scenario, its hardware profile, and the checks `run` and `verify` share (an
    error names the `--set` that caused it: `guarded`)."""
    loaded = load_scenario(arg, overrides)
    hw = load_hardware(loaded)
    check_supported(loaded, hw)
    return loaded, hw
