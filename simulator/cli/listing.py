"""`shardsim profiles` and `shardsim scenarios`: what is bundled, with key figures."""

from __future__ import annotations

from typing import IO, Annotated, Any

import typer

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


def profiles(json_out: JsonOpt = False) -> None:
    """List the bundled hardware profiles with their key figures."""
    with guarded() as stdout:
        from simulator.hardware.load import list_profiles, profile_summary

        rows = [profile_summary(hw) for hw in list_profiles()]
        if json_out:
            emit_json({"profiles": rows}, stdout)
            return
        short = [{_PROFILE_HEADERS.get(k, k): v for k, v in row.items() if k != "description"}
                 for row in rows]
        _table("hardware profiles (use the name in a scenario's `hardware:`)", short, stdout)
        for row in rows:
            if row.get("description"):
                stdout.write(f"{row.get('name')}: {row['description']}\n")


def _scenario_row(name: str) -> dict[str, Any]:
    """Name, title, hardware and device count of a bundled scenario, read without
    validation so one broken file does not hide the others."""
    from simulator.resources import bundled_dir
    from simulator.yamlio import load_yaml_text

    path = bundled_dir("scenarios") / f"{name}.yaml"
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8"))
    except Exception:  # a listing shows what it can; `run` reports the error in full
        data = None
    data = _mapping(data)
    cluster, model = _mapping(data.get("cluster")), _mapping(data.get("model"))
    nodes, per_node = cluster.get("nodes", 1), cluster.get("devices_per_node", 1)
    devices = nodes * per_node if isinstance(nodes, int) and isinstance(per_node, int) else None
    return {"name": name, "title": data.get("name"), "model": model.get("type"),
            "hardware": data.get("hardware"), "devices": devices}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def scenarios(json_out: JsonOpt = False) -> None:
    """List the bundled scenarios (run one with `shardsim run NAME`)."""
    with guarded() as stdout:
        from simulator.resources import list_bundled

        rows = [_scenario_row(name) for name in list_bundled("scenarios")]
        if json_out:
            emit_json({"scenarios": rows}, stdout)
        else:
            _table("bundled scenarios (shardsim run NAME)", rows, stdout)
