"""Write framework_profiles/*.yaml (drafts) with one key set for all profiles: python framework_profiles/make_profiles.py"""
import yaml
from pathlib import Path

OUT = Path(__file__).resolve().parent

CUDA_CTX = {
    "cuda_context_bytes": 750_000_000,
    "cuda_context_source": ("discuss.pytorch.org/t/high-gpu-memory-overhead/81330 (ptrblck: "
                            "'allocated by the CUDA context ... you might see an allocation of "
                            "~700+MB'); discuss.pytorch.org/t/what-is-the-reason-for-pytorchs-"
                            "gpu-memory-floor/73021 (723 MiB after the first CUDA call); "
                            "discuss.pytorch.org/t/how-pytorch-consumes-gpu/74776 (cuDNN ~750 MB)."
                            " Range 0.7-0.9 GB depending on CUDA version and loaded libraries"),
}
NCCL_BUF = {
    "comm_buffer_bytes": 4_194_304,
    "comm_buffer_rule": ("NCCL Simple-protocol buffer per channel per connected peer "
                         "(NCCL_BUFFSIZE); plus LL/LL128 buffers; grows with channels x peers "
                         "x communicators"),
    "comm_buffer_source": ("NVIDIA/nccl src/init.cc: '#define DEFAULT_BUFFSIZE (1 << 22) /* 4MiB */'"
                           ", NCCL_PARAM(BuffSize, \"BUFFSIZE\", -2)"),
}
HCCL_BUF = {
    "comm_buffer_bytes": 400_000_000,
    "comm_buffer_rule": "2 x HCCL_BUFFSIZE (default 200 MB) per HCCL communicator (send + receive)",
    "comm_buffer_source": ("hiascend.com CANN env reference HCCL_BUFFSIZE (envref_07_0080): 'default"
                           " value is 200' MB; 'Each communicator occupies 2 x HCCL_BUFFSIZE memory'"),
}
TORCH_ALLOC = ("PyTorch caching allocator (reserved > allocated; fragmentation grows with varying "
               "tensor sizes; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is the NeMo/"
               "Megatron-Bridge first remedy: docs.nvidia.com/nemo/megatron-bridge skills "
               "perf-activation-recompute 'most borderline OOMs are caused by memory "
               "fragmentation')")
TE_DELAYED = {
    "recipe": "delayed scaling (scale from the amax history of previous iterations)",
    "format": "HYBRID: E4M3 forward tensors, E5M2 backward (gradient) tensors",
    "amax_history_len": 1024,
    "amax_compute_algo": "max",
    "scaling_granularity": "per tensor",
    "fp8_gemms": ["qkv projection", "attention output projection", "fc1", "fc2"],
    "bf16_ops": ["attention core (QK^T, softmax, PV) unless fp8_dpa", "layer norms",
                 "embedding", "LM head (output layer)", "optimizer and master weights"],
    "cast_costs": ("every fp8 GEMM input is cast (quantize) per use; amax reduction and scale "
                   "update once per step (all-reduce of amaxes across the TP/DP group)"),
}
TE_SRC = ("NVIDIA TransformerEngine docs, common API: DelayedScaling(margin=0, fp8_format=Format.HYBRID,"
          " amax_history_len=1024, amax_compute_algo='max') (releases 1.12-2.15); Format.HYBRID = "
          "'FP8 tensors in the forward pass are in e4m3 format, ... backward pass ... e5m2'")

MCORE_DDP = ("NVIDIA/Megatron-LM megatron/core/distributed/distributed_data_parallel.py: 'if "
             "ddp_config.bucket_size is None: ddp_config.bucket_size = max(40000000, 1000000 * "
             "dp_group.size())'; 'if not ddp_config.overlap_grad_reduce: bucket_size = None'; "
             "distributed_data_parallel_config.py bucket_size docstring ('larger DP sizes need "
             "larger buckets to ensure collectives do not become latency-bound')")


def prof(**kw):
    return kw


# MindFormers Llama layer (mindformers/models/llama/llama_layer.py, llama_transformer.py; the
# configs' layernorm_compute_type and rotary_dtype float32): traffic beyond the layer's own
# kernels, bytes read + written per element. Counted with adjacent element-wise ops fused
# (jit_level O1 enables graph-kernel fusion: mindspore.cn tutorials "Custom Fusion": 'Setting
# jit_level=O1 to enable graph kernel fusion') but not across the CANN kernels (MatMul,
# BatchMatMul, RmsNorm, SiLU, Transpose, FlashAttentionScore), whose inputs and outputs are
# materialised in HBM. Not counted: the per-use Cast of fp16 weights to bf16 (param_init_type
# float16 in the 7B/13B/8B configs, bfloat16 in the 70B one: a config's, not the stack's).
MS_SRC = "mindspore-lab/mindformers mindformers/models/llama/llama_layer.py, llama_transformer.py"
MS_UNFUSED = [
    dict(name="rmsnorm_fp32", tensor="hidden", count=2, fwd_bytes=14, bwd_bytes=20,
         ops=("LlamaRMSNorm._rms_norm: Cast(x, float32) -> RmsNorm -> rcast to bf16, twice a layer. "
              "Forward: the Cast fuses into the residual Add (+4: fp32 written), RmsNorm in fp32 (read 4, "
              "write 4 vs the layer's bf16 2 + 2: +4), rcast alone before the MatMul (read 4, write 2: +6) "
              "= +14. Backward: Cast of dy to fp32 (2 + 4), the Cast re-run (self.cast.recompute(): 2 + 4), "
              "RmsNormGrad in fp32 (dy 4 + x 4 read, dx 4 written), dx Cast fused into the residual-grad "
              "add (+2) = 26 vs the layer's 6: +20. " + MS_SRC)),
    dict(name="rope_fp32_q", tensor="heads", count=1, fwd_bytes=22, bwd_bytes=22,
         ops=("LlamaRotaryEmbedding with rotary_dtype float32: x*cos + BatchMatMul(x, swap_mask)*sin. The "
              "BatchMatMul (cube) splits the element-wise chain: Cast to fp32 for it (read 2, write 4), the "
              "BatchMatMul in fp32 (read 4, write 4), the fused Mul/Mul/Add/Cast (read x 2 + rotated 4, "
              "write 2) = 22 per element; the backward mirrors it (22). The layer has no RoPE kernel. " + MS_SRC)),
    dict(name="rope_fp32_k", tensor="kv_heads", count=1, fwd_bytes=22, bwd_bytes=22,
         ops="as rope_fp32_q, on the keys"),
    dict(name="bnsd_transpose_q_out", tensor="heads", count=2, fwd_bytes=4, bwd_bytes=4,
         ops=("LLamaAttention.construct: Transpose of q from BSH to BNSD before RoPE / FlashAttentionScore "
              "and _merge_heads (merger_head_transpose) of the context back: read 2 + write 2 each, forward "
              "and backward. " + MS_SRC)),
    dict(name="bnsd_transpose_kv", tensor="kv_heads", count=2, fwd_bytes=4, bwd_bytes=4,
         ops="as bnsd_transpose_q_out, for k and v"),
    dict(name="silu_then_mul", tensor="ffn", count=1, fwd_bytes=4, bwd_bytes=7, activation="swiglu",
         ops=("LlamaFeedForward: hidden = Mul(w3(x), LlamaSiLU(w1(x))), SiLU a CANN kernel "
              "(P._inner_ops.SiLU). Forward SiLU (2 + 2) and Mul (4 + 2) = 10 vs the layer's one SwiGLU "
              "pass 6: +4; backward Mul grad (reads dy, silu, up; writes two: 10) and SiLUGrad (reads d, "
              "gate; writes 2: 6) = 16 vs 9: +7. " + MS_SRC)),
]


