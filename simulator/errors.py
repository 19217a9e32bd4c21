"""Exceptions for user input. The CLI turns InputError into exit status 2 with its message.

Messages follow STYLE habit 9: `file: dotted.key: what was found; what is allowed (hint)`.
"""

from __future__ import annotations

__all__ = ["ShardsimError", "InputError"]


class ShardsimError(Exception):
    """Base class of every error shardsim raises on purpose."""


class InputError(ShardsimError):
    """Bad user input: a file, a key path inside it, and what was expected.

    `source` is the file (or `--set`), `key` the dotted path ('' for the whole file).
    """

    def __init__(self, source: str, key: str, message: str) -> None:
        self.source = source
        self.key = key
        self.message = message
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {message}")
