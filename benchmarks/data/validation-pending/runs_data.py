# ruff: noqa: E501  (data records and citations are kept one per line)
"""The published runs behind benchmarks/data/validation-pending/ (read by make_cases.py).

One dict per run. Every figure is copied from the source named in `source`/`source_detail`;
nothing is fitted. Builders below fill the fields one framework's table shares.
"""

from __future__ import annotations

RUNS: list[dict] = []

# --------------------------------------------------------------------------------------------
# MosaicML llm-foundry: scripts/train/benchmarking/README.md (MPT models, PyTorch FSDP via
# Composer). Shapes: scripts/train/yamls/pretrain/mpt-*.yaml (d_model, n_heads, n_layers,
# expansion_ratio 4, vocab 50368); the table's NumParams column matches 12*l*h^2 + V*h + s*h.
# --------------------------------------------------------------------------------------------
LLMF_SRC = ("mosaicml/llm-foundry scripts/train/benchmarking/README.md "
            "@061f2c7ce64e655100286584a7629e2a09f827ba")
MPT = {"760m": (1536, 12, 24), "1b": (2048, 16, 24), "3b": (2560, 20, 32),
       "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48),
       "70b": (8192, 64, 80)}
LLMF_TABLES = {
    "h100-bf16": ("H100 80GB BF16", "H100 80GB SXM", "h100-sxm"),
    "h100-fp8": ("H100 80GB FP8", "H100 80GB SXM", "h100-sxm"),
    "a100-80": ("A100 80GB with 1600 Gbps node-node interconnect (RoCE)", "A100 80GB",
                "a100-80gb"),
    "a100-40": ("A100 40GB with 1600 Gbps node-node interconnect (RoCE)", "A100 40GB",
                "a100-40gb"),
}


def llmf(table, model, seq, gpus, mfu, mbs, ga, gbs, tps, gbs_tok, prec, mp, ac, nparams):
    title, gpu_type, hw = LLMF_TABLES[table]
    h, a, l = MPT[model]
    fp8 = prec == "amp_fp8"
    tag = table.replace("-", "")
    needs = ["framework profile llm-foundry (FSDP FULL_SHARD, one wrap unit per MPT block, "
             "limit_all_gathers, forward/backward prefetch)",
             "learned position embedding s*h (tiny)"]
    if fp8:
        needs.insert(0, "fp8 per-GEMM precision with TE delayed-scaling costs (amp_fp8 = "
                        "Transformer Engine fp8 on the linear layers; attention, softmax, "
                        "norms and the LM head stay bf16)")
    reduce = ("fp32 (Composer MixedPrecision DEFAULT: param bf16, reduce fp32, buffer fp32)"
              if mp == "DEFAULT" else "bf16 (Composer MixedPrecision PURE: param, reduce and "
                                      "buffer all bf16)")
    RUNS.append({
        "id": f"llmf-{tag}-mpt-{model}-s{seq}-{gpus}g", "framework": "llm-foundry",
        "source": "MosaicML llm-foundry MPT training benchmarks",
        "source_detail": [LLMF_SRC, f"table '{title}', row {model} seq {seq} x {gpus} GPUs"],
        "table": title, "model_name": f"MPT-{model}", "params_billion": round(nparams / 1e9, 3),
        "num_layers": l, "hidden_size": h, "num_heads": a, "ffn_hidden_size": 4 * h,
        "seq_len": seq, "vocab_size": 50368, "global_batch_size": gbs,
        "micro_batch_size": mbs, "num_gpus": gpus, "gpu_type": gpu_type, "hardware": hw,
        "dtype": "fp8" if fp8 else "bf16", "dtype_csv": prec,
        "fsdp_or_zero": "FSDP FULL_SHARD", "zero_csv": 3,
        "recompute_csv": "full" if ac else "none",
        "measured_metric": "tokens_per_s_total", "measured_value": tps,
        "global_batch_tokens": gbs_tok, "metric_kind": "tokens_per_s_total",
        "body": {"data": gpus, "optimizer_shard": 3, "attention": "flash",
                 "recompute": "full" if ac else "none"},
        "needs": needs,
        "settings": [f"gradient reduction dtype {reduce}",
                     f"table MFU {mfu}% (llm-foundry 6N + attention count)",
                     f"grad accumulation {ga} (table column GradAccum)",
                     "activation checkpointing = whole MPT block (Composer "
                     "activation_checkpointing: true)" if ac else "no activation checkpointing",
                     "attention: FlashAttention (README: 'our models use Flash Attention')"],
        "notes": [f"MFU={mfu}", f"precision={prec}", f"mp_mode={mp}",
                  f"NumParams={nparams}"],
        "assumptions": ["the table states GlobalBatchSize = MicroBatchSize x GradAccum x GPUs;"
                        " the iteration time uses its GlobalBatchSize (T) column and "
                        "Throughput (T/s)",
                        "MPT-30B shape (7168, 56 heads, 48 layers) from mpt-30b.yaml; the "
                        "NumParams column agrees to 0.1%"],
    })
    assert gbs == mbs * ga * gpus, (model, seq, gpus)


# H100 80GB BF16 (Throughput (T/s) column; GlobalBatchSize (T) column)
llmf("h100-bf16", "70b", 2048, 64, 42.57, 8, 4, 2048, 66523, 4194304, "amp_bf16", "DEFAULT", True, 64862437376)
llmf("h100-bf16", "30b", 2048, 32, 43.92, 14, 3, 1344, 73860, 2752512, "amp_bf16", "DEFAULT", True, 29975214080)
llmf("h100-bf16", "13b", 2048, 64, 39.86, 2, 1, 128, 307209, 262144, "amp_bf16", "DEFAULT", False, 12853954560)
llmf("h100-bf16", "13b", 2048, 8, 39.79, 2, 1, 16, 38336, 32768, "amp_bf16", "DEFAULT", False, 12853954560)
llmf("h100-bf16", "7b", 2048, 8, 46.44, 6, 1, 48, 85144, 98304, "amp_bf16", "DEFAULT", False, 6658859008)
llmf("h100-bf16", "7b", 8192, 8, 37.14, 8, 2, 128, 55481, 1048576, "amp_bf16", "DEFAULT", True, 6684024832)
llmf("h100-bf16", "3b", 2048, 64, 40.8, 6, 3, 1152, 1441663, 2359296, "amp_bf16", "DEFAULT", False, 2651837440)
llmf("h100-bf16", "1b", 2048, 64, 40.85, 20, 1, 1280, 2841754, 2621440, "amp_bf16", "DEFAULT", False, 1315950592)
llmf("h100-bf16", "760m", 2048, 32, 37.57, 24, 1, 768, 2175091, 1572864, "amp_bf16", "DEFAULT", False, 760470528)
# H100 80GB FP8
llmf("h100-fp8", "3b", 2048, 8, 27.7, 10, 6, 480, 244692, 983040, "amp_fp8", "DEFAULT", False, 2651837440)
llmf("h100-fp8", "3b", 8192, 8, 23.28, 3, 6, 144, 153174, 1179648, "amp_fp8", "DEFAULT", False, 2667566080)
# A100 80GB
llmf("a100-80", "70b", 2048, 64, 53.33, 8, 4, 2048, 26274, 4194304, "bf16", "PURE", True, 64862437376)
llmf("a100-80", "30b", 2048, 8, 55.3, 3, 21, 504, 7330, 1032192, "amp_bf16", "DEFAULT", True, 29975214080)
llmf("a100-80", "13b", 2048, 8, 59.57, 2, 3, 48, 18097, 98304, "amp_bf16", "DEFAULT", False, 12853954560)
llmf("a100-80", "7b", 2048, 8, 64.23, 6, 2, 96, 37130, 196608, "amp_bf16", "DEFAULT", False, 6658859008)
llmf("a100-80", "1b", 2048, 8, 59.86, 14, 4, 448, 164109, 917504, "amp_bf16", "DEFAULT", False, 1315950592)
# A100 40GB
llmf("a100-40", "70b", 2048, 128, 48.91, 4, 1, 512, 48194, 1048576, "bf16", "PURE", True, 64862437376)
llmf("a100-40", "30b", 2048, 128, 52.25, 6, 1, 768, 110803, 1572864, "bf16", "PURE", True, 29975214080)
llmf("a100-40", "13b", 2048, 128, 51.93, 16, 1, 2048, 252444, 4194304, "bf16", "PURE", True, 12853954560)
llmf("a100-40", "7b", 2048, 128, 50.14, 18, 1, 2304, 463749, 4718592, "bf16", "PURE", True, 6658859008)
llmf("a100-40", "3b", 2048, 128, 54.8, 6, 1, 768, 1220885, 1572864, "bf16", "PURE", False, 2651837440)

