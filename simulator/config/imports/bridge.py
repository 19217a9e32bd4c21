"""A scenario from a Megatron-Bridge (or NeMo 2) training config (issue 27): `shardsim import
bridge SOURCE` and the scenario key `from: {bridge_config: FILE}`.

A Megatron-Core GPT (`model.num_layers`, `hidden_size`, `ffn_hidden_size`,
`num_attention_heads`, `num_query_groups`, `seq_length`, `gated_linear_unit` with
`activation_func`, `normalization`, `position_embedding_type`, `rotary_base`,
`share_embeddings_and_output_weights`), its vocabulary as Bridge sets it (training/setup.py
`_validate_and_set_vocab_size`: `model.vocab_size` as given, else `tokenizer.vocab_size`
padded to `make_vocab_size_divisible_by` x TP), its parallelism (`model.*_parallel_size`,
`sequence_parallel`), recompute (`recompute_granularity`, `recompute_method`,
`recompute_num_layers`, `recompute_modules`), precision (`mixed_precision`: a recipe's name or
its fields), `train.global/micro_batch_size`, `ddp`/`optimizer.use_distributed_optimizer`
and `comm_overlap.tp_comm_overlap` on the megatron-bridge framework profile (Megatron-Bridge
25.11 on Megatron-Core 0.15; `framework` names another, as `plan --emit bridge` does for a
NeMo scenario). The world size is not in a
ConfigContainer (the launcher's): --nodes and --devices-per-node, or NeMo 2's
`trainer.num_nodes` x `trainer.devices`."""

from __future__ import annotations

from typing import Any

from simulator.config.framework.load import load_framework
from simulator.config.imports.bridge_keys import rule
from simulator.config.imports.bridge_parallel import parallel, training
from simulator.config.imports.mcore_config import degrees, read_dropout
from simulator.config.imports.megatron import Imported, Row
from simulator.config.imports.megatron_flags import MAP, REFUSE
from simulator.config.imports.mindformers_source import MfConfig
from simulator.errors import InputError

__all__ = ["import_bridge", "dtype_of"]

# Megatron-Bridge training/mixed_precision.py recipes by name -> the scenario's dtype;
# fp8 with current (tensorwise) or delayed scaling is the framework profile's fp8 recipe
RECIPES = {"bf16_mixed": "bf16", "fp16_mixed": "fp16",
           "bf16_with_fp8_current_scaling_mixed": "fp8",
           "bf16_with_fp8_delayed_scaling_mixed": "fp8",
           "fp16_with_fp8_current_scaling_mixed": "fp8",
           "fp16_with_fp8_delayed_scaling_mixed": "fp8",
           "bf16_with_mxfp8_mixed": "fp8", "fp16_with_mxfp8_mixed": "fp8",
           "bf16-mixed": "bf16", "16-mixed": "fp16"}
_FP8 = ("hybrid", "e4m3")
# fp8_recipe -> training.fp8_scaling: one scale per tensor (TE current or delayed scaling,
# the framework profile's recipe) or Blackwell's MXFP8 blocks
_FP8_RECIPES = {"tensorwise": "tensor", "delayed": "tensor", "mxfp8": "mxfp8"}
_ACT = {"silu": "swiglu", "gelu": "gelu", "squared_relu": "relu2"}


def dtype_of(cfg: MfConfig) -> str:
    """The scenario's dtype: `mixed_precision` (a recipe's name, or bf16/fp16/fp8 fields)."""
    name = cfg.get("mixed_precision")
    if name is not None:
        if name not in RECIPES:
            raise cfg.error("mixed_precision", f"found {name!r}; the recipes simulated: "
                            f"{', '.join(RECIPES)} (subchannel and nvfp4 scaling are not)")
        return RECIPES[name]
    fp8 = cfg.get("mixed_precision.fp8", cfg.get("model.fp8"))
    if fp8 is not None:
        if fp8 not in _FP8:
            raise cfg.error("mixed_precision.fp8", f"found {fp8!r}; allowed: null, "
                            f"{', '.join(_FP8)}")
        recipe = cfg.get("mixed_precision.fp8_recipe", "tensorwise")
        if recipe not in _FP8_RECIPES:
            raise cfg.error("mixed_precision.fp8_recipe", f"found {recipe!r}; the fp8 "
                            f"recipes simulated: {', '.join(_FP8_RECIPES)}")
        return "fp8"
    for key, dtype in (("bf16", "bf16"), ("fp16", "fp16")):
        for section in ("mixed_precision", "model"):
            if cfg.get(f"{section}.{key}") is True:
                return dtype
    return "fp32"


