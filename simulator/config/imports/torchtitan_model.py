"""The `model` section of a scenario from a torchtitan job config: the flavour's shape
(`[model] name` and `flavor`), as torchtitan's model registry states it.

Llama 2 and Llama 3: torchtitan/models/llama/__init__.py `llama2_configs` / `llama3_configs`
@0413364 (2024-04) and torchtitan/models/llama3/__init__.py `llama3_args` @238fa99 (2026-02;
the same 8B / 70B / 405B shapes). `ModelArgs` defaults (model.py @0413364): multiple_of 256,
no ffn_dim_multiplier, n_kv_heads = n_heads, rope_theta 10000. The FFN width is
`FeedForward`'s: int(2 x 4 dim / 3), times ffn_dim_multiplier (int), rounded up to a multiple
of multiple_of. The vocabulary is the tokenizer's: Llama 3's tiktoken 128,000 + 256 reserved
special tokens = 128,256 (datasets/tokenizer/tiktoken.py; `vocab_size: int = 128256` in
llama3/model/args.py @238fa99), Llama 2's SentencePiece 32,000. The model (model.py): an
untied output projection, RoPE, no dropout, no linear biases, attention by
F.scaled_dot_product_attention (FlashAttention-2 on these GPUs in bf16).
"""

from __future__ import annotations

from typing import Any

from simulator.config.imports.torchtitan_source import Toml
from simulator.config.yamlio import did_you_mean

__all__ = ["FLAVORS", "model_section", "ffn_width"]


def _args(dim: int, layers: int, heads: int, kv: int | None = None, mult: float | None = None,
          multiple_of: int = 256, theta: float = 10000.0, vocab: int = 32000) -> dict[str, Any]:
    return {"dim": dim, "n_layers": layers, "n_heads": heads, "n_kv_heads": kv or heads,
            "ffn_dim_multiplier": mult, "multiple_of": multiple_of, "rope_theta": theta,
            "vocab_size": vocab}



FLAVORS: dict[str, dict[str, dict[str, Any]]] = {
    "llama2": {
        "271M": _args(1024, 16, 8), "1B": _args(2048, 18, 16), "7B": _args(4096, 32, 32),
        "13B": _args(5120, 40, 40), "26B": _args(5120, 80, 40),
        "70B": _args(8192, 80, 64, 8, 1.3, 4096)},
    "llama3": {
        "8B": _args(4096, 32, 32, 8, 1.3, 1024, 500000.0, 128256),
        "70B": _args(8192, 80, 64, 8, 1.3, 4096, 500000.0, 128256),
        "405B": _args(16384, 126, 128, 8, 1.2, 4096, 500000.0, 128256)},
}

_NORMS = {"rmsnorm": "rmsnorm", "layernorm": "layernorm", "np_layernorm": "layernorm",
          "fused_rmsnorm": "rmsnorm"}


def ffn_width(args: dict[str, Any]) -> int:
    """torchtitan FeedForward's hidden width (model.py)."""
    hidden = int(2 * 4 * args["dim"] / 3)
    if args["ffn_dim_multiplier"] is not None:
        hidden = int(args["ffn_dim_multiplier"] * hidden)
    multiple = args["multiple_of"]
    return multiple * ((hidden + multiple - 1) // multiple)


def _flavor(toml: Toml) -> dict[str, Any]:
    name = toml.text("model.name", "llama3")
    if name not in FLAVORS:
        raise toml.error("model.name", f"found {name!r}; the flavours read here: "
                         f"{', '.join(FLAVORS)}{did_you_mean(name, list(FLAVORS))} (another "
                         "model: write its scenario's model section, or model.from_hf)")
    flavor = toml.text("model.flavor", "debugmodel")
    table = FLAVORS[name]
    if flavor not in table:
        same = [f for f in table if f.lower() == flavor.lower()]
        hint = f" (did you mean '{same[0]}'?)" if same else did_you_mean(flavor, list(table))
        raise toml.error("model.flavor", f"found {flavor!r}; {name}'s flavours: "
                         f"{', '.join(table)}{hint}")
    return table[flavor]


def _norm(toml: Toml, lenient: bool) -> str:
    """RMSNorm (torchtitan's default, and the only norm from 2025), or LayerNorm; the
    fused_rmsnorm Triton kernel is refused unless `--lenient` (the torchtitan profile prices
    the eager RMSNorm's passes)."""
    given = toml.text("model.norm_type", "rmsnorm", tuple(_NORMS))
    if given == "fused_rmsnorm":
        why = ("fused_rmsnorm's one Triton kernel: the torchtitan profile prices the eager "
               "RMSNorm's passes (framework_profiles/torchtitan.yaml rmsnorm_eager)")
        if not lenient:
            raise toml.error("model.norm_type", f"changes what torchtitan runs and has no "
                             f"scenario key ({why}); --lenient imports it as rmsnorm")
        toml.notes.append(f"model.norm_type fused_rmsnorm (line {toml.line('model.norm_type')})"
                          f" imported as rmsnorm: {why}")
    return _NORMS[given]


def model_section(toml: Toml, dtype: str, lenient: bool) -> dict[str, Any]:
    """The transformer of the file's flavour, its sequence length and `dtype`."""
    args = _flavor(toml)
    seq = toml.integer(toml.first("training.seq_len") or "training.seq_len", 2048, hi=10**7)
    model: dict[str, Any] = {
        "type": "transformer", "layers": args["n_layers"], "hidden_size": args["dim"],
        "num_heads": args["n_heads"], "ffn_hidden_size": ffn_width(args)}
    if args["n_kv_heads"] != args["n_heads"]:
        model["num_kv_heads"] = args["n_kv_heads"]
    model.update({"ffn_activation": "swiglu", "tie_embeddings": False, "position": "rope",
                  "norm": _norm(toml, lenient), "rope_theta": args["rope_theta"],
                  "attention": "flash", "seq_length": seq, "vocab_size": args["vocab_size"],
                  "dtype": dtype, "dropout": 0.0})
    return model
