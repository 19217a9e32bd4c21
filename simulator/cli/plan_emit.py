"""`shardsim plan --emit FORMAT`: the best configuration as the launch configuration of a
training framework (issue 27 item 4; `api.emit_config`), kept apart from plan.py."""

from __future__ import annotations

from typing import IO, Any

__all__ = ["emit_best", "print_emitted"]


def emit_best(loaded: Any, report: dict[str, Any], devices: int, per_node: int,
              fmt: str | None) -> None:
    """Add `emit` ({format, text}) to a `plan --devices` report: its best configuration on
    `devices` devices, `per_node` a node, in format `fmt` (None: nothing)."""
    if fmt is None or not report.get("best"):
        return
    # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
    from simulator import api

    cluster = [f"cluster.nodes={max(1, devices // per_node)}",
               f"cluster.devices_per_node={per_node}"]
    text = api.emit_config(fmt, loaded, [*report["best"]["overrides"], *cluster])
    report["emit"] = {"format": fmt, "text": text}


def print_emitted(report: dict[str, Any], out: IO[str]) -> None:
    """The emitted launch after the table."""
    if report.get("emit"):
        out.write(f"\nthe best configuration as {report['emit']['format']} arguments:\n")
        out.write(report["emit"]["text"])
