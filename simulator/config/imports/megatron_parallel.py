"""The `parallel` section of a scenario from Megatron-LM arguments: the degrees (data derived
as Megatron-LM derives it), the pipeline schedule, sequence parallelism, the distributed
optimizer, recompute and the overlaps. Megatron-LM's rules and defaults are those of
megatron/training/arguments.py `validate_args` (core_v0.8.0), cited at each."""

from __future__ import annotations

from typing import Any

from simulator.config.imports.megatron_values import Values

__all__ = ["parallel_section"]

Derived = list[tuple[str, str, str]]  # (scenario key, value, why)


def _degrees(values: Values, world: int) -> dict[str, int]:
    """TP, PP, CP, EP and DP = world / (TP x PP x CP) (validate_args: 'world size is not
    divisible by tensor parallel size times pipeline parallel size times context parallel
    size')."""
    tp = values.integer("--tensor-model-parallel-size", 1) or 1
    pp = values.integer("--pipeline-model-parallel-size", 1) or 1
    cp = values.integer("--context-parallel-size", 1) or 1
    ep = values.integer("--expert-model-parallel-size", 1) or 1
    if world % (tp * pp * cp):
        given = [a.flag for a in values.flags("--tensor-model-parallel-size",
                                              "--pipeline-model-parallel-size",
                                              "--context-parallel-size")]
        raise values.error(given[-1] if given else "--tensor-model-parallel-size",
                           f"TP {tp} x PP {pp} x CP {cp} = {tp * pp * cp} does not divide the "
                           f"world size {world}; the data-parallel size would not be whole")
    dp = world // (tp * pp * cp)
    if dp % ep:
        raise values.error("--expert-model-parallel-size", f"{ep} does not divide the "
                           f"data-parallel size {dp}")
    return {"data": dp, "tensor": tp, "pipeline": pp, "context": cp, "expert": ep}


