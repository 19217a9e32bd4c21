"""Exceptions raised on purpose. The CLI turns InputError into exit status 2 and
InfeasibleError into exit status 1, printing the message and no traceback.

Messages follow STYLE habit 9: `file: dotted.key: what was found; what is allowed (hint)`.
"""

from __future__ import annotations

__all__ = ["ShardsimError", "InputError", "InfeasibleError"]


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


class InfeasibleError(ShardsimError):
    """A valid scenario that cannot be carried out as asked (exit status 1), for example a
    plan search that finds no configuration. Not for "does not fit in memory": `run` reports
    that as `fits: false` in its result.
    """
