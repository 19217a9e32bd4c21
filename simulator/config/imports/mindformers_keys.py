"""The table of MindFormers run-config keys (`run_*.yaml` / `pretrain_*.yaml`, dotted here)
the importer reads. Names: mindspore-lab/mindformers @26e0014a mindformers/models/llama/
llama_config.py `LlamaConfig.__init__`, mindformers/modules/transformer/transformer.py
`TransformerOpParallelConfig` / `TransformerRecomputeConfig`, and the keys of the configs
configs/llama2/*.yaml; a key in no entry and under no section read whole is refused with a
did-you-mean."""

from __future__ import annotations

from simulator.config.imports.key_rules import approximated as _approx
from simulator.config.imports.key_rules import ignored as _ignore
from simulator.config.imports.key_rules import mapped as _m
from simulator.config.imports.key_rules import refused as _refuse
from simulator.config.imports.key_rules import section_rule
from simulator.config.imports.megatron_flags import Flag

__all__ = ["KEYS", "SECTIONS", "rule", "NAMES"]




_LOG = "logging, checkpointing, profiling, evaluation or paths: not part of a training step"
_INFER = "an inference or tokenizer setting: not used in training"
_HYPER = "an optimizer hyperparameter or schedule: the same kernels whatever its value"
_MC = "model.model_config."

SECTIONS: dict[str, Flag] = {
    **{s: _ignore(_LOG) for s in (
        "seed", "output_dir", "load_checkpoint", "src_strategy_path_or_dir", "auto_trans_ckpt",
        "only_save_strategy", "resume_training", "callbacks", "eval_callbacks", "do_eval",
        "eval_dataset", "eval_dataset_task", "eval_step_interval", "eval_epoch_interval",
        "metric", "auto_tune", "filepath_prefix",
        "autotune_per_step", "profile", "profile_start_step", "profile_stop_step",
        "init_start_profile", "profile_communication", "profile_memory", "remote_save_url",
        "layer_scale", "layer_decay", "lr_scale", "lr_scale_factor", "trainer", "processor")},
    "train_dataset": _ignore("the data pipeline: the simulator starts each micro-batch with its "
                             "tokens on the device"),
    "train_dataset_task": _ignore("the data pipeline"),
    "lr_schedule": _ignore(_HYPER),
    "model.arch": _ignore("the model class: LlamaForCausalLM"),
    "runner_wrapper": _ignore("the train-step cell: loss scaling and gradient clipping"),
}