PROFILES = {
"megatron-lm-2021": prof(
    name="megatron-lm-2021",
    description="Megatron-LM as in Narayanan et al. 2021 (PTD-P, A100, fp16), before Megatron-Core",
    basis="Narayanan et al. 2021 (arXiv:2104.04473) Sec. 4; NVIDIA/Megatron-LM megatron/arguments.py (2021)",
    attention=dict(fused_default=False, implementation=None,
                   kernel="unfused QK^T and PV GEMMs with a fused scale-mask-softmax kernel (FusedScaleMaskSoftmax); no flash attention in 2021",
                   source="Narayanan 2021 Sec. 4.2 (fused scale+mask+softmax); apex/transformer/functional FusedScaleMaskSoftmax"),
    fused_kernels=dict(list=["bias + GeLU", "bias + dropout + add", "scale + mask + softmax", "layer norm (apex FusedLayerNorm)"],
                       source="Narayanan 2021 Sec. 4.2 'Computation Optimizations'"),
    fused_grad_accumulation=dict(enabled=False, detail="weight gradients accumulated by a separate add into the contiguous grad buffer",
                                 source="not in the 2021 code path (gradient-accumulation fusion arrived with Megatron-Core); assumption"),
    grad_reduction=dict(bucket_rule="one all-reduce of the contiguous gradient buffer after the last micro-batch's backward (local DDP)",
                        bucket_params=None, bucket_params_per_dp_rank=None, bucket_bytes=None, first_bucket_bytes=None,
                        collective="all_reduce", dtype="model dtype (fp16); fp32 only with --accumulate-allreduce-grads-in-fp32",
                        source="megatron/arguments.py: --DDP-impl default='local' (contiguous buffer, reduced after backward); --accumulate-allreduce-grads-in-fp32 optional"),
    param_gather=dict(rule="none (optimizer states replicated; no distributed optimizer in 2021)", dtype=None, source="Narayanan 2021 Sec. 3"),
    sharding=dict(optimizer_states="replicated", gradients="replicated", parameters="replicated over DP, split by TP/PP",
                  wrap_unit=None, reshard_after_forward=None, source="Narayanan 2021 Sec. 2-3"),
    overlap=dict(p2p_blocking="always", grad_reduce=False, param_gather=False, tp_comm=False,
                 pipeline_p2p="scatter/gather optimization: TP ranks send 1/t of the activation over IB, all-gather over NVLink",
                 fsdp_forward_prefetch_depth=None, fsdp_backward_prefetch_depth=None, limit_inflight_all_gathers=None,
                 source="Narayanan 2021 Sec. 4.1 (scatter/gather); local DDP all-reduce after backward"),
    fp8=dict(supported=False, recipe=None, format=None, amax_history_len=None, amax_compute_algo=None,
             scaling_granularity=None, fp8_gemms=[], bf16_ops=[], cast_costs=None, source="A100 has no FP8"),
    memory_overheads=dict(**CUDA_CTX, **NCCL_BUF, allocator=TORCH_ALLOC,
                          persistent_buffers="fp16 contiguous grad buffer (2 B/param); fp32 master params + Adam moments (12 B/param)",
                          workspace_bytes=None, workspace_source="not sourced"),
    cross_entropy=dict(implementation="vocab-parallel cross entropy (mpu.vocab_parallel_cross_entropy)", vocab_parallel=True,
                       logits_dtype="fp32 (output.float()) unless --fp16-lm-cross-entropy", fused=False,
                       source="megatron loss_fn: 'mpu.vocab_parallel_cross_entropy(output.float(), labels)' unless fp16_lm_cross_entropy"),
    activation_recompute=dict(options=["full (--checkpoint-activations)"], default_in_published_runs="full (Eq. 3 assumes it)",
                              source="Narayanan 2021 Sec. 3.5 and Eq. 3"),
    notes=["Validation runs: scenarios/validation r001-r010 (Narayanan Table 1)."],
),
"megatron-core": prof(
    name="megatron-core",
    description="Megatron-LM with Megatron-Core + Transformer Engine (core r0.8, 2024; H100)",
    basis="NVIDIA/Megatron-LM core_r0.8 (megatron/core, megatron/training/arguments.py), README 'Training Speed and Scalability'",
    attention=dict(fused_default=True, implementation="te",
                   kernel="Transformer Engine DotProductAttention: cuDNN fused attention or FlashAttention-2 (TE picks per GPU/shape; NVTE_FUSED_ATTN / NVTE_FLASH_ATTN)",
                   source="hardware_profiles/h100-sxm.yaml software.fused_attention (NeMo PR 9188 memory_optimizations.rst); Megatron-Core transformer_engine.py TEDotProductAttention"),
    fused_kernels=dict(list=["TE LayerNormLinear (norm fused into the following GEMM)", "bias + GeLU / SwiGLU", "bias + dropout + add", "fused RoPE", "masked softmax (when not flash)"],
                       source="Megatron-Core transformer layer specs (TE modules); --bias-gelu-fusion/--bias-swiglu-fusion defaults on"),
    fused_grad_accumulation=dict(enabled=True, detail="wgrad GEMM accumulates directly into the fp32 main_grad buffer (TE/APEX fused wgrad)",
                                 source="megatron/training/arguments.py --no-gradient-accumulation-fusion (store_false: default on); hardware_profiles/h100-sxm.yaml"),
    grad_reduction=dict(bucket_rule="bucket_size = max(40e6, 1e6 x dp_size) parameters; no buckets (one collective) when overlap_grad_reduce is off",
                        bucket_params=40_000_000, bucket_params_per_dp_rank=1_000_000, bucket_bytes=None, first_bucket_bytes=None,
                        collective="reduce_scatter with --use-distributed-optimizer, else all_reduce",
                        dtype="fp32 for bf16 training (accumulate_allreduce_grads_in_fp32 forced on)",
                        source=MCORE_DDP + "; megatron/training/arguments.py 'bfloat16 requires gradient accumulation and all-reduce to be done in fp32'"),
    param_gather=dict(rule="same buckets as the gradients; all-gather of bf16 params after the optimizer step (distributed optimizer)",
                      dtype="bf16", source="megatron/core/distributed param_and_grad_buffer.py (bucket all-gather with --overlap-param-gather)"),
    sharding=dict(optimizer_states="sharded over DP with --use-distributed-optimizer", gradients="full fp32 buffer kept, reduce-scattered per bucket",
                  parameters="replicated over DP", wrap_unit="flat contiguous buffer in buckets (reverse layer order)", reshard_after_forward=None,
                  source="megatron/core/optimizer/distrib_optimizer.py; docs/source/distrib_optimizer.md"),
    overlap=dict(p2p_blocking="non_interleaved", grad_reduce="--overlap-grad-reduce: a bucket's reduce-scatter starts when all its grads are ready, during the last micro-batch's backward",
                 param_gather="--overlap-param-gather: bucket all-gather issued ahead and waited on by the forward pre-hook of its first layer",
                 tp_comm="--tp-comm-overlap (needs --sequence-parallel): TE userbuffers split TP all-gather/reduce-scatter and pipeline them with the GEMM, 16 SMs",
                 pipeline_p2p="batched isend/irecv overlapped with compute (--overlap-p2p-communication default in interleaved schedule)",
                 fsdp_forward_prefetch_depth=None, fsdp_backward_prefetch_depth=None, limit_inflight_all_gathers=None,
                 source="Megatron-LM README (runs use --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap); TE module/base.py initialize_ub add_ub(num_sm=16)"),
    fp8=dict(supported=True, **TE_DELAYED, source=TE_SRC + "; Megatron --fp8-format hybrid --fp8-amax-history-len --fp8-amax-compute-algo"),
    memory_overheads=dict(**CUDA_CTX, **NCCL_BUF, allocator=TORCH_ALLOC,
                          persistent_buffers="fp32 main_grad buffer 4 B/param (not sharded even with the distributed optimizer); bucket padding to lcm(dp,128) elements; TE userbuffers for tp-comm overlap",
                          workspace_bytes=None, workspace_source="cuBLAS/TE workspaces not sourced"),
    cross_entropy=dict(implementation="vocab-parallel cross entropy over the TP group (tensor_parallel.vocab_parallel_cross_entropy); --cross-entropy-loss-fusion optional",
                       vocab_parallel=True, logits_dtype="fp32 (logits cast to float before the loss)", fused=False,
                       source="megatron/core/tensor_parallel/cross_entropy.py VocabParallelCrossEntropy.calculate_logits_max: 'vocab_parallel_logits = vocab_parallel_logits.float()'; megatron/core/fusions/fused_cross_entropy.py (opt-in --cross-entropy-loss-fusion)"),
    activation_recompute=dict(options=["selective (core attention)", "full (uniform/block, recompute_num_layers)"], default_in_published_runs="not stated in the README table",
                              source="megatron/training/arguments.py --recompute-granularity"),
    notes=["Validation runs: scenarios/validation r023-r031 (README table, H100)."],
),
"nemo": prof(
    name="nemo",
    description="NVIDIA NeMo (24.07 launcher recipes; 25.x Megatron-Bridge) on Megatron-Core + Transformer Engine",
    basis="NVIDIA/NeMo-Framework-Launcher conf/training/gpt3/*_fp8_performance.yaml; NVIDIA/NeMo docs performance_summary.md (24.07); NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (25.11)",
    attention=dict(fused_default=True, implementation="te", kernel="TE fused attention (cuDNN) or FlashAttention-2 via TE; dgxc GPT3-175B recipe sets NVTE_FUSED_ATTN=0 (FlashAttention-2)",
                   source="scenarios/calibration/nemo-h100-gpt3-175b-128g.yaml header; NeMo docs memory_optimizations.rst (PR 9188)"),
    fused_kernels=dict(list=["bias + GeLU", "bias + dropout + add", "masked softmax", "persistent layer norm", "TE LayerNormLinear"],
                       source="NeMo-Framework-Launcher 5b_fp8_performance.yaml (bias_activation_fusion, bias_dropout_add_fusion, masked_softmax_fusion, persist_layer_norm: True)"),
    fused_grad_accumulation=dict(enabled=True, detail="gradient_accumulation_fusion: True", source="5b_fp8_performance.yaml 'gradient_accumulation_fusion: True # Fuse weight gradient accumulation to GEMMs'"),
    grad_reduction=dict(bucket_rule="Apex distributed_fused_adam buckets of bucket_cap_mb MB (200 in the GPT3-5B FP8 recipe, 220 in GPT3-175B); Megatron-Bridge uses Megatron-Core's max(40e6, 1e6 x dp) parameters",
                        bucket_params=None, bucket_params_per_dp_rank=None, bucket_bytes=200_000_000, first_bucket_bytes=None,
                        collective="reduce_scatter (distributed optimizer)", dtype="bf16 (grad_sync_dtype: bf16 in the performance recipes)",
                        source="5b_fp8_performance.yaml optim: name distributed_fused_adam, bucket_cap_mb 200, overlap_grad_sync True, overlap_param_sync true, contiguous_grad_buffer True, grad_sync_dtype bf16; gpt3_175b_hydra.yaml bucket_cap_mb 220"),
    param_gather=dict(rule="same buckets, all-gather overlapped with the next forward (overlap_param_sync)", dtype="bf16", source="5b_fp8_performance.yaml"),
    sharding=dict(optimizer_states="sharded over DP (distributed_fused_adam / distributed optimizer)", gradients="reduce-scattered, contiguous buffer",
                  parameters="replicated over DP (Megatron-FSDP optional in Megatron-Bridge: FSDP column of its table)", wrap_unit="buckets", reshard_after_forward=None,
                  source="Megatron-Bridge performance-summary.md nomenclature 'FSDP = 1: use FSDP'"),
    overlap=dict(p2p_blocking="non_interleaved", grad_reduce=True, param_gather=True, tp_comm="ub_tp_comm_overlap (True in the GPT3-175B recipe, False in the 5B FP8 recipe)", pipeline_p2p="overlapped (Megatron-Core default)",
                 fsdp_forward_prefetch_depth=None, fsdp_backward_prefetch_depth=None, limit_inflight_all_gathers=None,
                 source="5b_fp8_performance.yaml ub_tp_comm_overlap: False; calibration nemo-h100-gpt3-175b-128g.yaml (ub_tp_comm_overlap)"),
    fp8=dict(supported=True, **{**TE_DELAYED, "recipe": "delayed scaling (NeMo 24.07: fp8_hybrid, fp8_amax_history_len 1024, fp8_amax_compute_algo max, fp8_interval 1, fp8_margin 0); Megatron-Bridge 25.11 H100 rows use FP8-CS (current scaling: scale from the current tensor's amax, no history)"},
             source=TE_SRC + "; 5b_fp8_performance.yaml (fp8: True, fp8_hybrid: True, fp8_amax_history_len: 1024, fp8_amax_compute_algo: max); Megatron-Bridge performance-summary.md (FP8-CS, FP8-MX)"),
    memory_overheads=dict(**CUDA_CTX, **NCCL_BUF, allocator=TORCH_ALLOC,
                          persistent_buffers="contiguous grad buffer (bf16 with grad_sync_dtype bf16, else fp32); distributed optimizer shards fp32 master + moments; TE userbuffers with ub_tp_comm_overlap",
                          workspace_bytes=None, workspace_source="not sourced"),
    cross_entropy=dict(implementation="Megatron-Core vocab-parallel cross entropy", vocab_parallel=True,
                       logits_dtype="fp32 (fp16_lm_cross_entropy: False in the recipes)", fused=False,
                       source="5b_fp8_performance.yaml 'fp16_lm_cross_entropy: False # Move the cross entropy unreduced loss calculation for lm head to fp16'"),
    activation_recompute=dict(options=["selective", "full (block/uniform)"], default_in_published_runs="selective granularity with 0 layers in the 5B FP8 recipe (none in effect); not stated in the summary tables",
                              source="5b_fp8_performance.yaml activations_checkpoint_granularity: selective, activations_checkpoint_num_layers: 0"),
    notes=["Calibration runs scenarios/calibration/nemo-h100-*; pending nemo2407-* and bridge2511-* cases."],
),
"megatron-deepspeed": prof(
    name="megatron-deepspeed",
    description="Megatron-DeepSpeed (Megatron-LM 2021 model code + DeepSpeed pipeline engine and ZeRO), BLOOM-176B and MT-NLG 530B era (2021-2022, A100)",
    basis="bigscience-workshop/bigscience train/tr11-176B-ml (README, slurm); Smith et al. 2022 (arXiv:2201.11990) Sec. 2",
    attention=dict(fused_default=False, implementation=None, kernel="Megatron fused scale-mask-softmax (BLOOM: --abort-on-unmet-fused-kernel-constraints); no flash attention",
                   source="tr11-176B-ml.slurm GPT_ARGS"),
    fused_kernels=dict(list=["scale + mask + softmax", "bias + GeLU", "bias + dropout + add", "apex FusedAdam"], source="tr11-176B-ml README 'Optimizer: apex.optimizers.FusedAdam'"),
    fused_grad_accumulation=dict(enabled=False, detail="BF16_Optimizer accumulates grads into an fp32 buffer", source="tr11-176B-ml README 'The new BF16_Optimizer accumulates grads in fp32'"),
    grad_reduction=dict(bucket_rule="DeepSpeed reduce_bucket_size (default 5e8 elements) for ZeRO-1/2; BF16_Optimizer (ZeRO stage 0 config) reduces its fp32 grads itself",
                        bucket_params=500_000_000, bucket_params_per_dp_rank=None, bucket_bytes=None, first_bucket_bytes=None,
                        collective="reduce_scatter (ZeRO) / all_reduce", dtype="fp32 (BF16_Optimizer) ; NCCL bf16 comms available with pt-1.11",
                        source="deepspeed/runtime/zero/config.py reduce_bucket_size = pp_int(5e8); tr11-176B-ml README 'Deepspeed config' and 'Packages'"),
    param_gather=dict(rule="DeepSpeed allgather_bucket_size (default 5e8 elements) after the step", dtype="bf16", source="deepspeed/runtime/zero/config.py allgather_bucket_size = pp_int(5e8)"),
    sharding=dict(optimizer_states="sharded over DP (ZeRO-1; BF16_Optimizer 'implements its own ZeRO Stage 1')", gradients="fp32 accumulation buffer, not sharded (4 B/param)",
                  parameters="replicated over DP, split by TP/PP", wrap_unit=None, reshard_after_forward=None,
                  source="tr11-176B-ml README: 'It doesn't shard the static fp32 buffer it reuses, which consumes 4 bytes * params of additional memory'"),
    overlap=dict(p2p_blocking="always", grad_reduce="DeepSpeed overlap_comm (default only for ZeRO-3)", param_gather=False, tp_comm=False,
                 pipeline_p2p="DeepSpeed PipelineEngine 1F1B send/recv (not interleaved)",
                 fsdp_forward_prefetch_depth=None, fsdp_backward_prefetch_depth=None, limit_inflight_all_gathers=None,
                 source="deepspeed/runtime/zero/config.py overlap_comm_valid: 'self.overlap_comm = self.stage == ZeroStageEnum.weights'; MT-NLG Sec. 2.3 (1F1B)"),
    fp8=dict(supported=False, recipe=None, format=None, amax_history_len=None, amax_compute_algo=None, scaling_granularity=None,
             fp8_gemms=[], bf16_ops=[], cast_costs=None, source="A100 era"),
    memory_overheads=dict(**CUDA_CTX, **NCCL_BUF, allocator=TORCH_ALLOC,
                          persistent_buffers="fp32 grad accumulation buffer 4 B/param unsharded (BF16_Optimizer); bf16 + fp32 weights (2 + 4 B/param) and fp32 moments (8 B/param) per the checkpoint breakdown",
                          workspace_bytes=None, workspace_source="not sourced; BLOOM reports about 60 GB per GPU in use (bigscience.notion.site BigScience-176B-Model)"),
    cross_entropy=dict(implementation="Megatron vocab-parallel cross entropy", vocab_parallel=True, logits_dtype="fp32", fused=False,
                       source="Megatron-LM 2021 loss_fn (output.float())"),
    activation_recompute=dict(options=["full (--checkpoint-activations / --deepspeed-activation-checkpointing)"], default_in_published_runs="full",
                              source="tr11-176B-ml.slurm"),
    notes=["pp-partition-method 'type:transformer|embedding' balances the tied embeddings as pipeline layers (BLOOM).",
           "Pending cases: mds-bloom-176b-384g, mds-mtnlg-530b-*."],
),
"deepspeed-zero": prof(
    name="deepspeed-zero",
    description="DeepSpeed ZeRO stages 1-3 (data parallel with sharded states), current DeepSpeed defaults",
    basis="deepspeedai/DeepSpeed deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig defaults)",
    attention=dict(fused_default=False, implementation=None, kernel="whatever the model code uses (DeepSpeed does not replace attention in training)", source="DeepSpeed is model-agnostic"),
    fused_kernels=dict(list=["FusedAdam / CPUAdam (optimizer)"], source="deepspeed/ops/adam"),
    fused_grad_accumulation=dict(enabled=False, detail="contiguous_gradients copies grads into a contiguous buffer as produced", source="config.py contiguous_gradients: bool = True"),
    grad_reduction=dict(bucket_rule="reduce_bucket_size elements per reduce(-scatter) (default 5e8 elements)",
                        bucket_params=500_000_000, bucket_params_per_dp_rank=None, bucket_bytes=None, first_bucket_bytes=None,
                        collective="reduce_scatter (reduce_scatter: True) for stage 2/3; all_reduce for stage 0/1",
                        dtype="communication_data_type; default None = inferred from the enabled half precision (fp16 or bf16) (deepspeed/runtime/config.py get_communication_data_type: 'if val is None: return val # we must determine it by other parameters'; PR 3370 fixed the bf16 default)",
                        source="deepspeed/runtime/zero/config.py: reduce_bucket_size = Field(pp_int(5e8)); reduce_scatter: bool = True"),
    param_gather=dict(rule="stage 1/2: allgather_bucket_size elements (default 5e8) after the step; stage 3: prefetch_bucket_size (5e7) elements fetched ahead of use, params < param_persistence_threshold (1e5) never partitioned, at most max_live_parameters (1e9) resident, max_reuse_distance 1e9",
                      dtype="model dtype (fp16/bf16)",
                      source="config.py allgather_bucket_size = pp_int(5e8); stage3_prefetch_bucket_size = pp_int(5e7); stage3_param_persistence_threshold = pp_int(1e5); stage3_max_live_parameters = pp_int(1e9); stage3_max_reuse_distance = pp_int(1e9)"),
    sharding=dict(optimizer_states="stage >= 1", gradients="stage >= 2", parameters="stage 3", wrap_unit="per submodule (hooks on each nn.Module; fine-grained modules grouped by stage3_module_granularity_threshold, default 0)",
                  reshard_after_forward="stage 3: released after use unless within max_reuse_distance", source="config.py ZeroStageEnum and docstrings"),
    overlap=dict(p2p_blocking="never", grad_reduce="overlap_comm: default True only for stage 3 (validator), configurable", param_gather="stage 3 prefetch up to prefetch_bucket_size elements ahead (trace-based)",
                 tp_comm=False, pipeline_p2p=None,
                 fsdp_forward_prefetch_depth=None, fsdp_backward_prefetch_depth=None, limit_inflight_all_gathers=None,
                 source="config.py overlap_comm_valid ('self.overlap_comm = self.stage == ZeroStageEnum.weights'); prefetch_bucket_size docstring 'Maximum number of parameter elements to fetch ahead of use'"),
    fp8=dict(supported=False, recipe=None, format=None, amax_history_len=None, amax_compute_algo=None, scaling_granularity=None,
             fp8_gemms=[], bf16_ops=[], cast_costs=None, source="not part of ZeRO (TE can be combined by the model code)"),
    memory_overheads=dict(**CUDA_CTX, **NCCL_BUF, allocator=TORCH_ALLOC,
                          persistent_buffers="reduce and all-gather buckets (bucket elements x dtype bytes, e.g. 5e8 x 2 B = 1 GB each); stage 3 prefetch buffers up to 5e7 elements",
                          workspace_bytes=None, workspace_source="not sourced"),
    cross_entropy=dict(implementation="model code's own", vocab_parallel=False, logits_dtype=None, fused=False, source="DeepSpeed is model-agnostic"),
    activation_recompute=dict(options=["deepspeed.checkpointing (partition_activations, cpu_checkpointing)"], default_in_published_runs=None, source="deepspeed/runtime/activation_checkpointing"),
    notes=["AscendSpeed LLaMA2-7B case (mindspeed) runs ZeRO-2 with reduce/allgather_bucket_size 1e8 and overlap_comm true."],
),
"pytorch-fsdp": prof(
    name="pytorch-fsdp",
    description="PyTorch FSDP1 (FullyShardedDataParallel wrapper) and DDP defaults; FSDP2 (fully_shard) noted where it differs",
    basis="pytorch.org/docs/stable/fsdp (constructor defaults); docs.pytorch.org notes/fsdp.html (prefetch nuances); pytorch/pytorch PR 104900, PR 128884",
    attention=dict(fused_default=True, implementation="fa2", kernel="F.scaled_dot_product_attention dispatches to FlashAttention-2 / memory-efficient / cuDNN backends when the model uses it", source="torch.nn.functional.scaled_dot_product_attention docs"),
    fused_kernels=dict(list=[], source="none added by FSDP itself"),
    fused_grad_accumulation=dict(enabled=False, detail="grads accumulate in the unsharded param.grad (no_sync) or are reduce-scattered per micro-batch", source="FSDP no_sync docs"),
    grad_reduction=dict(bucket_rule="FSDP: one reduce-scatter per wrap unit (FlatParameter) per backward; DDP: bucket_cap_mb 25 MB, first bucket 1 MB",
                        bucket_params=None, bucket_params_per_dp_rank=None, bucket_bytes=25 * 1024 * 1024, first_bucket_bytes=1024 * 1024,
                        collective="reduce_scatter (FULL_SHARD, SHARD_GRAD_OP); all_reduce (DDP, NO_SHARD)",
                        dtype="MixedPrecision.reduce_dtype; if None but param_dtype is set, reduce_dtype takes param_dtype",
                        source="torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25) and dist._DEFAULT_FIRST_BUCKET_BYTES; torch.distributed.fsdp.MixedPrecision docstring"),
    param_gather=dict(rule="one all-gather per wrap unit before its forward and again before its backward (FULL_SHARD)", dtype="MixedPrecision.param_dtype", source="docs.pytorch.org notes/fsdp.html"),
    sharding=dict(optimizer_states="sharded", gradients="sharded", parameters="sharded (FULL_SHARD) / kept after forward (SHARD_GRAD_OP)",
                  wrap_unit="auto_wrap_policy unit, typically one transformer block (transformer_auto_wrap_policy)", reshard_after_forward="FULL_SHARD: yes; FSDP2 fully_shard reshard_after_forward=True default",
                  source="FullyShardedDataParallel(sharding_strategy=None -> FULL_SHARD)"),
    overlap=dict(p2p_blocking="never", grad_reduce="reduce-scatter of a unit issued on a separate stream right after its backward",
                 param_gather="implicit forward prefetch (all-gather on a separate stream overlaps the previous unit's compute; the first cannot overlap); forward_prefetch=False default; backward_prefetch=BACKWARD_PRE default",
                 tp_comm=False, pipeline_p2p=None,
                 fsdp_forward_prefetch_depth=1, fsdp_backward_prefetch_depth=1, limit_inflight_all_gathers=2,
                 source="FullyShardedDataParallel(..., backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=False, limit_all_gathers=True, ...) (pytorch.org/docs/stable/fsdp); notes/fsdp.html 'Implicit forward prefetching (always enabled)'; PR 104900 'Default limit_all_gathers=True' (rate limiter); PR 128884 FSDP2 'allows two all-gather output tensors to be alive at once' and explicit backward prefetch in reverse post-forward order"),
    fp8=dict(supported=False, recipe=None, format=None, amax_history_len=None, amax_compute_algo=None, scaling_granularity=None,
             fp8_gemms=[], bf16_ops=[], cast_costs=None, source="FSDP itself has no fp8 (torchao/TE add it; see torchtitan, llm-foundry)"),
    memory_overheads=dict(**CUDA_CTX, **NCCL_BUF, allocator=TORCH_ALLOC,
                          persistent_buffers="unsharded params of up to 2 in-flight units (rate limiter) plus the padded flat shards",
                          workspace_bytes=None, workspace_source="not sourced"),
    cross_entropy=dict(implementation="model code's own (torch.nn.functional.cross_entropy)", vocab_parallel=False, logits_dtype="model choice", fused=False, source="FSDP is model-agnostic"),
    activation_recompute=dict(options=["torch.utils.checkpoint / apply_activation_checkpointing per wrap unit"], default_in_published_runs=None, source="torch.distributed.algorithms._checkpoint"),
    notes=["Zhao et al. 2023 (PyTorch FSDP, VLDB) measured runs were not found in tabular form in the corpora searched."],
),
"torchtitan": prof(
    name="torchtitan",
    description="torchtitan (PyTorch-native 4D: FSDP2 + DTensor TP/SP + pipelining + CP; Float8 via torchao), Dec 2024",
    basis="pytorch/torchtitan @9dec370 (2024-12-26) docs/performance.md; torchtitan/config_manager.py; parallelize_llama.py; Liang et al. 2024 (arXiv:2410.06511)",
    attention=dict(fused_default=True, implementation="fa2", kernel="F.scaled_dot_product_attention (FlashAttention-2 / cuDNN backend) in the Llama model", source="torchtitan/models/llama/model.py (sdpa)"),
    fused_kernels=dict(list=["torch.compile per TransformerBlock (fuses norms, RoPE, SwiGLU elementwise) when training.compile"], source="docs/performance.md 'FSDP + torch.compile' rows; config compile: bool = False"),
    fused_grad_accumulation=dict(enabled=False, detail="FSDP2 reduce-scatters each micro-batch's grads unless gradient accumulation is deferred", source="FSDP2 semantics; not a torchtitan option in Dec 2024"),
    grad_reduction=dict(bucket_rule="one reduce-scatter per fully_shard unit (each TransformerBlock; embeddings/norm/output in the root unit)",
                        bucket_params=None, bucket_params_per_dp_rank=None, bucket_bytes=None, first_bucket_bytes=None,
                        collective="reduce_scatter (FSDP dim); all_reduce across data_parallel_replicate (HSDP)",
                        dtype="fp32 (mixed_precision_reduce: Literal['float32'] = 'float32')",
                        source="torchtitan config_manager.py 'mixed_precision_reduce ... = \"float32\"' and 'mixed_precision_param ... = \"bfloat16\"'; parallelize_llama.py MixedPrecisionPolicy(param_dtype, reduce_dtype)"),
    param_gather=dict(rule="one all-gather per block before forward and (after reshard) before backward; with PP no reshard after forward", dtype="bf16 (Float8 all-gather optional: enable_fsdp_float8_all_gather)",
                      source="parallelize_llama.py: 'reshard_after_forward = int(layer_id) < len(model.layers) - 1 and not parallel_dims.pp_enabled' ('When using Pipeline Parallelism, generally zero-2 is best')"),
    sharding=dict(optimizer_states="sharded", gradients="sharded", parameters="sharded (FSDP2 per-parameter DTensor dim-0 shards)",
                  wrap_unit="TransformerBlock", reshard_after_forward="True except the last block; False for every block when PP is on",
                  source="parallelize_llama.py apply_fsdp"),
    overlap=dict(p2p_blocking="never", grad_reduce="FSDP2 reduce-scatter stream overlapping backward", param_gather="FSDP2 implicit forward prefetch (2 all-gather outputs alive) and explicit backward prefetch of the next block",
                 tp_comm="AsyncTP (experimental.enable_async_tensor_parallel: SymmetricMemory micro-pipelined all-gather/reduce-scatter + matmul) when enabled; plain DTensor TP otherwise",
                 pipeline_p2p="torch.distributed.pipelining schedules (1F1B, Interleaved1F1B, ...)",
                 fsdp_forward_prefetch_depth=1, fsdp_backward_prefetch_depth=1, limit_inflight_all_gathers=2,
                 source="pytorch PR 128884 (FSDP2 prefetch defaults); docs/performance.md Table 4 '2D + AsyncTP'"),
    fp8=dict(supported=True, recipe="torchao Float8Linear, dynamic scaling (scale from the current amax every step, no history)",
             format="E4M3 for inputs and weights, E5M2 for grad outputs (torchao defaults)", amax_history_len=None, amax_compute_algo="current tensor amax",
             scaling_granularity="tensorwise", fp8_gemms=["every nn.Linear in the TransformerBlocks (wq, wk, wv, wo, w1, w2, w3)"],
             bf16_ops=["output head (filter_fqns = 'output')", "SDPA attention core", "RMSNorm", "embedding"],
             cast_costs="per-GEMM dynamic amax + cast of input, weight and grad_output; precompute_float8_dynamic_scale_for_fsdp batches the weight amax when fp8 all-gather is on",
             source="torchtitan train_configs/llama3_8b.toml [float8] enable_fsdp_float8_all_gather = false, precompute_float8_dynamic_scale_for_fsdp = false, filter_fqns = 'output'; docs/performance.md 'Float8 is enabled (on nn.Linear modules)'"),
    memory_overheads=dict(**CUDA_CTX, **NCCL_BUF, allocator=TORCH_ALLOC,
                          persistent_buffers="FSDP2 all-gather outputs of up to 2 blocks; SymmetricMemory buffers with AsyncTP",
                          workspace_bytes=None, workspace_source="measured peaks per run in docs/performance.md (e.g. 82.4 GiB for 8B on 8 GPUs, local batch 2, seq 8192, selective AC)"),
    cross_entropy=dict(implementation="torch.nn.functional.cross_entropy; loss_parallel (vocab-parallel over TP) unless disable_loss_parallel",
                       vocab_parallel=True, logits_dtype="fp32 (logits cast to float in the loss function)", fused=False,
                       source="config_manager.py disable_loss_parallel: bool = False; torchtitan train.py loss_fn: 'torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))'"),
    activation_recompute=dict(options=["none", "selective op (save matmul outputs per policy)", "selective layer (every n-th block)", "full"], default_in_published_runs="selective op for 8B tables, full for 70B/405B",
                              source="train_configs/llama3_8b.toml [activation_checkpoint] mode = 'selective', selective_ac_option = 'op'"),
    notes=["Published runs used H100 96 GB HBM2e at 500 W (not the h100-sxm profile's 80 GB/700 W)."],
),
"llm-foundry": prof(
    name="llm-foundry",
    description="MosaicML llm-foundry MPT training on Composer with PyTorch FSDP1 (2023-2024 benchmark tables)",
    basis="mosaicml/llm-foundry scripts/train/benchmarking/README.md; scripts/train/yamls/pretrain/mpt-*.yaml; mosaicml/composer composer/utils/parallelism.py FSDPConfig; composer/core/precision.py",
    attention=dict(fused_default=True, implementation="fa2", kernel="FlashAttention (flash-attn) in MPT attention ('our models use Flash Attention'); triton variant in older yamls",
                   source="benchmarking/README.md HFU note; mpt-70b.yaml attn_config attn_impl"),
    fused_kernels=dict(list=["flash-attn fused cross entropy", "LPLayerNorm (low-precision layer norm)"], source="llm-foundry hf_causal_lm loss_fn default 'fused_crossentropy' (flash_attn.losses.cross_entropy)"),
    fused_grad_accumulation=dict(enabled=False, detail="Composer micro-batches under FSDP; grads reduce-scattered per micro-batch", source="Composer FSDP semantics"),
    grad_reduction=dict(bucket_rule="one reduce-scatter per FSDP unit (one MPT block, auto_wrap)", bucket_params=None, bucket_params_per_dp_rank=None, bucket_bytes=None, first_bucket_bytes=None,
                        collective="reduce_scatter (FULL_SHARD)", dtype="fp32 with mixed_precision DEFAULT (param bf16, reduce fp32, buffer fp32); bf16 with PURE",
                        source="composer parallelism.py FSDPConfig mixed_precision: str = 'DEFAULT'; benchmark table 'MP Mode' column (DEFAULT/PURE)"),
    param_gather=dict(rule="all-gather per MPT block before forward and backward", dtype="bf16", source="FSDP FULL_SHARD"),
    sharding=dict(optimizer_states="sharded", gradients="sharded", parameters="sharded (FULL_SHARD)", wrap_unit="MPT block (auto_wrap: True)", reshard_after_forward=True,
                  source="composer FSDPConfig auto_wrap: bool = True; table 'Sharding Strategy' FULL_SHARD"),
    overlap=dict(p2p_blocking="never", grad_reduce="FSDP reduce-scatter stream", param_gather="implicit forward prefetch; backward_prefetch BACKWARD_POST (limit 1); forward_prefetch False",
                 tp_comm=False, pipeline_p2p=None, fsdp_forward_prefetch_depth=1, fsdp_backward_prefetch_depth=1, limit_inflight_all_gathers=2,
                 source="composer/utils/parallelism.py FSDPConfig: backward_prefetch: str = 'BACKWARD_POST', backward_prefetch_limit: int = 1, forward_prefetch: bool = False, forward_prefetch_limit: int = 1, limit_all_gathers: bool = True; mpt-70b.yaml limit_all_gathers: true"),
    fp8=dict(supported=True, recipe="Transformer Engine delayed scaling via Composer amp_fp8", format="HYBRID (E4M3 forward, E5M2 backward)", amax_history_len=16, amax_compute_algo="max",
             scaling_granularity="per tensor", fp8_gemms=["TE linear layers (fc_type 'te')"], bf16_ops=["attention core (flash-attn)", "norms", "embedding/LM head"],
             cast_costs="TE per-GEMM casts and amax bookkeeping",
             source="composer/core/precision.py get_precision_context: AMP_FP8 default precision_config {'fp8_format': Format.HYBRID, 'amax_history_len': 16, 'amax_compute_algo': 'max'}; te.fp8_autocast"),
    memory_overheads=dict(**CUDA_CTX, **NCCL_BUF, allocator=TORCH_ALLOC, persistent_buffers="FSDP flat-parameter shards and up to 2 unsharded units (limit_all_gathers)",
                          workspace_bytes=None, workspace_source="not sourced"),
    cross_entropy=dict(implementation="flash-attn CrossEntropyLoss (fused_crossentropy, default loss_fn)", vocab_parallel=False, logits_dtype="model dtype inside the fused kernel (fp32 accumulation)", fused=True,
                       source="llm-foundry models/hf/hf_causal_lm.py: loss_fn_config = om_model_config.get('loss_fn', 'fused_crossentropy') -> flash_attn.losses.cross_entropy.CrossEntropyLoss"),
    activation_recompute=dict(options=["none", "full block (activation_checkpointing: true)"], default_in_published_runs="per table column 'Activation Checkpointing'",
                              source="benchmarking/README.md; composer FSDPConfig activation_checkpointing: bool = False"),
    notes=["The benchmark's microbatching may use micro-batches that do not divide the global batch (README); the pending cases use only rows where MBS x GA x GPUs = GBS."],
),
"mindspore": prof(
    name="mindspore",
    description="MindSpore + MindFormers on Ascend 910B (graph mode, semi-auto parallel, optimizer parallel)",
    basis="mindspore-lab/mindformers configs (llama2/llama3); mindspore.set_auto_parallel_context docs (r2.x); CANN HCCL env reference",
    attention=dict(fused_default=True, implementation=None, kernel="Ascend FlashAttentionScore operator (use_flash_attention: True)", source="mindformers configs/llama2/pretrain_llama2_7b_bf16.yaml 'use_flash_attention: True # FA can accelerate training or finetune'"),
    fused_kernels=dict(list=["graph-mode operator fusion (jit_level O1)", "fine_grain_interleave for TP comm/compute interleaving",
                             "NOT fused in the Llama configs: RMSNorm computed in fp32 between Casts (layernorm_compute_type: float32; "
                             "IR ops 'attention_norm.rcast', 'ffn_norm.norm'), SiLU and Mul as separate ops ('feed_forward.w1.activation', "
                             "'feed_forward.mul'), rotary embedding in fp32 (rotary_dtype: float32)"],
                       source=("pretrain_llama2_7b_bf16.yaml context.jit_config.jit_level 'O1', model_config layernorm_compute_type / "
                               "rotary_dtype; finetune_llama2_70b_bf16_32p.yaml fine_grain_interleave: 2; mindspore-ai/docs "
                               "docs/mindformers/docs/source_zh_cn/perf_optimize/perf_optimize.md (select_recompute op names, "
                               "Cast Float16 (1,4096,4096) -> Float32 in the IR excerpt)"),
                       unfused_passes=MS_UNFUSED),
    fused_grad_accumulation=dict(enabled=None, detail="gradient accumulation inside the compiled graph (gradient_accumulation_steps / micro_batch_num)", source="mindformers runner_config"),
    grad_reduction=dict(bucket_rule="graph-level communication fusion of gradient all-reduce / reduce-scatter; MindFormers gradient_aggregation_group 4", bucket_params=None, bucket_params_per_dp_rank=None, bucket_bytes=None, first_bucket_bytes=None,
                        collective="reduce_scatter with optimizer parallel, else all_reduce", dtype="fp32 (gradient_fp32_sync default True)",
                        source="mindspore.set_auto_parallel_context docs: 'gradient_fp32_sync (bool) - Run allreduce of gradients in fp32 ... Default: True'; comm_fusion option; mindformers parallel_config gradient_aggregation_group: 4"),
    param_gather=dict(rule="optimizer parallel all-gathers parameters before use; parameters below parallel_optimizer_threshold (64 KB in the configs) are not sharded", dtype="bf16/fp16 (param_init_type)",
                      source="mindformers parallel.parallel_optimizer_config parallel_optimizer_threshold: 64; enable_parallel_optimizer: True"),
    sharding=dict(optimizer_states="sharded over DP (enable_parallel_optimizer)", gradients="gradient_accumulation_shard: False in the configs", parameters="split by model_parallel / pipeline_stage",
                  wrap_unit=None, reshard_after_forward=None, source="mindformers configs parallel_optimizer_config"),
    overlap=dict(p2p_blocking="never", grad_reduce="graph scheduler overlaps fused gradient communication with backward", param_gather="parallel_optimizer_comm_recompute False; all-gather inserted in the forward graph",
                 tp_comm="micro_batch_interleave_num 2 (config comment: 'when model parallel is greater than 1 ... may accelerate'); fine_grain_interleave", pipeline_p2p="pipeline_stage with micro_batch_num micro-batches",
                 fsdp_forward_prefetch_depth=None, fsdp_backward_prefetch_depth=None, limit_inflight_all_gathers=None,
                 source="mindformers llama2 configs (micro_batch_interleave_num comment)"),
    fp8=dict(supported=False, recipe=None, format=None, amax_history_len=None, amax_compute_algo=None, scaling_granularity=None, fp8_gemms=[], bf16_ops=[], cast_costs=None, source="910B has no FP8"),
    memory_overheads=dict(cuda_context_bytes=None, cuda_context_source="no figure found for the Ascend runtime context",
                          **HCCL_BUF, allocator="MindSpore memory pool capped by context.max_device_memory (58-59 GB of 64 GB in the 8-device configs, 53 GB in the 70B 32-device config)",
                          persistent_buffers="fp32 optimizer states (FP32StateAdamWeightDecay) sharded; fp16/bf16 params",
                          workspace_bytes=None, workspace_source="not sourced"),
    cross_entropy=dict(implementation="MindFormers CrossEntropyLoss (vocab_emb_dp: True keeps the embedding/LM head data parallel in the 7B/13B/8B configs)", vocab_parallel=False, logits_dtype=None, fused=None,
                       source="mindformers parallel_config vocab_emb_dp"),
    activation_recompute=dict(options=["recompute (full)", "select_recompute (per layer list)", "mp_comm_recompute", "recompute_slice_activation"], default_in_published_runs="per config",
                              source="mindformers recompute_config"),
    notes=["Pending cases mf-910b-*."],
),
"mindspeed": prof(
    name="mindspeed",
    description="MindSpeed / MindSpeed-LLM (formerly AscendSpeed / ModelLink): Megatron-Core patched for Ascend NPUs via torch_npu",
    basis="Ascend/MindSpeed-LLM examples and docs; Ascend/AscendSpeed examples/llama2 (2023)",
    attention=dict(fused_default=True, implementation=None,
                   kernel=("torch_npu npu_fusion_attention (FlashAttention on Ascend, --use-flash-attn). NOT fused: AscendSpeed 2023 --triangle-attn "
                           "(block 1024) is TriangleAttention, a Python loop over query blocks that materialises each block's scores "
                           "(torch.matmul), runs npu_scaled_masked_softmax and a second torch.matmul: unfused attention that skips the "
                           "blocks above the diagonal (10 of 16 score blocks at seq 4096, block 1024); runs using it set model.attention: standard"),
                   source=("AscendSpeed examples/llama2/pretrain_llama2_7b_zero_8p.sh (--triangle-attn --triangle-block-size 1024); "
                           "Ascend/AscendSpeed ascendspeed/model/triangle_attention.py (class TriangleAttention: compute_attn = "
                           "torch.matmul, scaled_masked_softmax, torch.matmul per block); MindSpeed-LLM example scripts (--use-flash-attn)")),
    fused_kernels=dict(list=["fused RMSNorm", "fused SwiGLU", "fused rotary position embedding"], source="pretrain_llama2_7b_zero_8p.sh --use-fused-rotary-pos-emb; MindSpeed-LLM scripts --use-fused-rmsnorm --use-fused-swiglu"),
    fused_grad_accumulation=dict(enabled=None, detail="inherits Megatron-Core gradient_accumulation_fusion where the NPU kernel exists", source="not verified"),
    grad_reduction=dict(bucket_rule="Megatron-Core rule max(40e6, 1e6 x dp) parameters (Megatron-Core DDP unchanged); DeepSpeed buckets in the 2023 AscendSpeed ZeRO scripts (1e8 elements)",
                        bucket_params=40_000_000, bucket_params_per_dp_rank=1_000_000, bucket_bytes=None, first_bucket_bytes=None,
                        collective="reduce_scatter (distributed optimizer) / all_reduce", dtype="fp32 for bf16 (Megatron-Core rule)",
                        source=MCORE_DDP + "; pretrain_llama2_7b_zero_8p.sh reduce_bucket_size 1e8, allgather_bucket_size 1e8"),
    param_gather=dict(rule="Megatron-Core distributed optimizer buckets", dtype="bf16", source="Megatron-Core"),
    sharding=dict(optimizer_states="distributed optimizer (or DeepSpeed ZeRO in AscendSpeed)", gradients="per ZeRO stage", parameters="replicated over DP", wrap_unit="buckets", reshard_after_forward=None, source="Megatron-Core / DeepSpeed"),
    overlap=dict(p2p_blocking="non_interleaved", grad_reduce="--overlap-grad-reduce (MindSpeed-LLM README: 'Multi-machine training requires the addition of parameter --overlap-grad-reduce')", param_gather="--overlap-param-gather (Megatron-Core)",
                 tp_comm="MindSpeed communication-over-computation features (not default)", pipeline_p2p="Megatron-Core schedules",
                 fsdp_forward_prefetch_depth=None, fsdp_backward_prefetch_depth=None, limit_inflight_all_gathers=None,
                 source="Ascend/MindSpeed-LLM examples/llama2/README_en.md"),
    fp8=dict(supported=False, recipe=None, format=None, amax_history_len=None, amax_compute_algo=None, scaling_granularity=None, fp8_gemms=[], bf16_ops=[], cast_costs=None, source="910B has no FP8"),
    memory_overheads=dict(cuda_context_bytes=None, cuda_context_source="no figure found for the torch_npu context", **HCCL_BUF,
                          allocator="torch_npu caching allocator; PYTORCH_NPU_ALLOC_CONF expandable_segments default False",
                          persistent_buffers="as Megatron-Core (fp32 main_grad buffer 4 B/param)",
                          workspace_bytes=None, workspace_source="not sourced"),
    cross_entropy=dict(implementation="Megatron-Core vocab-parallel cross entropy", vocab_parallel=True, logits_dtype="fp32", fused=False, source="inherits Megatron-Core"),
    activation_recompute=dict(options=["selective", "full", "--auto-recompute-device-size (AscendSpeed)"], default_in_published_runs="full in the AscendSpeed LLaMA2-7B ZeRO-2 example",
                              source="pretrain_llama2_7b_zero_8p.sh --deepspeed-activation-checkpointing --auto-recompute-device-size 51200"),
    notes=["MindSpeed-LLM docs/pytorch/models/ssm_model.md: 'PYTORCH_NPU_ALLOC_CONF ... default expandable_segments:False'", "The 2023 AscendSpeed / ModelLink LLaMA2 examples (RMSNorm not fused) run as the ascendspeed profile."],
),
}

