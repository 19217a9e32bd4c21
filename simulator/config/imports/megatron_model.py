"""The `model` section of a scenario from Megatron-LM arguments (a GPT transformer), with
Megatron-LM's defaults where a flag is absent (megatron/training/arguments.py, core_v0.8.0:
`validate_args` and the `_add_*_args` defaults; tokenizer/tokenizer.py for the vocabulary)."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.megatron_pattern import (
    PatternError,
    as_first_dense_every,
    parse_pattern,
)
from simulator.config.imports.megatron_values import Values

__all__ = ["model_section", "vocab_size"]

# GPT-2's BPE vocabulary (gpt2-vocab.json: 50,257 tokens), the one tokenizer whose size is
# known without its file (Radford et al. 2019; Megatron-LM README "vocab of 50,257")
_GPT2_VOCAB = 50257
_BACKENDS = {"auto": "auto", "flash": "flash", "fused": "cudnn", "unfused": "standard",
             "local": "standard"}


def vocab_size(values: Values, tp: int) -> int:
    """The padded vocabulary Megatron-LM builds: the tokenizer's size (`--vocab-size`; plus
    the EOD token of the NullTokenizer; 50,257 for GPT2BPETokenizer without it) rounded up to
    a multiple of `--make-vocab-size-divisible-by` (default 128) x TP (tokenizer.py
    `_vocab_size_with_padding`)."""
    kind = values.text("--tokenizer-type")
    size = values.integer("--vocab-size")
    if size is None and kind == "GPT2BPETokenizer":
        size = _GPT2_VOCAB
    if size is None:
        raise values.error("--vocab-size", "missing; the vocabulary of a tokenizer file "
                           "cannot be read offline: give the tokenizer's size as --vocab-size "
                           "(GPT2BPETokenizer alone is known: 50,257)")
    if kind == "NullTokenizer":
        size += 1  # _NullTokenizer.vocab_size: the tokens plus its EOD
    multiple = (values.integer("--make-vocab-size-divisible-by", 128) or 128) * tp
    return -(-size // multiple) * multiple


def _dtype(values: Values, notes: list[str], lenient: bool) -> str:
    if values.has("--fp16") and values.has("--bf16"):
        raise values.error("--bf16", "given with --fp16; Megatron-LM allows one of them")
    dtype = "fp16" if values.has("--fp16") else "bf16" if values.has("--bf16") else "fp32"
    if values.has("--fp8-format"):
        values.text("--fp8-format", choices=("e4m3", "hybrid"))
        return "fp8"
    if values.has("--accumulate-allreduce-grads-in-fp32") and dtype == "fp16":
        if not lenient:
            raise values.error("--accumulate-allreduce-grads-in-fp32", "fp32 gradient "
                               "reduction of an fp16 model has no scenario key (bf16 has it "
                               "always); --lenient imports without it")
        notes.append("--accumulate-allreduce-grads-in-fp32 left out: fp16 gradients reduced")
    return dtype


def _dropout(values: Values, notes: list[str], lenient: bool) -> float:
    """One probability for the hidden states and the attention (Megatron-LM: 0.1 each)."""
    hidden = values.number("--hidden-dropout", 0.1, 0.0, 1.0)
    attn = values.number("--attention-dropout", 0.1, 0.0, 1.0)
    if (hidden == 0) != (attn == 0):
        if not lenient:
            raise values.error("--attention-dropout", f"{attn:g} with --hidden-dropout "
                               f"{hidden:g}: the scenario has one dropout probability, and "
                               "only one of them keeps masks; --lenient takes the hidden one")
        notes.append(f"dropout {hidden:g} for both (--attention-dropout {attn:g} left out)")
    elif hidden != attn:
        notes.append(f"dropout {hidden:g} for both (--attention-dropout {attn:g}: same kernels)")
    return hidden


def _layer_freq(values: Values, layers: int, notes: list[str], lenient: bool
                ) -> dict[str, int]:
    """`first_dense` and `every` of `--moe-layer-freq` (default 1: every layer;
    megatron_pattern): a pattern no first_dense / every says is refused, or with
    `--lenient` left out (every layer MoE) with a note."""
    text = values.text("--moe-layer-freq")
    if text is None:
        return {}
    try:
        found = as_first_dense_every(parse_pattern(text, layers))
    except PatternError as exc:
        raise values.error("--moe-layer-freq", f"{text!r}: {exc}") from None
    if found is None:
        why = ("its MoE layers are not the first_dense dense layers then one in every N "
               "(Megatron's integer N puts experts in layer 0, N, 2N, ...)")
        if not lenient:
            raise values.error("--moe-layer-freq", f"{text!r}: {why}: no scenario key says "
                               "it; --lenient imports every layer as MoE")
        notes.append(f"--moe-layer-freq {text} left out (every layer MoE): {why}")
        return {}
    first, every = found
    keys = {"first_dense": first} if first else {}
    if every > 1:
        keys["every"] = every
    return keys


def _moe(values: Values, layers: int, notes: list[str], lenient: bool
         ) -> dict[str, Any] | None:
    """Experts (`--num-experts`), top-k (`--moe-router-topk`, default 2), the capacity
    factor (`--moe-expert-capacity-factor`; default None: dropless, `capacity_factor:
    null`) and the MoE layers (`--moe-layer-freq`)."""
    experts = values.integer("--num-experts", lo=1, hi=100_000)
    if experts is None or experts == 1:
        return None
    top_k = values.integer("--moe-router-topk", 2, hi=experts) or 2
    capacity = values.number("--moe-expert-capacity-factor", 1.0, 1e-6, 1000.0) \
        if values.has("--moe-expert-capacity-factor") else None
    return {"experts": experts, "top_k": top_k, "capacity_factor": capacity,
            **_layer_freq(values, layers, notes, lenient)}


_POSITIONS = {"learned_absolute": "learned", "rope": "rope", "none": "none"}


def _shape_keys(values: Values, kv_channels: int) -> dict[str, Any]:
    """The head, positions and norm as Megatron-LM sets them, always stated (its defaults,
    arguments.py: a tied output layer, learned absolute positions, LayerNorm, kv_channels
    hidden / heads, rotary base 10000, differ from a swiglu scenario's by-architecture
    defaults)."""
    given = values.text("--position-embedding-type", "learned_absolute", tuple(_POSITIONS))
    position = _POSITIONS[given or "learned_absolute"]
    if values.has("--use-rotary-position-embeddings"):
        position = "rope"
    if values.has("--no-position-embedding"):
        position = "none"
    norm = values.text("--normalization", "LayerNorm", ("LayerNorm", "RMSNorm"))
    keys: dict[str, Any] = {
        "tie_embeddings": not values.has("--untie-embeddings-and-output-weights"),
        "position": position, "norm": "rmsnorm" if norm == "RMSNorm" else "layernorm"}
    head = values.integer("--kv-channels", kv_channels, lo=1)
    if head != kv_channels:
        keys["head_dim"] = head
    if values.has("--rotary-base"):
        keys["rope_theta"] = values.number("--rotary-base", 10000.0, 1.0, 1e12)
    return keys


def model_section(values: Values, tp: int, notes: list[str], lenient: bool) -> dict[str, Any]:
    """The transformer's keys (the vocabulary apart: `vocab_size`)."""
    hidden = values.need("--hidden-size")
    heads = values.need("--num-attention-heads")
    if hidden % heads:
        raise values.error("--num-attention-heads", f"{heads} does not divide --hidden-size "
                           f"{hidden} (Megatron-LM: kv_channels = hidden / heads)")
    swiglu = values.has("--swiglu")
    # arguments.py: 'int((4 * args.hidden_size * 2 / 3) / 64) * 64' with --swiglu, else 4 h
    ffn = values.integer("--ffn-hidden-size", int((4 * hidden * 2 / 3) / 64) * 64 if swiglu
                     else 4 * hidden)
    model: dict[str, Any] = {
        "type": "transformer", "layers": values.need("--num-layers"), "hidden_size": hidden,
        "num_heads": heads, "ffn_hidden_size": ffn, "seq_length": values.need("--seq-length"),
        "dtype": _dtype(values, notes, lenient)}
    if values.has("--group-query-attention"):  # --num-query-groups: default 1
        groups = values.integer("--num-query-groups", 1, hi=heads) or 1
        if heads % groups:
            raise values.error("--num-query-groups", f"{groups} does not divide "
                               f"--num-attention-heads {heads}")
        model["num_kv_heads"] = groups
    if swiglu:
        model["ffn_activation"] = "swiglu"
    elif values.has("--squared-relu"):  # squared ReLU (Nemotron-H, Nemotron-4): relu2
        model["ffn_activation"] = "relu2"
    model.update(_shape_keys(values, hidden // heads))
    model["dropout"] = _dropout(values, notes, lenient)
    if values.has("--use-flash-attn"):
        model["attention"] = "flash"
    backend = values.text("--attention-backend", None, tuple(_BACKENDS))
    if backend is not None:
        model["attention"] = _BACKENDS[backend]
    moe = _moe(values, model["layers"], notes, lenient)
    if moe:
        model["moe"] = moe
    return model
