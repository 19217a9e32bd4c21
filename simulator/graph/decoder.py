"""The shape of a decoder (`GptDims`), the kind of each of its layers (`LayerKind`), and the
pieces every block builder of `graph.builders` and of the block modules (`graph.mla`, ...)
shares: a linear layer with its optional bias, dropout, the fused bias-dropout-add, and the
seeds of dropout masks. A block builder takes the layer's input tensor, its name prefix
(`l3`), the model's dimensions and the layer's kind, and returns its output with the residual
added (`Block`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.graph.graph import GraphBuilder

__all__ = ["GptDims", "LayerKind", "Block", "linear", "norm", "dropout", "bias_dropout_add",
           "hash_seed"]


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer is made of: its token mixer and its FFN, each a key of a
    table of block builders (`MIXERS`, `FFNS`), so that a new block (multi-head latent
    attention, a Mamba-2 mixer, a mixture of experts with shared experts) is one builder
    registered there, and a model whose layers differ (DeepSeek-V3's first three dense
    layers, GPT-OSS's alternating sliding-window layers, Nemotron-H's Mamba, attention and
    MLP layers) is a tuple of kinds, one per layer (`GptDims.kinds`).

    mixer: 'attention' (multi-head or grouped-query), or a block registered in MIXERS;
    'none': no mixer (an FFN-only layer, Nemotron-H's '-'). window: attention over the
    last `window` tokens of each query (0: every earlier token; sliding-window attention,
    Beltagy et al. 2020). ffn: 'dense', 'moe', or a block registered in FFNS; 'none': no
    FFN (a mixer-only layer, Nemotron-H's 'M' and '*')."""

    mixer: str = "attention"
    window: int = 0
    ffn: str = "dense"

    def __str__(self) -> str:
        win = f"[{self.window}]" if self.window else ""
        return f"{self.mixer}{win}+{self.ffn}"


