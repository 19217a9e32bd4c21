"""Kernel, launch and memory measurements on one NVIDIA GPU, for the hardware and framework
profiles (issue 24 item 2: GEMMs by shape, memory-bound kernels, attention by sequence / head
size / mask, host launch cost per stack mode, kernels per layer, and a training step's memory
as the caching allocator sees it).

Not part of the package or the test suite: it needs PyTorch and a GPU. Run on the GPU host:

    python3 benchmarks/device/gpu_kernels.py OUT_DIR [--quick] [--device cpu]

It writes OUT_DIR/gpu_kernels.json, section by section (a section that fails records its error
and the rest still run). `--quick --device cpu` exercises every code path with tiny sizes.

Timing: each kernel is timed alone with CUDA events, the L2 cache flushed (a 256 MiB buffer
zeroed) before each repetition, median of the repetitions, after warm-up runs (the method of
triton.testing.do_bench). Host launch cost: wall time of N launches back to back with one
synchronisation at the end, over N.
"""
# ruff: noqa: B023 - every closure below is timed before its loop variables change

from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn

ARGS = sys.argv[1:]
OUT = ARGS[0] if ARGS and not ARGS[0].startswith("--") else os.environ.get("OUT", ".")
QUICK = "--quick" in ARGS
DEV = "cpu" if "--device" in ARGS and ARGS[ARGS.index("--device") + 1] == "cpu" else "cuda"
CUDA = DEV == "cuda"
T0 = time.time()
RESULTS: dict = {"sections": {}, "errors": {}}


def save() -> None:
    RESULTS["elapsed_s"] = round(time.time() - T0, 1)
    with open(os.path.join(OUT, "gpu_kernels.json"), "w") as f:
        json.dump(RESULTS, f, indent=1)


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


_FLUSH = None


def flush_l2() -> None:
    global _FLUSH
    if CUDA:
        if _FLUSH is None:
            _FLUSH = torch.empty(256 * 2**20, dtype=torch.int8, device=DEV)
        _FLUSH.zero_()


