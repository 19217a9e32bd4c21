"""What one decoder layer keeps for its backward, tensor by tensor (issue 24 item 1).

A Llama layer written as torchtitan wrote it in December 2024 (pytorch/torchtitan
torchtitan/models/llama/model.py and models/norms.py at that time: an RMSNorm computed in
fp32 from x.float() and cast back before the weight, rotary embeddings as a complex multiply
of the fp32 queries and keys, repeat_kv copying the key/value heads to every query head,
SDPA on [batch, heads, seq, head_dim], the output made contiguous before wo, SwiGLU
w2(silu(w1 x) * w3 x)), in bf16 as FSDP2's MixedPrecisionPolicy(param_dtype=bf16) runs it.
A saved_tensors_hooks pack hook records every tensor autograd saves during the forward,
de-duplicated by storage; each is labelled with the module or step that saved it.
Variants: torch's nn.RMSNorm instead of the fp32 one; SDPA's cuDNN and flash backends.

    python3 benchmarks/device/saved_tensors.py OUT_DIR [--quick] [--device cpu]

writes OUT_DIR/saved_tensors.json.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

ARGS = sys.argv[1:]
OUT = ARGS[0] if ARGS and not ARGS[0].startswith("--") else os.environ.get("OUT", ".")
QUICK = "--quick" in ARGS
CUDA = not ("--device" in ARGS and ARGS[ARGS.index("--device") + 1] == "cpu")
DEV = "cuda" if CUDA else "cpu"
DT = torch.bfloat16
STAGE = ["?"]


class Fp32RMSNorm(nn.Module):
    """RMS norm computed on x.float(), cast back to x's dtype, then scaled by the weight."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x [b, s, h, d] rotated by the complex frequencies [s, d/2], computed in fp32."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs[None, :, None, :]).flatten(3).type_as(x)


class Layer(nn.Module):
    def __init__(self, h: int, heads: int, kv: int, ffn: int, torch_norm: bool):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        norm = (lambda: nn.RMSNorm(h, eps=1e-5)) if torch_norm else (lambda: Fp32RMSNorm(h))
        self.attention_norm, self.ffn_norm = norm(), norm()
        self.wq = nn.Linear(h, heads * self.hd, bias=False)
        self.wk = nn.Linear(h, kv * self.hd, bias=False)
        self.wv = nn.Linear(h, kv * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, h, bias=False)
        self.w1 = nn.Linear(h, ffn, bias=False)
        self.w3 = nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        STAGE[0] = "attention_norm"
        y = self.attention_norm(x)
        STAGE[0] = "wq/wk/wv"
        q = self.wq(y).view(b, s, self.heads, self.hd)
        k = self.wk(y).view(b, s, self.kv, self.hd)
        v = self.wv(y).view(b, s, self.kv, self.hd)
        STAGE[0] = "rotary"
        q, k = rotary(q, freqs), rotary(k, freqs)
        STAGE[0] = "repeat_kv"
        rep = self.heads // self.kv
        k = k[:, :, :, None, :].expand(b, s, self.kv, rep, self.hd).reshape(b, s, -1, self.hd)
        v = v[:, :, :, None, :].expand(b, s, self.kv, rep, self.hd).reshape(b, s, -1, self.hd)
        STAGE[0] = "sdpa"
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        STAGE[0] = "wo"
        x = x + self.wo(a.transpose(1, 2).contiguous().view(b, s, -1))
        STAGE[0] = "ffn_norm"
        y = self.ffn_norm(x)
        STAGE[0] = "w1/w3"
        g, u = self.w1(y), self.w3(y)
        STAGE[0] = "silu*mul"
        z = F.silu(g) * u
        STAGE[0] = "w2"
        return x + self.w2(z)


def measure(torch_norm: bool, backend: str, h: int, heads: int, kv: int, ffn: int, s: int) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    layer = Layer(h, heads, kv, ffn, torch_norm).to(DEV, DT)
    hd = h // heads
    inv = 1.0 / 500000.0 ** (torch.arange(0, hd, 2, device=DEV).float() / hd)
    freqs = torch.polar(torch.ones(s, hd // 2, device=DEV),
                        torch.outer(torch.arange(s, device=DEV).float(), inv))
    x = torch.randn(1, s, h, device=DEV, dtype=DT, requires_grad=True)
    seen: dict[int, dict] = {}
    skip = {x.untyped_storage().data_ptr(), freqs.untyped_storage().data_ptr()}
    skip |= {p.untyped_storage().data_ptr() for p in layer.parameters()}

    def pack(t: torch.Tensor):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = {"stage": STAGE[0], "shape": list(t.shape), "dtype": str(t.dtype),
                         "bytes": t.untyped_storage().nbytes()}
        return t

    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "math": SDPBackend.MATH}
    with sdpa_kernel(backends[backend]), torch.autograd.graph.saved_tensors_hooks(pack,
                                                                                  lambda t: t):
        out = layer(x, freqs)
    out.sum().backward()
    per_stage: dict[str, int] = {}
    for v in seen.values():
        per_stage[v["stage"]] = per_stage.get(v["stage"], 0) + v["bytes"]
    elems = s * h
    return {"norm": "torch nn.RMSNorm" if torch_norm else "fp32 RMSNorm", "backend": backend,
            "hidden": h, "heads": heads, "kv_heads": kv, "ffn": ffn, "seq": s,
            "saved_bytes": sum(v["bytes"] for v in seen.values()),
            "saved_bytes_per_token_hidden": sum(v["bytes"] for v in seen.values()) / elems,
            "per_stage_bytes_per_token_hidden": {k: v / elems for k, v in per_stage.items()},
            "tensors": list(seen.values())}


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    shape = (256, 4, 2, 512, 128) if QUICK else (4096, 32, 8, 14336, 8192)
    rows = []
    backends = ("cudnn", "flash") if CUDA else ("math",)
    for torch_norm in (False, True):
        for backend in backends:
            try:
                rows.append(measure(torch_norm, backend, *shape))
            except Exception as e:  # noqa: BLE001 - a backend may refuse
                rows.append({"norm": torch_norm, "backend": backend, "error": str(e)[:300]})
            with open(os.path.join(OUT, "saved_tensors.json"), "w") as f:
                json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    for r in rows:
        print(r.get("norm"), r.get("backend"), round(r.get("saved_bytes_per_token_hidden", 0), 3),
              {k: round(v, 3) for k, v in r.get("per_stage_bytes_per_token_hidden", {}).items()},
              r.get("error", ""), flush=True)


if __name__ == "__main__":
    main()
