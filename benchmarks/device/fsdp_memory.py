"""Memory of a torchtitan-style FSDP2 training step on one GPU, phase by phase (issue 24 item 1).

The model is gpu_kernels.py's Llama (torchtitan's layer in eager PyTorch), wrapped as
torchtitan wraps it: `fully_shard` on every block and on the root, MixedPrecisionPolicy
(param_dtype bf16, reduce_dtype fp32), reshard_after_forward, AdamW, loss on fp32 logits,
zero_grad(set_to_none). One rank (world size 1), so what it measures is the memory a rank
holds, with no sharding arithmetic in the way: fp32 parameters and optimizer states, the bf16
parameters FSDP gathers per block, the activations each block saves, the logits.

For each case it records torch.cuda.memory_allocated() before the forward, after the forward,
after the loss, after the backward and after the optimizer step, and max_memory_allocated /
max_memory_reserved over the step (steps 2-4; the first builds the optimizer states). Two layer
counts per shape separate what one layer saves from what the embedding and head hold.

    python3 benchmarks/device/fsdp_memory.py OUT_DIR [--quick] [--device cpu]

writes OUT_DIR/fsdp_memory.json.
"""
# ruff: noqa: B023 - every closure is called before its loop variables change

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_kernels import Llama  # noqa: E402 - the same layer as the kernel measurements

ARGS = sys.argv[1:]
OUT = ARGS[0] if ARGS and not ARGS[0].startswith("--") else os.environ.get("OUT", ".")
QUICK = "--quick" in ARGS
CUDA = not ("--device" in ARGS and ARGS[ARGS.index("--device") + 1] == "cpu")
DEV = "cuda" if CUDA else "cpu"


CASES = [("tiny", 2, 256, 4, 2, 512, 1000, False, 128, 2, False),
         ("tiny-1l", 1, 256, 4, 2, 512, 1000, False, 128, 2, False)] if QUICK else [
    ("l3-8b-w-8l", 8, 4096, 32, 8, 14336, 128256, False, 8192, 1, False),
    ("l3-8b-w-4l", 4, 4096, 32, 8, 14336, 128256, False, 8192, 1, False),
    ("l3-8b-w-8l-mb2", 8, 4096, 32, 8, 14336, 128256, False, 8192, 2, False),
    ("l3-8b-w-8l-ckpt", 8, 4096, 32, 8, 14336, 128256, False, 8192, 2, True),
    ("l32-1b", 16, 2048, 32, 8, 8192, 128256, True, 4096, 2, False),
    ("l32-1b-8l", 8, 2048, 32, 8, 8192, 128256, True, 4096, 2, False),
    ("l32-3b", 28, 3072, 24, 8, 8192, 128256, True, 4096, 2, False),
]


def allocated() -> int:
    return torch.cuda.memory_allocated() if CUDA else 0


def case(name: str, layers: int, h: int, heads: int, kv: int, ffn: int, vocab: int, tied: bool,
         seq: int, mb: int, checkpoint: bool) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    if CUDA:
        torch.cuda.empty_cache()
    base = allocated()
    torch.manual_seed(0)
    with torch.device(DEV):
        model = Llama(layers, h, heads, kv, ffn, vocab, tied, seq, checkpoint)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mp_policy=mp)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    ids = torch.randint(0, vocab, (mb, seq), device=DEV)
    labels = torch.randint(0, vocab, (mb, seq), device=DEV)
    marks: dict[str, int] = {}

    def step(record: bool) -> None:
        m = {"before_forward": allocated()}
        logits = model(ids)
        m["after_forward"] = allocated()
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
        m["after_loss"] = allocated()
        del logits
        loss.backward()
        m["after_backward"] = allocated()
        opt.step()
        m["after_step"] = allocated()
        opt.zero_grad(set_to_none=True)
        if record:
            marks.update({k: v - base for k, v in m.items()})

    step(False)
    if CUDA:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        step(True)
        if CUDA:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    row = {"name": name, "layers": layers, "hidden": h, "heads": heads, "kv_heads": kv,
           "ffn": ffn, "vocab": vocab, "tied": tied, "seq": seq, "micro_batch": mb,
           "checkpoint": checkpoint, "params": params, "step_s": sorted(times)[1],
           "base_allocated_bytes": base, **{f"{k}_bytes": v for k, v in marks.items()}}
    if CUDA:
        row.update(max_allocated_bytes=torch.cuda.max_memory_allocated() - base,
                   max_reserved_bytes=torch.cuda.max_memory_reserved())
    return row


def one_case(index: int) -> None:
    """Run case `index` in this process (a fresh one: nothing of another case is alive) and
    print its row as JSON on the last line."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(29531 + index)
    dist.init_process_group("nccl" if CUDA else "gloo", rank=0, world_size=1)
    if CUDA:
        torch.cuda.set_device(0)
    c = CASES[index]
    try:
        row = case(*c)
    except Exception as e:  # noqa: BLE001 - reported as the case's row
        row = {"name": c[0], "error": f"{type(e).__name__}: {str(e)[:300]}",
               "trace": traceback.format_exc()[-1200:]}
    dist.destroy_process_group()
    print(json.dumps(row))


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    rows = []
    t0 = time.time()
    for i, c in enumerate(CASES):
        print(f"[{time.time() - t0:6.1f}s] {c[0]}", flush=True)
        argv = [sys.executable, os.path.abspath(__file__), OUT, "--case", str(i)]
        argv += ["--quick"] if QUICK else []
        argv += [] if CUDA else ["--device", "cpu"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        try:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            rows.append({"name": c[0], "error": f"rc {done.returncode}",
                         "trace": (done.stdout + done.stderr)[-1500:]})
        with open(os.path.join(OUT, "fsdp_memory.json"), "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    for r in rows:
        print({k: (round(v / 2**30, 3) if k.endswith("bytes") else v) for k, v in r.items()
               if k != "trace"}, flush=True)


if __name__ == "__main__":
    if "--case" in ARGS:
        one_case(int(ARGS[ARGS.index("--case") + 1]))
    else:
        main()
