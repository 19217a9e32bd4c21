"""A scenario from a MindFormers run config (issue 27): `shardsim import mindformers SOURCE`
and the scenario key `from: {mindformers_yaml: FILE}`.

A Llama model (`model.model_config`, LlamaConfig: mindspore-lab/mindformers @26e0014a
mindformers/models/llama/llama_config.py; the FFN width of llama_layer.py LlamaFeedForward:
intermediate_size, else 4h times ffn_dim_multiplier + 0.01, times 2/3, up to multiple_of; no
dropout; an untied head unless tie_word_embeddings), its `parallel_config` (data, model,
pipeline, context parallel, micro_batch_num, use_seq_parallel), the `parallel` context
(enable_parallel_optimizer as optimizer_shard 3 with parallel_optimizer_threshold, in KB,
MindSpore's default 64; enable_alltoall), `recompute_config` (with
recompute_slice_activation) and `runner_config` on the
mindspore framework profile (graph mode). The world size is `--nodes` x `--devices-per-node`,
which must be data x model x pipeline x context parallel.
"""

from __future__ import annotations

from typing import Any

from simulator.config.imports.megatron import Imported, Row
from simulator.config.imports.megatron_flags import MAP
from simulator.config.imports.mindformers_keys import rule
from simulator.config.imports.mindformers_source import MfConfig
from simulator.errors import InputError

__all__ = ["import_mindformers", "ffn_width"]

_MC = "model.model_config."
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_ADAM = ("FP32StateAdamWeightDecay", "AdamW", "AdamWeightDecay", "FusedAdamWeightDecay")


