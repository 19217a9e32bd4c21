"""The table of NeMo (1.x launcher / Megatron GPT) training-config keys the importer reads,
dotted. Names: NVIDIA/NeMo examples/nlp/language_modeling/conf/megatron_gpt_config.yaml and
NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/5b_fp8_performance.yaml
@1e46ac6c (the keys of `trainer`, `model`, `model.optim`, `exp_manager`, `run`); a key in no
entry and under no section read whole is refused with a did-you-mean."""

from __future__ import annotations

from simulator.config.imports.key_rules import approximated as _approx
from simulator.config.imports.key_rules import ignored as _ignore
from simulator.config.imports.key_rules import mapped as _m
from simulator.config.imports.key_rules import refused as _refuse
from simulator.config.imports.key_rules import section_rule
from simulator.config.imports.megatron_flags import Flag

__all__ = ["KEYS", "SECTIONS", "rule", "NAMES"]




_LOG = "logging, checkpointing, profiling, validation or paths: not part of a training step"
_HYPER = "an optimizer hyperparameter or schedule: the same kernels whatever its value"
_NUM = "numerics of the same kernels"
_FUSED = "a fused kernel: the nemo framework profile's"

SECTIONS: dict[str, Flag] = {
    **{s: _ignore(_LOG) for s in (
        "hydra", "run", "exp_manager", "model.nsys_profile", "name", "restore_from_path",
        "base_results_dir", "data_dir")},
    "model.data": _ignore("the data pipeline: the simulator starts each micro-batch with its "
                          "tokens on the device"),
    "model.optim.sched": _ignore(_HYPER),
    "model.tokenizer": _ignore("the tokenizer's files (its type gives the vocabulary)"),
}

KEYS: dict[str, Flag] = {
    "trainer.num_nodes": _m("cluster.nodes"),
    "trainer.devices": _m("cluster.devices_per_node"),
    "trainer.precision": _m("model.dtype"),
    "trainer.accumulate_grad_batches": _m("training.global_batch_size"),
    "trainer.accelerator": _ignore("gpu: the hardware profile says which"),
    **{f"trainer.{k}": _ignore(_LOG) for k in (
        "logger", "enable_checkpointing", "replace_sampler_ddp", "max_epochs", "max_steps",
        "max_time", "log_every_n_steps", "val_check_interval", "limit_val_batches",
        "limit_test_batches", "benchmark", "enable_model_summary", "num_sanity_val_steps")},
    "trainer.gradient_clip_val": _ignore("a clip of the gradient norm: one reduction, the "
                                         "framework profile's optimizer step"),
    # ---- parallelism and batch
    "model.micro_batch_size": _m("training.micro_batch_size"),
    "model.global_batch_size": _m("training.global_batch_size"),
    "model.rampup_batch_size": _refuse("a batch that grows during the run"),
    "model.tensor_model_parallel_size": _m("parallel.tensor"),
    "model.pipeline_model_parallel_size": _m("parallel.pipeline"),
    "model.virtual_pipeline_model_parallel_size": _m("parallel.virtual_stages"),
    "model.context_parallel_size": _m("parallel.context"),
    "model.expert_model_parallel_size": _m("parallel.expert"),
    "model.sequence_parallel": _m("parallel.sequence_parallel"),
    "model.resume_from_checkpoint": _ignore(_LOG),
    # ---- the model (a Megatron GPT)
    **{f"model.{k}": _m(f"model.{v}") for k, v in (
        ("encoder_seq_length", "seq_length"), ("num_layers", "layers"),
        ("hidden_size", "hidden_size"), ("ffn_hidden_size", "ffn_hidden_size"),
        ("num_attention_heads", "num_heads"), ("num_query_groups", "num_kv_heads"),
        ("hidden_dropout", "dropout"), ("attention_dropout", "dropout"),
        ("make_vocab_size_divisible_by", "vocab_size"), ("activation", "ffn_activation"),
        ("position_embedding_type", "position"), ("normalization", "norm"),
        ("share_embeddings_and_output_weights", "tie_embeddings"),
        ("rotary_base", "rope_theta"), ("fp8", "dtype"))},
    "model.max_position_embeddings": _approx("the learned position table's rows: its "
                                             "seq_length rows are the ones used"),
    "model.kv_channels": _refuse("a head width other than hidden_size / heads"),
    "model.bias": _approx("the linear biases: the model type's"),
    **{f"model.{k}": _approx(_NUM) for k in (
        "init_method_std", "apply_query_key_layer_scaling", "layernorm_epsilon",
        "fp32_residual_connection", "fp16_lm_cross_entropy", "native_amp_init_scale",
        "native_amp_growth_interval", "hysteresis", "fp8_e4m3", "fp8_hybrid", "fp8_margin",
        "fp8_interval", "fp8_amax_history_len", "fp8_amax_compute_algo", "seed",
        "apex_transformer_log_level", "onnx_safe", "use_cpu_initialization",
        "sync_batch_comm", "pre_process", "post_process")},
    **{f"model.{k}": _approx(_FUSED) for k in (
        "persist_layer_norm", "gradient_as_bucket_view", "grad_div_ar_fusion",
        "gradient_accumulation_fusion", "bias_activation_fusion", "bias_dropout_add_fusion",
        "masked_softmax_fusion", "transformer_engine", "use_emha", "megatron_amp_O2",
        "grad_allreduce_chunk_size_mb", "mcore_gpt", "use_flash_attention")},
    "model.ub_tp_comm_overlap": _m("parallel.overlap.tp_comm"),
    # ---- activation checkpointing
    "model.activations_checkpoint_granularity": _m("parallel.recompute"),
    "model.activations_checkpoint_method": _m("parallel.recompute"),
    "model.activations_checkpoint_num_layers": _m("parallel.recompute"),
    "model.num_micro_batches_with_partial_activation_checkpoints": _refuse(
        "activation checkpoints on part of the micro-batches"),
    "model.activations_checkpoint_layers_per_pipeline": _refuse(
        "a different number of checkpointed layers per pipeline stage"),
    # ---- the optimizer
    "model.optim.name": _m("training.optimizer"),
    "model.optim.bucket_cap_mb": _approx("the gradient buckets: the nemo framework profile's"),
    "model.optim.overlap_grad_sync": _approx("the gradient reduce-scatter overlapped: the "
                                             "nemo framework profile's"),
    "model.optim.overlap_param_sync": _approx("the parameter all-gather overlapped: the nemo "
                                              "framework profile's"),
    "model.optim.contiguous_grad_buffer": _approx(_FUSED),
    "model.optim.grad_sync_dtype": _approx("bf16 gradient reduction: the nemo framework "
                                           "profile's"),
    **{f"model.optim.{k}": _ignore(_HYPER) for k in (
        "lr", "weight_decay", "betas", "eps")},
}

NAMES: tuple[str, ...] = tuple(sorted({*KEYS, *SECTIONS, "model.optim", "model.tokenizer.type"}))


def rule(key: str) -> Flag | None:
    """The rule of dotted `key`: its own, else a section read whole that encloses it."""
    return section_rule(key, KEYS, SECTIONS)