@dataclass(frozen=True)
class GptDims:
    """Shape of a GPT-style decoder. `bias`: GPT-2/3 style biases on every linear layer
    (Llama-style models have none); `flash`: attention as one fused kernel; `tied`: the LM
    head reuses the token embedding (Megatron-LM's default)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    seq: int
    vocab: int
    batch: int
    swiglu: bool = False
    # a non-gated FFN's activation: squared ReLU (relu2: Nemotron-H) instead of GeLU
    relu2: bool = False
    dropout: float = 0.1
    bias: bool = False
    flash: bool = False
    tied: bool = True
    # mixture of experts (0 experts: none): the FFN of every `moe_every`-th layer is
    # `experts` expert FFNs, each token routed to `top_k` of them, `capacity` slots each
    experts: int = 0
    top_k: int = 1
    capacity: int = 0
    moe_every: int = 1
    # each routed expert's FFN width (0: `ffn`), the shared experts' total width (0: none),
    # the router's score function, whether the chosen weights are renormalised (None: when
    # top_k > 1) and their scale (graph.ops.moe)
    expert_ffn: int = 0
    shared_ffn: int = 0
    score: str = "softmax"
    normalize: bool | None = None
    route_scale: float = 1.0
    # group-limited routing (DeepSeek-V3): the experts in `route_groups` groups, each
    # token's top_k chosen among its `route_top_groups` best groups (1 group: none)
    route_groups: int = 1
    route_top_groups: int = 1
    # the expert FFNs split their FFN dim on the tensor-parallel axis (Megatron-Core's expert
    # tensor parallel size = tensor); false: their expert dim (expert tensor parallel 1)
    expert_tp: bool = True
    # context parallel: attention as ring attention over `context` sequence blocks
    context: int = 1
    # a vision transformer (`patch` > 0; Dosovitskiy et al. 2021): images of `channels` x
    # `image` x `image` pixels cut into patch x patch patches (seq: the patches and the
    # class token), `vocab` classes, bidirectional attention (`causal` false)
    patch: int = 0
    image: int = 0
    channels: int = 3
    causal: bool = True
    # one LayerKind per layer (empty: attention, and an FFN that is a mixture of experts
    # every `moe_every`-th layer when `experts` > 0, else dense)
    kinds: tuple[LayerKind, ...] = ()
    # dense transformer fidelity: the size of a head (0: hidden / heads; Qwen3 and Gemma-3
    # set their own); positions 'learned' (a table added to the embedding), 'rope' (rotary,
    # on queries and keys in every layer, base `rope_base`) or 'none'; RMSNorm in place of
    # LayerNorm (`rms`); biases on the query, key and value projections alone (`qkv_bias`,
    # Qwen2); an RMSNorm of every query and key head (`qk_norm`, Qwen3, Gemma-3); the
    # attention window of every layer while `kinds` is empty (0: all earlier tokens); a
    # learned sink logit per head (`sinks`, GPT-OSS)
    head_size: int = 0
    position: str = "learned"
    rope_base: float = 10000.0
    rms: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    window: int = 0
    sinks: bool = False
    # Mamba-2 mixers (graph/mamba.py, LayerKind.mixer 'mamba'): `mamba_heads` heads of
    # `mamba_head_dim` channels in `mamba_groups` groups that share B and C of
    # `mamba_state` each, a causal convolution of `mamba_conv` taps, SSD chunks of
    # `mamba_chunk` tokens (Nemotron-H-8B: 128, 64, 8, 128, 4, 128)
    mamba_heads: int = 0
    mamba_head_dim: int = 64
    mamba_groups: int = 1
    mamba_state: int = 128
    mamba_conv: int = 4
    mamba_chunk: int = 128
    # multi-head latent attention (DeepSeek-V2 Sec. 2.1; the 'mla' mixer, graph.mla): a
    # query latent of q_lora_rank (0: a plain query projection, as DeepSeek-V2-Lite), a
    # key/value latent of kv_lora_rank (0: no MLA), per-head query/key dims without and
    # with rotary position, and the value head dim
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # multi-token prediction (DeepSeek-V3 Sec. 2.2; graph.mtp): `mtp_depth` sequential
    # modules after the last layer, their mean cross-entropy added times `mtp_weight`
    mtp_depth: int = 0
    mtp_weight: float = 0.0

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    def is_moe(self, layer: int) -> bool:
        """Whether layer `layer` (from 0) has experts: every `moe_every`-th layer, the last of
        each block (GShard's every other layer: 1, 3, 5, ...; Megatron-LM --moe-layer-freq)."""
        return self.experts > 0 and (layer + 1) % self.moe_every == 0

    def kind(self, layer: int) -> LayerKind:
        """The kind of layer `layer` (from 0)."""
        if self.kinds:
            return self.kinds[layer]
        return LayerKind(mixer="mla" if self.kv_lora_rank else "attention",
                         window=self.window, ffn="moe" if self.is_moe(layer) else "dense")


def linear(g: GraphBuilder, x: str, w: str, name: str, eq: str, d: GptDims, kernel: str,
           bias_shape: list[int], bias: bool | None = None) -> str:
    """x @ w (+ bias, GPT-style; `bias` true or false in place of the model's `d.bias`) as
    one kernel: the bias add is the GEMM's epilogue."""
    y = g.op("Einsum", [x, w], name + "_mm", equation=eq, kernel=kernel)
    if not (d.bias if bias is None else bias):
        return y
    b = g.tensor(f"{name}.bias", bias_shape, "parameter")
    return g.op("Add", [y, b], name, kernel=kernel)


def norm(g: GraphBuilder, x: str, name: str, d: GptDims, kernel: str, width: int = 0) -> str:
    """The model's norm over the last dim (`width`, default hidden): LayerNorm with gain
    `{name}.g` and shift `{name}.b`, or with `d.rms` RMSNorm with its gain alone."""
    gain = g.tensor(f"{name}.g", [width or d.hidden], "parameter")
    if d.rms:
        return g.op("RMSNorm", [x, gain], name, kernel=kernel)
    shift = g.tensor(f"{name}.b", [width or d.hidden], "parameter")
    return g.op("LayerNorm", [x, gain, shift], name, kernel=kernel)


def dropout(g: GraphBuilder, x: str, name: str, d: GptDims, seed: int, kernel: str) -> str:
    """Dropout of probability `d.dropout`; none at 0 (torch's dropout returns its input
    when p == 0: no kernel, no saved mask)."""
    if d.dropout == 0.0:
        return x
    return g.op("Dropout", [x], name, p=d.dropout, seed=seed, kernel=kernel)


def bias_dropout_add(g: GraphBuilder, y: str, x: str, p: str, role: str, d: GptDims,
                     k: int) -> str:
    """Megatron's fused bias-dropout-add after a row-parallel GEMM: one kernel."""
    kernel = f"dropout_residual{k}"
    if d.bias:
        y = g.op("Add", [y, g.tensor(f"{p}.{role}.bias", [d.hidden], "parameter")],
                 f"{p}.{role}_bias", kernel=kernel)
    y = dropout(g, y, f"{p}.{role}_drop", d, hash_seed(p, 1 + k), kernel)
    return g.op("Add", [x, y], f"{p}.res{k}", kernel=kernel)


def hash_seed(prefix: str, k: int) -> int:
    """A seed that depends only on the op's name (deterministic across runs and ranks)."""
    return (sum(ord(c) * (i + 1) for i, c in enumerate(prefix)) * 31 + k) % (2**31)


Block = Callable[[GraphBuilder, str, str, GptDims, LayerKind], str]