def ffn_width(hidden: int, multiple_of: int, multiplier: float | None) -> int:
    """LlamaFeedForward's hidden width without intermediate_size (llama_layer.py @0e67b43f:
    4h, times ffn_dim_multiplier + 0.01, then 2/3, rounded up to multiple_of; Llama 2 70B's
    1.3 gives 28672)."""
    width = 4 * hidden
    if multiplier is not None:
        width = int((multiplier + 0.01) * width)
    width = int(2 * width / 3)
    return multiple_of * ((width + multiple_of - 1) // multiple_of)


def _shape(mf: MfConfig) -> dict[str, Any]:
    kind = mf.get(f"{_MC}type", "LlamaConfig")
    if kind != "LlamaConfig":
        raise mf.error(f"{_MC}type", f"found {kind!r}; the model read here: LlamaConfig (another "
                       "model: write its scenario's model section)")
    hidden = mf.integer(f"{_MC}hidden_size", 4096)
    heads = mf.integer(f"{_MC}num_heads", 32)
    assert hidden is not None and heads is not None
    if hidden % heads:
        raise mf.error(f"{_MC}num_heads", f"{heads} does not divide hidden_size {hidden}")
    multiplier = mf.get(f"{_MC}ffn_dim_multiplier")
    if multiplier is not None and (isinstance(multiplier, bool) or not isinstance(
            multiplier, int | float) or not 0 < multiplier <= 100):
        raise mf.error(f"{_MC}ffn_dim_multiplier", f"found {multiplier!r}; expected a "
                       "positive number")
    ffn = mf.integer(f"{_MC}intermediate_size", None) or ffn_width(
        hidden, mf.integer(f"{_MC}multiple_of", 256) or 256, multiplier)
    model: dict[str, Any] = {
        "type": "transformer", "layers": mf.integer(f"{_MC}num_layers", 32),
        "hidden_size": hidden, "num_heads": heads, "ffn_hidden_size": ffn}
    kv = mf.integer(f"{_MC}n_kv_heads", None, hi=heads)
    if kv is not None and kv != heads:
        if heads % kv:
            raise mf.error(f"{_MC}n_kv_heads", f"{kv} does not divide num_heads {heads}")
        model["num_kv_heads"] = kv
    return model


def _model(mf: MfConfig) -> dict[str, Any]:
    """The Llama transformer: its shape, dtypes, RoPE base, attention kernel."""
    model = _shape(mf)
    compute = mf.text(f"{_MC}compute_dtype", "float16", tuple(_DTYPES))
    param = mf.text(f"{_MC}param_init_type", "float16", tuple(_DTYPES))
    theta = mf.get(f"{_MC}theta", 10000.0)
    if isinstance(theta, bool) or not isinstance(theta, int | float) or theta <= 0:
        raise mf.error(f"{_MC}theta", f"found {theta!r}; expected a positive number")
    model.update({
        "ffn_activation": "swiglu", "tie_embeddings": mf.flag(f"{_MC}tie_word_embeddings"),
        "position": "rope", "norm": "rmsnorm", "rope_theta": float(theta),
        "attention": "flash" if mf.flag(f"{_MC}use_flash_attention") else "standard",
        "seq_length": mf.integer(f"{_MC}seq_length", 2048, hi=10**7),
        "vocab_size": mf.integer(f"{_MC}vocab_size", 32000), "dtype": _DTYPES[compute],
        "dropout": 0.0})
    if param != compute and {param, compute} == {"float16", "bfloat16"}:
        model["param_dtype"] = _DTYPES[param]  # 16-bit weights cast each micro-batch
    return model


def _degrees(mf: MfConfig, world: int) -> dict[str, int]:
    keys = {"data": "data_parallel", "tensor": "model_parallel", "pipeline": "pipeline_stage",
            "context": "context_parallel", "expert": "expert_parallel"}
    d = {k: mf.integer(f"parallel_config.{v}", 1) or 1 for k, v in keys.items()}
    product = d["data"] * d["tensor"] * d["pipeline"] * d["context"]
    if product != world:
        raise mf.error("parallel_config.data_parallel", f"data {d['data']} x model "
                       f"{d['tensor']} x pipeline {d['pipeline']} x context {d['context']} = "
                       f"{product}, not the {world} devices (MindFormers refuses it)")
    if d["data"] % d["expert"]:
        raise mf.error("parallel_config.expert_parallel", f"{d['expert']} does not divide "
                       f"data_parallel {d['data']}")
    return d


def _recompute(mf: MfConfig, lenient: bool) -> str:
    """full (`recompute: True`), selective (`select_recompute: True`), none; a per-stage list
    of layers (part of each stage) has no scenario key."""
    full, select = mf.get("recompute_config.recompute", False), mf.get(
        "recompute_config.select_recompute", False)
    for key, value in (("recompute_config.recompute", full),
                       ("recompute_config.select_recompute", select)):
        if isinstance(value, list):
            why = f"{value}: the layers of each stage recomputed, part of a stage"
            if not lenient:
                raise mf.error(key, f"{why}: not simulated (allowed: True or False); "
                               "--lenient imports it as every layer")
            mf.notes.append(f"{key} {value} imported as True: {why}")
        elif not isinstance(value, bool):
            raise mf.error(key, f"found {value!r}; expected True, False or a list per stage")
    return "full" if full else "selective" if select else "none"


_SLICE = "recompute_config.recompute_slice_activation"


def _slice_activation(mf: MfConfig, p: dict[str, Any]) -> bool:
    """`recompute_config.recompute_slice_activation` ("slice the cell output which would
    remain in memory", TransformerRecomputeConfig in mindformers/modules/transformer/
    transformer.py @fd4deebc) = `parallel.recompute_slice_activation` (Megatron's
    --distribute-saved-activations). MindFormers passes it to `Cell.recompute` only where
    `recompute` is True for every layer (mindformers/models/utils.py); where it changes
    nothing (no such recompute, model_parallel 1, or use_seq_parallel, whose kept output is
    already split over the tensor ranks) it is noted and left false."""
    if not mf.flag(_SLICE):
        return False
    why = None
    if mf.get("recompute_config.recompute", False) is not True:
        why = ("MindFormers applies it only with recompute_config.recompute: True (every "
               "layer recomputed)")
    elif p["tensor"] == 1:
        why = "model_parallel 1: no tensor-parallel ranks to slice the kept output over"
    elif p["sequence_parallel"]:
        why = "use_seq_parallel: the kept output is already split over the tensor ranks"
    if why is not None:
        mf.notes.append(f"{_SLICE} True imported as false: {why}")
        return False
    return True


def _parallel(mf: MfConfig, d: dict[str, int], lenient: bool) -> dict[str, Any]:
    p: dict[str, Any] = {"data": d["data"], "tensor": d["tensor"], "pipeline": d["pipeline"]}
    for k in ("context", "expert"):
        if d[k] > 1:
            p[k] = d[k]
    p["sequence_parallel"] = mf.flag("parallel_config.use_seq_parallel") and d["tensor"] > 1
    shard = mf.flag("parallel.enable_parallel_optimizer")
    p["optimizer_shard"] = 3 if shard else 0
    if shard:
        key = "parallel.parallel_optimizer_config.parallel_optimizer_threshold"
        p["optimizer_threshold_kb"] = float(mf.integer(key, 64, lo=0) or 0)
    p["recompute"] = _recompute(mf, lenient)
    if _slice_activation(mf, p):
        p["recompute_slice_activation"] = True
    p["comm_fusion"] = {"mode": "auto"}
    interleave = mf.integer(f"{_MC}pp_interleave_num", 1) or 1
    if interleave > 1:
        p.update(schedule="interleaved_1f1b", virtual_stages=interleave)
    return p


def _training(mf: MfConfig, d: dict[str, int]) -> dict[str, Any]:
    """The batch: runner_config.batch_size per device; global = it x data parallel x
    micro_batch_num with a pipeline, x gradient_accumulation_steps without."""
    micro = mf.integer("runner_config.batch_size", 1) or 1
    gas = mf.integer("runner_config.gradient_accumulation_steps", 1) or 1
    mbn = mf.integer("parallel_config.micro_batch_num", 1) or 1
    if d["pipeline"] > 1 and gas > 1:
        raise mf.error("runner_config.gradient_accumulation_steps", f"{gas} with pipeline_stage "
                       f"{d['pipeline']}: MindFormers accumulates over micro_batch_num there")
    steps = mbn if d["pipeline"] > 1 else gas
    name = mf.get("optimizer.type", "AdamW")
    if name not in _ADAM:
        raise mf.error("optimizer.type", f"found {name!r}; the optimizers simulated: "
                       f"{', '.join(_ADAM)}")
    return {"global_batch_size": micro * d["data"] * steps, "micro_batch_size": micro,
            "optimizer": "adam"}


def _stack(mf: MfConfig, world: int) -> None:
    """Graph mode, semi-auto parallel (the mindspore profile), one micro-batch interleave."""
    if mf.integer("context.mode", 0, lo=0, hi=1) != 0:
        raise mf.error("context.mode", "1 (PyNative): the mindspore profile is graph mode (0)")
    if mf.get("run_mode", "train") not in ("train", "finetune"):
        raise mf.error("run_mode", f"found {mf.get('run_mode')!r}; a training run is "
                       "simulated (allowed: 'train', 'finetune')")
    if not mf.flag("use_parallel", True) and world > 1:
        raise mf.error("use_parallel", f"False on {world} devices")
    if mf.integer("parallel.parallel_mode", 1, lo=0, hi=3) not in (0, 1):
        raise mf.error("parallel.parallel_mode", "auto or hybrid parallel searches the "
                       "strategies: allowed 0 (data) or 1 (semi-auto)")
    if (mf.integer("micro_batch_interleave_num", 1) or 1) > 1:
        raise mf.error("micro_batch_interleave_num", "two micro-batches interleaved to hide "
                       "the tensor-parallel communication have no scenario key (allowed: 1)")
    if mf.flag("context.enable_graph_kernel"):
        raise mf.error("context.enable_graph_kernel", "graph-kernel fusion is not modelled "
                       "(allowed: False)")


def _rows(mf: MfConfig) -> tuple[Row, ...]:
    rows = []
    for key, value in mf.values.items():
        found = rule(key)
        assert found is not None  # parse_mf refused the rest
        shown = str(value)
        kind, detail = ("lenient", "left out (--lenient)") if key in mf.dropped else (
            found.kind, found.key if found.kind == MAP else found.why)
        rows.append(Row(key, shown, mf.lines.get(key, 0), kind, detail))
    return tuple(sorted(rows, key=lambda r: r.line))


def import_mindformers(mf: MfConfig, hardware: str, nodes: int | None, per_node: int | None,
                       lenient: bool = False) -> Imported:
    """The scenario mapping of the checked config `mf` on `hardware` over `nodes` x
    `per_node` devices; InputError naming the key and line otherwise."""
    if nodes is None or per_node is None:
        raise InputError(mf.path, "", "the world size is not in a MindFormers config (msrun's "
                         "--worker_num); give --nodes and --devices-per-node")
    _stack(mf, nodes * per_node)
    d = _degrees(mf, nodes * per_node)
    scenario = {"name": f"{mf.path} (MindFormers config)", "hardware": hardware,
                "framework": "mindspore", "cluster": {"nodes": nodes,
                                                      "devices_per_node": per_node},
                "model": _model(mf), "training": _training(mf, d),
                "parallel": _parallel(mf, d, lenient)}
    derived = [("parallel.comm_fusion", "mode auto", "the mindspore profile's gradient fusion "
                "(gradient_aggregation_group)")]
    rows = _rows(mf) + tuple(Row(k, v, 0, "default", why) for k, v, why in derived)
    return Imported(scenario, rows, tuple(mf.notes))
