"""A scenario from a DeepSpeed config (`ds_config.json`) and a model description (issue 27):
`shardsim import deepspeed SOURCE --model HF_CONFIG --seq-length N` and the scenario key
`from: {deepspeed_config: FILE}` beside a `model` section.

DeepSpeed's engine is data parallel over the world (ZeRO shards over all of it): the world
size is `--nodes` x `--devices-per-node`. What each key becomes is `deepspeed_keys.KEYS`;
absent keys take DeepSpeed's defaults (deepspeed/runtime/config.py, zero/config.py @edaa722:
ZeRO stage 0, overlap_comm on only for stage 3, reduce_bucket_size 5e8 elements: the
deepspeed-zero framework profile's rule). Keys the Hugging Face Trainer fills ("auto") take
`--micro-batch-size`, `--gradient-accumulation-steps` and `--dtype`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.imports.deepspeed_keys import rule
from simulator.config.imports.deepspeed_source import DsConfig
from simulator.config.imports.megatron import Imported, Row
from simulator.config.imports.megatron_flags import MAP
from simulator.errors import InputError

__all__ = ["Fills", "import_deepspeed"]

_ADAM = ("adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam", "onebitadam")
_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


@dataclass(frozen=True)
class Fills:
    """What the Trainer fills where the file says "auto" (or leaves a key out): the
    micro-batch, the accumulation steps, the dtype; and the model (a `model` section: a
    Hugging Face config name or path, and the sequence length) and recompute."""

    micro_batch_size: int | None = None
    grad_accum: int | None = None
    dtype: str | None = None
    model: str | None = None
    seq_length: int | None = None
    recompute: str = "none"


def _dtype(ds: DsConfig, fills: Fills) -> str:
    """bf16 or fp16 as enabled (both: DeepSpeed refuses it), else fp32; "auto" from --dtype."""
    fp16 = ds.flag("fp16.enabled")
    bf16 = ds.flag("bf16.enabled" if "bf16.enabled" in ds.values else "bfloat16.enabled")
    if fp16 and bf16:
        raise ds.error("bf16.enabled", "true with fp16.enabled true; DeepSpeed allows one "
                       "(runtime/config.py 'bfloat16 and fp16 modes cannot be simultaneously "
                       "enabled')")
    if fp16 is None or bf16 is None:
        if fills.dtype is None:
            raise ds.error("fp16.enabled" if fp16 is None else "bf16.enabled", "\"auto\": the "
                           "Hugging Face Trainer fills it from its --bf16 / --fp16; give "
                           "--dtype")
        return fills.dtype
    return "fp16" if fp16 else "bf16" if bf16 else "fp32"


def _batch(ds: DsConfig, dp: int, fills: Fills) -> tuple[int, int]:
    """(global batch, micro-batch) as DeepSpeed derives them from any two of
    train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps
    (runtime/config.py `_set_batch_related_parameters`, `_batch_assertion`)."""
    train = ds.integer("train_batch_size")
    micro = ds.integer("train_micro_batch_size_per_gpu") or fills.micro_batch_size
    gas = ds.integer("gradient_accumulation_steps") or fills.grad_accum
    if micro is None and train is None:
        raise ds.error("train_micro_batch_size_per_gpu", "missing (or \"auto\") with "
                       "train_batch_size: DeepSpeed needs one of them; give "
                       "--micro-batch-size")
    if micro is None:
        assert train is not None
        gas = gas or 1
        if train % (gas * dp):
            raise ds.error("train_batch_size", f"{train} is not divisible by gradient "
                           f"accumulation {gas} x {dp} GPUs")
        micro = train // (gas * dp)
    gas = gas or (train // (micro * dp) if train else 1)
    if train is not None and train != micro * gas * dp:
        raise ds.error("train_batch_size", f"{train} is not micro-batch {micro} x gradient "
                       f"accumulation {gas} x {dp} GPUs = {micro * gas * dp} (DeepSpeed "
                       "refuses it)")
    return micro * gas * dp, micro


def _offload(ds: DsConfig, stage: int) -> dict[str, bool | str]:
    """parallel.offload from offload_optimizer / offload_param: 'cpu' is host memory (true),
    'nvme' for the optimizer is ZeRO-Infinity's NVMe tier (optimizer_states: nvme), which
    DeepSpeed runs only under ZeRO-3 (its stage3 optimizer owns the swapper)."""
    out: dict[str, bool | str] = {}
    for key, what, legacy in (("offload_optimizer", "optimizer_states", "cpu_offload"),
                              ("offload_param", "parameters", "cpu_offload_param")):
        full = f"zero_optimization.{key}.device"
        device = ds.get(full, "cpu" if ds.get(f"zero_optimization.{legacy}") else "none")
        if device not in ("none", "cpu", "nvme", None):
            raise ds.error(full, f"found {device!r}; allowed: 'none', 'cpu', 'nvme'")
        if device == "nvme" and what == "parameters":
            raise ds.error(full, "'nvme': parameters on NVMe have no scenario key yet "
                           "(allowed here: 'none', 'cpu'; the optimizer's states may go to "
                           "'nvme')")
        if device == "nvme" and stage != 3:
            raise ds.error(full, f"'nvme' with ZeRO stage {stage}: DeepSpeed swaps optimizer "
                           "states to NVMe only with stage 3")
        if device == "nvme":  # DeepSpeed's pipelined swap (offload_config.py), where asked
            out[what] = "nvme"
            for k in ("read", "write"):
                if ds.flag(f"zero_optimization.{key}.pipeline_{k}"):
                    out[f"nvme_pipeline_{k}"] = True
        if device == "cpu" and what == "parameters" and stage != 3:
            raise ds.error(full, f"'cpu' with ZeRO stage {stage}: DeepSpeed offloads "
                           "parameters only with stage 3")
        if device == "cpu":
            out[what] = True
    return out


def _parallel(ds: DsConfig, dp: int, dtype: str, fills: Fills) -> dict[str, Any]:
    stage = ds.integer("zero_optimization.stage", lo=0, hi=3) or 0
    overlap = ds.flag("zero_optimization.overlap_comm", stage == 3)
    p: dict[str, Any] = {"data": dp, "tensor": 1, "pipeline": 1, "optimizer_shard": stage,
                         "recompute": fills.recompute,
                         "overlap": {"grad_reduce": stage == 3 if overlap is None else overlap}}
    comm = ds.get("communication_data_type")
    if comm is not None and comm != dtype:
        raise ds.error("communication_data_type", f"{comm!r} with {dtype} training: gradients "
                       f"reduced in another dtype than {dtype} have no scenario key")
    elems = ds.integer("zero_optimization.reduce_bucket_size", lo=1)
    if elems is not None and stage == 3:
        ds.notes.append(f"zero_optimization.reduce_bucket_size {elems:,} with ZeRO-3: "
                        "simulated as one reduce-scatter a layer (the scenario's ZeRO-3 unit)")
        elems = None
    p["comm_fusion"] = {"mode": "auto"} if elems is None else {
        "mode": "size", "bucket_mb": elems * _BYTES[dtype] / 1e6}
    offload = _offload(ds, stage)
    if offload:
        p["offload"] = offload
    return p


def _optimizer(ds: DsConfig) -> str:
    name = ds.get("optimizer.type", "Adam")
    if not isinstance(name, str) or name.lower() not in _ADAM:
        raise ds.error("optimizer.type", f"found {name!r}; the optimizers simulated: Adam, "
                       "AdamW (and their fused / CPU forms)")
    return "adam"


def _rows(ds: DsConfig) -> tuple[Row, ...]:
    rows = []
    for key, value in ds.values.items():
        found = rule(key)
        assert found is not None  # parse_ds refused the rest
        shown = json_text(value)
        if key in ds.dropped:
            rows.append(Row(key, shown, ds.lines.get(key, 0), "lenient", "left out (--lenient)"))
        else:
            rows.append(Row(key, shown, ds.lines.get(key, 0), found.kind,
                            found.key if found.kind == MAP else found.why))
    return tuple(sorted(rows, key=lambda r: r.line))


def json_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value).lower() if isinstance(
        value, bool) else repr(value)


def import_deepspeed(ds: DsConfig, hardware: str, nodes: int | None, per_node: int | None,
                     fills: Fills) -> Imported:
    """The scenario mapping of the checked config `ds` on `hardware` over `nodes` x
    `per_node` devices, with the model and Trainer values of `fills`."""
    if nodes is None or per_node is None:
        raise InputError(ds.path, "", "the world size is not in a DeepSpeed config; give "
                         "--nodes and --devices-per-node (in a scenario: cluster)")
    dp = nodes * per_node
    dtype = _dtype(ds, fills)
    glob, micro = _batch(ds, dp, fills)
    scenario: dict[str, Any] = {
        "name": f"{ds.path} (DeepSpeed config)", "hardware": hardware,
        "framework": "deepspeed-zero", "cluster": {"nodes": nodes, "devices_per_node": per_node},
        "training": {"global_batch_size": glob, "micro_batch_size": micro,
                     "optimizer": _optimizer(ds)},
        "parallel": _parallel(ds, dp, dtype, fills)}
    scenario["model"] = {"dtype": dtype} if fills.model is None else {
        "from_hf": fills.model, "seq_length": fills.seq_length, "dtype": dtype}
    derived = [("parallel.data", str(dp), "DeepSpeed's data parallel: the world size")]
    if "zero_optimization.reduce_bucket_size" not in ds.values or ds.get(
            "zero_optimization.reduce_bucket_size") == "auto":
        derived.append(("parallel.comm_fusion", "mode auto", "reduce_bucket_size absent or "
                        "auto: the deepspeed-zero profile's 5e8 elements"))
    rows = _rows(ds) + tuple(Row(k, v, 0, "default", why) for k, v, why in derived)
    return Imported(scenario, rows, tuple(ds.notes))