def _activation(cfg: MfConfig) -> str:
    given = cfg.get("model.activation_func._target_", cfg.get("model.activation_func"))
    name = str(given or "gelu").rsplit(".", 1)[-1]
    if name not in _ACT:
        raise cfg.error("model.activation_func", f"found {given!r}; allowed: "
                        f"{', '.join(_ACT)} (torch.nn.functional's)")
    gated = cfg.get("model.gated_linear_unit", False)
    if not isinstance(gated, bool):
        raise cfg.error("model.gated_linear_unit", f"found {gated!r}; expected True or False")
    if gated != (name == "silu"):
        raise cfg.error("model.gated_linear_unit", f"{gated} with {name}: the FFNs simulated "
                        "are SwiGLU (gated silu), GELU and squared ReLU (not gated)")
    return _ACT[name]


def _vocab(cfg: MfConfig, tp: int) -> int:
    given = cfg.integer("model.vocab_size", None)
    if given is not None:
        return given
    base = cfg.integer("tokenizer.vocab_size", None)
    if base is None:
        raise cfg.error("model.vocab_size", "missing, and no tokenizer.vocab_size: the "
                        "vocabulary is read from one of them")
    multiple = (cfg.integer("model.make_vocab_size_divisible_by", 128) or 128) * tp
    return multiple * ((base + multiple - 1) // multiple)


def _shape(cfg: MfConfig) -> dict[str, Any]:
    found = {}
    for key in ("model.num_layers", "model.hidden_size", "model.num_attention_heads"):
        value = cfg.integer(key, None)
        if value is None:
            raise cfg.error(key, "missing: the model's shape is read from it")
        found[key.split(".")[1]] = value
    hidden, heads = found["hidden_size"], found["num_attention_heads"]
    if hidden % heads:
        raise cfg.error("model.num_attention_heads", f"{heads} does not divide hidden_size "
                        f"{hidden}")
    channels = cfg.integer("model.kv_channels", None)
    if channels is not None and channels != hidden // heads:
        raise cfg.error("model.kv_channels", f"{channels} with hidden_size / heads "
                        f"{hidden // heads}: a head width other than hidden_size / heads "
                        "is not simulated")
    return {"type": "transformer", "layers": found["num_layers"], "hidden_size": hidden,
            "num_heads": heads,
            "ffn_hidden_size": cfg.integer("model.ffn_hidden_size", 4 * hidden)}


def _model(cfg: MfConfig, tp: int) -> dict[str, Any]:
    model = _shape(cfg)
    heads = model["num_heads"]
    groups = cfg.integer("model.num_query_groups", None, hi=heads)
    if groups is not None and groups != heads:
        if heads % groups:
            raise cfg.error("model.num_query_groups", f"{groups} does not divide "
                            f"num_attention_heads {heads}")
        model["num_kv_heads"] = groups
    model["ffn_activation"] = _activation(cfg)
    model["tie_embeddings"] = cfg.flag("model.share_embeddings_and_output_weights", True)
    model["position"] = {"rope": "rope", "learned_absolute": "learned"}[cfg.text(
        "model.position_embedding_type", "learned_absolute", ("learned_absolute", "rope"))]
    model["norm"] = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}[cfg.text(
        "model.normalization", "LayerNorm", ("LayerNorm", "RMSNorm"))]
    if model["position"] == "rope":
        theta = cfg.get("model.rotary_base", 10000)
        if isinstance(theta, bool) or not isinstance(theta, int | float) or theta <= 0:
            raise cfg.error("model.rotary_base", f"found {theta!r}; expected a positive number")
        model["rope_theta"] = float(theta)
    model.update(attention="auto", seq_length=cfg.integer("model.seq_length", None, hi=10**7),
                 vocab_size=_vocab(cfg, tp), dtype=dtype_of(cfg))
    if model["seq_length"] is None:
        raise cfg.error("model.seq_length", "missing: the sequence length is read from it")
    dropout = read_dropout(cfg)
    if dropout != 0.1:
        model["dropout"] = dropout
    return model


