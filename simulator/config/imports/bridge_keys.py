"""The table of Megatron-Bridge training-config keys the importer reads, dotted as its
ConfigContainer YAML and its Hydra-style overrides name them (`model.tensor_model_parallel_size=4
train.global_batch_size=128`). Names: NVIDIA-NeMo/Megatron-Bridge
src/megatron/bridge/training/config.py (ConfigContainer: model, train, optimizer, ddp,
dataset, tokenizer, mixed_precision, comm_overlap and the sections of logging and state),
training/mixed_precision.py (MixedPrecisionConfig), training/comm_overlap.py
(CommOverlapConfig), models/gpt_provider.py (GPTModelProvider: Megatron-Core's
TransformerConfig) @00b7660be025 (the 25.11 performance release). NeMo 2's names for the same
keys (`trainer.strategy.*`, `model.config.*`, `data.*`, `optim.config.*`) are rewritten to
these (`ALIASES`). A key in no entry and under no section read whole is refused with a
did-you-mean."""

from __future__ import annotations

from simulator.config.imports.key_rules import approximated as _approx
from simulator.config.imports.key_rules import ignored as _ignore
from simulator.config.imports.key_rules import mapped as _m
from simulator.config.imports.key_rules import refused as _refuse
from simulator.config.imports.key_rules import section_rule
from simulator.config.imports.megatron_flags import Flag

__all__ = ["KEYS", "SECTIONS", "ALIASES", "NAMES", "rule", "canonical"]

_LOG = "logging, checkpointing, profiling, fault tolerance or process setup: not part of " \
       "a training step"
_HYPER = "an optimizer hyperparameter or schedule: the same kernels whatever its value"
_NUM = "numerics of the same kernels"
_FUSED = "a fused kernel or launch detail: the megatron-bridge framework profile's"
_GRADS = "the gradient buckets and their overlap: the megatron-bridge framework profile's"

SECTIONS: dict[str, Flag] = {
    **{s: _ignore(_LOG) for s in (
        "rng", "rerun_state_machine", "logger", "checkpoint", "dist", "ft", "straggler",
        "nvrx_straggler", "profiling", "tensor_inspect", "inprocess_restart", "log",
        "resume", "nemo_run")},
    "scheduler": _ignore(_HYPER),
    "dataset": _ignore("the data pipeline: the simulator starts each micro-batch with its "
                       "tokens on the device"),
    "tokenizer": _ignore("the tokenizer's files (tokenizer.vocab_size gives the "
                         "vocabulary when model.vocab_size is null)"),
    "comm_overlap.tp_comm_overlap_cfg": _approx("the userbuffers chunking of the tensor-"
                                                "parallel overlap: the megatron-bridge profile's"),
}

_MODEL = {
    "num_layers": "layers", "hidden_size": "hidden_size", "ffn_hidden_size": "ffn_hidden_size",
    "num_attention_heads": "num_heads", "num_query_groups": "num_kv_heads",
    "seq_length": "seq_length", "vocab_size": "vocab_size",
    "make_vocab_size_divisible_by": "vocab_size", "should_pad_vocab": "vocab_size",
    "normalization": "norm", "gated_linear_unit": "ffn_activation",
    "activation_func": "ffn_activation", "activation_func._target_": "ffn_activation",
    "position_embedding_type": "position", "rotary_base": "rope_theta",
    "share_embeddings_and_output_weights": "tie_embeddings", "hidden_dropout": "dropout",
    "attention_dropout": "dropout", "kv_channels": "num_heads", "fp8": "dtype",
    "bf16": "dtype", "fp16": "dtype"}
_PARALLEL = {
    "tensor_model_parallel_size": "tensor", "pipeline_model_parallel_size": "pipeline",
    "virtual_pipeline_model_parallel_size": "virtual_stages",
    "context_parallel_size": "context", "expert_model_parallel_size": "expert",
    "sequence_parallel": "sequence_parallel", "recompute_granularity": "recompute",
    "recompute_method": "recompute", "recompute_num_layers": "recompute",
    "recompute_modules": "recompute_modules"}

