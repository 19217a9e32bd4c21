"""The table of torchtitan job-config keys the importer reads (`section.key`): each mapped key
with the scenario key it sets, each ignored key with the reason (no effect on an iteration's
time or memory), each approximated key with how, and the keys that change performance with
no equivalent here (refused by name unless `--lenient`). A torchtitan key in none of these is
refused the same way. Names and defaults: pytorch/torchtitan torchtitan/config/job_config.py
@238fa99 and torchtitan/config_manager.py @0413364 / @9dec370 (`torchtitan_names.KEY_NAMES`).
"""

from __future__ import annotations

from simulator.config.imports.key_rules import approximated as _approx
from simulator.config.imports.key_rules import ignored as _ignore
from simulator.config.imports.key_rules import mapped as _m
from simulator.config.imports.key_rules import refused as _refuse
from simulator.config.imports.megatron_flags import Flag

__all__ = ["KEYS", "SECTIONS"]




_PATHS = "a file or folder path, or a name: no effect on an iteration's time or memory"
_LOG = "logging, profiling, validation or checkpointing: not part of a training iteration"
_HYPER = "an optimizer hyperparameter or schedule: the same kernels whatever its value"
_SETUP = "process setup or debugging: no effect on the simulated iteration"
_DATA = "the data pipeline: the simulator starts each micro-batch with its tokens on the device"

_SECTION_WHY = {"job": _PATHS, "profiling": _LOG, "metrics": _LOG, "checkpoint": _LOG,
                "validation": _LOG, "comm": _SETUP, "memory_estimation": _SETUP,
                "lr_scheduler": _HYPER}