# AscendSpeed / ModelLink as of their 2023 LLaMA2 examples: Megatron-LM (+ DeepSpeed) on torch_npu
# in eager mode, the fused kernels opt-in per flag. The published LLaMA2-7B scripts pass
# --use-fused-rotary-pos-emb but not --use-fused-rmsnorm, so RMSNorm runs as PyTorch ops.
import copy  # noqa: E402

AS_SRC = ("Ascend/AscendSpeed ascendspeed/model/rms_norm.py: 'if self.use_fused_rmsnorm: return "
          "torch_npu.npu_rms_norm(...)'; else 'output = self._norm(x.float()).type_as(x); return output "
          "* self.weight', _norm = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps); flag absent "
          "from examples/llama2/pretrain_llama2_7b_zero_8p.sh (AscendSpeed) and pretrain_llama2_7b_ptd.sh "
          "(ModelLink); the same class in ModelLink's ascendspeed/model/rms_norm.py (aeeeeeep/ModelLink mirror)")
PROFILES["ascendspeed"] = copy.deepcopy(PROFILES["mindspeed"])
PROFILES["ascendspeed"].update(
    name="ascendspeed",
    description=("AscendSpeed / ModelLink 2023 (Megatron-LM and DeepSpeed on torch_npu, eager): the stack of the "
                 "2023 LLaMA2 examples, before MindSpeed-LLM; fused kernels only where a script's flag asks"),
    basis="Ascend/AscendSpeed examples/llama2 and ascendspeed/model (2023); Ascend ModelLink examples/llama2 (2023)",
    notes=["Cases ascendspeed-910b-llama2-7b-zero2-8p, modellink-910b-llama2-7b-tp8-8p.",
           "SwiGLU: not counted (the 2023 MLP code was not read); RoPE fused by --use-fused-rotary-pos-emb."],
)
PROFILES["ascendspeed"]["fused_kernels"] = dict(
    list=["fused rotary position embedding (--use-fused-rotary-pos-emb)",
          "NOT fused: RMSNorm without --use-fused-rmsnorm (eager PyTorch ops, fp32)"],
    source=AS_SRC,
    unfused_passes=[dict(
        name="rmsnorm_eager", tensor="hidden", count=2, fwd_bytes=32, bwd_bytes=78,
        ops=("RMSNorm as eager PyTorch ops, twice a layer. Forward: x.float() (read 2, write 4), pow(2) (4 + 4), "
             "mean(-1) (read 4), x * rsqrt (4 + 4), type_as (4 + 2), * weight (2 + 2) = 36 vs the layer's fused "
             "norm 4: +32. Backward (autograd of the same ops): dy * weight (2 + 2), the weight gradient "
             "dy * out and its sum (2 + 2 + 2, 2), type_as (2 + 4), g * rsqrt (4 + 4), g * x and its sum "
             "(4 + 4 + 4, 4), pow backward (x.pow(1), * 2, * grad: 3 x (4 + 4)), the two x gradients added "
             "(4 + 4 + 4), float() (4 + 2) = 84 vs 6: +78. " + AS_SRC))])