KEYS: dict[str, Flag] = {
    **{f"model.{k}": _m(f"model.{v}") for k, v in _MODEL.items()},
    **{f"model.{k}": _m(f"parallel.{v}") for k, v in _PARALLEL.items()},
    "model.tp_comm_overlap": _m("parallel.overlap.tp_comm"),
    "model.cuda_graph_impl": _m("training.cuda_graphs"),
    "model.cuda_graph_scope": _m("training.cuda_graphs"),
    "model._target_": _ignore("the provider class a dump names: its keys say the model"),
    "model.activation_func._call_": _ignore("how a dump names a function"),
    "model.expert_tensor_parallel_size": _approx("experts split as the dense layers"),
    # the token dispatcher (bridge_parallel._dispatcher)
    **{f"model.{k}": _m("parallel.expert_dispatcher") for k in (
        "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "moe_enable_deepep")},
    "model.max_position_embeddings": _approx("the position table's rows: the seq_length "
                                             "rows are the ones used"),
    "model.add_bias_linear": _approx("the linear biases: the model type's"),
    "model.add_qkv_bias": _approx("the linear biases: the model type's"),
    "model.pipeline_dtype": _approx("the dtype sent between stages: the model's"),
    "model.params_dtype": _approx("the parameters' dtype: the model's"),
    **{f"model.{k}": _approx(_NUM) for k in (
        "init_method_std", "layernorm_epsilon", "apply_query_key_layer_scaling",
        "attention_softmax_in_fp32", "fp32_residual_connection", "fp8_margin",
        "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_recipe", "fp8_wgrad",
        "seq_len_interpolation_factor", "rope_scaling", "rope_scaling_factor",
        "rotary_percent", "autocast_dtype", "init_model_with_meta_device", "use_te_rng_tracker",
        "perform_initialization", "use_cpu_initialization", "calculate_per_token_loss",
        "deterministic_mode", "scatter_embedding_sequence_parallel")},
    **{f"model.{k}": _approx(_FUSED) for k in (
        "gradient_accumulation_fusion", "bias_activation_fusion", "bias_dropout_fusion",
        "masked_softmax_fusion", "persist_layer_norm", "apply_rope_fusion",
        "cross_entropy_loss_fusion", "cross_entropy_fusion_impl", "attention_backend",
        "cuda_graph_warmup_steps",
        "use_transformer_engine_op_fuser", "transformer_layer_spec",
        "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "overlap_p2p_comm",
        "batch_p2p_comm", "align_grad_reduce", "async_tensor_model_parallel_allreduce",
        "deallocate_pipeline_outputs", "variable_seq_lengths")},
    "model.account_for_embedding_in_pipeline_split": _refuse(
        "the embedding counted as a layer in the pipeline split (write parallel.stage_layers)"),
    "model.account_for_loss_in_pipeline_split": _refuse(
        "the loss counted as a layer in the pipeline split (write parallel.stage_layers)"),
    **{f"model.{k}": _refuse(why) for k, why in (
        ("num_moe_experts", "mixture-of-experts layers: not read from a Bridge config yet "
         "(write model.moe beside `from:`)"),
        ("cpu_offloading", "activations or weights offloaded to the host"),
        ("cpu_offloading_num_layers", "activations or weights offloaded to the host"),
        ("mtp_num_layers", "multi-token prediction layers"),
        ("multi_latent_attention", "multi-latent attention"),
        ("num_layers_in_first_pipeline_stage", "an uneven pipeline split"),
        ("num_layers_in_last_pipeline_stage", "an uneven pipeline split"),
        ("first_last_layers_bf16", "the first and last layers in bf16 around fp8 ones"),
        ("fp4", "fp4 GEMMs"),
        ("fp8_dot_product_attention", "fp8 attention"))},
    # ---- train
    "train.global_batch_size": _m("training.global_batch_size"),
    "train.micro_batch_size": _m("training.micro_batch_size"),
    "train.rampup_batch_size": _refuse("a batch that grows during the run"),
    "train.manual_gc": _approx("Python's garbage collection between steps: host time"),
    "train.manual_gc_interval": _approx("Python's garbage collection between steps: host time"),
    "train.manual_gc_eval": _approx("Python's garbage collection between steps: host time"),
    "train.empty_unused_memory_level": _approx("the caching allocator's cache emptied"),
    **{f"train.{k}": _ignore("the run's length, evaluation or exit: not part of a training "
                             "step") for k in (
        "train_iters", "train_samples", "eval_iters", "eval_interval", "exit_interval",
        "exit_duration_in_mins", "exit_signal_handler", "exit_signal",
        "exit_signal_handler_for_dataloader", "skip_train", "iterations_to_skip",
        "check_weight_hash_across_dp_replicas_interval", "train_sync_interval",
        "decrease_batch_size_if_needed")},
    # ---- optimizer
    "optimizer.optimizer": _m("training.optimizer"),
    "optimizer.use_distributed_optimizer": _m("parallel.optimizer_shard"),
    **{f"optimizer.{k}": _ignore(_HYPER) for k in (
        "lr", "min_lr", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "sgd_momentum",
        "clip_grad", "loss_scale", "initial_loss_scale", "min_loss_scale",
        "loss_scale_window", "hysteresis", "decoupled_lr", "decoupled_min_lr",
        "log_num_zeros_in_grad", "timers", "barrier_with_L1_time", "config_logger_dir")},
    **{f"optimizer.{k}": _approx(_GRADS) for k in (
        "overlap_param_gather", "overlap_grad_reduce", "overlap_param_gather_with_optimizer_step",
        "use_precision_aware_optimizer", "main_grads_dtype", "main_params_dtype",
        "exp_avg_dtype", "exp_avg_sq_dtype", "store_param_remainders",
        "use_torch_optimizer_for_cpu_offload")},
    **{f"optimizer.{k}": _approx(_NUM) for k in ("bf16", "fp16", "params_dtype")},
    "optimizer.optimizer_cpu_offload": _refuse("optimizer states offloaded to the host"),
    "optimizer.optimizer_offload_fraction": _refuse("optimizer states offloaded to the host"),
    # ---- ddp
    "ddp.use_distributed_optimizer": _m("parallel.optimizer_shard"),
    **{f"ddp.{k}": _approx(_GRADS) for k in (
        "overlap_grad_reduce", "overlap_param_gather", "align_param_gather", "bucket_size",
        "grad_reduce_in_fp32", "average_in_collective", "num_distributed_optimizer_instances",
        "pad_buckets_for_high_nccl_busbw", "reduce_scatter_with_fp32_accumulation",
        "keep_fp8_transpose_cache", "fsdp_double_buffer", "suggested_communication_unit_size",
        "preserve_fp32_weights", "nccl_ub", "disable_symmetric_registration")},
    **{f"ddp.{k}": _ignore(_LOG) for k in (
        "check_for_nan_in_grad", "check_for_large_grads", "delay_wgrad_compute")},
    "ddp.use_megatron_fsdp": _refuse("Megatron FSDP (parameters sharded too)"),
    "ddp.use_custom_fsdp": _refuse("Megatron FSDP (parameters sharded too)"),
    "ddp.data_parallel_sharding_strategy": _refuse("Megatron FSDP's sharding (parameters "
                                                   "sharded too)"),
    # ---- mixed precision (a recipe's name, or its fields)
    "mixed_precision": _m("model.dtype"),
    **{f"mixed_precision.{k}": _m("model.dtype") for k in ("bf16", "fp16", "fp32", "fp8")},
    "mixed_precision.fp8_recipe": _m("training.fp8_scaling"),
    **{f"mixed_precision.{k}": _approx(_NUM) for k in (
        "params_dtype", "pipeline_dtype", "autocast_dtype", "autocast_enabled",
        "grad_reduce_in_fp32", "fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo",
        "fp8_wgrad", "fp4_recipe", "loss_scale", "initial_loss_scale",
        "min_loss_scale", "loss_scale_window", "hysteresis",
        "reuse_grad_buf_for_mxfp8_param_ag")},
    **{f"{s}.{k}": _approx("how many layers first_last_layers_bf16 keeps in bf16 (refused "
                            "when it is true)")
       for s in ("model", "mixed_precision")
       for k in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")},
    **{f"mixed_precision.{k}": _refuse(why) for k, why in (
        ("first_last_layers_bf16", "the first and last layers in bf16 around fp8 ones"),
        ("fp4", "fp4 GEMMs"), ("fp8_dot_product_attention", "fp8 attention"),
        ("fp8_multi_head_attention", "fp8 attention"))},
    **{f"mixed_precision.{k}": _m("training.fp8_params") for k in (
        "fp8_param", "fp8_param_gather")},
    "model.fp8_param": _m("training.fp8_params"),
    # ---- communication overlap
    "comm_overlap.tp_comm_overlap": _m("parallel.overlap.tp_comm"),
    **{f"comm_overlap.{k}": _approx(_GRADS) for k in (
        "tp_comm_bootstrap_backend", "overlap_p2p_comm", "batch_p2p_comm",
        "overlap_grad_reduce", "overlap_param_gather",
        "overlap_param_gather_with_optimizer_step", "align_param_gather", "bucket_size",
        "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "data_parallel_size")},
    # Megatron-Core's expert all-to-all overlap and the weight-gradient delay it needs
    # (bridge_parallel._moe_a2a; Bridge 25.11's moe_a2a_overlap sets both)
    **{f"{s}.{k}": _m("parallel.overlap.moe_a2a") for s in ("comm_overlap", "model")
       for k in ("overlap_moe_expert_parallel_comm", "delay_wgrad_compute")},
    "peft": _refuse("parameter-efficient fine-tuning (frozen weights)"),
    # ---- NeMo 2's trainer: the world size, the rest its loop
    "trainer.num_nodes": _m("cluster.nodes"),
    "trainer.devices": _m("cluster.devices_per_node"),
    **{f"trainer.{k}": _ignore(_LOG) for k in (
        "max_steps", "max_epochs", "val_check_interval", "limit_val_batches",
        "limit_test_batches", "log_every_n_steps", "num_sanity_val_steps", "accelerator",
        "enable_checkpointing", "use_distributed_sampler", "callbacks", "logger")},
    "trainer.accumulate_grad_batches": _refuse("NeMo 2 accumulates over global_batch_size / "
                                               "(micro_batch_size x data parallel)"),
}

# NeMo 2 (nemo.collections.llm recipes, NeMo-Run overrides) names -> Megatron-Bridge names:
# the longest prefix wins.
ALIASES: dict[str, str] = {
    "trainer.strategy.ddp.": "ddp.", "trainer.strategy.": "model.", "model.config.": "model.",
    "optim.config.": "optimizer.", "data.global_batch_size": "train.global_batch_size",
    "data.micro_batch_size": "train.micro_batch_size", "data.": "dataset.",
    "trainer.plugins.": "mixed_precision.", "optim.lr_scheduler.": "scheduler."}

NAMES: tuple[str, ...] = tuple(sorted({*KEYS, *SECTIONS}))


def canonical(key: str) -> str:
    """`key` under Megatron-Bridge's name (a NeMo 2 name rewritten; Hydra's `+`/`++`
    stripped)."""
    key = key.lstrip("+")
    for prefix in sorted(ALIASES, key=len, reverse=True):
        if key.startswith(prefix):
            return ALIASES[prefix] + key[len(prefix):]
    return key


def rule(key: str) -> Flag | None:
    """The rule of dotted `key` (a Megatron-Bridge name): its own, else a section read whole
    that encloses it."""
    return section_rule(key, KEYS, SECTIONS)
