"""A scenario from a torchtitan job config (`train_configs/*.toml`; issue 27): `shardsim
import torchtitan SOURCE` and the scenario key `from: {torchtitan_toml: FILE}`.

What each key becomes is the table of `torchtitan_keys.KEYS`; where a key is absent the
value is torchtitan's own default (torchtitan/config/job_config.py @238fa99, and
config_manager.py @0413364 for the 2024 names), and what torchtitan leaves to its code (FSDP2
one all-gather per TransformerBlock, the eager kernels) is the torchtitan framework
profile's. The world size is not in the file (torchrun's): `--nodes` and
`--devices-per-node`, or the scenario's `cluster`. Three schemas are read: 2024-04
(`[training]` degrees, `batch_size`), 2024-12 (`data_parallel_shard_degree`,
`[experimental]`, `[float8]`) and 2025 on (`[parallelism]`, `local_batch_size`,
`[compile]`, `[quantize]`).
"""

from __future__ import annotations

from typing import Any

from simulator.config.imports.megatron import Imported, Row
from simulator.config.imports.megatron_flags import MAP, REFUSE, Flag
from simulator.config.imports.torchtitan_keys import rule
from simulator.config.imports.torchtitan_model import model_section
from simulator.config.imports.torchtitan_parallel import degrees, parallel_section
from simulator.config.imports.torchtitan_pipeline import pipeline_keys
from simulator.config.imports.torchtitan_source import Toml
from simulator.errors import InputError

__all__ = ["import_torchtitan"]

_OLD = ("training.data_parallel_degree", "training.data_parallel_shard_degree",
        "training.batch_size", "experimental.pipeline_parallel_degree",
        "training.pipeline_parallel_degree")
_FP8_CONVERTERS = ("float8", "quantize.linear.float8")


def _refuse(toml: Toml, key: str, why: str, lenient: bool) -> None:
    """A value with no scenario key: an error, or with `--lenient` a note."""
    if not lenient:
        raise toml.error(key, f"{toml.get(key)!r} changes what torchtitan runs and has no "
                         f"scenario key ({why}); --lenient imports without it")
    toml.notes.append(f"{key} = {toml.get(key)!r} (line {toml.line(key)}) left out: {why}")
    toml.dropped.add(key)


def _dtype(toml: Toml, lenient: bool) -> str:
    """fp8 (torchao Float8Linear: the `float8` converter, [float8] enable_float8_linear,
    training.fp8_linear), else mixed_precision_param (default bfloat16)."""
    converters = toml.strings("model.converters")
    for name in converters:
        if name not in _FP8_CONVERTERS:
            raise toml.error("model.converters", f"{name!r}: only Float8Linear "
                             f"({', '.join(_FP8_CONVERTERS)}) has a scenario dtype (MX "
                             "formats and grouped-GEMM converters have none)")
    if toml.get("training.dtype", "float32") == "bfloat16":
        _refuse(toml, "training.dtype", "bf16 parameters and optimizer states without an "
                "fp32 copy", lenient)
    fp8 = bool(converters) or toml.flag("float8.enable_float8_linear") or \
        toml.text("training.fp8_linear", "", ("", "dynamic", "delayed")) != ""
    if fp8:
        return "fp8"
    param = toml.text("training.mixed_precision_param", "bfloat16", ("bfloat16", "float32"))
    return "bf16" if param == "bfloat16" else "fp32"


def _training(toml: Toml, d: dict[str, int], dtype: str) -> dict[str, Any]:
    """The batch (the local batch per data-parallel rank; global default local x DP,
    train.py 'global_batch_size % (local_batch_size * batch_degree)') and AdamW."""
    dp = d["replicate"] * d["shard"]
    key = toml.first("training.local_batch_size", "training.batch_size") or \
        "training.local_batch_size"
    local = toml.integer(key, 8)
    glob = toml.integer("training.global_batch_size", -1, lo=-1)
    if glob in (-1, 0):
        glob = local * dp
    if glob % (local * dp):
        raise toml.error("training.global_batch_size", f"{glob} is not a multiple of the "
                         f"local batch {local} x data-parallel degree {dp} (torchtitan train.py "
                         "refuses it)")
    micro = local
    if d["pipeline"] > 1:
        micro = toml.integer("parallelism.pipeline_parallel_microbatch_size", 1)
        if local % micro:
            raise toml.error("parallelism.pipeline_parallel_microbatch_size", f"{micro} does "
                             f"not divide the local batch {local} (torchtitan refuses it)")
        if glob != local * dp:
            raise toml.error("training.global_batch_size", f"{glob}: gradient accumulation "
                             "with a pipeline flushes the pipeline each local batch, which no "
                             "scenario key says")
    name = toml.text("optimizer.name", "AdamW")
    if name not in ("AdamW", "Adam"):
        raise toml.error("optimizer.name", f"found {name!r}; the optimizers simulated: AdamW, "
                         "Adam")
    out: dict[str, Any] = {"global_batch_size": glob, "micro_batch_size": micro,
                           "optimizer": "adam"}
    if dtype == "fp8" and (toml.flag("float8.enable_fsdp_float8_all_gather") or toml.flag(
            "quantize.linear.float8.enable_fsdp_float8_all_gather")):
        out["fp8_params"] = True
    return out