# --------------------------------------------------------------------------------------------
# torchtitan (PyTorch FSDP2 / DTensor TP / torch.distributed.pipelining)
# --------------------------------------------------------------------------------------------
TT_H100 = ("pytorch/torchtitan docs/performance.md (Dec 2024 version; torch 1963fc8, torchao "
           "eab345c, torchtitan 9dec370; later moved to benchmarks/llama3_h100_202412_torchtitan.md)")
TT_PAPER = "also Liang et al. 2024, TorchTitan (arXiv:2410.06511), Sec. 4 tables"
TT_A100 = ("pytorch/torchtitan docs/performance.md @041336434916bdc0f88c1f89fda176fd3c2092e4 "
           "(2024, 64 A100 80GB)")
LLAMA = {  # layers, hidden, heads, kv heads, ffn, vocab
    "llama3.1-8b": (32, 4096, 32, 8, 14336, 128256, 8.03),
    "llama3.1-70b": (80, 8192, 64, 8, 28672, 128256, 70.6),
    "llama3.1-405b": (126, 16384, 128, 8, 53248, 128256, 405.9),
    "llama2-7b": (32, 4096, 32, 32, 11008, 32000, 6.74),
    "llama2-13b": (40, 5120, 40, 40, 13824, 32000, 13.0),
    "llama2-70b": (80, 8192, 64, 8, 28672, 32000, 69.0),
}
TT_HW_NEED = ("hardware variant: H100 SXM with 96 GB HBM2e at 2.4 TB/s and a 500 W power "
              "limit (Grand Teton; the docs say peak TFLOP/s lies between SXM and NVL); the "
              "body uses h100-sxm (80 GB HBM3, 3.35 TB/s, 700 W)")


def llama_fields(model):
    l, h, a, g, f, v, pb = LLAMA[model]
    return {"num_layers": l, "hidden_size": h, "num_heads": a, "num_kv_heads": g,
            "ffn_hidden_size": f, "vocab_size": v, "params_billion": pb,
            "ffn_activation": "swiglu"}