# Megatron-Bridge @00b7660b src/megatron/bridge/training/mixed_precision.py: fp8_param and
# fp8_param_gather are kept equal (MixedPrecisionConfig.__setattr__), and every fp8 recipe
# by name sets fp8_param_gather = True (the FP8 GEMMs' weights stored and gathered in FP8)
_FP8_PARAM_KEYS = ("mixed_precision.fp8_param_gather", "mixed_precision.fp8_param",
                   "model.fp8_param")


def _fp8_training(cfg: MfConfig) -> dict[str, Any]:
    """`training.fp8_params` and `fp8_scaling` of an fp8 config: its fp8_param(_gather)
    fields, else true for a recipe named, as the recipes set it; its fp8_recipe (or the
    named recipe's); nothing for other dtypes."""
    if dtype_of(cfg) != "fp8":
        return {}
    name = str(cfg.get("mixed_precision") or "")
    recipe = "mxfp8" if "mxfp8" in name else cfg.get("mixed_precision.fp8_recipe",
                                                      "tensorwise")
    return {**_fp8_params(cfg), "fp8_scaling": _FP8_RECIPES[recipe]}


def _fp8_params(cfg: MfConfig) -> dict[str, bool]:
    """`training.fp8_params` of an fp8 config (see `_fp8_training`)."""
    for key in _FP8_PARAM_KEYS:
        value = cfg.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise cfg.error(key, f"found {value!r}; expected true or false")
        return {"fp8_params": value}
    return {"fp8_params": True} if cfg.get("mixed_precision") is not None else {}


def _rows(cfg: MfConfig) -> tuple[Row, ...]:
    rows = []
    for key, value in cfg.values.items():
        found = rule(key)
        if key in cfg.dropped or found is None:
            kind, detail = "lenient", "left out (--lenient)"
        elif found.kind == REFUSE:  # parse_bridge refused it when on
            kind, detail = "ignored", f"off ({found.why})"
        else:
            kind, detail = found.kind, found.key if found.kind == MAP else found.why
        rows.append(Row(key, str(value), cfg.lines.get(key, 0), kind, detail))
    return tuple(sorted(rows, key=lambda r: r.line))


def import_bridge(cfg: MfConfig, hardware: str, nodes: int | None, per_node: int | None,
                  lenient: bool = False, framework: str = "megatron-bridge") -> Imported:
    """The scenario mapping of the checked config `cfg` on `hardware` over `nodes` x
    `per_node` devices (default: NeMo 2's trainer.num_nodes x trainer.devices), run on
    the stack `framework`; InputError naming the key and line otherwise."""
    nodes = nodes or cfg.integer("trainer.num_nodes", None)
    per_node = per_node or cfg.integer("trainer.devices", None)
    if nodes is None or per_node is None:
        raise InputError(cfg.path, "--nodes", "a Megatron-Bridge config does not hold the "
                         "world size: give --nodes and --devices-per-node (or NeMo 2's "
                         "trainer.num_nodes and trainer.devices)")
    d = degrees(cfg, nodes * per_node)
    tp_comm = load_framework(framework).overlap.tp_comm_enabled
    scenario = {"name": f"{cfg.path} (Megatron-Bridge config)", "hardware": hardware,
                "framework": framework,
                "cluster": {"nodes": nodes, "devices_per_node": per_node},
                "model": _model(cfg, d["tensor"]),
                "training": {**training(cfg, d), **_fp8_training(cfg)},
                "parallel": parallel(cfg, d, tp_comm, lenient)}
    derived = [("parallel.data", str(d["data"]), "the devices over tensor x pipeline x "
                "context parallel"),
               ("parallel.comm_fusion", "mode auto", f"the {framework} profile's gradient "
                "buckets")]
    rows = _rows(cfg) + tuple(Row(k, v, 0, "default", why) for k, v, why in derived)
    return Imported(scenario, rows, tuple(cfg.notes))