def bench_s(fn, reps: int = 10, warmup: int = 3) -> float:
    """Median seconds of one call of fn (GPU time between events, L2 flushed before each)."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        flush_l2()
        if CUDA:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def reps_for(seconds_guess: float) -> int:
    """Fewer repetitions for long kernels: about 50 ms of timed work, 5..30 repetitions."""
    return int(min(30, max(5, 0.05 / max(seconds_guess, 1e-6))))


def section(name: str):
    def wrap(fn):
        @functools.wraps(fn)
        def run():
            t = time.time()
            print(f"[{time.time() - T0:6.1f}s] {name} ...", flush=True)
            try:
                RESULTS["sections"][name] = fn()
            except Exception as e:  # noqa: BLE001 - a failing section must not lose the others
                tb = traceback.format_exc()[-1500:]
                RESULTS["errors"][name] = f"{type(e).__name__}: {e}\n{tb}"
                print(RESULTS["errors"][name], flush=True)
            print(f"[{time.time() - T0:6.1f}s] {name} done in {time.time() - t:.1f}s", flush=True)
            save()
        return run
    return wrap


@section("environment")
def environment() -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": DEV}
    if CUDA:
        p = torch.cuda.get_device_properties(0)
        env.update(name=p.name, sms=p.multi_processor_count, total_memory_bytes=p.total_memory,
                   cuda=torch.version.cuda, capability=list(torch.cuda.get_device_capability()),
                   l2_bytes=getattr(p, "L2_cache_size", None))
        free, total = torch.cuda.mem_get_info()
        env["context_used_bytes"] = total - free  # driver view right after the context exists
        try:
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem,"
                 "power.limit,clocks.sm", "--format=csv"],
                capture_output=True, text=True, timeout=20).stdout
        except Exception as e:  # noqa: BLE001
            env["nvidia_smi"] = str(e)
    return env


def gemm_shapes() -> list[tuple[str, int, int, int]]:
    """(label, m, n, k): squares, skinny and small-k shapes, and the forward, data-gradient
    and weight-gradient GEMMs of Llama-style layers at tensor-parallel degrees 1, 2 and 8."""
    if QUICK:
        return [("square", 64, 64, 64), ("qkv", 128, 96, 64)]
    out = [("square", s, s, s) for s in (256, 512, 1024, 2048, 4096, 8192, 16384)]
    out += [("small_k", 4096, 4096, k) for k in (64, 128, 256, 512, 1024)]
    out += [("skinny_m", m, 4096, 4096) for m in (16, 64, 256, 1024)]
    for h, ffn, heads, kv in ((2048, 8192, 32, 8), (4096, 14336, 32, 8), (8192, 28672, 64, 8)):
        hd = h // heads
        for t in (1, 2, 8):
            for tokens in (2048, 8192):
                qkv = (heads + 2 * kv) * hd // t
                for name, n, k in (("qkv", qkv, h), ("proj", h, h // t),
                                   ("fc1", 2 * ffn // t, h), ("fc2", h, ffn // t)):
                    out.append((f"{name}_h{h}_t{t}_fwd", tokens, n, k))
                    out.append((f"{name}_h{h}_t{t}_dgrad", tokens, k, n))
                    out.append((f"{name}_h{h}_t{t}_wgrad", k, n, tokens))
    return out


@section("gemm_bf16")
def gemm_bf16() -> list[dict]:
    rows = []
    dtype = torch.bfloat16 if CUDA else torch.float32
    for label, m, n, k in gemm_shapes():
        a = torch.randn(m, k, device=DEV, dtype=dtype)
        b = torch.randn(k, n, device=DEV, dtype=dtype)
        guess = 2 * m * n * k / 6e14
        s = bench_s(lambda: torch.mm(a, b), reps=reps_for(guess))
        rows.append({"label": label, "m": m, "n": n, "k": k, "s": s,
                     "tflops": 2 * m * n * k / s / 1e12})
    return rows


@section("gemm_fp8")
def gemm_fp8() -> list[dict]:
    if not CUDA:
        return []
    shapes = [("square", s, s, s) for s in (1024, 2048, 4096, 8192, 16384)]
    shapes += [x for x in gemm_shapes() if "_t1_" in x[0] or "_t8_" in x[0]][::2]
    rows = []
    one = torch.tensor(1.0, device=DEV)
    for label, m, n, k in shapes:
        if m % 16 or n % 16 or k % 16:
            continue
        a = torch.randn(m, k, device=DEV).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn).t()  # column-major operand
        guess = 2 * m * n * k / 1.2e15
        s = bench_s(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                             out_dtype=torch.bfloat16), reps=reps_for(guess))
        row = {"label": label, "m": m, "n": n, "k": k, "s": s, "tflops": 2 * m * n * k / s / 1e12}
        if label == "square":  # Transformer Engine's forward GEMMs accumulate fast (no split)
            s2 = bench_s(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                  out_dtype=torch.bfloat16, use_fast_accum=True),
                         reps=reps_for(guess))
            row["fast_accum_tflops"] = 2 * m * n * k / s2 / 1e12
        rows.append(row)
    return rows


@section("memory_bound")
def memory_bound() -> list[dict]:
    """Elementwise, normalisation, softmax, cross-entropy and optimizer kernels by size:
    bytes = what the kernel must read and write once."""
    rows = []
    sizes = [2**k for k in ((10, 16) if QUICK else (14, 17, 20, 22, 24, 26, 28, 30))]
    bf = torch.bfloat16 if CUDA else torch.float32
    for numel in sizes:
        x = torch.randn(numel, device=DEV, dtype=bf)
        y = torch.randn(numel, device=DEV, dtype=bf)
        cols = 4096
        x2 = x.view(-1, cols) if numel >= cols else x.view(1, -1)
        w = torch.ones(x2.shape[-1], device=DEV, dtype=bf)
        e = x.element_size()
        cases = {
            "copy": (lambda: x.clone(), 2 * numel * e, 1),
            "add": (lambda: x + y, 3 * numel * e, 1),
            "gelu": (lambda: F.gelu(x, approximate="tanh"), 2 * numel * e, 1),
            "swiglu_eager": (lambda: F.silu(x) * y, 3 * numel * e, 2),
            "rms_norm": (lambda: F.rms_norm(x2, (x2.shape[-1],), w), 2 * numel * e, None),
            "layer_norm": (lambda: F.layer_norm(x2, (x2.shape[-1],), w, w), 2 * numel * e, 1),
            "softmax": (lambda: torch.softmax(x2, -1), 2 * numel * e, 1),
        }
        for name, (fn, nbytes, kernels) in cases.items():
            s = bench_s(fn, reps=reps_for(nbytes / 3e12))
            rows.append({"op": name, "numel": numel, "bytes": nbytes, "s": s, "kernels": kernels,
                         "GBps": nbytes / s / 1e9})
    # the optimizer step: fp32 parameter, gradient, two moments (28 bytes per parameter)
    for numel in sizes[-4:]:
        p = nn.Parameter(torch.randn(numel, device=DEV))
        p.grad = torch.randn(numel, device=DEV)
        for mode in (("fused",) if CUDA else ()) + ("foreach",):
            opt = torch.optim.AdamW([p], lr=1e-4, **{mode: True})
            s = bench_s(opt.step, reps=reps_for(28 * numel / 3e12))
            rows.append({"op": f"adamw_{mode}", "numel": numel, "bytes": 28 * numel, "s": s,
                         "GBps": 28 * numel / s / 1e9})
    # cross-entropy on fp32 logits [tokens, vocab]: read logits, write log-probs (torch's
    # log_softmax + nll_loss), forward only
    for tokens in ((8,) if QUICK else (512, 2048, 8192)):
        vocab = 1000 if QUICK else 128256
        lg = torch.randn(tokens, vocab, device=DEV)
        tg = torch.randint(0, vocab, (tokens,), device=DEV)
        s = bench_s(lambda: F.cross_entropy(lg, tg), reps=10)
        rows.append({"op": "cross_entropy_fp32", "numel": tokens * vocab,
                     "bytes": 8 * tokens * vocab, "s": s, "GBps": 8 * tokens * vocab / s / 1e9})
    return rows


@section("grouped_gemm")
def grouped_gemm() -> list[dict]:
    """Expert GEMMs: torch._grouped_mm over G experts of equal token counts against the same
    work as one dense GEMM (m = all tokens)."""
    if not CUDA:
        return []
    rows = []
    for g, tokens, h, ffn in ((8, 16384, 4096, 14336), (64, 16384, 2048, 1408),
                              (128, 32768, 7168, 2048), (32, 8192, 2880, 2880)):
        per = tokens // g
        a = torch.randn(tokens, h, device=DEV, dtype=torch.bfloat16)
        w = torch.randn(g, ffn, h, device=DEV, dtype=torch.bfloat16).transpose(-2, -1)
        offs = torch.arange(per, tokens + 1, per, device=DEV, dtype=torch.int32)
        flops = 2 * tokens * h * ffn
        s = bench_s(lambda: torch._grouped_mm(a, w, offs=offs), reps=reps_for(flops / 6e14))
        wd = torch.randn(h, ffn, device=DEV, dtype=torch.bfloat16)
        sd = bench_s(lambda: a @ wd, reps=reps_for(flops / 6e14))
        rows.append({"experts": g, "tokens": tokens, "k": h, "n": ffn, "grouped_s": s,
                     "dense_s": sd, "grouped_tflops": flops / s / 1e12,
                     "dense_tflops": flops / sd / 1e12})
    return rows


@section("host_copy")
def host_copy() -> dict:
    """Pinned host <-> device copies of 1 GiB (offload traffic over PCIe)."""
    if not CUDA:
        return {}
    n = 2**30
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d = torch.empty(n, dtype=torch.uint8, device=DEV)
    up = bench_s(lambda: d.copy_(h, non_blocking=True), reps=5)
    down = bench_s(lambda: h.copy_(d, non_blocking=True), reps=5)
    return {"bytes": n, "h2d_GBps": n / up / 1e9, "d2h_GBps": n / down / 1e9}


@section("attention")
def attention() -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    if not CUDA:
        backends = {"math": SDPBackend.MATH}
    tokens = 256 if QUICK else 16384
    seqs = (64, 128) if QUICK else (512, 1024, 2048, 4096, 8192, 16384)
    configs = [(b, 128, c) for b in backends for c in (True, False)]
    configs += [("flash", 64, True)] if CUDA else []
    dt = torch.bfloat16 if CUDA else torch.float32
    for backend, d, causal in configs:
        heads = 4096 // d if not QUICK else 2
        for s in seqs:
            b = max(1, tokens // s)
            q, k, v = (torch.randn(b, heads, s, d, device=DEV, dtype=dt, requires_grad=True)
                       for _ in range(3))
            flops = 4 * b * heads * s * s * d * (0.5 if causal else 1.0)
            try:
                with sdpa_kernel(backends[backend]):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    g = torch.randn_like(out)
                    fwd = bench_s(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                  reps=reps_for(flops / 4e14))

                    def both():  # gradients returned, not accumulated into .grad
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        torch.autograd.grad(o, (q, k, v), g)
                    total = bench_s(both, reps=reps_for(3.5 * flops / 4e14))
            except Exception as e:  # noqa: BLE001 - a backend may refuse a shape
                rows.append({"backend": backend, "d": d, "causal": causal, "seq": s,
                             "error": str(e)[:200]})
                continue
            bwd = total - fwd
            rows.append({"backend": backend, "d": d, "causal": causal, "seq": s, "batch": b,
                         "heads": heads, "fwd_s": fwd, "bwd_s": bwd,
                         "fwd_tflops": flops / fwd / 1e12, "bwd_tflops": 2.5 * flops / bwd / 1e12})
    return rows


@section("launch")
def launch() -> dict:
    """Host time per launched operator (eager, back to back, one sync at the end) and GPU time
    per kernel in a CUDA graph."""
    n = 200 if QUICK else 3000
    out = {}
    x = torch.zeros(1024, device=DEV)

    def host_per_op(fn) -> float:
        for _ in range(50):
            fn()
        sync()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return (time.perf_counter() - t) / n

    out["eager_inplace_add_s"] = host_per_op(lambda: x.add_(1.0))
    xg = torch.zeros(1024, device=DEV, requires_grad=True)
    out["eager_autograd_mul_s"] = host_per_op(lambda: xg * 2.0)
    a = torch.randn(64, 64, device=DEV)
    out["eager_small_mm_s"] = host_per_op(lambda: a @ a)
    lin = nn.Linear(64, 64, device=DEV)
    xl = torch.randn(16, 64, device=DEV, requires_grad=True)
    out["eager_module_linear_s"] = host_per_op(lambda: lin(xl))
    if CUDA:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                x.add_(1.0)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(n):
                x.add_(1.0)
        g.replay()
        sync()
        t = time.perf_counter()
        for _ in range(5):
            g.replay()
        sync()
        out["cuda_graph_per_kernel_s"] = (time.perf_counter() - t) / (5 * n)
    return out


class Rope:
    """Rotary embedding tables (cos, sin) for head size d over s positions, base theta."""

    def __init__(self, s: int, d: int, theta: float):
        inv = 1.0 / theta ** (torch.arange(0, d, 2, device=DEV).float() / d)
        ang = torch.outer(torch.arange(s, device=DEV).float(), inv)
        self.cos, self.sin = ang.cos(), ang.sin()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # x: b, h, s, d
        x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
        c, s = self.cos[: x.shape[2]], self.sin[: x.shape[2]]
        return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), -1).flatten(-2).type_as(x)


class Block(nn.Module):
    """A Llama-3 decoder layer as torchtitan writes it in eager PyTorch: RMSNorm, q/k/v/o
    projections without bias, rotary positions, grouped-query SDPA, SwiGLU."""

    def __init__(self, h: int, heads: int, kv: int, ffn: int):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        self.n1, self.n2 = nn.RMSNorm(h, eps=1e-5), nn.RMSNorm(h, eps=1e-5)
        self.wq = nn.Linear(h, heads * self.hd, bias=False)
        self.wk = nn.Linear(h, kv * self.hd, bias=False)
        self.wv = nn.Linear(h, kv * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, h, bias=False)
        self.w1 = nn.Linear(h, ffn, bias=False)
        self.w3 = nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)

    def forward(self, x: torch.Tensor, rope: Rope) -> torch.Tensor:
        b, s, _ = x.shape
        y = self.n1(x)
        q = self.wq(y).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.wk(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.wv(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        q, k = rope(q), rope(k)
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, -1))
        y = self.n2(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Llama(nn.Module):
    def __init__(self, layers: int, h: int, heads: int, kv: int, ffn: int, vocab: int,
                 tied: bool, seq: int, checkpoint: bool = False):
        super().__init__()
        self.tok = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList(Block(h, heads, kv, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(h, eps=1e-5)
        self.out = nn.Linear(h, vocab, bias=False)
        if tied:
            self.out.weight = self.tok.weight
        self.rope = Rope(seq, h // heads, 500000.0)
        self.checkpoint = checkpoint

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids)
        for layer in self.layers:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(layer, x, self.rope, use_reentrant=False)
            else:
                x = layer(x, self.rope)
        return self.out(self.norm(x))


@section("layer_kernels")
def layer_kernels() -> list[dict]:
    """Kernels launched and wall time of one decoder layer's forward and backward (bf16
    weights, eager), for a large and a small layer."""
    from torch.profiler import ProfilerActivity, profile
    rows = []
    shapes = [(256, 4, 2, 512, 128, 1)] if QUICK else [
        (4096, 32, 8, 14336, 4096, 1), (2048, 32, 8, 8192, 4096, 1), (1024, 16, 8, 4096, 2048, 1)]
    dt = torch.bfloat16 if CUDA else torch.float32
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    for h, heads, kv, ffn, s, b in shapes:
        blk = Block(h, heads, kv, ffn).to(DEV, dt)
        rope = Rope(s, h // heads, 500000.0)
        x = torch.randn(b, s, h, device=DEV, dtype=dt, requires_grad=True)
        g = torch.randn(b, s, h, device=DEV, dtype=dt)

        def step():
            blk(x, rope).backward(g)
        fwd_s = bench_s(lambda: blk(x, rope), reps=10)
        total_s = bench_s(step, reps=10)
        for _ in range(2):
            step()
        sync()
        with profile(activities=acts) as pf:
            out = blk(x, rope)
            sync()
        with profile(activities=acts) as pb:
            out.backward(g)
            sync()
        kf = [e for e in pf.events() if e.device_type.name == "CUDA"] if CUDA else []
        kb = [e for e in pb.events() if e.device_type.name == "CUDA"] if CUDA else []
        kernels = kf + kb
        kernel_s = sum(e.time_range.elapsed_us() for e in kernels) / 1e6 if CUDA else 0.0
        wall = []
        for _ in range(5):
            sync()
            t = time.perf_counter()
            step()
            sync()
            wall.append(time.perf_counter() - t)
        host_f, host_b = [], []
        for _ in range(5):
            sync()
            t = time.perf_counter()
            out = blk(x, rope)
            t1 = time.perf_counter()
            out.backward(g)
            t2 = time.perf_counter()
            sync()
            host_f.append(t1 - t)
            host_b.append(t2 - t1)
        compiled = {}
        if CUDA and time.time() - T0 < 200:
            try:
                t = time.time()
                cblk = torch.compile(blk)
                cblk(x, rope).backward(g)
                compiled["compile_s"] = time.time() - t

                def cstep():
                    cblk(x, rope).backward(g)
                compiled["fwd_bwd_s"] = bench_s(cstep, reps=10)
                with profile(activities=acts) as pc:
                    cstep()
                    sync()
                compiled["kernels_fwd_bwd"] = len(
                    [e for e in pc.events() if e.device_type.name == "CUDA"])
                cw = []
                for _ in range(5):
                    sync()
                    t = time.perf_counter()
                    cstep()
                    sync()
                    cw.append(time.perf_counter() - t)
                compiled["wall_fwd_bwd_s"] = statistics.median(cw)
            except Exception as e:  # noqa: BLE001
                compiled["error"] = str(e)[:300]
        names: dict[str, int] = {}
        for e in kernels:
            names[e.name[:60]] = names.get(e.name[:60], 0) + 1
        rows.append({"h": h, "heads": heads, "kv": kv, "ffn": ffn, "seq": s, "batch": b,
                     "fwd_s": fwd_s, "fwd_bwd_s": total_s, "kernels_fwd": len(kf),
                     "kernels_bwd": len(kb),
                     "kernel_busy_s": kernel_s, "wall_fwd_bwd_s": statistics.median(wall),
                     "host_fwd_s": statistics.median(host_f),
                     "host_bwd_s": statistics.median(host_b),
                     "aten_ops_fwd": len([e for e in pf.events() if e.device_type.name == "CPU"
                                          and e.name.startswith("aten::")]),
                     "compiled": compiled,
                     "kernel_names": dict(sorted(names.items(), key=lambda kv_: -kv_[1])[:40])})
    return rows


def train_case(name: str, layers: int, h: int, heads: int, kv: int, ffn: int, vocab: int,
               tied: bool, seq: int, mb: int, checkpoint: bool) -> dict:
    """A torchtitan-style single-GPU step: fp32 parameters, bf16 autocast (torchtitan's
    maybe_enable_amp when FSDP is off), fp32 cross-entropy, fused AdamW, zero_grad(set_to_none)."""
    if CUDA:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if CUDA else 0
    torch.manual_seed(0)
    with torch.device(DEV):  # parameters created on the device (no host-side init)
        model = Llama(layers, h, heads, kv, ffn, vocab, tied, seq, checkpoint)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=CUDA, foreach=not CUDA)
    ids = torch.randint(0, vocab, (mb, seq), device=DEV)
    labels = torch.randint(0, vocab, (mb, seq), device=DEV)
    amp = torch.autocast(DEV, dtype=torch.bfloat16, enabled=CUDA)

    def step():
        with amp:
            logits = model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    after_init = torch.cuda.memory_allocated() - base if CUDA else 0
    step()
    sync()
    after_first = torch.cuda.memory_allocated() - base if CUDA else 0
    times = []
    for i in range(2 if QUICK else 7):
        if CUDA and i == 2:
            torch.cuda.reset_peak_memory_stats()
        sync()
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    row = {"name": name, "layers": layers, "hidden": h, "heads": heads, "kv_heads": kv,
           "ffn": ffn, "vocab": vocab, "tied": tied, "seq": seq, "micro_batch": mb,
           "checkpoint": checkpoint, "params": params, "step_s": statistics.median(times[1:]),
           "step_times_s": times, "allocated_after_init_bytes": after_init,
           "allocated_steady_bytes": after_first}
    if CUDA:
        free, total = torch.cuda.mem_get_info()
        row.update(max_allocated_bytes=torch.cuda.max_memory_allocated() - base,
                   max_reserved_bytes=torch.cuda.max_memory_reserved(),
                   base_allocated_bytes=base, reserved_now_bytes=torch.cuda.memory_reserved(),
                   driver_used_bytes=total - free,
                   driver_minus_reserved_bytes=total - free - torch.cuda.memory_reserved(),
                   tflops_6n=6 * params * mb * seq / row["step_s"] / 1e12)
    return row


@section("training_step")
def training_step() -> list[dict]:
    global _FLUSH
    _FLUSH = None
    if CUDA:
        torch.cuda.empty_cache()
    cases = [("tiny", 2, 256, 4, 2, 512, 1000, False, 128, 2, False)] if QUICK else [
        ("llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, True, 4096, 2, False),
        ("llama3.2-1b-mb1", 16, 2048, 32, 8, 8192, 128256, True, 4096, 1, False),
        ("llama3.2-1b-mb4", 16, 2048, 32, 8, 8192, 128256, True, 4096, 4, False),
        ("llama3.2-3b", 28, 3072, 24, 8, 8192, 128256, True, 4096, 1, False),
        ("llama3.2-3b-ckpt", 28, 3072, 24, 8, 8192, 128256, True, 4096, 2, True),
        ("llama3-8b-8layers", 8, 4096, 32, 8, 14336, 128256, False, 8192, 1, False),
    ]
    rows = []
    for case in cases:
        try:
            rows.append(train_case(*case))
        except Exception as e:  # noqa: BLE001 - out of memory in one case keeps the others
            rows.append({"name": case[0], "error": f"{type(e).__name__}: {str(e)[:300]}"})
        if CUDA:
            torch.cuda.empty_cache()
    return rows


@section("compile_launch")
def compile_launch() -> dict:
    """Host time per call of ten elementwise ops: eager (ten kernels), torch.compile (fused)
    and torch.compile with CUDA graphs (mode='reduce-overhead')."""
    if not CUDA:
        return {}
    x = torch.randn(4096, device=DEV)

    def f(t):
        for _ in range(10):
            t = t * 1.01 + 0.1
        return t
    out = {}
    n = 2000

    def per_call(fn) -> float:
        for _ in range(20):
            fn(x)
        sync()
        t = time.perf_counter()
        for _ in range(n):
            fn(x)
        sync()
        return (time.perf_counter() - t) / n
    out["eager_10ops_call_s"] = per_call(f)
    t = time.time()
    cf = torch.compile(f)
    cf(x)
    out["compile_s"] = time.time() - t
    out["compiled_call_s"] = per_call(cf)
    cg = torch.compile(f, mode="reduce-overhead")
    for _ in range(3):
        cg(x)
    out["cudagraph_call_s"] = per_call(cg)
    return out


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    skip = os.environ.get("SKIP", "").split(",")
    for fn in (environment, launch, gemm_bf16, gemm_fp8, grouped_gemm, memory_bound, host_copy,
               attention, layer_kernels, training_step, compile_launch):
        if fn.__name__ not in skip:
            fn()
    print(json.dumps({k: (v if not isinstance(v, list) else f"{len(v)} rows")
                      for k, v in RESULTS["sections"].items()}, default=str)[:4000])
    print("errors:", list(RESULTS["errors"]))
    print(f"total {time.time() - T0:.1f}s")
