"""The megatron-bridge framework profile (Megatron-Bridge 25.11 on Megatron-Core 0.15 and
Transformer Engine 2.9): it loads; its fused loss (Transformer Engine's Triton cross entropy:
two reads and one in-place write of the logits forward, a read and a write backward, the
bf16 logits kept instead of an fp32 softmax) against Megatron's unfused fp32 passes in closed
form; its gradient-buffer passes (the bf16 buffer's zero_ only: no NaN-check norm, no 1/dp
pre-scale) counted in the last micro-batch's backward; Bridge's 128 Mi-parameter buckets;
and the Bridge validation runs priced with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator import simulate
from simulator.config.framework import load_framework
from simulator.config.hardware.load import load_profile
from simulator.config.resources import bundled_dir
from simulator.config.scenario import parse_scenario
from simulator.cost import compute_time_s
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError
from simulator.lower.buckets import auto_fusion
from simulator.program.model_program import transformer_program

ROOT = Path(__file__).parent.parent
VOCAB, SEQ = 8192, 1024


def _scenario(data: int = 4, tensor: int = 1, framework: str = "megatron-bridge"):
    return parse_scenario({
        "name": "mb", "hardware": "h100-sxm", "framework": framework,
        "cluster": {"nodes": 1, "devices_per_node": data * tensor},
        "model": {"type": "transformer", "layers": 2, "hidden_size": 1024, "num_heads": 16,
                  "seq_length": SEQ, "vocab_size": VOCAB, "dtype": "bf16"},
        "training": {"global_batch_size": 2 * data, "micro_batch_size": 1},
        "parallel": {"data": data, "tensor": tensor, "sequence_parallel": tensor > 1,
                     "optimizer_shard": 1}}, "mb.yaml")


def _profile(write_file, section: str, **fields: Any) -> str:
    """A copy of the profile with `fields` of `section` changed (a file of its own: the
    loader caches profiles by path)."""
    data = yaml.safe_load((bundled_dir("framework_profiles") / "megatron-bridge.yaml")
                          .read_text())
    data[section].update(fields)
    name = "-".join(f"{k}{v}" for k, v in fields.items())
    return str(write_file(f"{section}-{name}.yaml", data))


def test_the_profile_loads_with_what_bridge_runs() -> None:
    fw = load_framework("megatron-bridge")
    s = fw.software
    assert fw.name == "megatron-bridge"
    assert s.fused_cross_entropy and s.ce_fused_passes == (3.0, 2.0)
    assert s.ce_backward_transient_bytes_per_logit == 0.0
    assert s.grad_buffer_passes == (1.0, 0.0)
    assert s.dense_embedding_grad and s.fused_grad_accumulation and not s.bf16_grads_fp32
    # what it keeps of nemo's: TE attention, the YaRN rope unfused, probs in the activation
    assert (s.attention_impl, s.yarn_rope_unfused, s.moe_probs_in_activation) == ("te", True,
                                                                                  True)
    assert load_framework("nemo").software.ce_fused_passes == (1.0, 2.0)  # the default


@pytest.mark.parametrize("tensor", [1, 2])
def test_the_fused_loss_moves_and_keeps_the_logits_in_closed_form(tensor: int) -> None:
    # per logit of one device (its vocabulary share under tensor parallelism), e = 2 (bf16):
    # TE's Triton loss 3e forward, 2e backward, keeping the e-byte logits; Megatron's
    # vocab_parallel_cross_entropy e + 36 and 12 + e, keeping the fp32 softmax (4 bytes)
    hw = load_profile("h100-sxm")
    sc = _scenario(data=2, tensor=tensor)
    fused = transformer_program(sc, load_framework("megatron-bridge").software,
                                hw.compute_units)
    plain = transformer_program(sc, load_framework("megatron-core").software,
                                hw.compute_units)
    logits = 1 * SEQ * VOCAB / tensor  # micro-batch x sequence x local vocabulary
    ce = lambda ops, n: next(op for op in ops if op.name == n)  # noqa: E731
    assert ce(fused.block("head").fwd, "cross_entropy").bytes_accessed == 6 * logits
    assert ce(fused.block("head").bwd, "cross_entropy.bwd").bytes_accessed == 4 * logits
    assert ce(plain.block("head").fwd, "cross_entropy").bytes_accessed == 38 * logits
    assert ce(plain.block("head").bwd, "cross_entropy.bwd").bytes_accessed == 14 * logits
    assert ce(fused.block("head").fwd, "cross_entropy").flops == \
        ce(plain.block("head").fwd, "cross_entropy").flops
    assert plain.block("head").saved_bytes - fused.block("head").saved_bytes == 2 * logits


def test_the_loss_passes_are_read_from_the_profile(write_file) -> None:
    hw = load_profile("h100-sxm")
    path = _profile(write_file, "cross_entropy", fused_fwd_passes=1, fused_bwd_passes=2)
    sc = _scenario(data=2)
    flash = transformer_program(sc, load_framework(path).software, hw.compute_units)
    te = transformer_program(sc, load_framework("megatron-bridge").software, hw.compute_units)
    ce = lambda p: next(op for op in p.block("head").fwd if op.name == "cross_entropy")  # noqa
    assert ce(te).bytes_accessed == 3 * ce(flash).bytes_accessed
    with pytest.raises(InputError) as info:
        load_framework(_profile(write_file, "cross_entropy", fused_fwd_passes=-1))
    assert "cross_entropy.fused_fwd_passes: found -1; expected a value from 0 to 10000" in \
        str(info.value)


def _last_backward(result: Any) -> list:
    dev = result.plan.devices[0]
    tasks = [t for t in result.plan.tasks if t.device == dev and t.name == "B"]
    last = max(t.micro for t in tasks)
    return sorted((t for t in tasks if t.micro == last), key=lambda t: t.tid)


@pytest.mark.parametrize("data", [4, 1])
def test_the_buffer_is_zeroed_once_and_nothing_else(data: int, write_file) -> None:
    # one write of the bf16 buffer (2 bytes an element) a step, with or without data
    # parallelism (average_in_collective: no pre-scale; check_for_nan_in_grad off)
    base = simulate(_scenario(data))
    none = simulate(_scenario(data, framework=_profile(
        write_file, "grad_reduction", buffer_passes=0, buffer_passes_dp=0)))
    with_, without = _last_backward(base), _last_backward(none)
    hw = load_profile("h100-sxm")
    blocks = {b.name: b for b in base.program.blocks}
    params = [blocks["head"].params] + [blocks["layer"].params] * blocks["layer"].repeat \
        + [blocks["embed"].params]
    params = params if len(with_) > 1 else [sum(params)]
    assert len(with_) == len(without) == len(params)
    for a, b, n in zip(with_, without, params, strict=True):
        spec = ComputeSpec("x", "elementwise", 0.0, 1 * n * 2.0, "bf16", "bwd")
        assert a.duration_s - b.duration_s == pytest.approx(compute_time_s(spec, hw),
                                                            rel=1e-9)


@pytest.mark.parametrize("data", [4, 256])
def test_buckets_are_bridges_128_mi_parameters_at_any_data_degree(data: int) -> None:
    # CommOverlapConfig: bucket_size = 128 * 1024 * 1024 parameters (bf16: 2 bytes each),
    # not Megatron-Core's max(40e6, 1e6 x dp)
    fw = load_framework("megatron-bridge")
    assert auto_fusion(fw, data, 2.0, 1) == ("size", 128 * 1024 * 1024 * 2.0 / 1e6)
    assert auto_fusion(load_framework("megatron-core"), data, 2.0, 1) == (
        "size", max(40e6, 1e6 * data) * 2.0 / 1e6)


def test_the_bridge_validation_runs_name_it() -> None:
    cases = sorted((ROOT / "scenarios" / "validation").glob("bridge2511-*.yaml"))
    assert len(cases) == 29
    for path in cases:
        assert yaml.safe_load(path.read_text())["framework"] == "megatron-bridge", path.name
