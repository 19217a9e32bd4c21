"""The `shardsim` command line (docs/contract.md section 1): argument parsing and exit codes only.

Exit status: 0 success; 1 infeasible (`run --strict`) or a failed check (`verify`); 2 bad
input, with a message on stderr naming the file and dotted key; 3 an internal error.
Each command imports what it calls inside its body, so that starting up stays cheap.
"""

from __future__ import annotations

from typing import Annotated

import typer

from simulator.cli._group import OneLineErrors
from simulator.cli.calibrate import calibrate
from simulator.cli.comm import comm
from simulator.cli.explain import explain
from simulator.cli.importer import import_app
from simulator.cli.listing import profiles, scenarios
from simulator.cli.plan import plan
from simulator.cli.run import run, verify
from simulator.cli.schema import schema
from simulator.cli.sweep import sweep

__all__ = ["app", "main"]

app = typer.Typer(
    name="shardsim",
    cls=OneLineErrors,
    help="Simulate distributed deep-learning training: iteration time, where the time goes, "
    "memory, and a numpy proof that a sharded plan computes what one device would.",
    add_completion=True,  # `shardsim --install-completion` (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
        from simulator import __version__

        typer.echo(f"shardsim {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", metavar="", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False) -> None:
    """Simulate distributed deep-learning training: iteration time, where the time goes,
    memory, and a numpy proof that a sharded plan computes what one device would."""


app.command("run")(run)
app.command("verify")(verify)
app.command("comm")(comm)
app.command("explain")(explain)
app.command("plan")(plan)
app.command("profiles")(profiles)
app.command("scenarios")(scenarios)
app.command("sweep")(sweep)
app.command("schema")(schema)
app.command("calibrate")(calibrate)
app.add_typer(import_app, name="import")


def main() -> None:
    """Console-script entry point (`shardsim`, `python -m simulator`)."""
    app(prog_name="shardsim")