# No training stack: the plain kernels shardsim's own numpy `verify` executes (no fused
# attention, a separate gradient add), no collective library, no runtime context. The default of
# the cpu-x86 profile (one socket is one device; nothing of a GPU stack applies).
_NA = "not applicable: no training stack"
PROFILES["reference"] = prof(
    name="reference",
    description="No training stack: plain kernels as shardsim's numpy verify executes them (cpu-x86 default)",
    basis="simulator/numeric/execute.py (the kernels verify runs)",
    attention=dict(fused_default=False, implementation=None, kernel="scores materialised (QK^T, softmax, PV)", source=_NA),
    fused_kernels=dict(list=[], source=_NA),
    fused_grad_accumulation=dict(enabled=False, detail="gradients added per micro-batch", source=_NA),
    grad_reduction=dict(bucket_rule="one reduction of all gradients after the backward", bucket_params=None,
                        bucket_params_per_dp_rank=None, bucket_bytes=None, first_bucket_bytes=None,
                        collective="all_reduce", dtype="model dtype", source=_NA),
    param_gather=dict(rule="none", dtype=None, source=_NA),
    sharding=dict(optimizer_states="per parallel.optimizer_shard", gradients="per parallel.optimizer_shard",
                  parameters="per parallel.optimizer_shard", wrap_unit=None, reshard_after_forward=None, source=_NA),
    overlap=dict(p2p_blocking="never", grad_reduce=False, param_gather=False, tp_comm=False, pipeline_p2p=None,
                 fsdp_forward_prefetch_depth=None, fsdp_backward_prefetch_depth=None,
                 limit_inflight_all_gathers=None, source=_NA),
    fp8=dict(supported=False, recipe=None, format=None, amax_history_len=None, amax_compute_algo=None,
             scaling_granularity=None, fp8_gemms=[], bf16_ops=[], cast_costs=None, source=_NA),
    memory_overheads=dict(cuda_context_bytes=0, cuda_context_source=_NA, comm_buffer_bytes=0,
                          comm_buffer_rule=_NA, comm_buffer_source=_NA, allocator=_NA,
                          persistent_buffers="none", workspace_bytes=0, workspace_source=_NA),
    cross_entropy=dict(implementation="softmax cross entropy", vocab_parallel=True, logits_dtype=None,
                       fused=False, source=_NA),
    activation_recompute=dict(options=["none", "selective", "full"], default_in_published_runs=None, source=_NA),
    notes=["Default framework of hardware_profiles/cpu-x86.yaml."],
)

