"""`shardsim import FORMAT SOURCE`: a scenario from a training framework's own launch
configuration (issue 27; docs/import.md). One command per format, in the `import` group."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Annotated, Any

import typer

from simulator.cli._common import (
    emit_json,
    guarded,
    printable,
    stderr_console,
    write_out_file,
)

__all__ = ["import_app"]

import_app = typer.Typer(
    name="import", no_args_is_help=True, add_completion=False,
    help="Write a scenario from a training framework's own launch configuration.")


def _table(rows: list[dict[str, Any]]) -> str:
    """One line per flag: its line, the flag and its value, what became of it and the
    scenario key or why; then the keys no flag set."""
    out = [f"{'line':>4}  {'flag':<40} {'value':<14} {'became':<12} scenario key / why"]
    for r in rows:
        line = str(r["line"]) if r["line"] else ""
        out.append(f"{line:>4}  {r['flag']:<40} {printable(r['value']):<14} {r['kind']:<12} "
                   f"{printable(r['detail'])}")
    return "\n".join(out)


def _report(result: dict[str, Any], out: Path | None, stdout: IO[str]) -> None:
    err = stderr_console()
    err.print(_table(result["rows"]), soft_wrap=True)
    for note in result["notes"]:
        err.print(f"note: {note}", soft_wrap=True)
    if out is None:
        stdout.write(result["yaml"])
    else:
        write_out_file(out, result["yaml"], "the scenario")
        err.print(f"scenario written: {out} ({result['devices']} devices); "
                  f"`shardsim run {out}` simulates it", soft_wrap=True)


_OUT = Annotated[Path | None, typer.Option(
    "--out", metavar="FILE", help="Write the scenario YAML here (default: stdout).",
    show_default=False)]
_HARDWARE = Annotated[str, typer.Option(
    "--hardware", metavar="NAME", help="Hardware profile of the devices.")]
_LENIENT = Annotated[bool, typer.Option(
    "--lenient", help="Import without the keys that have no scenario key, with a note "
    "for each, instead of refusing them.")]
_JSON = Annotated[bool, typer.Option(
    "--json", help="Print the scenario, the table and the notes as one JSON object.")]


def _run(fmt: str, source: Path, out: Path | None, hardware: str, nodes: int | None,
         per_node: int | None, lenient: bool, json_out: bool,
         fills: dict[str, Any] | None = None) -> None:
    with guarded() as stdout:
        # imported when the command runs: the CLI starts cheap (no numpy/pydantic at --help)
        from simulator import api

        for name, value in (("--nodes", nodes), ("--devices-per-node", per_node)):
            if value is not None and value < 1:
                raise api.InputError(name, "", f"found {value}; expected at least 1")
        result = api.import_config(fmt, str(source), hardware, nodes, per_node, lenient,
                                   command=f"shardsim import {fmt} {source}", fills=fills)
        if json_out:
            if out is not None:
                write_out_file(out, result["yaml"], "the scenario")
            emit_json({k: v for k, v in result.items() if k != "yaml"}, stdout)
        else:
            _report(result, out, stdout)


@import_app.command("megatron")
def megatron(
    source: Annotated[Path, typer.Argument(
        metavar="SOURCE", help="A file of Megatron-LM arguments, or a launch script with a "
        "`torchrun ... pretrain_gpt.py ARGS` line.", show_default=False)],
    out: _OUT = None,
    hardware: _HARDWARE = "h100-sxm",
    nodes: Annotated[int | None, typer.Option(
        "--nodes", metavar="N", help="Nodes (default: the launcher's --nnodes).",
        show_default=False)] = None,
    devices_per_node: Annotated[int | None, typer.Option(
        "--devices-per-node", metavar="K", help="Devices per node (default: the launcher's "
        "--nproc-per-node).", show_default=False)] = None,
    lenient: _LENIENT = False,
    json_out: _JSON = False,
) -> None:
    """A scenario from Megatron-LM / Megatron-Core arguments or a launch script.

    The table of what each flag became goes to stderr, the scenario YAML to stdout or to
    --out FILE."""
    _run("megatron", source, out, hardware, nodes, devices_per_node, lenient, json_out)


@import_app.command("torchtitan")
def torchtitan(
    source: Annotated[Path, typer.Argument(
        metavar="SOURCE", help="A torchtitan job config (train_configs/*.toml), or the name "
        "of a bundled one.", show_default=False)],
    nodes: Annotated[int, typer.Option(
        "--nodes", metavar="N", help="Nodes (torchrun's --nnodes).", show_default=False)],
    devices_per_node: Annotated[int, typer.Option(
        "--devices-per-node", metavar="K", help="Devices per node (torchrun's "
        "--nproc-per-node).", show_default=False)],
    out: _OUT = None,
    hardware: _HARDWARE = "h100-sxm",
    lenient: _LENIENT = False,
    json_out: _JSON = False,
) -> None:
    """A scenario from a torchtitan job config (TOML).

    The table of what each key became goes to stderr, the scenario YAML to stdout or to
    --out FILE. The world size is not in the file: give --nodes and --devices-per-node."""
    _run("torchtitan", source, out, hardware, nodes, devices_per_node, lenient, json_out)


@import_app.command("mindformers")
def mindformers(
    source: Annotated[Path, typer.Argument(
        metavar="SOURCE", help="A MindFormers run config (YAML), or the name of a bundled one.",
        show_default=False)],
    nodes: Annotated[int, typer.Option(
        "--nodes", metavar="N", help="Nodes (msrun's).", show_default=False)],
    devices_per_node: Annotated[int, typer.Option(
        "--devices-per-node", metavar="K", help="Devices per node.", show_default=False)],
    out: _OUT = None,
    hardware: _HARDWARE = "ascend-910b",
    lenient: _LENIENT = False,
    json_out: _JSON = False,
) -> None:
    """A scenario from a MindFormers run config (a Llama model).

    The table of what each key became goes to stderr, the scenario YAML to stdout or to
    --out FILE."""
    _run("mindformers", source, out, hardware, nodes, devices_per_node, lenient, json_out)


@import_app.command("nemo")
def nemo(
    source: Annotated[Path, typer.Argument(
        metavar="SOURCE", help="A NeMo training config (a NeMo-Framework-Launcher "
        "conf/training YAML), or the name of a bundled one.", show_default=False)],
    out: _OUT = None,
    hardware: _HARDWARE = "h100-sxm",
    nodes: Annotated[int | None, typer.Option(
        "--nodes", metavar="N", help="Nodes (default: trainer.num_nodes).",
        show_default=False)] = None,
    devices_per_node: Annotated[int | None, typer.Option(
        "--devices-per-node", metavar="K", help="Devices per node (default: "
        "trainer.devices).", show_default=False)] = None,
    lenient: _LENIENT = False,
    json_out: _JSON = False,
) -> None:
    """A scenario from a NeMo training config (a Megatron GPT).

    The table of what each key became goes to stderr, the scenario YAML to stdout or to
    --out FILE."""
    _run("nemo", source, out, hardware, nodes, devices_per_node, lenient, json_out)


@import_app.command("bridge")
def bridge(
    source: Annotated[Path, typer.Argument(
        metavar="SOURCE", help="A Megatron-Bridge ConfigContainer YAML, a file of its dotted "
        "overrides (model.tensor_model_parallel_size=4 ...; NeMo 2's names too), or the name "
        "of a bundled one.", show_default=False)],
    out: _OUT = None,
    hardware: _HARDWARE = "h100-sxm",
    nodes: Annotated[int | None, typer.Option(
        "--nodes", metavar="N", help="Nodes (default: NeMo 2's trainer.num_nodes).",
        show_default=False)] = None,
    devices_per_node: Annotated[int | None, typer.Option(
        "--devices-per-node", metavar="K", help="Devices per node (default: NeMo 2's "
        "trainer.devices).", show_default=False)] = None,
    lenient: _LENIENT = False,
    json_out: _JSON = False,
) -> None:
    """A scenario from a Megatron-Bridge / NeMo 2 training config (a Megatron-Core GPT).

    The table of what each key became goes to stderr, the scenario YAML to stdout or to
    --out FILE. A ConfigContainer does not hold the world size: give --nodes and
    --devices-per-node."""
    _run("bridge", source, out, hardware, nodes, devices_per_node, lenient, json_out)


def _choices(dtype: str | None, recompute: str) -> None:
    """--dtype and --recompute among their values (exit 2 naming the option otherwise)."""
    for name, value, allowed in (("--dtype", dtype, ("bf16", "fp16", "fp32", None)),
                                 ("--recompute", recompute, ("none", "selective", "full"))):
        if value not in allowed:
            with guarded():
                # imported when the command runs: the CLI starts cheap (no numpy/pydantic)
                from simulator import api

                raise api.InputError(name, "", f"found {value!r}; allowed: "
                                     f"{', '.join(a for a in allowed if a)}")


@import_app.command("deepspeed")
def deepspeed(
    source: Annotated[Path, typer.Argument(
        metavar="SOURCE", help="A DeepSpeed config (ds_config.json).", show_default=False)],
    model: Annotated[str, typer.Option(
        "--model", metavar="HF_CONFIG", help="The model: a Hugging Face config.json or a "
        "bundled one's name (as model.from_hf).", show_default=False)],
    seq_length: Annotated[int, typer.Option(
        "--seq-length", metavar="N", min=1, help="Tokens per sample.", show_default=False)],
    nodes: Annotated[int, typer.Option(
        "--nodes", metavar="N", help="Nodes (the launcher's).", show_default=False)],
    devices_per_node: Annotated[int, typer.Option(
        "--devices-per-node", metavar="K", help="Devices per node (the launcher's).",
        show_default=False)],
    micro_batch_size: Annotated[int | None, typer.Option(
        "--micro-batch-size", metavar="N", min=1, help="Where the config says \"auto\" or "
        "nothing: the Trainer's per-device batch.", show_default=False)] = None,
    grad_accum: Annotated[int | None, typer.Option(
        "--gradient-accumulation-steps", metavar="N", min=1, help="Where the config says "
        "\"auto\" or nothing.", show_default=False)] = None,
    dtype: Annotated[str | None, typer.Option(
        "--dtype", metavar="bf16|fp16|fp32", help="Where fp16/bf16 enabled say \"auto\".",
        show_default=False)] = None,
    recompute: Annotated[str, typer.Option(
        "--recompute", metavar="none|selective|full", help="The model code's activation "
        "checkpointing (Hugging Face gradient_checkpointing: full).")] = "none",
    out: _OUT = None,
    hardware: _HARDWARE = "h100-sxm",
    lenient: _LENIENT = False,
    json_out: _JSON = False,
) -> None:
    """A scenario from a DeepSpeed config and a Hugging Face model config.

    The table of what each key became goes to stderr, the scenario YAML to stdout or to
    --out FILE."""
    _choices(dtype, recompute)
    fills = {"model": model, "seq_length": seq_length, "micro_batch_size": micro_batch_size,
             "grad_accum": grad_accum, "dtype": dtype, "recompute": recompute}
    _run("deepspeed", source, out, hardware, nodes, devices_per_node, lenient, json_out, fills)
