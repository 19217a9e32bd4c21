"""`shardsim comm`: the time of one collective, like nccl-tests (docs/contract.md sections 1, 4)."""

from __future__ import annotations

import re
from typing import IO, Annotated, Any

import typer

from simulator.api import InputError
from simulator.cli._common import emit_json, guarded, stdout_console

__all__ = ["comm", "parse_bytes"]

# Suffixes are binary, as in nccl-tests (`-b 32k -e 16G`); SI ones are spelled out.
_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30,
          "gib": 2**30, "t": 2**40, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "tb": 10**12}
# A buffer of at most 16 TiB (2^44 bytes, ~50x the largest device memory): a bound a real
# system could have, as the scenario's (simulator/config/scenario/schema.py)
MAX_BYTES = 2**44
_BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str) -> int:
    """'1073741824', '1G' or '1GiB' (binary), '1GB' (10^9) -> a positive byte count."""
    match = _BYTES_RE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise InputError("--bytes", "", f"found {text!r}; expected a byte count such as "
                         "1073741824, 1G or 1GiB (binary), 1GB (10^9)")
    number = float(match.group(1)) * _UNITS[unit]
    value = int(number) if number <= MAX_BYTES else MAX_BYTES + 1  # 400 digits: inf
    if value < 1:
        raise InputError("--bytes", "", f"found {text!r}; expected at least 1 byte")
    if value > MAX_BYTES:
        raise InputError("--bytes", "", f"found {text!r}; expected at most 16 TiB (2^44 "
                         "bytes, a range a real system could have)")
    return value


def comm(
    collective: Annotated[str, typer.Argument(
        metavar="COLLECTIVE", help="all_reduce, all_gather, reduce_scatter, all_to_all, "
        "broadcast or send_recv.", show_default=False)],
    nbytes: Annotated[str, typer.Option(
        "--bytes", metavar="N", help="Buffer size in bytes (nccl-tests convention); "
        "suffixes K, M, G are binary.", show_default=False)],
    devices: Annotated[int, typer.Option(
        "--devices", metavar="N", help="Devices in the group.", show_default=False)],
    hardware: Annotated[str, typer.Option(
        "--hardware", metavar="NAME", help="A hardware profile name or YAML path.",
        show_default=False)],
    devices_per_node: Annotated[int | None, typer.Option(
        "--devices-per-node", metavar="K", help="Devices per node (default: the profile's).",
        show_default=False)] = None,
    algorithm: Annotated[str, typer.Option(
        "--algorithm", metavar="NAME", help="auto (NCCL's choice: the fastest modelled), "
        "ring, tree, hierarchical, nvls, nvls_tree or pat.")] = "auto",
    json_out: Annotated[bool, typer.Option(
        "--json", metavar="", help="Print exactly one JSON object on stdout and nothing else.")
    ] = False,
) -> None:
    """Time one collective on a hardware profile: algorithm, time, algbw and busbw."""
    with guarded() as stdout:
        from simulator import api  # the cost model loads here, not at start-up

        res = api.comm(collective, parse_bytes(nbytes), devices, hardware, devices_per_node,
                       algorithm)
        if json_out:
            emit_json(res, stdout)
        else:
            _print(res, stdout)


def _print(res: dict[str, Any], out: IO[str]) -> None:
    from rich.table import Table

    table = Table(title=f"{res.get('collective')} on {res.get('devices')} devices "
                        f"({res.get('devices_per_node')} per node)")
    for col in ("bytes", "algorithm", "time_us", "algbw_GBps", "busbw_GBps"):
        table.add_column(col, justify="right")
    table.add_row(f"{res.get('bytes'):,}", str(res.get("algorithm")),
                  f"{float(res.get('time_s', 0.0)) * 1e6:,.1f}",
                  f"{float(res.get('algbw_GBps', 0.0)):.2f}",
                  f"{float(res.get('busbw_GBps', 0.0)):.2f}")
    stdout_console(out).print(table)