KEYS: dict[str, Flag] = {
    # ---- model: the flavour's shape (torchtitan_model.FLAVORS)
    "model.name": _m("model"),
    "model.flavor": _m("model"),
    "model.norm_type": _m("model.norm"),
    "model.converters": _m("model.dtype"),
    "model.tokenizer_path": _ignore(_PATHS),
    "model.hf_assets_path": _ignore(_PATHS),
    "model.print_after_conversion": _ignore(_SETUP),
    # ---- training
    "training.local_batch_size": _m("training.micro_batch_size"),
    "training.batch_size": _m("training.micro_batch_size"),
    "training.global_batch_size": _m("training.global_batch_size"),
    "training.seq_len": _m("model.seq_length"),
    "training.mixed_precision_param": _m("model.dtype"),
    "training.mixed_precision_reduce": _ignore("float32 is the one value; the torchtitan "
                                               "profile reduces in fp32 (reduce_dtype)"),
    "training.dtype": _m("model.dtype"),
    "training.fp8_linear": _m("model.dtype"),
    "training.compile": _m("framework"),
    "training.enable_cpu_offload": _refuse("FSDP's CPU offload of parameters, gradients and "
                                           "optimizer states has no scenario key"),
    "training.enable_loss_parallel": _m("framework"),
    "training.disable_loss_parallel": _m("framework"),
    "training.data_parallel_degree": _m("parallel.data"),
    "training.data_parallel_replicate_degree": _m("parallel.data"),
    "training.data_parallel_shard_degree": _m("parallel.data"),
    "training.tensor_parallel_degree": _m("parallel.tensor"),
    "training.pipeline_parallel_degree": _m("parallel.pipeline"),
    **{f"training.{k}": _ignore(_HYPER) for k in ("steps", "max_norm", "warmup_steps")},
    **{f"training.{k}": _ignore(_DATA) for k in (
        "dataset", "dataset_path", "dataloader.num_workers", "dataloader.persistent_workers",
        "dataloader.pin_memory", "dataloader.prefetch_factor")},
    **{f"training.{k}": _ignore(_SETUP) for k in ("gc_freq", "gc_debug", "seed",
                                                  "deterministic")},
    # ---- parallelism (2025-): the degrees, the pipeline, async TP
    **{f"parallelism.{k}_degree": _m(f"parallel.{v}") for k, v in (
        ("data_parallel_replicate", "data"), ("data_parallel_shard", "data"),
        ("tensor_parallel", "tensor"), ("pipeline_parallel", "pipeline"),
        ("context_parallel", "context"), ("expert_parallel", "expert"),
        ("expert_tensor_parallel", "expert_tensor"))},
    "parallelism.fsdp_reshard_after_forward": _m("framework"),
    "parallelism.disable_loss_parallel": _m("framework"),
    "parallelism.enable_async_tensor_parallel": _m("parallel.overlap.tp_comm"),
    "parallelism.pipeline_parallel_schedule": _m("parallel.schedule"),
    "parallelism.pipeline_parallel_layers_per_stage": _m("parallel.pipeline_layers"),
    "parallelism.pipeline_parallel_first_stage_less_layers": _m("parallel.pipeline_layers"),
    "parallelism.pipeline_parallel_last_stage_less_layers": _m("parallel.pipeline_layers"),
    "parallelism.pipeline_parallel_microbatch_size": _m("training.micro_batch_size"),
    "parallelism.module_fqns_per_model_part": _refuse("a hand-written split of modules "
                                                      "over stages: use parallel."
                                                      "pipeline_layers"),
    "parallelism.pipeline_parallel_schedule_csv": _m("parallel.schedule"),
    "parallelism.pipeline_parallel_expert_parallel_overlap": _ignore(
        "DualPipeV's overlap of expert-parallel communication: DualPipeV is refused"),
    "parallelism.context_parallel_load_balancer": _approx(
        "the load balancer of causal attention: the simulated ring attention balances it"),
    "parallelism.context_parallel_rotate_method": _approx(
        "all-gather or all-to-all of the key/value blocks: simulated as ring attention "
        "(the same bytes)"),
    "parallelism.expert_parallel_comm_backend": _m("framework"),
    # ---- 2024-12: [experimental] pipeline and context degrees, async TP
    "experimental.pipeline_parallel_degree": _m("parallel.pipeline"),
    "experimental.context_parallel_degree": _m("parallel.context"),
    "experimental.enable_async_tensor_parallel": _m("parallel.overlap.tp_comm"),
    "experimental.context_parallel_rotate_method": _approx(
        "all-gather or all-to-all of the key/value blocks: simulated as ring attention "
        "(the same bytes)"),
    "experimental.pipeline_parallel_schedule": _m("parallel.schedule"),
    "experimental.pipeline_parallel_microbatches": _m("training.micro_batch_size"),
    "experimental.pipeline_parallel_split_points": _refuse("hand-written split points: use "
                                                           "parallel.pipeline_layers"),
    "experimental.pipeline_parallel_schedule_csv": _m("parallel.schedule"),
    "experimental.enable_compiled_autograd": _refuse("compiled autograd is not modelled"),
    "experimental.custom_import": _m("model"),
    "experimental.custom_args_module": _m("model"),
    # ---- activation checkpointing
    "activation_checkpoint.mode": _m("parallel.recompute"),
    "activation_checkpoint.selective_ac_option": _m("parallel.recompute"),
    "activation_checkpoint.memory_budget": _m("parallel.recompute"),
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": _approx(
        "GEMMs recomputed by name (the MoE router's gate by default): a tiny share"),
    **{f"activation_checkpoint.{k}": _ignore(_SETUP) for k in (
        "early_stop", "preserve_rng_state", "determinism_check", "debug",
        "visualize_memory_budget_pareto")},
    # ---- compile, float8
    "compile.enable": _m("framework"),
    "compile.components": _m("framework"),
    "compile.backend": _m("framework"),
    "float8.enable_float8_linear": _m("model.dtype"),
    "float8.enable_fsdp_float8_all_gather": _m("training.fp8_params"),
    "float8.precompute_float8_dynamic_scale_for_fsdp": _approx(
        "one amax all-reduce for all parameters instead of one each: the FP8 casts as priced"),
    **{f"float8.scaling_type_{k}": _approx("dynamic or delayed scaling: the same FP8 GEMMs")
       for k in ("input", "weight", "grad_output")},
    "quantize.linear.float8.enable_fsdp_float8_all_gather": _m("training.fp8_params"),
    "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp": _approx(
        "one amax all-reduce for all parameters instead of one each: the FP8 casts as priced"),
    "quantize.linear.float8.recipe_name": _approx("tensorwise or rowwise scaling: the same "
                                                  "FP8 GEMMs"),
    "quantize.linear.float8.filter_fqns": _approx("the layers left in bf16 (the LM head by "
                                                  "default): every GEMM of the layers in FP8"),
    "quantize.linear.float8.emulate": _refuse("FP8 emulated in bf16 (for GPUs without FP8)"),
    **{f"quantize.{k}": _m("model.dtype") for k in (
        "linear.mx.filter_fqns", "linear.mx.mxfp8_dim1_cast_kernel_choice",
        "linear.mx.recipe_name", "grouped_mm.float8.fqns", "grouped_mm.mx.fqns",
        "grouped_mm.mx.recipe_name")},
    # ---- optimizer
    "optimizer.name": _m("training.optimizer"),
    **{f"optimizer.{k}": _ignore(_HYPER) for k in ("lr", "beta1", "beta2", "eps",
                                                  "weight_decay")},
    "optimizer.implementation": _approx("for-loop, foreach or fused: the step's kernels are "
                                        "the framework profile's"),
    "optimizer.fused": _approx("fused or foreach: the step's kernels are the framework "
                               "profile's"),
    "optimizer.early_step_in_backward": _refuse("the optimizer step inside the backward "
                                                "(gradients freed as they are made)"),
    "fault_tolerance.enable": _m("framework"),
    **{f"fault_tolerance.{k}": _ignore(_SETUP) for k in (
        "group_size", "min_replica_size", "process_group", "process_group_timeout_ms",
        "replica_id", "semi_sync_method")},
    "debug.moe_force_load_balance": _ignore("routing forced even: parallel.moe imbalance 1"),
    **{f"debug.{k}": _ignore(_SETUP) for k in ("seed", "deterministic",
                                               "deterministic_warn_only")},
}

SECTIONS = ("job", "profiling", "metrics", "model", "optimizer", "lr_scheduler", "training",
            "parallelism", "checkpoint", "activation_checkpoint", "compile", "quantize",
            "float8", "experimental", "comm", "memory_estimation", "fault_tolerance",
            "validation", "debug")


def rule(key: str) -> Flag | None:
    """The rule of `key` (`section.key`): its own, else its section's (the sections read
    whole: job, profiling, metrics, checkpoint, validation, comm, memory_estimation,
    lr_scheduler), else None."""
    found = KEYS.get(key)
    if found is not None:
        return found
    why = _SECTION_WHY.get(key.split(".", 1)[0])
    return _ignore(why) if why else None