def _schedule(values: Values, layers: int, pp: int) -> dict[str, Any]:
    """1F1B, or the interleaved schedule with `--num-layers-per-virtual-pipeline-stage` (its
    chunks: the layers per stage over it) or `--num-virtual-stages-per-pipeline-rank`."""
    per = values.integer("--num-layers-per-virtual-pipeline-stage")
    chunks = values.integer("--num-virtual-stages-per-pipeline-rank")
    flag = "--num-layers-per-virtual-pipeline-stage" if per else \
        "--num-virtual-stages-per-pipeline-rank"
    if per is None and chunks is None:
        return {"schedule": "1f1b"}
    if pp < 2:
        raise values.error(flag, "the interleaved schedule needs --pipeline-model-parallel-"
                           f"size of at least 2 (found {pp})")
    uneven = [a.flag for a in values.flags(*_UNEVEN)]
    if uneven and per is not None:
        raise values.error(flag, f"given with {uneven[0]}; Megatron-LM takes the virtual "
                           "pipeline size from --num-virtual-stages-per-pipeline-rank with "
                           "an uneven split (arguments.py)")
    if uneven:
        assert chunks is not None
        return {"schedule": "interleaved_1f1b", "virtual_stages": chunks} if chunks > 1 \
            else {"schedule": "1f1b"}
    if layers % pp:
        raise values.error(flag, f"--num-layers {layers} is not divisible by the pipeline "
                           f"size {pp}")
    if per is not None:
        if (layers // pp) % per:
            raise values.error(flag, f"{per} does not divide the {layers // pp} layers per "
                               "pipeline stage")
        chunks = layers // pp // per
    assert chunks is not None
    if chunks == 1:
        return {"schedule": "1f1b"}
    return {"schedule": "interleaved_1f1b", "virtual_stages": chunks}


_UNEVEN = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers")


def _uneven(values: Values, layers: int, pp: int, chunks: int) -> list[int] | None:
    """The layers of each virtual stage with `--decoder-first/last-pipeline-num-layers`:
    those on the first / last rank, the rest split evenly over the middle ranks, each
    rank's split evenly over its `chunks` model chunks; virtual stage c x PP + r is chunk c
    of rank r (Megatron-Core transformer_config.py `__post_init__` checks, transformer_block
    `get_transformer_layer_offset`)."""
    first, last = (values.integer(f, lo=1) for f in _UNEVEN)
    if first is None and last is None:
        return None
    flag = _UNEVEN[0] if first is not None else _UNEVEN[1]
    if pp < 2:
        raise values.error(flag, f"needs --pipeline-model-parallel-size of at least 2 "
                           f"(found {pp})")
    middle, rest = pp - (first is not None) - (last is not None), layers - (first or 0) - (
        last or 0)
    if rest < 0 or (middle and rest % middle) or (not middle and rest):
        raise values.error(flag, f"leaves {rest} of --num-layers {layers} for {middle} "
                           "middle pipeline stage(s): not a whole number each (Megatron-Core "
                           "refuses it)")
    per_rank = [first if r == 0 and first is not None else last
                if r == pp - 1 and last is not None else rest // max(middle, 1)
                for r in range(pp)]
    for r, count in enumerate(per_rank):
        if count % chunks:
            raise values.error(flag, f"{count} layers on pipeline rank {r} are not divisible "
                               f"by the {chunks} virtual stages a rank (Megatron-Core refuses "
                               "it)")
    return [per_rank[r] // chunks for _ in range(chunks) for r in range(pp)]


def _recompute(values: Values, layers_per_chunk: int, notes: list[str]) -> str:
    """none, selective (`--recompute-activations`, `--recompute-granularity selective`) or
    full (`--recompute-granularity full`, v2's `--checkpoint-activations`): every layer from
    its input with `--recompute-method uniform` (checkpoints every N layers: N > 1 noted) or
    `block` over all of a stage's layers."""
    if values.has("--checkpoint-activations"):
        every = values.integer("--checkpoint-num-layers", 1) or 1
        if every > 1:
            notes.append(f"--checkpoint-num-layers {every}: simulated as a checkpoint per "
                         "layer (the same recompute, more inputs kept)")
        return "full"
    gran = values.text("--recompute-granularity", None, ("full", "selective"))
    if values.has("--recompute-activations") or gran == "selective":
        if values.has("--recompute-num-layers"):
            raise values.error("--recompute-num-layers", "given with selective recompute; "
                               "Megatron-Core requires it unset (transformer_config.py)")
        return "selective"
    if gran is None:
        return "none"
    if not (values.has("--recompute-method") and values.has("--recompute-num-layers")):
        raise values.error("--recompute-granularity", "full needs --recompute-method "
                           "(uniform or block) and --recompute-num-layers (Megatron-Core "
                           "transformer_config.py refuses it without them)")
    method = values.text("--recompute-method", "uniform", ("uniform", "block"))
    n = values.integer("--recompute-num-layers", 1) or 1
    if method == "block" and n < layers_per_chunk:
        raise values.error("--recompute-num-layers", f"{n} of the {layers_per_chunk} layers "
                           "of each model chunk recomputed (block): recompute of part of a "
                           "stage is not simulated (allowed: all of them)")
    if method == "uniform" and n > 1:
        notes.append(f"--recompute-num-layers {n} (uniform): simulated as a checkpoint per "
                     "layer (the same recompute, more inputs kept)")
    return "full"


def _overlap(values: Values, p: dict[str, Any], tp_comm_default: bool) -> dict[str, Any]:
    """grad_reduce and param_gather as their flags say (Megatron-LM: off unless given);
    tp_comm as `--tp-comm-overlap` says, written `auto` where that is what the stack's
    profile resolves `auto` to (and with TP 1, where there is nothing to overlap)."""
    overlap: dict[str, Any] = {"grad_reduce": values.has("--overlap-grad-reduce")}
    if p["optimizer_shard"]:
        overlap["param_gather"] = values.has("--overlap-param-gather")
    tp_comm = values.has("--tp-comm-overlap")
    if tp_comm and not values.has("--sequence-parallel"):
        raise values.error("--tp-comm-overlap", "needs --sequence-parallel (Megatron-LM: "
                           "'Tensor parallel communication/GEMM overlap can happen only when "
                           "sequence parallelism is enabled')")
    overlap["tp_comm"] = "auto" if p["tensor"] == 1 or tp_comm == tp_comm_default else tp_comm
    a2a = values.has("--overlap-moe-expert-parallel-comm")
    if values.has("--delay-wgrad-compute") and not a2a:
        raise values.error("--delay-wgrad-compute", "needs --overlap-moe-expert-parallel-comm "
                           "(Megatron-Core: 'overlap_moe_expert_parallel_comm must be enabled "
                           "when enabling delay_wgrad_compute')")
    if a2a:  # with --delay-wgrad-compute or not: one price (lower.a2a_overlap)
        overlap["moe_a2a"] = True
    return overlap


def _dispatcher(values: Values) -> str | None:
    """`parallel.expert_dispatcher` from `--moe-token-dispatcher-type` (alltoall, or flex
    with `--moe-flex-dispatcher-backend` deepep (its default) | hybridep, or the deprecated
    `--moe-enable-deepep`: Megatron-LM 92c8482e arguments.py, transformer_config.py
    __post_init__); None without the flag. allgather is not modelled."""
    kind = values.text("--moe-token-dispatcher-type",
                       choices=("allgather", "alltoall", "flex"))
    deepep = values.has("--moe-enable-deepep")
    backend = values.text("--moe-flex-dispatcher-backend", choices=("deepep", "hybridep"))
    if deepep and kind != "flex":
        raise values.error("--moe-enable-deepep", "needs --moe-token-dispatcher-type flex "
                           "(Megatron-Core: 'DeepEP backend is only supported with flex "
                           "token dispatcher.')")
    if deepep and backend == "hybridep":
        raise values.error("--moe-enable-deepep", "with --moe-flex-dispatcher-backend "
                           "hybridep (Megatron-Core: 'Only one backend is supported for flex "
                           "token dispatcher.')")
    if kind == "allgather":
        raise values.error("--moe-token-dispatcher-type", "found 'allgather'; the all-gather "
                           "dispatcher is not modelled (allowed: alltoall, flex)")
    return (backend or "deepep") if kind == "flex" else kind


def _fusion(values: Values, derived: Derived) -> dict[str, Any]:
    """Buckets of `--ddp-bucket-size` parameters (fp32 gradients: bf16 training reduces in
    fp32, arguments.py 'bfloat16 requires gradient accumulation and all-reduce to be done in
    fp32'), else the stack's rule (`mode: auto`)."""
    size = values.integer("--ddp-bucket-size")
    if size is None:
        derived.append(("parallel.comm_fusion", "mode auto", "no --ddp-bucket-size: the "
                        "stack's bucket rule (framework profile grad_reduction)"))
        return {"mode": "auto"}
    grad_bytes = 2 if values.has("--fp16") and not values.has(
        "--accumulate-allreduce-grads-in-fp32") else 4
    return {"mode": "size", "bucket_mb": size * grad_bytes / 1e6}


def parallel_section(values: Values, world: int, tp_comm_default: bool, notes: list[str]
                     ) -> tuple[dict[str, Any], Derived]:
    """The parallel keys and the (key, value, why) of those derived from absent flags."""
    p: dict[str, Any] = _degrees(values, world)
    derived: Derived = [("parallel.data", str(p["data"]), "world size / (TP x PP x CP)")]
    layers = values.need("--num-layers")
    p.update(_schedule(values, layers, p["pipeline"]))
    if values.has("--sequence-parallel") and p["tensor"] == 1:
        notes.append("--sequence-parallel with TP 1: off, as Megatron-LM turns it off")
    p["sequence_parallel"] = values.has("--sequence-parallel") and p["tensor"] > 1
    p["optimizer_shard"] = 1 if values.has("--use-distributed-optimizer") else 0
    chunks = p.get("virtual_stages", 1)
    split = _uneven(values, layers, p["pipeline"], chunks)
    if split is not None:
        p["pipeline_layers"] = split
    chunk = min(split) if split else layers // (p["pipeline"] * chunks) or 1
    p["recompute"] = _recompute(values, chunk, notes)
    if values.has("--distribute-saved-activations") or \
            values.has("--distribute-checkpointed-activations"):
        p["recompute_slice_activation"] = True
    p["overlap"] = _overlap(values, p, tp_comm_default)
    if (dispatcher := _dispatcher(values)) is not None:
        p["expert_dispatcher"] = dispatcher
    p["comm_fusion"] = _fusion(values, derived)
    return p, derived
