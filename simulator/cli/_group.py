"""Usage errors (a missing option, a value of the wrong type, an unknown command) as one
`error: ...` line on stderr with exit status 2, like every other bad input, instead of
typer's framed panel of several lines."""

from __future__ import annotations

import sys
from typing import Any

from typer.core import TyperGroup

__all__ = ["OneLineErrors"]


class OneLineErrors(TyperGroup):
    """The command group of `shardsim`: click's usage errors printed on one line."""

    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True,
             **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **kwargs)
        try:
            code = super().main(args, prog_name, complete_var, False, **kwargs)
        except Exception as exc:  # typer vendors its own click: its exceptions, by shape
            if type(exc).__name__ == "Abort":
                sys.stderr.write("error: aborted\n")
                sys.exit(1)
            if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
                raise
            message = " ".join(exc.format_message().split())
            if not message:  # `shardsim` alone: the help was printed
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            where = f" (`{ctx.command_path} --help` lists the options)" if ctx else ""
            sys.stderr.write(f"error: {message}{where}\n")
            sys.stderr.flush()
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)
