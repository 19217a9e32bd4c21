"""A scenario from a NeMo training config (issue 27): `shardsim import nemo SOURCE` and the
scenario key `from: {nemo_yaml: FILE}`.

The YAML a NeMo-Framework-Launcher run is configured by (launcher_scripts/conf/training/
gpt3/*.yaml) or NeMo's examples/nlp/language_modeling/conf/megatron_gpt_config.yaml: a
Megatron GPT (`model.num_layers`, `hidden_size`, `ffn_hidden_size` (default 4h),
`num_attention_heads`, `num_query_groups`, `encoder_seq_length`, the vocabulary of
`model.tokenizer.type` padded to `make_vocab_size_divisible_by` x TP as Megatron pads it),
its parallelism (`tensor/pipeline/virtual_pipeline/context/expert_model_parallel_size`,
`sequence_parallel`), `activations_checkpoint_*`, `fp8`, `trainer.precision` and
`optim.name` (distributed_fused_adam: the distributed optimizer) on the nemo framework
profile. The world size is `trainer.num_nodes` x `trainer.devices` unless --nodes and
--devices-per-node say otherwise."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.mcore_config import batch_sizes, degrees, read_dropout
from simulator.config.imports.megatron import Imported, Row
from simulator.config.imports.megatron_flags import MAP
from simulator.config.imports.mindformers_source import MfConfig
from simulator.config.imports.nemo_keys import rule
from simulator.errors import InputError

__all__ = ["import_nemo", "TOKENIZERS"]

# the unpadded vocabularies of the tokenizers named by model.tokenizer.type (Megatron-LM
# megatron/training/tokenizer: GPT2BPETokenizer is GPT-2's 50257 BPE tokens)
TOKENIZERS = {"GPT2BPETokenizer": 50257}
_PRECISION = {"bf16": "bf16", "bf16-mixed": "bf16", "16": "fp16", "16-mixed": "fp16",
              "32": "fp32"}
_ACT = {"gelu": "gelu", "fast-swiglu": "swiglu", "swiglu": "swiglu", "squared-relu": "relu2"}
_DIST = ("distributed_fused_adam", "mcore_distributed_optim")
_ADAM = ("fused_adam", "adam", "adamw", *_DIST)


def _vocab(cfg: MfConfig, tp: int, lenient: bool) -> int:
    kind = cfg.get("model.tokenizer.type", "GPT2BPETokenizer")
    base = TOKENIZERS.get(kind)
    if base is None:
        if not lenient:
            raise cfg.error("model.tokenizer.type", f"found {kind!r}; the vocabularies known: "
                            f"{', '.join(TOKENIZERS)} (write model.vocab_size beside `from:` "
                            "with --lenient)")
        cfg.notes.append(f"tokenizer {kind!r}: vocabulary 32000 assumed")
        base = 32000
    multiple = (cfg.integer("model.make_vocab_size_divisible_by", 128) or 128) * tp
    return multiple * ((base + multiple - 1) // multiple)


def _model(cfg: MfConfig, tp: int, lenient: bool) -> dict[str, Any]:
    hidden = cfg.integer("model.hidden_size", None)
    heads = cfg.integer("model.num_attention_heads", None)
    layers = cfg.integer("model.num_layers", None)
    for key, value in (("model.num_layers", layers), ("model.hidden_size", hidden),
                       ("model.num_attention_heads", heads)):
        if value is None:
            raise cfg.error(key, "missing: the model's shape is read from it")
    assert hidden is not None and heads is not None
    if hidden % heads:
        raise cfg.error("model.num_attention_heads", f"{heads} does not divide hidden_size "
                        f"{hidden}")
    model: dict[str, Any] = {"type": "transformer", "layers": layers, "hidden_size": hidden,
                             "num_heads": heads,
                             "ffn_hidden_size": cfg.integer("model.ffn_hidden_size", 4 * hidden)}
    groups = cfg.integer("model.num_query_groups", None, hi=heads)
    if groups is not None and groups != heads:
        if heads % groups:
            raise cfg.error("model.num_query_groups", f"{groups} does not divide "
                            f"num_attention_heads {heads}")
        model["num_kv_heads"] = groups
    act = cfg.text("model.activation", "gelu", tuple(_ACT))
    if _ACT[act] != "gelu":
        model["ffn_activation"] = _ACT[act]
    if cfg.text("model.position_embedding_type", "learned_absolute",
                ("learned_absolute", "rope")) == "rope":
        model["position"] = "rope"
    if cfg.text("model.normalization", "layernorm", ("layernorm", "rmsnorm")) == "rmsnorm":
        model["norm"] = "rmsnorm"
    if "model.share_embeddings_and_output_weights" in cfg.values:
        model["tie_embeddings"] = cfg.flag("model.share_embeddings_and_output_weights")
    precision = str(cfg.get("trainer.precision", "bf16"))
    if precision not in _PRECISION:
        raise cfg.error("trainer.precision", f"found {precision!r}; allowed: "
                        f"{', '.join(_PRECISION)}")
    model.update({
        "attention": "auto",
        "seq_length": cfg.integer("model.encoder_seq_length", 2048, hi=10**7),
        "vocab_size": _vocab(cfg, tp, lenient),
        "dtype": "fp8" if cfg.flag("model.fp8") else _PRECISION[precision]})
    dropout = read_dropout(cfg)
    if dropout != 0.1:
        model["dropout"] = dropout
    return model


def _recompute(cfg: MfConfig, lenient: bool) -> str:
    """selective (the attention core) or full; full over fewer layers than a stage holds
    (`block` with activations_checkpoint_num_layers) is part of a stage."""
    granularity = cfg.get("model.activations_checkpoint_granularity")
    if granularity is None:
        return "none"
    if granularity not in ("selective", "full"):
        raise cfg.error("model.activations_checkpoint_granularity", f"found {granularity!r}; "
                        "allowed: null, 'selective', 'full'")
    if granularity == "full" and cfg.get("model.activations_checkpoint_method") == "block":
        n = cfg.integer("model.activations_checkpoint_num_layers", 1, lo=0)
        key = "model.activations_checkpoint_num_layers"
        if not lenient:
            raise cfg.error(key, f"{n} with method 'block': part of each stage recomputed, "
                            "not simulated (use method 'uniform'); --lenient imports it as "
                            "every layer")
        cfg.notes.append(f"{key} {n} (block) imported as every layer")
    return str(granularity)


def _parallel(cfg: MfConfig, d: dict[str, int], lenient: bool) -> dict[str, Any]:
    p: dict[str, Any] = {"data": d["data"], "tensor": d["tensor"], "pipeline": d["pipeline"]}
    for k in ("context", "expert"):
        if d[k] > 1:
            p[k] = d[k]
    vp = cfg.integer("model.virtual_pipeline_model_parallel_size", None) or 1
    p.update(schedule="interleaved_1f1b" if vp > 1 else "1f1b", virtual_stages=vp)
    p["sequence_parallel"] = cfg.flag("model.sequence_parallel") and d["tensor"] > 1
    name = cfg.get("model.optim.name", "fused_adam")
    if name not in _ADAM:
        raise cfg.error("model.optim.name", f"found {name!r}; the optimizers simulated: "
                        f"{', '.join(_ADAM)}")
    p["optimizer_shard"] = 1 if name in _DIST else 0
    p["recompute"] = _recompute(cfg, lenient)
    p["comm_fusion"] = {"mode": "auto"}
    if "model.ub_tp_comm_overlap" in cfg.values and d["tensor"] > 1:
        p["overlap"] = {"tp_comm": cfg.flag("model.ub_tp_comm_overlap")}
    return p


def _training(cfg: MfConfig, d: dict[str, int]) -> dict[str, Any]:
    gbs, micro = batch_sizes(cfg, d, "model")
    if (cfg.integer("trainer.accumulate_grad_batches", 1) or 1) != 1:
        raise cfg.error("trainer.accumulate_grad_batches", "NeMo's Megatron models accumulate "
                        "over global_batch_size / (micro_batch_size x data parallel): "
                        "allowed: 1")
    return {"global_batch_size": gbs, "micro_batch_size": micro, "optimizer": "adam"}


def _rows(cfg: MfConfig) -> tuple[Row, ...]:
    rows = []
    for key, value in cfg.values.items():
        found = rule(key)
        assert found is not None  # parse_nemo refused the rest
        kind, detail = ("lenient", "left out (--lenient)") if key in cfg.dropped else (
            found.kind, found.key if found.kind == MAP else found.why)
        rows.append(Row(key, str(value), cfg.lines.get(key, 0), kind, detail))
    return tuple(sorted(rows, key=lambda r: r.line))


def import_nemo(cfg: MfConfig, hardware: str, nodes: int | None, per_node: int | None,
                lenient: bool = False) -> Imported:
    """The scenario mapping of the checked config `cfg` on `hardware` over `nodes` x
    `per_node` devices (default: trainer.num_nodes x trainer.devices); InputError naming
    the key and line otherwise."""
    nodes = nodes or cfg.integer("trainer.num_nodes", None)
    per_node = per_node or cfg.integer("trainer.devices", None)
    if nodes is None or per_node is None:
        raise InputError(cfg.path, "trainer.num_nodes", "the world size needs trainer."
                         "num_nodes and trainer.devices, or --nodes and --devices-per-node")
    d = degrees(cfg, nodes * per_node)
    scenario = {"name": f"{cfg.path} (NeMo config)", "hardware": hardware,
                "framework": "nemo", "cluster": {"nodes": nodes, "devices_per_node": per_node},
                "model": _model(cfg, d["tensor"], lenient), "training": _training(cfg, d),
                "parallel": _parallel(cfg, d, lenient)}
    derived = [("parallel.data", str(d["data"]), "the devices over tensor x pipeline x "
                "context parallel"),
               ("parallel.comm_fusion", "mode auto", "the nemo profile's gradient buckets")]
    rows = _rows(cfg) + tuple(Row(k, v, 0, "default", why) for k, v, why in derived)
    return Imported(scenario, rows, tuple(cfg.notes))
