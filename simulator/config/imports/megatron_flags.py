"""The table of Megatron-LM flags the importer reads: each mapped flag with the scenario key it
sets, each flag it ignores with the reason (no effect on the time or memory of an iteration),
each flag it approximates as the simulated transformer does for every model (`model.from_hf`
makes the same approximations), and the flags that change performance with no equivalent here
(refused by name unless `--lenient`). A Megatron-LM name in none of these is refused the same
way. Names and defaults: NVIDIA/Megatron-LM megatron/training/arguments.py (core_v0.8.0,
core_v0.13.0) and megatron/arguments.py (v2.5); `megatron_names.ARGUMENT_NAMES` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Flag", "FLAGS", "MAP", "APPROX", "IGNORE", "REFUSE"]

MAP, APPROX, IGNORE, REFUSE = "mapped", "approximated", "ignored", "refused"


@dataclass(frozen=True)
class Flag:
    """How the importer treats one flag: `kind` (mapped, approximated, ignored, refused),
    the scenario key it sets (mapped) and why (the others), and how many values it takes
    (0: a switch; None: any number, not read)."""

    kind: str
    key: str = ""
    why: str = ""
    values: int | None = 1


def _m(key: str, values: int = 1) -> Flag:
    return Flag(MAP, key, "", values)


def _switch(key: str) -> Flag:
    return Flag(MAP, key, "", 0)


def _ignore(why: str, values: int | None = None) -> Flag:
    return Flag(IGNORE, "", why, values)


def _approx(why: str, values: int | None = None) -> Flag:
    return Flag(APPROX, "", why, values)


def _refuse(why: str, values: int | None = None) -> Flag:
    return Flag(REFUSE, "", why, values)


_PATHS = "a file or folder path: no effect on an iteration's time or memory"
_LOG = "logging, profiling or checkpoint cadence: not part of a training iteration"
_HYPER = "an optimizer hyperparameter or schedule: the same kernels whatever its value"
_NUMERICS = "numerics of the same kernels (scaling, epsilon, init): no effect on time or memory"
_SETUP = "process setup: no effect on the simulated iteration"
_DATA = "the data pipeline: the simulator starts each micro-batch with its tokens on the device"

FLAGS: dict[str, Flag] = {
    # ---- model
    "--num-layers": _m("model.layers"),
    "--hidden-size": _m("model.hidden_size"),
    "--num-attention-heads": _m("model.num_heads"),
    "--ffn-hidden-size": _m("model.ffn_hidden_size"),
    "--group-query-attention": _switch("model.num_kv_heads"),
    "--num-query-groups": _m("model.num_kv_heads"),
    "--seq-length": _m("model.seq_length"),
    "--vocab-size": _m("model.vocab_size"),
    "--make-vocab-size-divisible-by": _m("model.vocab_size"),
    "--tokenizer-type": _m("model.vocab_size"),
    "--swiglu": _switch("model.ffn_activation"),
    "--squared-relu": _switch("model.ffn_activation"),
    "--fp16": _switch("model.dtype"),
    "--bf16": _switch("model.dtype"),
    "--fp8-format": _m("model.dtype"),
    "--hidden-dropout": _m("model.dropout"),
    "--attention-dropout": _m("model.dropout"),
    "--use-flash-attn": _switch("model.attention"),
    "--attention-backend": _m("model.attention"),
    "--num-experts": _m("model.moe.experts"),
    "--moe-router-topk": _m("model.moe.top_k"),
    "--moe-expert-capacity-factor": _m("model.moe.capacity_factor"),
    "--decoder-first-pipeline-num-layers": _m("parallel.pipeline_layers"),
    "--decoder-last-pipeline-num-layers": _m("parallel.pipeline_layers"),
    "--fp8-param-gather": _switch("training.fp8_params"),
    # ---- training
    "--micro-batch-size": _m("training.micro_batch_size"),
    "--global-batch-size": _m("training.global_batch_size"),
    "--optimizer": _m("training.optimizer"),
    "--sgd-momentum": _m("training.optimizer"),
    # ---- parallel
    "--tensor-model-parallel-size": _m("parallel.tensor"),
    "--pipeline-model-parallel-size": _m("parallel.pipeline"),
    "--context-parallel-size": _m("parallel.context"),
    "--expert-model-parallel-size": _m("parallel.expert"),
    "--num-layers-per-virtual-pipeline-stage": _m("parallel.virtual_stages"),
    "--num-virtual-stages-per-pipeline-rank": _m("parallel.virtual_stages"),
    "--sequence-parallel": _switch("parallel.sequence_parallel"),
    "--use-distributed-optimizer": _switch("parallel.optimizer_shard"),
    "--recompute-activations": _switch("parallel.recompute"),
    "--recompute-granularity": _m("parallel.recompute"),
    "--recompute-method": _m("parallel.recompute"),
    "--recompute-num-layers": _m("parallel.recompute"),
    "--checkpoint-activations": _switch("parallel.recompute"),
    "--checkpoint-num-layers": _m("parallel.recompute"),
    "--overlap-grad-reduce": _switch("parallel.overlap.grad_reduce"),
    "--overlap-param-gather": _switch("parallel.overlap.param_gather"),
    "--tp-comm-overlap": _switch("parallel.overlap.tp_comm"),
    "--overlap-moe-expert-parallel-comm": _switch("parallel.overlap.moe_a2a"),
    "--cuda-graph-impl": _m("training.cuda_graphs"),
    "--cuda-graph-scope": Flag(MAP, "training.cuda_graphs", "", None),
    "--enable-cuda-graph": _switch("training.cuda_graphs"),
    "--external-cuda-graph": _switch("training.cuda_graphs"),
    "--cuda-graph-warmup-steps": _ignore("the steps before the graphs are captured: not "
                                         "part of a timed iteration"),
    "--delay-wgrad-compute": _switch("parallel.overlap.moe_a2a"),
    "--ddp-bucket-size": _m("parallel.comm_fusion"),
    "--transformer-impl": _m("framework"),
    "--accumulate-allreduce-grads-in-fp32": _switch("model.dtype"),
    # ---- approximated as for every simulated transformer (model.from_hf does the same)
    "--position-embedding-type": _m("model.position"),
    "--use-rotary-position-embeddings": _switch("model.position"),
    "--rotary-percent": _approx("RoPE on part of each head: the same element-wise kernel"),
    "--rotary-base": _m("model.rope_theta"),
    "--rotary-interleaved": _approx("another order of RoPE's pairs: the same kernel", 0),
    "--no-position-embedding": _switch("model.position"),
    "--max-position-embeddings": _ignore("the learned position table has seq_length rows "
                                         "(the rows an iteration reads)"),
    "--normalization": _m("model.norm"),
    "--disable-bias-linear": _approx("the simulated transformer carries its linear biases "
                                     "exactly when its FFN is gelu", 0),
    "--untie-embeddings-and-output-weights": _switch("model.tie_embeddings"),
    "--kv-channels": _m("model.head_dim"),
    "--apply-layernorm-1p": _approx("a LayerNorm variant: the same kernel", 0),
    "--use-mcore-models": _ignore("the Megatron-Core GPT model: the model simulated", 0),
    # ---- ignored: no effect on an iteration's time or memory
    **{f: _ignore(_PATHS) for f in (
        "--data-path", "--vocab-file", "--merge-file", "--tokenizer-model", "--save", "--load",
        "--data-cache-path", "--train-data-path", "--valid-data-path", "--test-data-path",
        "--tensorboard-dir", "--wandb-save-dir", "--tp-comm-overlap-cfg")},
    **{f: _ignore(_LOG) for f in (
        "--log-interval", "--save-interval", "--eval-interval", "--eval-iters",
        "--log-throughput", "--log-timers-to-tensorboard", "--log-validation-ppl-to-tensorboard",
        "--log-memory-to-tensorboard", "--log-num-zeros-in-grad", "--log-params-norm",
        "--timing-log-level", "--timing-log-option", "--tensorboard-log-interval",
        "--tensorboard-queue-size", "--wandb-project", "--wandb-exp-name", "--profile",
        "--profile-step-start", "--profile-step-end", "--profile-ranks", "--exit-interval",
        "--exit-duration-in-mins", "--exit-signal-handler", "--no-save-optim", "--no-save-rng",
        "--no-load-optim", "--no-load-rng", "--ckpt-format", "--async-save",
        "--use-dist-ckpt", "--auto-detect-ckpt-format",
        "--log-batch-size-to-tensorboard", "--log-world-size-to-tensorboard",
        "--no-log-loss-scale-to-tensorboard", "--log-straggler", "--ckpt-fully-parallel-save",
        "--ckpt-fully-parallel-load", "--dist-ckpt-format", "--finetune",
        "--pretrained-checkpoint")},
    **{f: _ignore(_HYPER) for f in (
        "--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples",
        "--lr-warmup-iters", "--lr-warmup-samples", "--lr-warmup-fraction", "--lr-warmup-init",
        "--weight-decay", "--start-weight-decay", "--end-weight-decay",
        "--weight-decay-incr-style", "--clip-grad", "--adam-beta1", "--adam-beta2",
        "--adam-eps", "--train-iters", "--train-samples", "--override-opt_param-scheduler",
        "--use-checkpoint-opt_param-scheduler", "--loss-scale", "--initial-loss-scale",
        "--min-loss-scale", "--loss-scale-window", "--hysteresis", "--decoupled-lr",
        "--decoupled-min-lr", "--moe-aux-loss-coeff", "--moe-z-loss-coeff",
        "--moe-router-load-balancing-type")},
    **{f: _ignore(_NUMERICS) for f in (
        "--init-method-std", "--seed", "--norm-epsilon", "--layernorm-epsilon",
        "--attention-softmax-in-fp32", "--apply-query-key-layer-scaling",
        "--no-query-key-layer-scaling", "--fp8-margin", "--fp8-amax-history-len",
        "--fp8-amax-compute-algo", "--fp8-interval",
        "--deterministic-mode", "--use-cpu-initialization", "--data-parallel-random-init")},
    **{f: _ignore(_SETUP) for f in (
        "--distributed-backend", "--distributed-timeout-minutes", "--local-rank",
        "--local_rank", "--DDP-impl",
        "--empty-unused-memory-level", "--manual-gc", "--manual-gc-interval",
        "--no-create-attention-mask-in-dataloader", "--use-torch-optimizer-for-cpu-offload")},
    **{f: _ignore(_DATA) for f in (
        "--split", "--num-workers", "--dataloader-type", "--mock-data", "--reset-position-ids",
        "--reset-attention-mask", "--eod-mask-loss", "--short-seq-prob", "--mmap-warmup",
        "--num-dataset-builder-threads", "--data-args-path", "--per-split-data-args-path")},
    # ---- refused: performance changes with no equivalent in a scenario
    "--no-async-tensor-model-parallel-allreduce": _refuse(
        "the input-gradient all-reduce overlaps the weight-gradient GEMM in the stack", 0),
    "--rampup-batch-size": _refuse("the batch grows over training; the simulator times one "
                                   "iteration at --global-batch-size"),
    "--no-gradient-accumulation-fusion": _refuse(
        "the stack's fused weight-gradient accumulation is its framework profile's", 0),
    "--no-bias-gelu-fusion": _refuse("the stack's fused kernels are its framework profile's", 0),
    "--no-bias-swiglu-fusion": _refuse("the stack's fused kernels are its framework profile's", 0),
    "--no-bias-dropout-fusion": _refuse("the stack's fused kernels are its framework profile's", 0),
    "--no-masked-softmax-fusion": _refuse("the stack's fused kernels are its framework "
                                          "profile's", 0),
    "--cross-entropy-loss-fusion": _refuse("the stack's cross entropy is its framework "
                                           "profile's (unfused)", 0),
    "--no-overlap-p2p-communication": _refuse(
        "pipeline sends overlap compute in the interleaved schedule (the framework profile)", 0),
    "--distribute-saved-activations": _switch("parallel.recompute_slice_activation"),
    "--distribute-checkpointed-activations": _switch("parallel.recompute_slice_activation"),
    "--fp8-recipe": _m("training.fp8_scaling"),
    "--moe-layer-freq": _m("model.moe.every"),
    "--expert-tensor-parallel-size": _refuse("the experts are split over parallel.tensor"),
    "--moe-token-dispatcher-type": _m("parallel.expert_dispatcher"),
    "--moe-flex-dispatcher-backend": _m("parallel.expert_dispatcher"),
    "--moe-enable-deepep": _switch("parallel.expert_dispatcher"),
    "--moe-grouped-gemm": _refuse("the experts' GEMMs are priced one expert at a time", 0),
    "--account-for-embedding-in-pipeline-split": _refuse("use parallel.pipeline_layers", 0),
    "--account-for-loss-in-pipeline-split": _refuse("use parallel.pipeline_layers", 0),
    "--use-torch-fsdp2": _refuse("use framework pytorch-fsdp with optimizer_shard 3", 0),
    "--use-custom-fsdp": _refuse("Megatron FSDP: use optimizer_shard 3", 0),
    "--defer-embedding-wgrad-compute": _refuse("deferred embedding weight gradients", 0),
    "--use-precision-aware-optimizer": _refuse("use training.optimizer_dtype", 0),
}