KEYS: dict[str, Flag] = {
    "run_mode": _m("framework"),
    "use_parallel": _m("parallel"),
    "runner_config.batch_size": _m("training.micro_batch_size"),
    "runner_config.gradient_accumulation_steps": _m("training.global_batch_size"),
    **{f"runner_config.{k}": _ignore("data sinking and epochs: the same step") for k in (
        "epochs", "sink_mode", "sink_size", "initial_epoch", "has_trained_epoches",
        "has_trained_steps")},
    "optimizer.type": _m("training.optimizer"),
    **{f"optimizer.{k}": _ignore(_HYPER) for k in ("beta1", "beta2", "eps", "weight_decay",
                                                  "learning_rate")},
    # ---- parallel context (mindspore.set_auto_parallel_context) and parallel_config
    "parallel.parallel_mode": _m("parallel.mode"),
    "parallel.gradients_mean": _ignore("a scaling of the reduced gradients: no kernel"),
    "parallel.enable_alltoall": _approx("redistributions by all-to-all or all-gather: a dense "
                                        "Llama's plan has none"),
    "parallel.full_batch": _approx("each device reads the whole batch and slices it: the "
                                   "simulator starts each micro-batch on its device"),
    "parallel.search_mode": _approx("the strategy search of auto parallel: the Llama cells "
                                    "set their strategies"),
    "parallel.enable_parallel_optimizer": _m("parallel.optimizer_shard"),
    "parallel.strategy_ckpt_save_file": _ignore(_LOG),
    "parallel.strategy_ckpt_config.save_file": _ignore(_LOG),
    "parallel.strategy_ckpt_config.only_trainable_params": _ignore(_LOG),
    "parallel.parallel_optimizer_config.gradient_accumulation_shard": _refuse(
        "gradients sharded across accumulation steps"),
    "parallel.parallel_optimizer_config.parallel_optimizer_threshold": _m(
        "parallel.optimizer_threshold_kb"),
    "parallel.parallel_optimizer_config.optimizer_weight_shard_size": _refuse(
        "the optimizer sharded over part of the data-parallel ranks"),
    "parallel_config.data_parallel": _m("parallel.data"),
    "parallel_config.model_parallel": _m("parallel.tensor"),
    "parallel_config.pipeline_stage": _m("parallel.pipeline"),
    "parallel_config.context_parallel": _m("parallel.context"),
    "parallel_config.expert_parallel": _m("parallel.expert"),
    "parallel_config.use_seq_parallel": _m("parallel.sequence_parallel"),
    "parallel_config.micro_batch_num": _m("training.global_batch_size"),
    "parallel_config.vocab_emb_dp": _approx("the embedding and LM head data parallel: the "
                                            "framework profile's"),
    "parallel_config.gradient_aggregation_group": _approx(
        "HCCL gradient fusion groups: the framework profile's"),
    "micro_batch_interleave_num": _m("parallel"),
    # ---- recompute
    "recompute_config.recompute": _m("parallel.recompute"),
    "recompute_config.select_recompute": _m("parallel.recompute"),
    "recompute_config.select_comm_recompute": _approx("the communication of the selectively "
                                                      "recomputed ops: recompute_comm"),
    "recompute_config.parallel_optimizer_comm_recompute": _approx(
        "the optimizer-parallel all-gather recomputed: the framework profile's"),
    "recompute_config.mp_comm_recompute": _approx("the tensor-parallel communication "
                                                  "recomputed: the framework profile's"),
    "recompute_config.recompute_slice_activation": _m("parallel.recompute_slice_activation"),
    # ---- MindSpore context
    "context.mode": _m("framework"),
    **{f"context.{k}": _ignore("a device or memory-pool setting of the process") for k in (
        "device_target", "max_call_depth", "max_device_memory", "mempool_block_size",
        "save_graphs", "save_graphs_path", "device_id", "runtime_num_threads")},
    "context.enable_graph_kernel": _m("framework"),
    "context.jit_config.jit_level": _approx("O0 / O1 graph compilation: the framework "
                                            "profile's fused kernels"),
    "context.memory_optimize_level": _approx("the memory pool's reuse level"),
    "context.ascend_config.precision_mode": _approx("Ascend's precision mode"),
    # ---- the model (LlamaConfig)
    "model.model_config.type": _m("model"),
    **{f"{_MC}{k}": _m(f"model.{v}") for k, v in (
        ("seq_length", "seq_length"), ("hidden_size", "hidden_size"),
        ("num_layers", "layers"), ("num_heads", "num_heads"), ("n_kv_heads", "num_kv_heads"),
        ("intermediate_size", "ffn_hidden_size"), ("multiple_of", "ffn_hidden_size"),
        ("ffn_dim_multiplier", "ffn_hidden_size"), ("vocab_size", "vocab_size"),
        ("theta", "rope_theta"), ("compute_dtype", "dtype"), ("param_init_type", "param_dtype"),
        ("use_flash_attention", "attention"), ("tie_word_embeddings", "tie_embeddings"))},
    **{f"{_MC}{k}": _approx(why) for k, why in (
        ("layernorm_compute_type", "the RMSNorm computed in fp32: the framework profile's"),
        ("softmax_compute_type", "the softmax dtype inside FlashAttention: the same kernel"),
        ("rotary_dtype", "RoPE in fp32: the framework profile's unfused passes"),
        ("embedding_init_type", "the embedding table's dtype: 16-bit either way"),
        ("fine_grain_interleave", "the tensor-parallel slices interleaved: the framework "
         "profile's"),
        ("qkv_concat", "Q, K and V as one GEMM: the same FLOPs"),
        ("fused_rms_norm", "the RMSNorm kernel: the framework profile's"),
        ("use_rope_slice", "RoPE by slices: the same bytes"),
        ("offset", "the layers per stage offset: an even split"),
        ("rms_norm_eps", "numerics of the same kernel"),
        ("scaling_factor", "RoPE scaling: the same kernel"),
        ("extend_method", "RoPE extension: the same kernel"))},
    **{f"{_MC}{k}": _ignore(_INFER) for k in (
        "batch_size", "use_past", "checkpoint_name_or_path", "repetition_penalty",
        "max_decode_length", "top_k", "top_p", "do_sample", "bos_token_id", "eos_token_id",
        "pad_token_id", "ignore_token_id", "block_size", "num_blocks", "is_dynamic",
        "max_position_embedding", "llm_backend")},
    f"{_MC}qkv_has_bias": _refuse("Q, K, V biases"),
    f"{_MC}use_ring_attention": _refuse("ring attention without context_parallel"),
    f"{_MC}use_attn_mask_compression": _approx("a compressed causal mask: the same kernel"),
    f"{_MC}pp_interleave_num": _m("parallel.virtual_stages"),
    f"{_MC}quant_config": _refuse("quantized weights"),
    f"{_MC}moe_config": _refuse("a mixture of experts (MoE Llama)"),
}

NAMES: tuple[str, ...] = tuple(sorted({*KEYS, *SECTIONS, "model.model_config"}))


def rule(key: str) -> Flag | None:
    """The rule of dotted `key`: its own, else a section read whole that encloses it."""
    return section_rule(key, KEYS, SECTIONS)
