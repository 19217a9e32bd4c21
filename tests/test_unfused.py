"""A stack's unfused kernels (framework profile `fused_kernels.unfused_passes`): the element
counts and bytes of each pass in closed form, where they sit in the layer (forward, backward,
a full recompute's re-run), the stacks that have none, and the profile errors."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from simulator.config.framework import load_framework
from simulator.config.framework.schema import Software, UnfusedPass
from simulator.config.resources import bundled_dir
from simulator.config.scenario import parse_scenario
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError
from simulator.program.model_program import transformer_program
from simulator.program.unfused import unfused_elements, unfused_ops

H, HEADS, KV, F, S, B = 1024, 16, 4, 2816, 512, 2


def _scenario(**parallel: Any):
    data = {"name": "u", "hardware": "ascend-910b", "framework": "mindspore",
            "cluster": {"nodes": 1, "devices_per_node": 8},
            "model": {"type": "transformer", "layers": 2, "hidden_size": H, "num_heads": HEADS,
                      "num_kv_heads": KV, "ffn_hidden_size": F, "ffn_activation": "swiglu",
                      "attention": "flash", "seq_length": S, "vocab_size": 4096},
            "training": {"global_batch_size": 16, "micro_batch_size": B},
            "parallel": {"data": 2, "tensor": 4, **parallel}}
    return parse_scenario(data, "u.yaml")


def _named(ops: tuple, prefix: str = "unfused.") -> dict[str, ComputeSpec]:
    return {op.name: op for op in ops if isinstance(op, ComputeSpec)
            and op.name.startswith(prefix)}


def test_element_counts_closed_forms() -> None:
    plain, sp = _scenario(), _scenario(sequence_parallel=True)
    tokens, d = B * S, H // HEADS
    assert unfused_elements(plain, "hidden") == tokens * H          # the norm runs on all of h
    assert unfused_elements(sp, "hidden") == tokens * H // 4        # on the sequence slice
    assert unfused_elements(plain, "heads") == tokens * HEADS * d // 4
    assert unfused_elements(plain, "kv_heads") == tokens * KV * d // 4
    assert unfused_elements(plain, "ffn") == tokens * F // 4


def test_pass_bytes_are_count_elements_bytes_per_element() -> None:
    sc = _scenario()
    ps = (UnfusedPass(name="a", tensor="heads", count=2, fwd_bytes=22, bwd_bytes=4.5, ops="x"),
          UnfusedPass(name="b", tensor="ffn", fwd_bytes=0, bwd_bytes=7, ops="y"))
    fwd, bwd = unfused_ops(sc, ps, "bf16")
    n_a, n_b = 2 * B * S * H // 4, B * S * F // 4
    assert [(o.name, o.kind, o.phase, o.flops, o.bytes_accessed) for o in fwd] == [
        ("unfused.a", "elementwise", "fwd", n_a, 22.0 * n_a)]           # a zero pass is no kernel
    assert [(o.name, o.phase, o.bytes_accessed) for o in bwd] == [
        ("unfused.a.bwd", "bwd", 4.5 * n_a), ("unfused.b.bwd", "bwd", 7.0 * n_b)]


def test_mindspore_layer_carries_its_passes_and_a_full_recompute_reruns_them() -> None:
    passes = load_framework("mindspore").fused_kernels.unfused_passes
    assert [p.name for p in passes] == ["rmsnorm_fp32", "rope_fp32_q", "rope_fp32_k",
                                        "bnsd_transpose_q_out", "bnsd_transpose_kv",
                                        "silu_then_mul"]
    sw = Software(fused_attention=True, unfused_passes=passes)
    sc = _scenario(recompute="full")
    prog = transformer_program(sc, sw, 24)
    want = {f"unfused.{p.name}": p.count * unfused_elements(sc, p.tensor) * p.fwd_bytes
            for p in passes}
    assert {k: v.bytes_accessed for k, v in _named(prog.block("layer").fwd).items()} == want
    assert {k: v.bytes_accessed for k, v in _named(prog.block("layer").recompute).items()} == want
    assert {k: v.bytes_accessed for k, v in _named(prog.block("layer").bwd).items()} == {
        f"unfused.{p.name}.bwd": p.count * unfused_elements(sc, p.tensor) * p.bwd_bytes
        for p in passes}
    # the same layer without the passes: nothing else moves
    base = transformer_program(sc, Software(fused_attention=True), 24)
    layer, base_layer = prog.block("layer"), base.block("layer")
    assert [o for o in layer.fwd if o.name not in want] == list(base_layer.fwd)
    assert layer.recompute[:len(base_layer.recompute)] == base_layer.recompute


def test_selective_recompute_does_not_rerun_them() -> None:
    passes = load_framework("mindspore").fused_kernels.unfused_passes
    prog = transformer_program(_scenario(recompute="selective"),
                               Software(fused_attention=True, unfused_passes=passes), 24)
    assert _named(prog.block("layer").recompute) == {}


@pytest.mark.parametrize("name", ["megatron-lm-2021", "megatron-core", "nemo", "mindspeed",
                                  "llm-foundry", "pytorch-fsdp", "reference"])
def test_fused_stacks_have_none(name: str) -> None:
    assert load_framework(name).software.unfused_passes == ()


def test_bad_pass_names_file_and_key(write_file) -> None:
    data = yaml.safe_load((bundled_dir("framework_profiles") / "mindspore.yaml").read_text())
    data["fused_kernels"]["unfused_passes"][0]["tensor"] = "weights"
    path = write_file("mine.yaml", data)
    with pytest.raises(InputError) as info:
        load_framework(str(path))
    assert str(info.value) == (f"{path}: fused_kernels.unfused_passes[0].tensor: found "
                               "'weights'; allowed: hidden, heads, kv_heads, ffn")


def test_ascendspeed_runs_the_eager_rmsnorm_on_the_sequence_slice_under_sp() -> None:
    passes = load_framework("ascendspeed").software.unfused_passes
    assert [(p.name, p.tensor, p.count) for p in passes] == [("rmsnorm_eager", "hidden", 2)]
    sc = _scenario(sequence_parallel=True)
    fwd, bwd = unfused_ops(sc, passes, "bf16")
    n = 2 * B * S * H // 4                      # two norms on the tp-th of the tokens
    assert [o.bytes_accessed for o in fwd] == [n * passes[0].fwd_bytes]
    assert [o.bytes_accessed for o in bwd] == [n * passes[0].bwd_bytes]


def test_a_pass_naming_an_activation_skips_other_models() -> None:
    passes = load_framework("mindspore").fused_kernels.unfused_passes
    swiglu = _scenario()
    gelu = parse_scenario({**swiglu.model_dump(mode="json", exclude_none=True),
                           "model": {**swiglu.model.model_dump(mode="json", exclude_none=True),
                                     "ffn_activation": "gelu"}}, "g.yaml")
    names = lambda sc: [o.name for o in unfused_ops(sc, passes, "bf16")[0]]  # noqa: E731
    assert "unfused.silu_then_mul" in names(swiglu)
    assert names(gelu) == [n for n in names(swiglu) if n != "unfused.silu_then_mul"]


def test_torchtitan_eager_model_code_passes() -> None:
    # the 64-A100 presets run norm_type "rmsnorm" with compile = false: eager RMSNorm (the
    # same code and count as AscendSpeed's), RoPE through complex fp32, SiLU then Mul, and
    # repeat_kv's copies for grouped-query attention
    passes = load_framework("torchtitan").software.unfused_passes
    assert [(p.name, p.tensor, p.count, p.fwd_bytes, p.bwd_bytes) for p in passes] == [
        ("rmsnorm_eager", "hidden", 2, 32, 78), ("rope_complex_fp32_q", "heads", 1, 20, 20),
        ("rope_complex_fp32_k", "kv_heads", 1, 20, 20), ("silu_then_mul", "ffn", 1, 4, 9),
        ("repeat_kv_heads", "heads", 2, 2, 2), ("repeat_kv_kv_heads", "kv_heads", 2, 2, 2)]
    ascend = load_framework("ascendspeed").software.unfused_passes[0]
    assert (passes[0].fwd_bytes, passes[0].bwd_bytes) == (ascend.fwd_bytes, ascend.bwd_bytes)


def test_a_grouped_query_pass_skips_models_with_as_many_kv_heads_as_heads() -> None:
    passes = load_framework("torchtitan").software.unfused_passes
    gqa = _scenario()                                   # 16 heads, 4 kv heads
    mha = parse_scenario({**gqa.model_dump(mode="json", exclude_none=True),
                          "model": {**gqa.model.model_dump(mode="json", exclude_none=True),
                                    "num_kv_heads": HEADS}}, "m.yaml")
    names = lambda sc: [o.name for o in unfused_ops(sc, passes, "bf16")[0]]  # noqa: E731
    repeats = ["unfused.repeat_kv_heads", "unfused.repeat_kv_kv_heads"]
    assert names(gqa)[-2:] == repeats
    assert names(mha) == [n for n in names(gqa) if n not in repeats]
    n = B * S * HEADS * (H // HEADS) // 4               # the repeated keys: heads / tp
    fwd, _ = unfused_ops(gqa, passes, "bf16")
    assert {o.name: o.bytes_accessed for o in fwd}["unfused.repeat_kv_heads"] == 2 * n * 2
