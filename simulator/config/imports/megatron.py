"""A scenario from a Megatron-LM / Megatron-Core command line (issue 27): `shardsim import
megatron SOURCE` and the scenario key `from: {megatron_args: FILE}`.

What each flag becomes is the table of `megatron_flags.FLAGS`; where a flag is absent the
value is Megatron-LM's own default (megatron/training/arguments.py `validate_args`, cited at
each), and what Megatron leaves to its stack (the gradient buckets, the tensor-parallel
overlap's kernels) is the framework profile's (`comm_fusion.mode: auto`, `tp_comm: auto`).
The stack is the hardware profile's default framework when that is a Megatron one
(megatron-core, megatron-lm-2021), else megatron-core. Every flag's value is checked, and the
contradictions Megatron-LM itself refuses (TP x PP x CP not dividing the world size, a global
batch not divisible by micro-batch x data-parallel size) are errors naming the flag and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.imports.cuda_graphs_import import cuda_graphs_section
from simulator.config.imports.megatron_flags import APPROX, FLAGS, IGNORE, MAP
from simulator.config.imports.megatron_model import model_section, vocab_size
from simulator.config.imports.megatron_parallel import parallel_section
from simulator.config.imports.megatron_source import Source, read_source
from simulator.config.imports.megatron_values import Values, check_flags
from simulator.config.imports.source_file import read_config_text
from simulator.config.resources import bundled_dir
from simulator.config.yamlio import did_you_mean
from simulator.errors import InputError

__all__ = ["Imported", "import_megatron", "read_megatron", "stack_for", "Row",
           "bundled_sources"]


@dataclass(frozen=True)
class Row:
    """One line of the import table: a flag of the file, its value and line, what became of
    it (mapped, approximated, ignored, lenient) and the scenario key or the reason; or a key
    no flag set (kind default, line 0), its value and why."""

    flag: str
    value: str
    line: int
    kind: str  # mapped | approximated | ignored | lenient | default
    detail: str


@dataclass(frozen=True)
class Imported:
    """The scenario mapping, the table of what each flag became, and the notes."""

    scenario: dict[str, Any]
    rows: tuple[Row, ...]
    notes: tuple[str, ...]


def stack_for(default_framework: str | None) -> str:
    """The framework profile a Megatron-LM run takes on hardware whose default stack is
    `default_framework`: that one when it is a Megatron-LM stack, else megatron-core."""
    if default_framework and default_framework.startswith("megatron-"):
        return default_framework
    return "megatron-core"


def _world(source: Source, nodes: int | None, per_node: int | None) -> tuple[int, int]:
    """(nodes, devices per node): the command line's, else the launcher's."""
    n = nodes if nodes is not None else (source.nnodes[0] if source.nnodes else None)
    k = per_node if per_node is not None else (source.nproc[0] if source.nproc else None)
    if n is None or k is None:
        missing = " and ".join(x for x, v in (("--nodes", n), ("--devices-per-node", k))
                               if v is None)
        raise InputError(source.path, "", f"the world size is not in the file (no torchrun "
                         f"--nnodes/--nproc-per-node); give {missing}")
    return n, k


def _rows(values: Values, notes: list[str]) -> tuple[Row, ...]:
    rows = []
    for arg in values.source.args:
        rule = FLAGS.get(arg.flag)
        shown = " ".join(arg.values)
        if rule is None or rule.kind not in (MAP, APPROX, IGNORE):
            rows.append(Row(arg.flag, shown, arg.line, "lenient", "left out (--lenient)"))
        elif rule.kind == MAP:
            rows.append(Row(arg.flag, shown, arg.line, MAP, rule.key))
        else:
            rows.append(Row(arg.flag, shown, arg.line, rule.kind, rule.why))
    return tuple(rows)


def import_megatron(source: Source, hardware: str, default_framework: str | None,
                    tp_comm_default: bool, nodes: int | None = None,
                    per_node: int | None = None, lenient: bool = False) -> Imported:
    """The scenario mapping of `source` on `hardware` (a profile name or path) whose default
    framework is `default_framework`; `tp_comm_default` is what the stack's
    `overlap.tp_comm: auto` resolves to. InputError naming the flag and line otherwise."""
    args, notes = check_flags(source, lenient)
    values = Values(source, args)
    n, k = _world(source, nodes, per_node)
    parallel, derived = parallel_section(values, n * k, tp_comm_default, notes)
    model = model_section(values, parallel["tensor"], notes, lenient)
    model["vocab_size"] = vocab_size(values, parallel["tensor"])
    training = _training(values, parallel["data"])
    if (graphs := _cuda_graphs(values)) is not None:
        training["cuda_graphs"] = graphs
    framework = stack_for(default_framework)
    if values.text("--transformer-impl", "transformer_engine",
                   ("transformer_engine", "local", "inference_optimized")) != "transformer_engine":
        if not lenient:
            raise values.error("--transformer-impl", "Megatron's own kernels instead of "
                               "Transformer Engine have no framework profile here (the "
                               f"{framework} profile is Transformer Engine's); --lenient "
                               "imports it as Transformer Engine")
        notes.append("--transformer-impl local imported as Transformer Engine")
    scenario = {"name": f"{source.path} (Megatron-LM arguments)", "hardware": hardware,
                "framework": framework, "cluster": {"nodes": n, "devices_per_node": k},
                "model": model, "training": training, "parallel": parallel}
    rows = _rows(values, notes) + tuple(Row(key, v, 0, "default", why)
                                        for key, v, why in derived)
    return Imported(scenario, rows, tuple(notes))


def _training(values: Values, dp: int) -> dict[str, Any]:
    """Batch sizes and the optimizer (Megatron-LM: `--global-batch-size` defaults to
    micro-batch x data-parallel size; `--optimizer adam`; sgd with `--sgd-momentum 0.9`)."""
    micro = values.need("--micro-batch-size")
    glob = values.integer("--global-batch-size", micro * dp)
    assert glob is not None
    if glob % (micro * dp):
        flag = "--global-batch-size" if values.has("--global-batch-size") else \
            "--micro-batch-size"
        raise values.error(flag, f"global batch {glob} is not divisible by micro-batch "
                           f"{micro} x data-parallel size {dp} = {micro * dp} (Megatron-LM "
                           "refuses it: the micro-batches per step must be whole)")
    opt = values.text("--optimizer", "adam", ("adam", "sgd"))
    if opt == "sgd":
        opt = "momentum" if values.number("--sgd-momentum", 0.9, 0.0, 1.0) > 0 else "sgd"
    out: dict[str, Any] = {"global_batch_size": glob, "micro_batch_size": micro,
                           "optimizer": opt}
    # --fp8-recipe (Megatron-LM arguments.py: delayed, tensorwise, mxfp8, blockwise): one
    # scale per tensor (delayed or current scaling, the framework profile's) or MXFP8
    recipe = values.text("--fp8-recipe", "delayed",
                         ("delayed", "tensorwise", "mxfp8", "blockwise"))
    if recipe == "blockwise":
        raise values.error("--fp8-recipe", "blockwise (1 x 128 / 128 x 128 block scales) has no "
                           "scenario key; tensor scaling (delayed, tensorwise) and mxfp8 do")
    if recipe == "mxfp8" and values.has("--fp8-format"):
        out["fp8_scaling"] = "mxfp8"
    return out


def bundled_sources() -> list[str]:
    """Names of the bundled launch scripts (scenarios/megatron/*.sh, without `.sh`)."""
    return sorted(p.stem for p in (bundled_dir("scenarios") / "megatron").glob("*.sh"))


def read_megatron(ref: str, shown: str | None = None) -> Source:
    """The arguments of the file `ref` (a path, or the name of a bundled launch script in
    scenarios/megatron/); `shown` names it in messages."""
    def missing() -> str:
        names = bundled_sources()
        return (f"no such file or bundled launch script{did_you_mean(ref, names)}; "
                f"bundled (scenarios/megatron/): {', '.join(names[:3])}, ... ({len(names)})")
    text, name = read_config_text(ref, shown, "megatron", ".sh", "Megatron-LM arguments",
                                  missing, "not an argument list or a launch script")
    return read_source(text, name)


def _cuda_graphs(values: Values) -> dict[str, Any] | None:
    """`training.cuda_graphs` from --cuda-graph-impl and --cuda-graph-scope (the deprecated
    --enable-cuda-graph is local, --external-cuda-graph transformer_engine: Megatron-LM
    92c8482e megatron/training/arguments.py validate_args)."""
    impl = values.text("--cuda-graph-impl")
    for flag, meant in (("--enable-cuda-graph", "local"),
                        ("--external-cuda-graph", "transformer_engine")):
        if values.has(flag):
            if impl not in (None, "none"):
                raise values.error(flag, "with --cuda-graph-impl: Megatron-LM refuses both "
                                   "('Do not use --enable-cuda-graph or --external-cuda-graph "
                                   "with --cuda-graph-impl.')")
            impl = meant
    arg = values.arg("--cuda-graph-scope")
    return cuda_graphs_section(impl, None if arg is None else list(arg.values),
                               ("--cuda-graph-impl", "--cuda-graph-scope"), values.error)
