"""Framework profiles: loading and errors, the hardware default, the Software value, the bucket
rule of comm_fusion auto, the stack's memory, and FP8 as a per-GEMM precision."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from simulator.config.framework import framework_for, list_frameworks, load_framework
from simulator.config.hardware.load import list_profiles, load_profile
from simulator.config.resources import list_bundled
from simulator.config.scenario import parse_scenario
from simulator.errors import InputError
from simulator.lower.buckets import auto_fusion
from simulator.lower.framework_apply import communicators, fp8_recipe, with_auto_fusion
from simulator.lower.state import framework_overhead_bytes
from simulator.program.fp8 import Fp8Recipe, apply_fp8
from simulator.program.model_program import transformer_program
from simulator.report.summary import summary
from simulator.simulation.simulate import simulate

MIB = 2**20


def _scenario(hardware: str = "h100-sxm", dtype: str = "bf16", **top: Any):
    data = {"name": "fw", "hardware": hardware,
            "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 4, "hidden_size": 1024,
                      "num_heads": 16, "seq_length": 1024, "vocab_size": 8192, "dtype": dtype},
            "training": {"global_batch_size": 16, "micro_batch_size": 1},
            "parallel": {"data": 4, "tensor": 2, "sequence_parallel": True}}
    for key, value in top.items():
        if key == "parallel":
            data["parallel"] = {**data["parallel"], **value}
        else:
            data[key] = value
    return parse_scenario(data, "fw.yaml")


def test_every_bundled_profile_loads_and_every_hardware_default_exists() -> None:
    names = {f.name for f in list_frameworks()}
    assert names == set(list_bundled("framework_profiles"))
    assert {"megatron-lm-2021", "megatron-core", "nemo", "megatron-deepspeed",
            "deepspeed-zero", "pytorch-fsdp", "torchtitan", "llm-foundry", "mindspore",
            "mindspeed"} <= names
    for hw in list_profiles():
        assert hw.default_framework in names


def test_hardware_defaults_keep_the_reference_stacks() -> None:
    a100, h100 = load_profile("a100-80gb").software, load_profile("h100-sxm").software
    assert not (a100.fused_attention or a100.fused_grad_accumulation or a100.tp_comm_overlap
                or a100.bf16_grads_fp32)
    assert h100.fused_attention and h100.fused_grad_accumulation and h100.tp_comm_overlap
    assert h100.bf16_grads_fp32 and h100.tp_comm_sms == 16


def test_scenario_framework_overrides_the_hardware_default() -> None:
    hw = load_profile("h100-sxm")
    assert framework_for(_scenario(), hw).name == "megatron-core"
    assert framework_for(_scenario(framework="nemo"), hw).name == "nemo"
    # nemo reduces bf16 gradients in bf16 (grad_sync_dtype), Megatron-Core in fp32
    mcore = transformer_program(_scenario(), hw.software, hw.compute_units)
    nemo = transformer_program(_scenario(), load_framework("nemo").software, hw.compute_units)
    assert mcore.grad_bytes == 4.0 and nemo.grad_bytes == 2.0


def test_unknown_framework_names_key_and_bundled(write_file) -> None:
    with pytest.raises(InputError) as info:
        framework_for(_scenario(framework="megatron-cor"), load_profile("h100-sxm"))
    msg = str(info.value)
    assert msg.startswith("fw.yaml: framework: found 'megatron-cor', which is neither a "
                          "bundled framework profile nor a file (did you mean 'megatron-core'?)")
    assert "bundled: ascendspeed, deepspeed-zero, " in msg


def test_bad_profile_field_names_file_and_key(write_file) -> None:
    data = _bundled_text("nemo")
    data["overlap"]["tp_comm_enabled"] = "yes"
    path = write_file("mine.yaml", data)
    with pytest.raises(InputError) as info:
        load_framework(str(path))
    assert str(info.value) == (f"{path}: overlap.tp_comm_enabled: found 'yes'; "
                               "expected true or false")


def _bundled_text(name: str) -> dict:
    from simulator.config.resources import bundled_dir

    return yaml.safe_load((bundled_dir("framework_profiles") / f"{name}.yaml").read_text())


def test_auto_bucket_rules_closed_forms() -> None:
    mcore = load_framework("megatron-core")
    # max(40e6, 1e6 x dp) parameters of 4 bytes
    assert auto_fusion(mcore, 8, 4.0, 1) == ("size", 40e6 * 4 / 1e6)
    assert auto_fusion(mcore, 64, 4.0, 1) == ("size", 64e6 * 4 / 1e6)
    assert auto_fusion(load_framework("pytorch-fsdp"), 8, 2.0, 0) == ("size", 26.2144)
    assert auto_fusion(load_framework("deepspeed-zero"), 8, 2.0, 2) == ("size", 1000.0)
    assert auto_fusion(load_framework("torchtitan"), 8, 4.0, 3) == ("index", math.inf)
    assert auto_fusion(load_framework("megatron-lm-2021"), 8, 2.0, 0) == ("size", math.inf)
    assert auto_fusion(load_framework("mindspore"), 8, 2.0, 1, 7.0) == ("size", 7.0)


def test_auto_fusion_only_replaces_auto() -> None:
    fw = load_framework("megatron-core")
    sc = _scenario(parallel={"comm_fusion": {"mode": "auto"}})
    assert with_auto_fusion(sc, fw, 4.0).parallel.comm_fusion.bucket_mb == 160.0
    fixed = _scenario(parallel={"comm_fusion": {"mode": "size", "bucket_mb": 7}})
    assert with_auto_fusion(fixed, fw, 4.0) is fixed


def test_framework_overhead_closed_form_in_the_report() -> None:
    sc = _scenario()
    fw = load_framework("megatron-core")
    o = fw.memory_overheads
    expected = o.cuda_context_bytes + 4 * MIB * o.comm_buffers_per_communicator * 2  # dp, tp
    assert communicators(sc) == 2
    assert framework_overhead_bytes(o, 2) == expected
    s = summary(simulate(sc, load_profile("h100-sxm")))
    mem = s["memory"]
    assert mem["by_category_bytes"]["framework_overhead"] == expected
    assert mem["headroom_bytes"] == mem["capacity_bytes"] - mem["peak_bytes"]


def test_fp8_runs_the_recipe_gemms_in_fp8_with_casts() -> None:
    sc = _scenario(dtype="fp8")
    hw = load_profile("h100-sxm")
    fw = framework_for(sc, hw)
    prog = transformer_program(sc, fw.software, hw.compute_units, fp8_recipe(sc, fw))
    gemms = {op.name: op.dtype for op in prog.block("layer").fwd + prog.block("head").fwd
             if getattr(op, "kind", "") == "gemm"}
    assert gemms == {"qkv": "fp8", "proj": "fp8", "fc1": "fp8", "fc2": "fp8",
                     "lm_head": "bf16"}
    assert prog.dtype == "bf16"  # weights, activations and states stay 16-bit
    casts = [op for op in prog.block("layer").fwd if ".fp8_" in op.name]
    assert len(casts) == 8  # input and weight of each of the 4 FP8 GEMMs
    qkv = next(op for op in prog.block("layer").fwd if op.name == "qkv")
    m, _, k = qkv.gemm_mnk
    # Megatron-Core's TE userbuffers gather qkv's input in FP8: quantized in the norm on
    # the shard, the gathered FP8 copy transposed (read 1, write 1)
    cast = next(op for op in casts if op.name == "qkv.fp8_transpose_input")
    assert cast.bytes_accessed == 2.0 * m * k
    # without the TP-comm overlap the gather is bf16 and the cast a cast_transpose of it
    plain_sc = _scenario(dtype="fp8", parallel={"overlap": {"tp_comm": False}})
    plain = transformer_program(plain_sc, fw.software, hw.compute_units,
                                fp8_recipe(plain_sc, fw))
    cast = next(op for op in plain.block("layer").fwd if op.name == "qkv.fp8_cast_input")
    assert cast.bytes_accessed == 4.0 * m * k  # read bf16, write FP8 and its transpose


def test_te_userbuffers_gather_fp8_operands() -> None:
    """transformer_engine/pytorch/module/base.py initialize_ub: fp8_buf for every
    all-gather-overlap layer: the gathers feeding FP8 GEMMs move 1 byte an element; the
    reduce-scatters and the gathers of bf16 GEMMs keep 2."""
    from simulator.cost.specs import CommSpec, ComputeSpec

    tp, m, k, n = 4, 64, 32, 16
    ops = (CommSpec("ag_x", "all_gather", 2.0 * m * k, "tp"),
           ComputeSpec("fc1", "gemm", 1.0, 1.0, "bf16", "fwd", (m, n, k)),
           CommSpec("rs_y", "reduce_scatter", 2.0 * m * n, "tp"),
           CommSpec("ag_h", "all_gather", 2.0 * m * k, "tp"),
           ComputeSpec("lm_head", "gemm", 1.0, 1.0, "bf16", "fwd", (m, n, k)))
    bwd = (CommSpec("ag_dy", "all_gather", 2.0 * m * n, "tp", "bwd"),
           ComputeSpec("fc2.dgrad", "gemm", 1.0, 1.0, "bf16", "bwd", (m, k, n)))
    te = Fp8Recipe(frozenset({"fc1", "fc2"}), False, 1, gather_tp=tp)
    got = {op.name: op.bytes if isinstance(op, CommSpec) else op.bytes_accessed
           for op in apply_fp8(ops, te) + apply_fp8(bwd, te)}
    assert got["ag_x.fp8"] == 1.0 * m * k and got["ag_dy.fp8"] == 1.0 * m * n
    assert got["rs_y"] == 2.0 * m * n and got["ag_h"] == 2.0 * m * k  # bf16 GEMM's gather
    assert got["fc1.fp8_transpose_input"] == 2.0 * m * k
    assert got["fc2.dgrad.fp8_cast_grad"] == (2.0 + 3.0 / tp) * m * n  # shard cast + transpose
    off = apply_fp8(ops, Fp8Recipe(frozenset({"fc1", "fc2"}), False, 1))
    assert [op.bytes for op in off if isinstance(op, CommSpec)] == [2.0 * m * k, 2.0 * m * n,
                                                                    2.0 * m * k]


def test_fp8_weight_cast_once_per_step_with_delayed_scaling() -> None:
    from simulator.cost.specs import ComputeSpec

    gemm = ComputeSpec("fc1", "gemm", 1.0, 1.0, "bf16", "fwd", (64, 32, 16))
    delayed = apply_fp8((gemm,), Fp8Recipe(frozenset({"fc1"}), False, 4))
    dynamic = apply_fp8((gemm,), Fp8Recipe(frozenset({"fc1"}), True, 4))
    w = {op.name: op.bytes_accessed for op in delayed}
    assert w["fc1.fp8_cast_weight"] == 16 * 32 * 4.0 / 4
    wd = {op.name: op.bytes_accessed for op in dynamic}
    assert wd["fc1.fp8_cast_weight"] == 16 * 32 * 6.0  # plus the amax pass, every use
    assert [op.dtype for op in delayed if op.name == "fc1"] == ["fp8"]
    # torchao Float8 (torchtitan) scales from the current amax; TE recipes are delayed
    assert load_framework("torchtitan").fp8.dynamic_scaling
    assert not load_framework("nemo").fp8.dynamic_scaling


def _layer_s(dtype: str, hidden: int, recipe: bool = True) -> float:
    from simulator.cost.compute import compute_time_s

    hw = load_profile("h100-sxm")
    sc = _scenario(dtype=dtype, model={"type": "transformer", "layers": 2, "dtype": dtype,
                                       "hidden_size": hidden, "num_heads": hidden // 128,
                                       "seq_length": 4096, "vocab_size": 8192})
    fw = framework_for(sc, hw)
    prog = transformer_program(sc, fw.software, hw.compute_units,
                               fp8_recipe(sc, fw) if recipe else None)
    return sum(compute_time_s(op, hw) for op in prog.block("layer").fwd + prog.block("layer").bwd
               if hasattr(op, "flops"))


def test_fp8_recipe_sits_between_bf16_and_all_fp8() -> None:
    """Large GEMMs gain from FP8 but less than 2x: the casts and the bf16 attention core
    stay; with no recipe every op ran in fp8 (the old model, too fast)."""
    bf16, fp8, every = _layer_s("bf16", 8192), _layer_s("fp8", 8192), _layer_s(
        "fp8", 8192, recipe=False)
    assert every < fp8 < bf16
    assert fp8 > bf16 / 2


def test_fp8_without_a_recipe_is_an_input_error() -> None:
    with pytest.raises(InputError) as info:
        simulate(_scenario(dtype="fp8", framework="pytorch-fsdp"), load_profile("h100-sxm"))
    assert str(info.value).startswith(
        "fw.yaml: model.dtype: fp8 needs a framework with an FP8 recipe; 'pytorch-fsdp' "
        "(framework_profiles/pytorch-fsdp.yaml) has none (fp8.supported: false)")


def test_fp8_weight_copies_are_counted_as_parameters() -> None:
    hw = load_profile("h100-sxm")
    bf16 = dict(simulate(_scenario(), hw).plan.static_memory[0])
    fp8 = simulate(_scenario(dtype="fp8"), hw).plan.static_memory[0]
    params = [b for cat, b in fp8 if cat == "parameters"]
    assert params[0] == bf16["parameters"] and len(params) == 2
    assert 0 < params[1] < bf16["parameters"]  # 2 B per layer parameter, not the embedding


def test_fp8_gemm_inputs_are_kept_in_fp8() -> None:
    """Tensors kept only by FP8 GEMMs are saved as their 1-byte FP8 copy: the layer keeps
    less than in bf16, but not half (norm, attention and residual tensors stay bf16)."""
    from simulator.graph.decoder import LayerKind
    from simulator.models.transformer_plan import gpt_dims, planned_transformer
    from simulator.program.fp8 import fp8_saved
    from simulator.sharding.lower import Saved
    from simulator.sharding.plan import build_plan

    hw = load_profile("h100-sxm")
    sc, sc8 = _scenario(), _scenario(dtype="fp8")
    fw = framework_for(sc8, hw)
    bf16 = transformer_program(sc, fw.software, hw.compute_units).block("layer").saved_bytes
    fp8 = transformer_program(sc8, fw.software, hw.compute_units,
                              fp8_recipe(sc8, fw)).block("layer").saved_bytes
    assert bf16 / 2 < fp8 < bf16
    graph, mesh = planned_transformer(gpt_dims(sc, True, (LayerKind(),) * 3), 4, 2, True)
    plan = build_plan(graph, mesh, 2)
    sv = Saved({"x": (8.0, "ln", ("l1.fc1_mm",)), "y": (8.0, "ln", ("l1.fc1_mm", "l1.ln2"))},
               {})
    out = fp8_saved(sv, plan, Fp8Recipe(frozenset({"fc1"}), False), 2.0)
    assert out.tensors["x"][0] == 4.0 and out.tensors["y"][0] == 8.0


def test_the_stack_names_its_attention_kernel_and_the_program_carries_it() -> None:
    # llm-foundry's benchmarks ran the Triton port of FlashAttention v1 and Megatron-Core
    # Transformer Engine: on an H100 the same model's attention then costs the FA1 rate (~15%
    # of peak) or cuDNN's (~49%)
    hw = load_profile("h100-sxm")
    fsdp = transformer_program(_scenario(framework="llm-foundry"),
                               load_framework("llm-foundry").software, hw.compute_units)
    mcore = transformer_program(_scenario(), hw.software, hw.compute_units)
    impls = lambda prog: {op.impl for op in prog.block("layer").fwd + prog.block("layer").bwd  # noqa: E731
                          if getattr(op, "kind", "") == "attention"}
    assert impls(fsdp) == {"fa1"} and impls(mcore) == {"te"}
    base = simulate(_scenario(), hw).iteration_time_s
    slower = simulate(_scenario(), load_profile("h100-sxm", [
        "efficiency.attention_kernels.te.bwd=0.1"])).iteration_time_s
    assert slower > base


def test_fused_cross_entropy_moves_the_logits_once_each_way() -> None:
    # llm-foundry's flash-attn cross-entropy: e bytes per logit forward, 2e backward, and it
    # keeps the bf16 logits (2 bytes each) instead of Megatron's fp32 softmax (4 bytes);
    # Megatron's fp32 passes move e + 36 and 12 + e (graph/ops/loss.py)
    hw = load_profile("h100-sxm")
    sc = _scenario(parallel={"tensor": 1, "data": 8, "sequence_parallel": False})
    fused = transformer_program(sc, load_framework("llm-foundry").software, hw.compute_units)
    plain = transformer_program(sc, load_framework("pytorch-fsdp").software, hw.compute_units)
    logits = 1 * 1024 * 8192  # micro-batch x sequence x vocabulary on one device
    ce = lambda ops, n: next(op for op in ops if op.name == n)  # noqa: E731
    assert ce(fused.block("head").fwd, "cross_entropy").bytes_accessed == 2 * logits
    assert ce(fused.block("head").bwd, "cross_entropy.bwd").bytes_accessed == 4 * logits
    assert ce(plain.block("head").fwd, "cross_entropy").bytes_accessed == 38 * logits
    assert ce(plain.block("head").bwd, "cross_entropy.bwd").bytes_accessed == 14 * logits
    assert plain.block("head").saved_bytes - fused.block("head").saved_bytes == 2 * logits


def test_weights_stored_in_another_16_bit_dtype_are_cast_each_micro_batch() -> None:
    # MindFormers' param_init_type float16 under compute_dtype bfloat16: every weight read
    # and written once before its matmuls (2 + 2 bytes) and its gradient cast back (2 + 2)
    hw = load_profile("h100-sxm")
    plain = transformer_program(_scenario(), hw.software, hw.compute_units)
    cast = transformer_program(_scenario(model={"type": "transformer", "layers": 4,
                                                "hidden_size": 1024, "num_heads": 16,
                                                "seq_length": 1024, "vocab_size": 8192,
                                                "dtype": "bf16", "param_dtype": "fp16"}),
                               hw.software, hw.compute_units)
    extra = {op.name: op for op in cast.block("layer").fwd + cast.block("layer").bwd
             if op.name.startswith("weight_cast_layer")}
    assert set(extra) == {"weight_cast_layer", "weight_cast_layer.bwd"}
    assert all(op.bytes_accessed == 4 * plain.block("layer").params for op in extra.values())
    assert len(cast.block("layer").fwd) == len(plain.block("layer").fwd) + 1
    with pytest.raises(InputError, match=r"model\.param_dtype: fp16 weights cast to a fp32 "
                                         r"computation are not simulated"):
        _scenario(model={"type": "transformer", "layers": 4, "hidden_size": 1024,
                         "num_heads": 16, "seq_length": 1024, "vocab_size": 8192,
                         "dtype": "fp32", "param_dtype": "fp16"})


def test_deepspeed_bf16_optimizer_casts_before_it_accumulates() -> None:
    """DeepSpeed BF16_Optimizer.update_hp_grads runs hp_grad.add_(lp.grad.to(fp32)) after
    every micro-batch: a cast (read 2, write 4) and an add (read 4 + 4, write 4), 18 bytes
    per parameter against the 10 of one add that reads the bf16 gradient as it is."""
    from simulator.program.stack_ops import main_grad

    (fused,), (cast,) = main_grad(2, "bf16", "g", 1000.0), main_grad(2, "bf16", "g", 1000.0,
                                                                     cast=True)
    assert (fused.bytes_accessed, cast.bytes_accessed) == (10_000.0, 18_000.0)
    assert main_grad(4, "fp32", "g", 1000.0, cast=True) == ()
    assert load_framework("megatron-deepspeed").software.grad_accumulation_cast
    assert not load_framework("megatron-lm-2021").software.grad_accumulation_cast


def test_swiglu_gate_and_up_share_one_fp8_input_cast() -> None:
    from simulator.cost.specs import ComputeSpec

    gate = ComputeSpec("fc_gate", "gemm", 1.0, 1.0, "bf16", "fwd", (64, 32, 16))
    up = ComputeSpec("fc_up", "gemm", 1.0, 1.0, "bf16", "fwd", (64, 32, 16))
    names = [op.name for op in apply_fp8((gate, up), Fp8Recipe(frozenset({"fc_gate", "fc_up"}),
                                                               False, 1))]
    assert names == ["fc_gate.fp8_cast_input", "fc_gate.fp8_cast_weight", "fc_gate",
                     "fc_up.fp8_cast_weight", "fc_up"]