def tt(rid, table, model, gpus, fsdp, tp, pp, lbs, seq, ac, tech, tps, mem, *, cp=1,
       schedule="1f1b", detail=None, extra_needs=(), extra_assume=(), a100=False):
    fp8 = "Float8" in tech
    compile_ = "compile" in tech
    async_tp = "AsyncTP" in tech
    gbs = lbs * fsdp
    flds = llama_fields(model)
    needs = ["framework profile torchtitan (FSDP2 fully_shard per TransformerBlock, "
             "reshard_after_forward, implicit prefetch of the next block; reduce_dtype fp32)"]
    if not a100:
        needs.append(TT_HW_NEED)
    if fp8:
        needs.append("fp8 per-GEMM precision: torchao Float8Linear, tensorwise dynamic "
                     "scaling on every nn.Linear except the output head (filter_fqns "
                     "'output'); attention and norms bf16")
    if compile_:
        needs.append("torch.compile fusion of elementwise/norm kernels (per-block compile)")
    if cp > 1:
        needs.append(f"context parallel {cp} (ring attention over the CP group)")
    needs += list(extra_needs)
    approx, assume = [], list(extra_assume)
    body = {"data": fsdp * cp, "tensor": tp, "pipeline": pp, "optimizer_shard": 3,
            "attention": "flash", "recompute": "selective" if ac == "selective" else ac,
            "sequence_parallel": tp > 1}
    if async_tp:
        body["parallel_extra"] = ["overlap: {tp_comm: true}"]
    elif tp > 1:
        body["parallel_extra"] = ["overlap: {tp_comm: false}"]
    if cp > 1:
        approx.append(f"data = FSDP {fsdp} x CP {cp} (context parallel folded into data "
                      f"parallel; exact: data {fsdp}, context_parallel {cp}, each rank holding "
                      f"seq {seq}/{cp})")
        body["global_batch_size"] = gbs * cp
        body["micro_batch_size"] = 1
        body["seq_length"] = seq // cp
        approx.append(f"the body gives each rank a {seq // cp}-token sequence and "
                      f"global_batch_size {gbs * cp} so the tokens per step ({gbs * seq}) are "
                      "kept; attention FLOPs are then undercounted (each query sees only "
                      f"{seq // cp} keys) until context parallel exists")
    if pp > 1:
        mb = max(lbs // pp, 1)
        body["micro_batch_size"] = mb
        body["schedule"] = schedule
        if schedule == "interleaved_1f1b":
            body["virtual_stages"] = 2
        per = flds["num_layers"] / (pp * body.get("virtual_stages", 1))
        if per != int(per):
            lay = pp * body.get("virtual_stages", 1) * round(per)
            body["layers"] = lay
            approx.append(f"layers {lay} (nearest multiple of the {pp * body.get('virtual_stages', 1)} "
                          f"stage chunks; exact: {flds['num_layers']} layers split unevenly)")
            needs.append(f"uneven pipeline stages ({flds['num_layers']} layers on "
                         f"{pp * body.get('virtual_stages', 1)} stage chunks; torchtitan "
                         "generate_split_points: base_interval = layers // stages, the "
                         "remaining layers spread over the stages)")
        assume.append(f"pipeline micro-batches: not stated in the table; torchtitan's default "
                      f"(pipelining build_pipeline_schedule: 'if n_microbatches is None: "
                      f"n_microbatches = job_config.experimental.pipeline_parallel_degree') gives "
                      f"{pp} micro-batches, so micro-batch size = local batch {lbs} / {pp} = {mb}")
        if schedule == "interleaved_1f1b":
            assume.append("interleaved 1F1B: 2 model chunks per rank, torchtitan's default "
                          "(pipelining generate_split_points: 'num_stages_per_rank = 2' for "
                          "PipelineScheduleMulti when no split points are given)")
    if pp > 1 and fsdp > 1:
        needs.append("torchtitan with PP sets reshard_after_forward=False on every block "
                     "(parallelize_llama: 'When using Pipeline Parallelism, generally zero-2 is "
                     "best'), i.e. parameters all-gathered once per step, not per micro-batch")
    if ac == "selective":
        assume.append("torchtitan selective AC = op-level SAC (saves matmul outputs, "
                      "recomputes the rest) for the H100 tables; mapped to recompute: selective")
    body["dropout"] = (0.0, "torchtitan's Llama has no dropout (torchtitan/models/llama/model.py)")
    RUNS.append({
        "id": rid, "framework": "torchtitan",
        "source": "torchtitan performance benchmarks (Meta)",
        "source_detail": detail or [TT_H100, TT_PAPER, table],
        "table": table, "model_name": model, **flds,
        "seq_len": seq, "global_batch_size": gbs, "micro_batch_size": body.get("micro_batch_size", lbs),
        "num_gpus": gpus, "gpu_type": "A100 80GB" if a100 else "H100 96GB HBM2e (500 W)",
        "hardware": "a100-80gb" if a100 else "h100-sxm",
        "dtype": "fp8" if fp8 else "bf16", "dtype_csv": "bf16+float8" if fp8 else "bf16",
        "fsdp_or_zero": "FSDP2 (fully_shard)", "zero_csv": 3, "recompute_csv": ac,
        "tp": tp, "pp": pp, "dp": fsdp, "sp_csv": "true" if tp > 1 else "",
        "measured_metric": "tokens_per_s_per_gpu", "measured_value": tps,
        "metric_kind": "tokens_per_s_per_gpu",
        "memory": (f"{mem} GiB peak per GPU (max over ranks, torch.cuda max reserved as logged)"
                   if mem else ""),
        "body": body, "needs": needs, "approx": approx,
        "settings": [f"techniques: {tech}", f"local batch {lbs} per FSDP rank, global {gbs}",
                     f"activation checkpointing: {ac}", f"context parallel {cp}",
                     "throughput read at iteration 90 (docs)"],
        "notes": [f"techniques={tech}", f"cp={cp}", f"mem_GiB={mem}"],
        "assumptions": assume + [f"sequence length {seq}: torchtitan llama3 train_configs "
                                 "(seq_len = 8192) for the 8K tables; stated in the table for "
                                 "the CP tables"],
    })


T1 = "Table 1: 1D FSDP, Llama 3.1 8B, 8 GPUs, local batch 2, global 16, selective AC"
tt("tt-h100-l3-8b-fsdp-8g", T1, "llama3.1-8b", 8, 8, 1, 1, 2, 8192, "selective", "FSDP", 5762, 82.4)
tt("tt-h100-l3-8b-fsdp-compile-8g", T1, "llama3.1-8b", 8, 8, 1, 1, 2, 8192, "selective", "FSDP + torch.compile", 6667, 77.0)
tt("tt-h100-l3-8b-fsdp-compile-fp8-8g", T1, "llama3.1-8b", 8, 8, 1, 1, 2, 8192, "selective", "FSDP + torch.compile + Float8", 8532, 76.8)
T3 = "Table 3: 1D FSDP, Llama 3.1 8B, 128 GPUs, local batch 2, global 256, selective AC"
tt("tt-h100-l3-8b-fsdp-128g", T3, "llama3.1-8b", 128, 128, 1, 1, 2, 8192, "selective", "FSDP", 5605, 67.0)
tt("tt-h100-l3-8b-fsdp-compile-128g", T3, "llama3.1-8b", 128, 128, 1, 1, 2, 8192, "selective", "FSDP + torch.compile", 6514, 62.0)
tt("tt-h100-l3-8b-fsdp-compile-fp8-128g", T3, "llama3.1-8b", 128, 128, 1, 1, 2, 8192, "selective", "FSDP + torch.compile + Float8", 8380, 61.8)
T2 = "Table 2: FSDP + CP + torch.compile + Float8, Llama 3.1 8B, 8 GPUs, local batch 1, full AC"
tt("tt-h100-l3-8b-fsdp8-cp1-s32k-8g", T2, "llama3.1-8b", 8, 8, 1, 1, 1, 32768, "full", "FSDP + CP + torch.compile + Float8", 3890, 83.9)
tt("tt-h100-l3-8b-fsdp4-cp2-s64k-8g", T2, "llama3.1-8b", 8, 4, 1, 1, 1, 65536, "full", "FSDP + CP + torch.compile + Float8", 2540, 84.2, cp=2)
T4 = ("Table 4: 2D FSDP 32 x TP 8 + torch.compile + Float8, Llama 3.1 70B, 256 GPUs, local "
      "batch 16, global 512, full AC")
tt("tt-h100-l3-70b-2d-256g", T4, "llama3.1-70b", 256, 32, 8, 1, 16, 8192, "full", "2D + torch.compile + Float8", 829, 71.9)
tt("tt-h100-l3-70b-2d-asynctp-256g", T4, "llama3.1-70b", 256, 32, 8, 1, 16, 8192, "full", "2D + AsyncTP + torch.compile + Float8", 876, 67.6)
T5 = ("Table 5: 3D FSDP 8 x TP 8 x PP 8 + torch.compile + Float8 + AsyncTP, Llama 3.1 405B, "
      "512 GPUs, local batch 32, global 256, full AC")
tt("tt-h100-l3-405b-3d-1f1b-512g", T5, "llama3.1-405b", 512, 8, 8, 8, 32, 8192, "full", "3D + torch.compile + Float8 + AsyncTP", 100, 82.5)
tt("tt-h100-l3-405b-3d-i1f1b-512g", T5, "llama3.1-405b", 512, 8, 8, 8, 32, 8192, "full", "3D + torch.compile + Float8 + AsyncTP", 128, 72.7, schedule="interleaved_1f1b")
T6 = ("Table 6: 4D FSDP + TP 8 + PP 8 + CP + torch.compile + Float8 + AsyncTP + 1F1B, Llama "
      "3.1 405B, 512 GPUs, local batch 8, full AC")
tt("tt-h100-l3-405b-4d-cp1-s32k-512g", T6, "llama3.1-405b", 512, 8, 8, 8, 8, 32768, "full", "4D + torch.compile + Float8 + AsyncTP", 76, 75.3)
# A100 rows (older docs/performance.md: FSDP2 on 64 A100 80GB, local batch = global / 64)
TA = "Llama 3 / Llama 2 performance numbers, FSDP2 on 64 A100 (80GB)"
for rid, model, lbs, seq, ac, wps, mfu in (
        ("tt-a100-l3-8b-fsdp-sacop-64g", "llama3.1-8b", 1, 8192, "selective", 2973, "58.2%"),
        ("tt-a100-l3-70b-fsdp-full-64g", "llama3.1-70b", 1, 8192, "full", 331, "51.7%"),
        ("tt-a100-l2-13b-fsdp-noac-64g", "llama2-13b", 2, 4096, "none", 2162, "61.1%"),
        ("tt-a100-l2-70b-fsdp-full-64g", "llama2-70b", 2, 4096, "full", 353, "50.5%")):
    tt(rid, TA, model, 64, 64, 1, 1, lbs, seq, ac, "FSDP2", wps, None,
       detail=[TT_A100, f"{TA}; table MFU {mfu}"], a100=True,
       extra_assume=["Llama 3 rows use the Llama 3 8B/70B shapes (same as 3.1 for training "
                     "throughput); sequence 8192 (Llama 3) / 4096 (Llama 2) as the docs state",
                     "WPS column read as tokens/s per GPU (train.py logs wps per rank)"])

# --------------------------------------------------------------------------------------------
# NVIDIA NeMo (Megatron-Core + Transformer Engine)
# --------------------------------------------------------------------------------------------
NEMO_2407 = ("NVIDIA/NeMo docs/source/performance/performance_summary.md "
             "@070a0bb168d405d653b9734c0017cf5078e77c0d")
NEMO_SHAPES = {  # layers, hidden, heads, kv, ffn, vocab, act, params
    "GPT3-5B": (24, 4096, 32, 32, 16384, 50304, "gelu", 5),
    "GPT3-20B": (44, 6144, 48, 48, 24576, 50304, "gelu", 20),
    "GPT3-175B": (96, 12288, 96, 96, 49152, 50304, "gelu", 175),
    "LLAMA2-7B": (32, 4096, 32, 32, 11008, 32000, "swiglu", 6.74),
    "LLAMA2-13B": (40, 5120, 40, 40, 13824, 32000, "swiglu", 13.0),
    "LLAMA2-70B": (80, 8192, 64, 8, 28672, 32000, "swiglu", 69.0),
    "Nemotron-22B": (40, 6144, 48, 48, 24576, 256000, "gelu", 22),
    "Nemotron-340B": (96, 18432, 96, 8, 73728, 256000, "gelu", 340),
    "LLAMA3-8B": (32, 4096, 32, 8, 14336, 128256, "swiglu", 8.03),
    "LLAMA3-70B": (80, 8192, 64, 8, 28672, 128256, "swiglu", 70.6),
    "LLAMA3.1-405B": (126, 16384, 128, 8, 53248, 128256, "swiglu", 405.9),
}
SHAPE_SRC = {
    "GPT3-5B": "NeMo-Framework-Launcher conf/training/gpt3/5b_fp8_performance.yaml (24 x 4096, 32 heads, 4h FFN)",
    "GPT3-20B": "NeMo-Framework-Launcher conf/training/gpt3/20b.yaml (44 x 6144, 48 heads, 4h FFN)",
    "GPT3-175B": "NeMo-Framework-Launcher conf/training/gpt3/175b.yaml (96 x 12288, 96 heads)",
    "Nemotron-22B": "NeMo nemo/collections/llm/gpt/model/nemotron.py Nemotron3Config22B (40 x 6144, 48 heads, FFN 24576); vocab 256000 (Nemotron tokenizer)",
    "Nemotron-340B": "NeMo nemotron.py Nemotron4Config340B (96 x 18432, 96 heads, 8 query groups, FFN 73728, squared-ReLU); vocab 256000",
}


def nemo(rid, model, gpus, gbs, mbs, seq, tp, pp, cp, vp, tps, *, src=NEMO_2407,
         table="Pretraining, FP8, NeMo 24.07, DGX-H100", gpu="H100 80GB SXM (DGX H100)",
         hw="h100-sxm", fsdp=False, prec="fp8", fmt="FP8 (TE delayed scaling)",
         framework="nemo", extra_needs=(), extra_assume=(), tflops=None, step_s=None,
         vocab=None, shape_note=None, source_name="NVIDIA NeMo performance summary",
         embed_loss_split=False):
    l, h, a, g, f, v, act, pb = NEMO_SHAPES[model]
    v = vocab or v
    if model.startswith("GPT3"):  # GPT-2 BPE 50257 padded to a multiple of 128 x TP
        v = -(-50257 // (128 * tp)) * 128 * tp
    dp = gpus // (tp * pp * cp)
    needs = [f"framework profile {framework} (Megatron-Core distributed optimizer with "
             "overlapped grad reduce-scatter / param all-gather, TE fused attention, "
             "tp-comm overlap)"]
    if prec == "fp8":
        needs.insert(0, f"fp8 per-GEMM precision with recipe costs ({fmt}: TE fp8 on the "
                        "transformer-layer linears; attention core, softmax, norms, embedding "
                        "and LM head bf16)")
    approx, assume = [], list(extra_assume)
    body = {"data": dp * cp, "tensor": tp, "pipeline": pp, "sequence_parallel": tp > 1,
            "optimizer_shard": 3 if fsdp else 1, "recompute": "none"}
    if vp > 1:
        body["schedule"], body["virtual_stages"] = "interleaved_1f1b", vp
    chunks = pp * max(vp, 1)
    if embed_loss_split and (l + 2) % chunks == 0:
        # Megatron-Core account_for_embedding/loss_in_pipeline_split: the embedding and the
        # loss each count as one layer of the first / last virtual stage
        per = (l + 2) // chunks
        split = [per - 1] + [per] * (chunks - 2) + [per - 1]
        body["parallel_extra"] = [f"pipeline_layers: [{', '.join(map(str, split))}]"]
        assume.append(f"stages: {split[0]}, {per} x {chunks - 2}, {split[-1]} layers per virtual "
                      "stage (the recipe's account_for_embedding_in_pipeline_split and "
                      "account_for_loss_in_pipeline_split, Megatron-Bridge recipes/llama/llama3.py "
                      "llama31_405b_pretrain_config)")
    elif l % chunks:
        lay = chunks * round(l / chunks)
        body["layers"] = lay
        approx.append(f"layers {lay} (nearest multiple of {chunks} chunks; exact: {l} layers, "
                      "Megatron-Core puts the remainder on the first/last stage "
                      "(--decoder-first/last-pipeline-num-layers) or the account_for_"
                      "embedding/loss layout)")
        needs.append(f"uneven pipeline stages ({l} layers on {pp} x VP {vp})")
    if cp > 1:  # parallel.context: each rank holds seq / cp tokens of every sequence
        body["data"], body["context"] = dp, cp
    if fsdp:
        needs.append("Megatron-FSDP (use_megatron_fsdp / custom FSDP) instead of the "
                     "distributed optimizer")
    if act == "gelu" and model.startswith("Nemotron"):
        assume.append("Nemotron uses squared-ReLU (2 FFN matrices): priced as gelu, same "
                      "GEMM FLOPs")
    needs += list(extra_needs)
    if model.startswith("GPT3"):
        assume.append(f"vocabulary {v}: GPT-2 BPE (50257) padded to a multiple of 128 x TP "
                      "(make_vocab_size_divisible_by 128, Megatron pads by TP as well)")
    assume += ["recompute: none (the table does not state it; NeMo performance recipes for "
               "these sizes run without activation recompute unless the row needs it)",
               "sequence parallel on whenever TP > 1 (NeMo/Megatron-Bridge performance "
               "recipes; required by tp-comm overlap)",
               "distributed optimizer (optimizer states sharded over data parallel), the "
               "NeMo/Megatron-Bridge default for these recipes"]
    RUNS.append({
        "id": rid, "framework": framework, "source": source_name,
        "source_detail": [src, table, shape_note or SHAPE_SRC.get(
            model, "shape: Llama 2/3 configs (Touvron et al. 2023; Dubey et al. 2024)")],
        "table": table, "model_name": model, "params_billion": pb, "num_layers": l,
        "hidden_size": h, "num_heads": a, "num_kv_heads": g, "ffn_hidden_size": f,
        "vocab_size": v, "ffn_activation": act, "seq_len": seq, "global_batch_size": gbs,
        "micro_batch_size": mbs, "num_gpus": gpus, "gpu_type": gpu, "hardware": hw,
        "dtype": "fp8" if prec == "fp8" else "bf16", "dtype_csv": fmt,
        "fsdp_or_zero": "Megatron-FSDP" if fsdp else "distributed optimizer (ZeRO-1)",
        "zero_csv": 3 if fsdp else 1, "tp": tp, "pp": pp, "dp": dp,
        "sp_csv": "true" if tp > 1 else "", "vp_csv": vp if vp > 1 else "",
        "measured_metric": "seconds_per_iteration" if step_s else "tokens_per_s_per_gpu",
        "measured_value": step_s or tps,
        "metric_kind": "seconds_per_iteration" if step_s else "tokens_per_s_per_gpu",
        "body": body, "needs": needs, "approx": approx,
        "settings": [x for x in (f"TP {tp}, PP {pp}, CP {cp}, VP {vp}, MBS {mbs}, GBS {gbs}, "
                                 f"seq {seq}", f"table Model TFLOP/s/GPU {tflops}" if tflops
                                 else "", f"precision {fmt}") if x],
        "notes": [f"cp={cp}", f"vp={vp}", f"model_tflops_per_gpu={tflops}", f"precision={fmt}"],
        "assumptions": assume,
    })


for args in (
        ("nemo2407-h100-gpt3-5b-64g", "GPT3-5B", 64, 2048, 4, 2048, 1, 1, 1, 1, 22521, 736),
        ("nemo2407-h100-gpt3-20b-64g", "GPT3-20B", 64, 256, 2, 2048, 2, 1, 1, 1, 5851, 750),
        ("nemo2407-h100-gpt3-175b-128g", "GPT3-175B", 128, 256, 1, 2048, 4, 8, 1, 6, 726, 782),
        ("nemo2407-h100-gpt3-175b-512g", "GPT3-175B", 512, 2048, 2, 2048, 4, 8, 1, 6, 782, 842),
        ("nemo2407-h100-llama2-7b-8g", "LLAMA2-7B", 8, 128, 1, 4096, 1, 1, 1, 1, 16847, 776),
        ("nemo2407-h100-llama2-13b-16g", "LLAMA2-13B", 16, 128, 1, 4096, 1, 4, 1, 10, 8646, 754),
        ("nemo2407-h100-llama2-70b-64g", "LLAMA2-70B", 64, 128, 1, 4096, 4, 4, 1, 20, 1707, 759),
        ("nemo2407-h100-nemotron-22b-64g", "Nemotron-22B", 64, 256, 2, 4096, 2, 4, 1, 10, 4256, 554),
        ("nemo2407-h100-nemotron-340b-128g", "Nemotron-340B", 128, 32, 1, 4096, 8, 8, 1, 12, 322, 678),
        ("nemo2407-h100-llama3-8b-cp2-8g", "LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 2, 1, 12036, 697),
        ("nemo2407-h100-llama3-70b-cp2-64g", "LLAMA3-70B", 64, 128, 1, 8192, 4, 4, 2, 5, 1533, 738)):
    rid, model, gpus, gbs, mbs, seq, tp, pp, cp, vp, tps, tfl = args
    nemo(rid, model, gpus, gbs, mbs, seq, tp, pp, cp, vp, tps, tflops=tfl,
         fmt="FP8 (TE delayed scaling, NeMo 24.07)")

BRIDGE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md "
          "@00b7660be0254ac6f95f44164ddd0c3e9cc798ed")
BR_T = "25.11 NeMo container, Pre-Training Performance, System: DGX-{}"
CS = "FP8-CS (TE current scaling: per-tensor scale from the current amax, no history)"
nemo("bridge2511-h100-llama3-8b-fsdp-8g", "LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 1, 1, 14451,
     src=BRIDGE, table=BR_T.format("H100"), fsdp=True, fmt=CS, framework="megatron-bridge",
     tflops=744)
nemo("bridge2511-h100-llama3-70b-64g", "LLAMA3-70B", 64, 128, 1, 8192, 4, 8, 1, 5, 1602,
     src=BRIDGE, table=BR_T.format("H100"), fmt=CS, framework="megatron-bridge", tflops=719)
nemo("bridge2511-h100-llama31-405b-cp2-1024g", "LLAMA3.1-405B", 1024, 512, 1, 8192, 8, 8, 2, 8,
     292, src=BRIDGE, table=BR_T.format("H100"), fmt=CS, framework="megatron-bridge", tflops=737,
     embed_loss_split=True)
B200_NEED = ("hardware profile b200 (NVIDIA B200, 8 per node, NVLink 5; not bundled yet: the "
             "body uses h200-sxm as a placeholder so the file parses)")
nemo("bridge2511-b200-llama3-8b-8g", "LLAMA3-8B", 8, 128, 2, 8192, 1, 1, 1, 1, 30624,
     src=BRIDGE, table=BR_T.format("B200"), gpu="B200 (DGX B200)", hw="h200-sxm", fmt=CS,
     framework="megatron-bridge", tflops=1576, extra_needs=[B200_NEED])
nemo("bridge2511-b200-llama31-405b-cp2-128g", "LLAMA3.1-405B", 128, 64, 1, 8192, 4, 8, 2, 8,
     661, src=BRIDGE, table=BR_T.format("B200"), gpu="B200 (DGX B200)", hw="b200-sxm", fmt=CS,
     framework="megatron-bridge", tflops=1667, embed_loss_split=True)

# --------------------------------------------------------------------------------------------
# Megatron-DeepSpeed: BLOOM-176B (BigScience) and MT-NLG 530B (Microsoft/NVIDIA)
# --------------------------------------------------------------------------------------------
RUNS.append({
    "id": "mds-bloom-176b-384g", "framework": "megatron-deepspeed",
    "source": "BigScience BLOOM-176B training (tr11-176B-ml)",
    "source_detail": [
        "bigscience-workshop/bigscience train/tr11-176B-ml/README.md @00327f8c (log line at "
        "iteration 85376: 'elapsed time per iteration (s): 104.70 | global batch size: 2048 | "
        "TFLOPs: 149.77')",
        "train/tr11-176B-ml/tr11-176B-ml.slurm @003b2505 (TP 4, PP 12, MBS 2, GBS 2048, "
        "70 x 14336, 112 heads, seq 2048, --bf16, ZeRO stage 0 + BF16_Optimizer, "
        "--checkpoint-activations, --pad-vocab-size-to 250880, "
        "--pp-partition-method type:transformer|embedding)",
        "bigscience.notion.site BigScience-176B-Model: 'one copy of the model takes 48 GPUs "
        "(using 60 GB of memory on each GPU)'"],
    "table": "README 'Important checkpoints' log line", "model_name": "BLOOM-176B",
    "params_billion": 176.2, "num_layers": 70, "hidden_size": 14336, "num_heads": 112,
    "ffn_hidden_size": 57344, "seq_len": 2048, "vocab_size": 250880,
    "global_batch_size": 2048, "micro_batch_size": 2, "num_gpus": 384,
    "gpu_type": "A100 80GB SXM (Jean Zay, 4x Omni-Path 100 Gb/s per node)",
    "hardware": "a100-80gb", "dtype": "bf16", "dtype_csv": "bf16",
    "fsdp_or_zero": "BF16_Optimizer (own ZeRO-1: optimizer states sharded over DP)",
    "zero_csv": 1, "recompute_csv": "full", "tp": 4, "pp": 12, "dp": 8, "sp_csv": "false",
    "measured_metric": "seconds_per_iteration", "measured_value": 104.70,
    "metric_kind": "seconds_per_iteration",
    "memory": "about 60 GB per GPU (BigScience notion page)",
    "body": {"data": 8, "tensor": 4, "pipeline": 12, "layers": 72, "optimizer_shard": 1,
             "recompute": "full", "attention": "standard"},
    "needs": ["uneven pipeline stages: [embed + 5, 6 x 10, 5 + embed] (README 'Architecture')",
              "framework profile megatron-deepspeed (DeepSpeed pipeline engine, fp32 grad "
              "accumulation buffer not sharded (4 bytes/param), fused softmax/Apex FusedAdam, "
              "no flash attention (2022))",
              "inter-node network of Jean Zay: 4 x 100 Gb/s Omni-Path per 8-GPU node (the "
              "a100-80gb profile has 8 x 200 Gb/s HDR)",
              "ALiBi / embedding LayerNorm (negligible FLOPs)"],
    "approx": ["layers 72 = 70 transformer blocks + the 2 tied-embedding slots the "
               "framework balances as blocks; exact: layers 70, pipeline_layers "
               "[5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5] with the embedding on stages 0 and 11"],
    "settings": ["gradient accumulation in fp32 (BF16_Optimizer), bf16 NCCL collectives "
                 "(README: pt-1.11 NCCL with bf16 comms)",
                 "TFLOPs 149.77 in the log are hardware TFLOPs (README 'Throughput': 4*2 "
                 "coefficient counts the recompute forward)",
                 "CUDA_LAUNCH_BLOCKING=1 during the run (README: 'tiny impact or no impact')"],
    "notes": ["tflops_hw=149.77", "samples_per_s=19.561", "iteration=85376"],
    "assumptions": ["the 104.70 s log line is one iteration at GBS 2048 late in training; the "
                    "README also states ~100-105 s/iteration"],
})
MTNLG_SRC = ("Smith et al. 2022, Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B "
             "(arXiv:2201.11990), Sec. 2.4 (iteration time on 280/350/420 DGX A100 nodes, "
             "global batch 1920) and Sec. 2.3 (8-way TP inside a node, 35-way PP, ZeRO data "
             "parallel, mixed precision, Selene 80 GB A100)")
for nodes, sec, tfl in ((280, 60.1, 126), (350, 50.2, 121), (420, 44.4, 113)):
    gpus = nodes * 8
    dp = gpus // 280
    RUNS.append({
        "id": f"mds-mtnlg-530b-{gpus}g", "framework": "megatron-deepspeed",
        "source": "Smith et al. 2022, Megatron-Turing NLG 530B (arXiv:2201.11990)",
        "source_detail": [MTNLG_SRC,
                          "figures as quoted by cli99/llm-analysis examples/megatron-turing-nlg/"
                          "README.md (60.1 / 50.2 / 44.4 s; 126 / 121 / 113 TFLOP/s per GPU); "
                          "shape 105 x 20480, 128 heads, FFN 81920, vocab 50272, seq 2048"],
        "table": "Sec. 2.4 text", "model_name": "MT-NLG-530B", "params_billion": 530,
        "num_layers": 105, "hidden_size": 20480, "num_heads": 128, "ffn_hidden_size": 81920,
        "seq_len": 2048, "vocab_size": 50272, "global_batch_size": 1920,
        "micro_batch_size": 1, "num_gpus": gpus, "gpu_type": "A100 80GB SXM (Selene, DGX A100)",
        "hardware": "a100-80gb", "dtype": "bf16", "dtype_csv": "mixed precision (bf16)",
        "fsdp_or_zero": "ZeRO stage 1 data parallel", "zero_csv": 1, "recompute_csv": "full",
        "tp": 8, "pp": 35, "dp": dp,
        "measured_metric": "seconds_per_iteration", "measured_value": sec,
        "metric_kind": "seconds_per_iteration",
        "body": {"data": dp, "tensor": 8, "pipeline": 35, "optimizer_shard": 1,
                 "recompute": "full", "attention": "standard"},
        "needs": ["framework profile megatron-deepspeed (DeepSpeed pipeline engine 1F1B, "
                  "ZeRO-1 over DP, Megatron TP kernels of 2021)"],
        "settings": [f"published TFLOP/s per GPU {tfl}", "1F1B pipeline schedule (not interleaved)"],
        "notes": [f"tflops_per_gpu={tfl}", f"nodes={nodes}"],
        "assumptions": ["micro-batch size 1: not stated in the quoted text",
                        "activation recompute full: the paper trains with activation "
                        "checkpointing (llm-analysis reproduces the figures with full "
                        "recompute); not restated per configuration",
                        "precision bf16: the paper says 'mixed precision'",
                        "ZeRO stage 1 for the data-parallel optimizer states (paper: "
                        "'ZeRO-powered data parallelism'; stage not restated here)",
                        f"gradient accumulation {1920 // dp} = 1920 / (1 x DP {dp})"],
    })

# --------------------------------------------------------------------------------------------
# Meta Llama 3 405B pre-training (internal stack: FSDP-style DP + TP + CP + PP)
# --------------------------------------------------------------------------------------------
def _mflops(flds, gbs, seq):
    b, s, l, h = gbs, seq, flds["num_layers"], flds["hidden_size"]
    g, a, f, v = flds["num_kv_heads"], flds["num_heads"], flds["ffn_hidden_size"], flds["vocab_size"]
    return 12 * b * s * l * h * h * ((1 + g / a + s / h) + (f / h) * 1.5) + 6 * b * s * h * v


L3_SRC = ("Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783), Table 4 "
          "(scaling configurations of Llama 3 405B pre-training)")
for gpus, cp, seq, tfl in ((8192, 1, 8192, 430), (16384, 1, 8192, 400), (16384, 16, 131072, 380)):
    dp = gpus // (8 * cp * 16)
    gbs = 16 * 1024 * 1024 // seq
    flds = llama_fields("llama3.1-405b")
    body = {"data": dp * cp, "tensor": 8, "pipeline": 16, "layers": 128,
            "sequence_parallel": True, "optimizer_shard": 3, "recompute": "none",
            "attention": "flash", "schedule": "1f1b"}
    approx = ["layers 128 (exact 126: the paper removes one layer from the first and the "
              "last stage, 7 + 8 x 14 + 7 on 16 stages)"]
    needs = ["uneven pipeline stages (126 layers on 16 stages: first and last stage one "
             "layer fewer)", "framework profile meta-internal (Llama 3: FSDP-style sharding "
             "with no reshard after forward, tuned interleaved pipeline schedule, async TP/CP)"]
    if cp > 1:
        needs.append("context parallel 16 (all-gather of K/V, Llama 3 paper Sec. 3.3.2)")
        body["global_batch_size"] = gbs * cp
        body["seq_length"] = seq // cp
        approx.append(f"data = DP {dp} x CP {cp} with seq {seq // cp}, global_batch_size "
                      f"{gbs * cp} (tokens per step kept, attention undercounted); exact: data "
                      f"{dp}, context_parallel {cp}, seq {seq}, global_batch_size {gbs}")
    RUNS.append({
        "id": f"meta-llama3-405b-cp{cp}-s{seq // 1024}k-{gpus}g", "framework": "meta-internal",
        "source": "Dubey et al. 2024, The Llama 3 Herd of Models (arXiv:2407.21783)",
        "source_detail": [L3_SRC, "as reproduced in glennklockwood.com/garden/llama-3.1 (GPUs, "
                          "TP, CP, PP, tokens/batch 16M, TFLOPS/GPU)"],
        "table": "Table 4", "model_name": "Llama-3.1-405B", **flds, "seq_len": seq,
        "global_batch_size": gbs, "micro_batch_size": 1, "num_gpus": gpus,
        "gpu_type": "H100 80GB HBM3 SXM (700 W, Grand Teton, RoCE 400 Gb/s)",
        "hardware": "h100-sxm", "dtype": "bf16", "dtype_csv": "bf16",
        "fsdp_or_zero": "FSDP-style (model, optimizer, gradients sharded over DP)",
        "zero_csv": 3, "tp": 8, "pp": 16, "dp": dp, "sp_csv": "true",
        "measured_metric": "tflops_per_gpu", "measured_value": tfl,
        "metric_kind": "tflops_megatron", "body": body, "needs": needs, "approx": approx,
        "settings": [f"TP 8, CP {cp}, PP 16, DP {dp}, seq {seq}, 16M tokens per batch"],
        "notes": [f"cp={cp}", "tokens_per_batch=16M"],
        "assumptions": ["16M tokens per batch read as 2^24 = 16,777,216 tokens, so global "
                        f"batch = {gbs} sequences of {seq}",
                        "the paper does not give its FLOP formula; the target uses Megatron-LM's "
                        "count (GQA 8 groups, SwiGLU); 6*N*tokens (N = 405.9e9) would give a "
                        f"time {100 * (1 - 6 * 405.9e9 * 16 * 1024 * 1024 / _mflops(flds, gbs, seq)):.0f}% "
                        "shorter",
                        "micro-batch 1, no activation recompute, 1F1B in the body: the paper "
                        "describes a tuned interleaved schedule but not its chunk count",
                        "data-parallel sharding: the paper uses FSDP for model, optimizer and "
                        "gradients (body optimizer_shard 3); not re-verified against the paper "
                        "text here"],
    })

# --------------------------------------------------------------------------------------------
# Huawei Ascend: MindFormers (MindSpore) and AscendSpeed / MindSpeed (PyTorch + torch_npu)
# --------------------------------------------------------------------------------------------
MF_DOC = ("mindspore-ai/docs docs/mindformers/docs/source_zh_cn/start/models.md "
          "@0995d789 (training performance tokens/s/p, Atlas 800T A2)")


def mindformers(rid, model, cfg, tps, dp, mp, pp, bs, ga, micro, seq, rec, mem, extra_assume=()):
    flds = llama_fields(model)
    gbs = bs * dp * ga * micro
    body = {"data": dp, "tensor": mp, "pipeline": pp, "optimizer_shard": 1,
            "recompute": rec, "attention": "flash", "sequence_parallel": mp > 1,
            "global_batch_size": gbs, "micro_batch_size": bs}
    RUNS.append({
        "id": rid, "framework": "mindspore", "source": "MindSpore MindFormers model library",
        "source_detail": [MF_DOC, f"configuration mindspore-lab/mindformers {cfg}"],
        "table": "models.md training performance", "model_name": model, **flds, "seq_len": seq,
        "global_batch_size": gbs, "micro_batch_size": bs, "num_gpus": dp * mp * pp,
        "gpu_type": "Ascend 910B (Atlas 800T A2, 64 GB)", "hardware": "ascend-910b",
        "dtype": "bf16", "dtype_csv": "bf16 compute, fp32 optimizer states",
        "fsdp_or_zero": "MindSpore optimizer parallel (enable_parallel_optimizer: states "
                        "sharded over DP)", "zero_csv": 1,
        "recompute_csv": rec, "tp": mp, "pp": pp, "dp": dp,
        "measured_metric": "tokens_per_s_per_device", "measured_value": tps,
        "metric_kind": "tokens_per_s_per_gpu",
        "memory": f"max_device_memory cap {mem} in the config (a limit, not a measurement)",
        "body": body,
        "needs": ["framework profile mindspore (graph mode O1, fused FlashAttention "
                  "kernel, optimizer parallel, HCCL gradient fusion groups "
                  "(gradient_aggregation_group 4), mp_comm_recompute)"],
        "settings": [f"parallel_config data {dp}, model {mp}, pipeline {pp}, micro_batch_num "
                     f"{micro}, batch_size {bs}, gradient_accumulation_steps {ga}",
                     f"recompute {rec}", "use_flash_attention: True"],
        "notes": [f"cfg={cfg}"],
        "assumptions": ["the configuration file is the one the model library links; the "
                        "stored copy may be a later commit than the measurement",
                        "runner_config.batch_size is the per-device batch (it overrides the "
                        "dataset batch_size)"] + list(extra_assume),
    })


mindformers("mf-910b-llama2-7b-8p", "llama2-7b", "configs/llama2/pretrain_llama2_7b_bf16.yaml "
            "@26e0014a", 4160, 8, 1, 1, 1, 8, 1, 4096, "none", "59GB")
mindformers("mf-910b-llama2-13b-8p", "llama2-13b", "configs/llama2/finetune_llama2_13b_bf16.yaml "
            "@0e67b43f", 1691, 8, 1, 1, 4, 1, 1, 4096, "full", "59GB",
            extra_assume=["the config comment says 'device num = 16' but its parallel_config "
                          "is 8 x 1 x 1: 8 devices used"])
mindformers("mf-910b-llama3-8b-8p", "llama3.1-8b",
            "research/llama3/finetune_llama3_8b_8k_800T_A2_64G.yaml @1decbaa2", 2581, 8, 1, 1, 1,
            1, 1, 8192, "full", "58GB")
mindformers("mf-910b-llama2-70b-32p", "llama2-70b",
            "configs/llama2/finetune_llama2_70b_bf16_32p.yaml @0e67b43f", 337, 1, 4, 8, 1, 1, 256,
            4096, "selective", "53GB",
            extra_assume=["select_recompute [8,4,4,1,1,1,1,1] layers per stage (selective "
                          "recompute on part of the layers of each stage) mapped to "
                          "recompute: selective",
                          "the same 337 tokens/s/p is listed for Llama2-70B, Llama3-70B and "
                          "Llama3.1-70B in the table"])
RUNS.append({
    "id": "ascendspeed-910b-llama2-7b-zero2-8p", "framework": "ascendspeed",
    "source": "Ascend AscendSpeed (now MindSpeed-LLM) LLaMA2-7B example",
    "source_detail": ["Ascend/AscendSpeed examples/llama2/README_en.md @0b79c57e, 'Machine "
                      "performance': single-step time 6.66 s/step, 2459.648 tokens/s/p, "
                      "147.42 TFLOPs",
                      "examples/llama2/pretrain_llama2_7b_zero_8p.sh @1454fa07 (8 NPUs, TP 1, "
                      "PP 1, ZeRO stage 2, MBS 2, GBS 32, seq 4096, fp16, DeepSpeed activation "
                      "checkpointing, reduce/allgather_bucket_size 1e8, overlap_comm)"],
    "table": "README Machine performance", "model_name": "llama2-7b", **llama_fields("llama2-7b"),
    "seq_len": 4096, "global_batch_size": 32, "micro_batch_size": 2, "num_gpus": 8,
    "gpu_type": "Ascend 910B (Atlas 900 A2 PoD links in the README)", "hardware": "ascend-910b",
    "dtype": "fp16", "dtype_csv": "fp16", "fsdp_or_zero": "DeepSpeed ZeRO-2", "zero_csv": 2,
    "recompute_csv": "full", "tp": 1, "pp": 1, "dp": 8,
    "measured_metric": "seconds_per_iteration", "measured_value": 6.66,
    "metric_kind": "seconds_per_iteration",
    "body": {"data": 8, "optimizer_shard": 2, "recompute": "full", "attention": "flash",
             "parallel_extra": ["comm_fusion: {mode: size, bucket_mb: 200}"]},
    "needs": ["framework profile mindspeed/deepspeed-zero (ZeRO-2 reduce_bucket_size 1e8 "
              "elements, overlap_comm, contiguous_gradients)"],
    "settings": ["fp16 with dynamic loss scaling", "--triangle-attn (block 1024) fused "
                 "attention", "--auto-recompute-device-size 51200"],
    "notes": ["tokens_per_s_per_npu=2459.648", "tflops=147.42"],
    "assumptions": ["32 x 4096 / 6.66 s / 8 = 2460 tokens/s/p matches the table, so GBS 32 "
                    "and seq 4096 hold; the table's 4.804 samples/s/p does not match (would "
                    "be 0.6) and is ignored",
                    "device: the README links Atlas 900 PoD A2 (Ascend 910B) drivers; the "
                    "exact 910B SKU is not named",
                    "bucket 200 MB = DeepSpeed reduce_bucket_size 1e8 elements x 2 bytes "
                    "(fp16)"],
})

# --------------------------------------------------------------------------------------------
# NVIDIA dgxc-benchmarking (NeMo 24.09 / 24.11 containers, DGX H100): weak-scaling tables with
# the measured 'train_step_timing' (seconds per step) per GPU count. The 175B GPT-3 and
# Nemotron-4 15B rows of this repository are already used in scenarios/calibration.
# --------------------------------------------------------------------------------------------
DGXC = "NVIDIA/dgxc-benchmarking @143b90dd91f9be958fed4773ae95d941a3356a82"
L31_8B = ("llama3.1/README_8b.md, table 'Llama 3.1 8b 24.09 {p} (TP=1, PP=1, CP=2, MBS=1, GA=32)', "
          "row 'Training step time (seconds per step)'")
for prec, gpus, step in (("BF16", 8, 12.91), ("BF16", 128, 13.10), ("FP8", 8, 9.67), ("FP8", 128, 9.82)):
    nemo(f"dgxc2409-h100-llama31-8b-{prec.lower()}-cp2-{gpus}g", "LLAMA3-8B", gpus, 16 * gpus, 1, 8192,
         1, 1, 2, 1, None, src=DGXC, source_name="NVIDIA dgxc-benchmarking NeMo training recipes (DGX H100)", table=L31_8B.format(p=prec), prec=prec.lower(),
         fmt=prec if prec == "BF16" else "FP8 (TE, NeMo 24.09 recipe)", step_s=step)
L31_70B = ("llama3.1/README_70b.md, table 'Llama 3.1 70b 24.09 {p} (TP=4, PP=4, CP=2, VP=5, MBS=1, "
           "GA=64)', row 'Training step time (seconds per step)'")
for prec, gpus, step in (("BF16", 64, 14.72), ("BF16", 512, 14.89), ("BF16", 2048, 14.98),
                         ("FP8", 64, 11.01), ("FP8", 2048, 11.39)):
    nemo(f"dgxc2409-h100-llama31-70b-{prec.lower()}-cp2-{gpus}g", "LLAMA3-70B", gpus, 2 * gpus, 1, 8192,
         4, 4, 2, 5, None, src=DGXC, source_name="NVIDIA dgxc-benchmarking NeMo training recipes (DGX H100)", table=L31_70B.format(p=prec), prec=prec.lower(),
         fmt=prec if prec == "BF16" else "FP8 (TE, NeMo 24.09 recipe)", step_s=step)
L31_405B = ("llama3.1/README_405b.md, table 'Llama 3.1 405b 24.09 {p} (TP=8, PP=9, CP=2, VP=7, MBS=1, "
            "GA=63)', full-model columns (126 layers), row 'Training step time (seconds per step)'")
for prec, gpus, step in (("BF16", 576, 17.20), ("BF16", 2304, 17.62), ("FP8", 576, 11.24),
                         ("FP8", 2304, 12.35)):
    nemo(f"dgxc2409-h100-llama31-405b-{prec.lower()}-cp2-{gpus}g", "LLAMA3.1-405B", gpus,
         252 * gpus // 576, 1, 8192, 8, 9, 2, 7, None, src=DGXC, source_name="NVIDIA dgxc-benchmarking NeMo training recipes (DGX H100)", table=L31_405B.format(p=prec),
         prec=prec.lower(), fmt=prec if prec == "BF16" else "FP8 (TE, NeMo 24.09 recipe)",
         step_s=step, vocab=51200,
         extra_assume=["vocabulary 51200: the README says 405B 'uses the GPT2BPETokenizer as a "
                       "proxy' (synthetic data), i.e. 50257 padded to a multiple of 128 x TP 8; its "
                       "FLOP note uses 128256 instead",
                       "8 query groups (Llama 3.1 405B); the README's FLOP note writes 16/128"])
N340 = ("nemotron/README_340b.md, table 'Nemotron4 340b 24.11 {p} (TP=8, PP=8, MBS=1, GA=16, VP=12)', "
        "row 'Training step time (seconds per step)'")
for prec, gpus, step in (("BF16", 128, 4.61), ("BF16", 512, 4.7), ("BF16", 2048, 4.84),
                         ("FP8", 128, 3.16), ("FP8", 2048, 3.49)):
    nemo(f"dgxc2411-h100-nemotron4-340b-{prec.lower()}-{gpus}g", "Nemotron-340B", gpus, gpus // 4, 1,
         4096, 8, 8, 1, 12, None, src=DGXC, source_name="NVIDIA dgxc-benchmarking NeMo training recipes (DGX H100)", table=N340.format(p=prec), prec=prec.lower(),
         fmt=prec if prec == "BF16" else "FP8 (TE, NeMo 24.11 recipe)", step_s=step,
         extra_assume=["container: the table says 24.11, the setup script 24.09",
                       "8 query groups (Nemotron4Config340B); the README's FLOP note counts "
                       "full multi-head attention (24*l*h^2)"])
RUNS.append({
    "id": "modellink-910b-llama2-7b-tp8-8p", "framework": "ascendspeed",
    "source": "Ascend ModelLink (now MindSpeed-LLM) LLaMA2-7B example",
    "source_detail": ["aeeeeeep/ModelLink (mirror of Ascend ModelLink) examples/llama2/README_en.md "
                      "@0525bced, 'Machine performance': 3.08 s/step, 2730 tokens/s/p, 122.39 TFLOPs",
                      "examples/llama2/pretrain_llama2_7b_ptd.sh @3fb40dfe (8 NPUs, TP 8, PP 1, "
                      "--sequence-parallel, MBS 4, GBS 16, seq 4096, --bf16, --use-flash-attn, "
                      "--use-fused-rotary-pos-emb, --mlp-layer-fusion, --DDP-impl local)"],
    "table": "README Machine performance", "model_name": "llama2-7b", **llama_fields("llama2-7b"),
    "seq_len": 4096, "global_batch_size": 16, "micro_batch_size": 4, "num_gpus": 8,
    "gpu_type": "Ascend 910B (8 x Ascend NPUs; SKU not named)", "hardware": "ascend-910b",
    "dtype": "bf16", "dtype_csv": "bf16", "fsdp_or_zero": "none (local DDP, DP 1)", "zero_csv": 0,
    "recompute_csv": "none", "tp": 8, "pp": 1, "dp": 1, "sp_csv": "true",
    "measured_metric": "seconds_per_iteration", "measured_value": 3.08,
    "metric_kind": "seconds_per_iteration",
    "body": {"data": 1, "tensor": 8, "sequence_parallel": True, "optimizer_shard": 0,
             "recompute": "none", "attention": "flash"},
    "needs": ["framework profile mindspeed (Megatron on torch_npu: npu_fusion_attention, fused "
              "RoPE, fused MLP; TP collectives over HCCS)"],
    "settings": ["tokens/s/p 2730 and TFLOPs 122.39 as published"],
    "notes": ["tokens_per_s_per_npu=2730", "tflops=122.39"],
    "assumptions": ["the script is stored at a different commit than the README; with its GBS 16 "
                    "x 4096 tokens the 3.08 s step gives 2660 tokens/s/p, 2.6% below the "
                    "table's 2730 (and the table's 5.19 samples/s/p matches neither): the "
                    "step time is taken as the measurement",
                    "no activation recompute flag in the script",
                    "the 34B/70B rows of the same README are left out: the README converts "
                    "70B weights to TP 8 x PP 4, the stored script runs TP 8 x PP 8 with VP"],
})