def _stack(toml: Toml, tp: int, lenient: bool) -> None:
    """What the torchtitan profile assumes: eager kernels, loss parallel with TP, FSDP2
    resharding after the forward, the standard all-to-all, no fault tolerance."""
    for key in ("training.compile", "compile.enable"):
        if toml.flag(key):
            _refuse(toml, key, "torch.compile's fusion is not modelled: the torchtitan "
                    "profile prices the eager kernels", lenient)
    if tp > 1 and (toml.flag("training.disable_loss_parallel") or toml.flag(
            "parallelism.disable_loss_parallel") or not toml.flag(
            "training.enable_loss_parallel", True)):
        key = toml.first("parallelism.disable_loss_parallel", "training.disable_loss_parallel",
                         "training.enable_loss_parallel") or ""
        _refuse(toml, key, "the LM head's loss gathered instead of vocabulary-parallel: the "
                "torchtitan profile's is loss parallel", lenient)
    checks = (("parallelism.fsdp_reshard_after_forward", "default", ("default", "always"),
               "FSDP2 keeping the gathered parameters after the forward"),
              ("parallelism.expert_parallel_comm_backend", "standard", ("standard",),
               "DeepEP's dispatch kernels"),
              ("experimental.custom_import", "", ("",), "a model or code of your own"),
              ("experimental.custom_args_module", "", ("",), "job-config keys of your own"))
    for key, default, fine, why in checks:
        if toml.text(key, default) not in fine:
            _refuse(toml, key, why, lenient)
    if toml.flag("fault_tolerance.enable"):
        _refuse(toml, "fault_tolerance.enable", "torchft replica groups", lenient)


def _rows(toml: Toml) -> tuple[Row, ...]:
    rows = []
    for key, value in toml.values.items():
        found = rule(key)
        if found is None:  # a torchtitan name the table does not list: left out (--lenient)
            found = Flag(REFUSE, "", "")
        shown = value if isinstance(value, str) else repr(value).lower() if isinstance(
            value, bool) else repr(value)
        if key in toml.dropped:
            rows.append(Row(key, shown, toml.line(key), "lenient", "left out (--lenient)"))
        else:
            rows.append(Row(key, shown, toml.line(key), found.kind,
                            found.key if found.kind == MAP else found.why))
    return tuple(sorted(rows, key=lambda r: r.line))


def import_torchtitan(toml: Toml, hardware: str, nodes: int | None, per_node: int | None,
                      lenient: bool = False) -> Imported:
    """The scenario mapping of the checked job config `toml` on `hardware` over `nodes` x
    `per_node` devices; InputError naming the key and line otherwise."""
    if nodes is None or per_node is None:
        missing = " and ".join(x for x, v in (("--nodes", nodes), ("--devices-per-node",
                                                                     per_node)) if v is None)
        raise InputError(toml.path, "", "the world size is not in a torchtitan job config "
                         f"(torchrun's --nnodes / --nproc-per-node); give {missing}")
    d = degrees(toml, nodes * per_node)
    dtype = _dtype(toml, lenient)
    model = model_section(toml, dtype, lenient)
    modern = not any(toml.has(k) for k in _OLD)
    pipe = pipeline_keys(toml, model["layers"], d["pipeline"], modern)
    parallel, derived = parallel_section(toml, d, model["layers"], lenient, pipe)
    training = _training(toml, d, dtype)
    _stack(toml, d["tensor"], lenient)
    scenario = {"name": f"{toml.path} (torchtitan job config)", "hardware": hardware,
                "framework": "torchtitan", "cluster": {"nodes": nodes,
                                                       "devices_per_node": per_node},
                "model": model, "training": training, "parallel": parallel}
    rows = _rows(toml) + tuple(Row(k, v, 0, "default", why) for k, v, why in derived)
    return Imported(scenario, rows, tuple(toml.notes))