# Typed fields the simulator reads (simulator/config/framework/schema.py), merged into the blocks above.
# grad_reduction.fp32_for_bf16: bf16 gradients kept and reduced in fp32; overlap.tp_comm_enabled /
# tp_comm_sms: what parallel.overlap.tp_comm: auto resolves to; fp8.gemm_roles: the GEMMs dtype fp8
# runs in FP8 (qkv, proj, fc1, fc2, lm_head); fp8.weight_copy_bytes_per_param: FP8 weight copies;
# memory_overheads.comm_buffers_per_communicator: comm_buffer_bytes buffers per communicator.
TE_ROLES = ["qkv", "proj", "fc1", "fc2"]
NCCL_BUFS = 64  # 2 ring connections x 32 channels (NCCL MAXCHANNELS); NVIDIA/nccl#986 (sjeaugey):
                # 'Ring uses a limited amount of memory as it only has 2 connections regardless of
                # the scale'; 'The memory usage is linearly tied to the number of channels'
MACHINE = {
    "megatron-lm-2021": dict(fp32=False, tp=False, roles=[], copies=0, bufs=NCCL_BUFS),
    "megatron-core": dict(fp32=True, tp=True, roles=TE_ROLES, copies=2, bufs=NCCL_BUFS),
    "nemo": dict(fp32=False, tp=True, roles=TE_ROLES, copies=2, bufs=NCCL_BUFS),
    "megatron-deepspeed": dict(fp32=True, tp=False, roles=[], copies=0, bufs=NCCL_BUFS),
    "deepspeed-zero": dict(fp32=False, tp=False, roles=[], copies=0, bufs=NCCL_BUFS),
    "pytorch-fsdp": dict(fp32=False, tp=False, roles=[], copies=0, bufs=NCCL_BUFS),
    "torchtitan": dict(fp32=True, tp=False, roles=TE_ROLES, copies=0, bufs=NCCL_BUFS),
    "llm-foundry": dict(fp32=True, tp=False, roles=TE_ROLES, copies=2, bufs=NCCL_BUFS),
    "mindspore": dict(fp32=False, tp=False, roles=[], copies=0, bufs=1),  # gradient_fp32_sync casts for the all-reduce only
    "mindspeed": dict(fp32=True, tp=False, roles=[], copies=0, bufs=1),
    "ascendspeed": dict(fp32=True, tp=False, roles=[], copies=0, bufs=1),
    "reference": dict(fp32=False, tp=False, roles=[], copies=0, bufs=0),
}
COPIES_SRC = ("Transformer Engine keeps the FP8 weight and its FP8 transpose between micro-batches "
              "(Float8Tensor data + cached transpose; Megatron passes is_first_microbatch so the weight "
              "is cast once per step): 2 bytes per parameter of an FP8 GEMM")
