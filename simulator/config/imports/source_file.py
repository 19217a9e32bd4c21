"""The text of a framework config to import: a file, or the name of one bundled under
scenarios/FOLDER/ (shared by every `shardsim import` reader)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simulator.config.resources import bundled_dir, is_file
from simulator.errors import InputError

__all__ = ["MAX_CHARS", "read_config_text"]

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
