"""The table of DeepSpeed config keys (`ds_config.json`, dotted here) the importer reads, with
what each becomes; a key in no entry and under no section read whole is refused with a
did-you-mean. Names: deepspeedai/DeepSpeed @edaa722 (2026-08) deepspeed/runtime/constants.py
(the top level), deepspeed/runtime/zero/config.py `DeepSpeedZeroConfig` (with its stage3_
aliases) and zero/offload_config.py, activation_checkpointing/config.py."""

from __future__ import annotations

from simulator.config.imports.key_rules import approximated as _approx
from simulator.config.imports.key_rules import ignored as _ignore
from simulator.config.imports.key_rules import mapped as _m
from simulator.config.imports.key_rules import refused as _refuse
from simulator.config.imports.megatron_flags import IGNORE, MAP, REFUSE, Flag

__all__ = ["KEYS", "SECTIONS", "rule", "NAMES"]




_LOG = "logging, monitoring, profiling or checkpointing: not part of a training iteration"
_HYPER = "an optimizer hyperparameter or schedule: the same kernels whatever its value"
_NUMERICS = "numerics of the same kernels (loss scaling): no effect on time or memory"
_TUNE = ("a ZeRO-3 tuning knob (prefetch, persistence, live parameters): the framework "
         "profile's defaults are simulated")

# whole sections: every key under them (DeepSpeed's monitors, schedules, I/O)
SECTIONS: dict[str, Flag] = {
    **{s: _ignore(_LOG) for s in ("tensorboard", "wandb", "csv_monitor", "comet",
                                  "flops_profiler", "comms_logger", "checkpoint", "nebula",
                                  "autotuning", "aio", "timers")},
    "scheduler": _ignore(_HYPER),
    "optimizer.params": _ignore(_HYPER),
}