for name, m in MACHINE.items():
    p = PROFILES[name]
    p["fused_kernels"].setdefault("unfused_passes", [])
    p["grad_reduction"]["fp32_for_bf16"] = m["fp32"]
    p["overlap"]["tp_comm_enabled"] = m["tp"]
    p["overlap"]["tp_comm_sms"] = 16
    p["fp8"]["gemm_roles"] = m["roles"]
    p["fp8"]["dynamic_scaling"] = name == "torchtitan"  # torchao Float8 tensorwise: current amax
    p["fp8"]["weight_copy_bytes_per_param"] = m["copies"]
    if m["copies"]:
        p["fp8"]["source"] += "; weight copies: " + COPIES_SRC
    p["memory_overheads"]["comm_buffers_per_communicator"] = m["bufs"]

KEYS = None
for name, p in PROFILES.items():
    flat = sorted(p.keys())
    sub = {k: sorted(v.keys()) for k, v in p.items() if isinstance(v, dict)}
    if KEYS is None:
        KEYS = (flat, sub)
    assert (flat, sub) == KEYS, (name, set(flat) ^ set(KEYS[0]),
                                 {k: set(sub[k]) ^ set(KEYS[1][k]) for k in sub if sub[k] != KEYS[1].get(k)})
    text = ("# Framework profile (issue 9 item 1): what this training stack does, each field cited.\n"
            "# Units are in the key names (_bytes, _params); null = not found in public code/docs.\n"
            "# Field meanings: framework_profiles/README.md\n")
    text += yaml.safe_dump(p, sort_keys=False, width=100, allow_unicode=False)
    (OUT / f"{name}.yaml").write_text(text)
print("wrote", len(PROFILES))
