"""`shardsim profiles` and `shardsim scenarios`: what is bundled, with key figures."""

from __future__ import annotations

from typing import IO, Annotated, Any

import typer

from simulator.api import InputError
from simulator.cli._common import emit_json, guarded, stdout_console

__all__ = ["profiles", "scenarios"]

JsonOpt = Annotated[bool, typer.Option(
    "--json", metavar="", help="Print exactly one JSON object on stdout and nothing else.")]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _table(title: str, rows: list[dict[str, Any]], out: IO[str]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    for i, col in enumerate(columns):
        table.add_column(col, overflow="fold", no_wrap=i == 0)
    for row in rows:
        table.add_row(*(_cell(row.get(col)) for col in columns))
    stdout_console(out).print(table)


# Short headers for the profile table; keys not listed keep their own name.
_PROFILE_HEADERS = {
    "bf16_tflops": "bf16\nTFLOP/s", "fp16_tflops": "fp16\nTFLOP/s",
    "fp32_tflops": "fp32\nTFLOP/s", "fp8_tflops": "fp8\nTFLOP/s", "memory_GB": "mem\nGB",
    "memory_bandwidth_GBps": "mem\nGB/s", "intra_node_GBps": "intra\nGB/s",
    "intra_node_topology": "intra\ntopology", "nic_Gbps_per_node": "NICs\nGb/s/node",
    "devices_per_node": "dev/\nnode",
}


NameArg = Annotated[str | None, typer.Argument(
    metavar="NAME", help="A profile name or YAML path: print every field with its value and "
    "source.", show_default=False)]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="KEY=VALUE", help="With NAME: override a field (as `run --set "
    "hardware.KEY=VALUE`, without `hardware.`). Repeatable.", show_default=False)]


def _profile_fields(name: str, overrides: list[str], json_out: bool, out: IO[str]) -> None:
    """Every field of one profile: value, source (file, default, --set), what reads it."""
    from simulator import api  # profiles load here, not at start-up

    doc = api.profile_fields(name, overrides)
    rows = doc["fields"]
    if json_out:
        emit_json(doc, out)
        return
    for row in rows:
        value = row["value"]
        if isinstance(value, tuple) and len(value) > 4:
            row["value"] = f"{len(value)} points: {value[0]} .. {value[-1]}"
    _table(f"{doc['profile']} ({doc['source']}): every field, its value and where it came from",
           [{k: v for k, v in r.items() if k != "note"} for r in rows], out)
    for row in rows:
        if row["note"]:
            out.write(f"note: {row['field']}: {row['note']}\n")


def profiles(name: NameArg = None, json_out: JsonOpt = False, overrides: SetOpt = None) -> None:
    """List the bundled hardware profiles with their key figures; with NAME, every field of
    that profile with its source."""
    with guarded() as stdout:
        from simulator import api  # profiles load here, not at start-up

        if name is not None:
            _profile_fields(name, overrides or [], json_out, stdout)
            return
        if overrides:
            raise InputError("--set", overrides[0], "needs a profile NAME to override")

        rows = api.profiles()
        if json_out:
            emit_json({"profiles": rows}, stdout)
            return
        short = [{_PROFILE_HEADERS.get(k, k): v for k, v in row.items() if k != "description"}
                 for row in rows]
        _table("hardware profiles (use the name in a scenario's `hardware:`)", short, stdout)
        for row in rows:
            if row.get("description"):
                stdout.write(f"{row.get('name')}: {row['description']}\n")


def scenarios(json_out: JsonOpt = False) -> None:
    """List the bundled scenarios (run one with `shardsim run NAME`)."""
    with guarded() as stdout:
        # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
        from simulator import api

        rows = api.scenarios()
        if json_out:
            emit_json({"scenarios": rows}, stdout)
        else:
            _table("bundled scenarios (shardsim run NAME)", rows, stdout)