_ZERO = "zero_optimization."
KEYS: dict[str, Flag] = {
    "train_batch_size": _m("training.global_batch_size"),
    "train_micro_batch_size_per_gpu": _m("training.micro_batch_size"),
    "gradient_accumulation_steps": _m("training.global_batch_size"),
    "optimizer.type": _m("training.optimizer"),
    "fp16.enabled": _m("model.dtype"),
    "bf16.enabled": _m("model.dtype"),
    "bfloat16.enabled": _m("model.dtype"),
    **{f"fp16.{k}": _ignore(_NUMERICS) for k in (
        "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
        "consecutive_hysteresis", "min_loss_scale", "auto_cast")},
    "fp16.fp16_master_weights_and_grads": _refuse("fp16 master weights: no fp32 copy"),
    "bf16.immediate_grad_update": _approx("the gradient accumulated as it is made: the same "
                                          "kernels"),
    "bf16.bf16_master_weights_and_grads": _refuse("bf16 master weights: no fp32 copy"),
    "bf16.bf16_optimizer_states": _refuse("bf16 optimizer states"),
    "gradient_clipping": _ignore(_HYPER),
    "steps_per_print": _ignore(_LOG),
    "wall_clock_breakdown": _ignore(_LOG),
    "memory_breakdown": _ignore(_LOG),
    "dump_state": _ignore(_LOG),
    "zero_allow_untested_optimizer": _ignore("a check of the optimizer, not a kernel"),
    "zero_force_ds_cpu_optimizer": _ignore("DeepSpeed's CPU Adam for offload: the offloaded "
                                           "step is the framework profile's"),
    "prescale_gradients": _approx("the gradients scaled before the reduction instead of "
                                  "after: one element-wise pass either way"),
    "gradient_predivide_factor": _approx("a scaling split around the reduction: the same "
                                         "kernels"),
    "communication_data_type": _m("parallel.comm_fusion"),
    "sparse_gradients": _refuse("sparse embedding gradients reduced as sparse tensors"),
    "dataloader_drop_last": _ignore("the data pipeline"),
    "disable_allgather": _approx("stage 1's parameters broadcast instead of all-gathered: "
                                 "the same bytes"),
    "data_types.grad_accum_dtype": _approx("the dtype gradients accumulate in: the framework "
                                           "profile's"),
    # ---- ZeRO
    f"{_ZERO}stage": _m("parallel.optimizer_shard"),
    f"{_ZERO}offload_optimizer.device": _m("parallel.offload.optimizer_states"),
    f"{_ZERO}offload_param.device": _m("parallel.offload.parameters"),
    **{f"{_ZERO}offload_{w}.{k}": _approx("the host buffers and threads of the offload: "
                                          "the framework profile's")
       for w in ("optimizer", "param") for k in (
           "pin_memory", "buffer_count", "buffer_size", "max_in_cpu", "fast_init",
           "cpuadam_cores_perc")},
    **{f"{_ZERO}offload_optimizer.pipeline_{k}": _m(f"parallel.offload.nvme_pipeline_{k}")
       for k in ("read", "write")},
    **{f"{_ZERO}offload_param.{k}": _approx("the parameter swap's pipelining: parameters on "
                                            "NVMe have no scenario key")
       for k in ("pipeline_read", "pipeline_write")},
    **{f"{_ZERO}offload_{w}.nvme_path": _ignore("a path") for w in ("optimizer", "param")},
    f"{_ZERO}offload_optimizer.ratio": _refuse("a part of the optimizer offloaded"),
    f"{_ZERO}overlap_comm": _m("parallel.overlap.grad_reduce"),
    f"{_ZERO}reduce_bucket_size": _m("parallel.comm_fusion"),
    f"{_ZERO}allgather_bucket_size": _approx("the stage 1/2 parameter all-gather's buckets "
                                             "after the step: the profile's"),
    f"{_ZERO}contiguous_gradients": _approx("gradients copied into one buffer as they are "
                                            "made: the framework profile's"),
    f"{_ZERO}reduce_scatter": _approx("reduce-scatter (the default) or all-reduce of the "
                                      "gradients: simulated as the stage's collective"),
    f"{_ZERO}allgather_partitions": _approx("one all-gather or broadcasts: the same bytes"),
    f"{_ZERO}round_robin_gradients": _approx("the gradients' order over the ranks: the same "
                                             "bytes"),
    f"{_ZERO}sub_group_size": _approx("the optimizer step in groups of parameters: the same "
                                      "kernels"),
    f"{_ZERO}elastic_checkpoint": _ignore(_LOG),
    f"{_ZERO}load_from_fp32_weights": _ignore(_LOG),
    f"{_ZERO}ignore_unused_parameters": _ignore("a check, not a kernel"),
    f"{_ZERO}legacy_stage1": _approx("the old stage 1 code: the same collectives"),
    **{f"{_ZERO}{p}{k}": _approx(_TUNE) for p in ("", "stage3_") for k in (
        "prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
        "max_live_parameters", "max_reuse_distance", "module_granularity_threshold",
        "allgather_sequential", "use_all_reduce_for_fetch_params")},
    **{f"{_ZERO}{k}": _ignore(_LOG) for k in (
        "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save")},
    **{f"{_ZERO}{k}": _refuse("ZeRO++ / MiCS: quantized or hierarchical collectives") for k in (
        "zero_quantized_weights", "zero_quantized_gradients",
        "zero_quantized_nontrainable_weights", "zero_hpz_partition_size", "mics_shard_size",
        "mics_hierarchical_params_gather", "zeropp_loco_param")},
    f"{_ZERO}cpu_offload": _m("parallel.offload.optimizer_states"),
    f"{_ZERO}cpu_offload_param": _m("parallel.offload.parameters"),
    f"{_ZERO}cpu_offload_use_pin_memory": _approx("pinned host buffers: the profile's"),
    # ---- activation checkpointing (deepspeed.checkpointing, called by the model code)
    "activation_checkpointing.partition_activations": _refuse(
        "saved activations split over the tensor-parallel ranks"),
    "activation_checkpointing.cpu_checkpointing": _refuse("checkpoints kept in host memory"),
    "activation_checkpointing.contiguous_memory_optimization": _approx(
        "checkpoints copied into one buffer: the same bytes"),
    "activation_checkpointing.number_checkpoints": _approx("the buffer's size hint"),
    "activation_checkpointing.synchronize_checkpoint_boundary": _approx(
        "a device synchronisation at each checkpoint: no kernel"),
    "activation_checkpointing.profile": _ignore(_LOG),
    # ---- features with no scenario key
    "amp.enabled": _refuse("NVIDIA Apex AMP"),
    "torch_autocast.enabled": _refuse("torch.autocast instead of DeepSpeed's mixed precision"),
    "pipeline": _refuse("DeepSpeed's pipeline engine"),
    "sparse_attention.mode": _refuse("block-sparse attention"),
    "progressive_layer_drop.enabled": _refuse("layers skipped as training goes"),
    "elasticity.enabled": _refuse("the batch chosen by the elastic agent"),
    "compression_training": _refuse("compression (quantization, pruning) while training"),
    "curriculum_learning.enabled": _refuse("a sequence length growing over training"),
    "data_efficiency.enabled": _refuse("data sampling and routing of DeepSpeed Data "
                                       "Efficiency"),
    "hybrid_engine.enabled": _refuse("the RLHF hybrid engine"),
    "sequence_parallel_size": _refuse("DeepSpeed-Ulysses sequence parallel"),
    "tensor_parallel.autotp_size": _refuse("AutoTP tensor parallel"),
    "compile.deepcompile": _refuse("DeepCompile"),
}

# the names the did-you-mean searches: the table, the sections and DeepSpeed's other
# top-level keys (constants.py)
NAMES: tuple[str, ...] = tuple(sorted({*KEYS, *SECTIONS, "optimizer", "fp16", "bf16",
                                       "zero_optimization", "activation_checkpointing",
                                       "data_types"}))


def rule(key: str) -> Flag | None:
    """The rule of dotted `key`: its own, else the nearest enclosing one (a section read
    whole, or a feature refused whole: `pipeline`, `compression_training`), else None."""
    parts = key.split(".")
    switch = f"{parts[0]}.enabled"
    if key != switch and KEYS.get(switch, Flag(MAP)).kind == REFUSE:
        return _ignore(f"a setting of {parts[0]}, which {switch} turns on")
    for end in range(len(parts), 0, -1):
        head = ".".join(parts[:end])
        found = KEYS.get(head) or SECTIONS.get(head)
        if found is not None and (end == len(parts) or found.kind in (IGNORE, REFUSE)):
            return found
    return None
