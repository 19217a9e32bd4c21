"""The text of a framework config to import: a file, or the name of one bundled under
scenarios/FOLDER/ (shared by every `shardsim import` reader), and the keys read from it with
their lines (`KeyedConfig`, shared by the key-path readers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.config.resources import bundled_dir, is_file
from simulator.errors import InputError

__all__ = ["MAX_CHARS", "KeyedConfig", "read_config_text"]

MAX_CHARS = 1_000_000  # no launch or run config comes near; beyond it the input is not one


def read_config_text(ref: str, shown: str | None, folder: str, suffix: str, what: str,
                     missing: Callable[[], str], not_one: str) -> tuple[str, str]:
    """(text, the name messages give it) of the file `ref`, or of the bundled
    scenarios/`folder`/`ref``suffix`. `missing()` says what was expected when neither exists,
    `what` names the config in the message of a file that cannot be read, `not_one` ends the
    message of one over MAX_CHARS characters."""
    name = shown or ref
    path = Path(ref)
    if not is_file(path):
        bundled = bundled_dir("scenarios") / folder / f"{ref}{suffix}"
        if not is_file(bundled):
            raise InputError(name, "", missing())
        path, name = bundled, shown or f"scenarios/{folder}/{ref}{suffix}"
    try:
        with path.open(encoding="utf-8") as fh:
            text = fh.read(MAX_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(name, "", f"cannot read the {what} ({exc})") from None
    if len(text) > MAX_CHARS:
        raise InputError(name, "", f"more than 1,000,000 characters: {not_one}")
    return text, name


@dataclass
class KeyedConfig:
    """The checked keys of one file (dotted paths to values), their lines, the notes and what
    --lenient left out; an error names the file, the line and the key."""

    path: str
    values: dict[str, Any]
    lines: dict[str, int]
    notes: list[str] = field(default_factory=list)
    dropped: set[str] = field(default_factory=set)

    def error(self, key: str, message: str) -> InputError:
        line = self.lines.get(key, 0)
        return InputError(f"{self.path}:{line}" if line else self.path, key, message)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)
