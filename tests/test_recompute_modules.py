"""Fine-grained selective recompute (`parallel.recompute_modules`, Megatron-Core's
--recompute-modules), BF16 optimizer moments (`training.moments_dtype`) and the FP8 recipe
over MLA and expert GEMMs: the memory terms in closed form per layer and token, the
recompute pass, and mutations that must fail."""

from __future__ import annotations

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.config.framework.load import framework_for
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError
from simulator.lower.state import state_bytes_per_param, state_dtype_of
from simulator.models import recompute as rc
from simulator.simulation.simulate import run_program

# a small DeepSeek-V3-shaped layer: MLA, 8 routed experts (top 2) and one shared expert
H, N, QL, KVL, DN, DR, DV = 256, 4, 64, 32, 32, 16, 32
E, K, F, FS, S = 8, 2, 64, 64, 128
DS = {
    "name": "ds-tiny", "hardware": "h100-sxm", "cluster": {"nodes": 1, "devices_per_node": 1},
    "model": {"type": "transformer", "layers": 2, "hidden_size": H, "num_heads": N,
              "ffn_hidden_size": 512, "ffn_activation": "swiglu", "seq_length": S,
              "vocab_size": 512, "dtype": "fp8", "dropout": 0.0,
              "mla": {"q_lora_rank": QL, "kv_lora_rank": KVL, "qk_nope_head_dim": DN,
                      "qk_rope_head_dim": DR, "v_head_dim": DV},
              "moe": {"experts": E, "top_k": K, "ffn_hidden_size": F, "shared_experts": 1,
                      "shared_ffn_hidden_size": FS, "first_dense": 1, "score": "sigmoid",
                      "capacity_factor": None}},
    "training": {"global_batch_size": 1, "micro_batch_size": 1},
}
GPT = {
    "name": "gpt-tiny", "hardware": "a100-80gb", "cluster": {"nodes": 1, "devices_per_node": 1},
    "model": {"type": "transformer", "layers": 2, "hidden_size": 256, "num_heads": 4,
              "seq_length": 128, "vocab_size": 512, "dtype": "bf16"},
    "training": {"global_batch_size": 2, "micro_batch_size": 2},
}
MODULES = "parallel.recompute_modules=[{}]"


def _program(case: dict, *sets: str):
    loaded = load_scenario(case, list(sets))
    sc, hw = loaded.scenario, load_hardware(loaded)
    return run_program(sc, hw, framework_for(sc, hw)).program


def _moe_layer(*sets: str):
    return _program(DS, *sets).block("layer1")


def _saved(*modules: str) -> float:
    if not modules:
        return _moe_layer().saved_bytes
    return _moe_layer("parallel.recompute=selective",
                      MODULES.format(",".join(modules))).saved_bytes


def test_layernorm_drops_both_norm_outputs_of_a_bf16_layer():
    """Korthikanti et al.'s 34 sbh count two LayerNorm outputs of 2 sbh each (the inputs
    of qkv and fc1); discarding them leaves 4 sbh less, the norms' inputs still kept."""
    b, s, h = 2, 128, 256
    plain = _program(GPT).block("layer").saved_bytes
    ln = _program(GPT, "parallel.recompute=selective", MODULES.format("layernorm"))
    assert plain - ln.block("layer").saved_bytes == 4 * s * b * h
    # the re-run is the two norms' forward kernels again
    fwd = {op.name: op for op in ln.block("layer").fwd if isinstance(op, ComputeSpec)}
    assert [op.name for op in ln.block("layer").recompute] == ["ln1", "ln2"]
    assert sum(op.flops for op in ln.block("layer").recompute) == \
        fwd["ln1"].flops + fwd["ln2"].flops


def test_core_attn_module_is_the_default_selective_recompute():
    default = _program(GPT, "parallel.recompute=selective").block("layer")
    core = _program(GPT, "parallel.recompute=selective", MODULES.format("core_attn"))
    assert core.block("layer").saved_bytes == default.saved_bytes


def test_deepseek_modules_closed_form_per_token():
    """Per token of a MoE layer of an FP8 model (Transformer Engine keeps FP8 inputs):
    - layernorm: ln2's output loses its bf16 copy (the router reads it in bf16) and keeps
      the shared experts' FP8 copy: 2h -> h; ln1's feeds FP8 GEMMs alone (h either way);
    - mla_up_proj: the latent norms' FP8 outputs (q_lora + kv_lora), the queries and keys
      (2 x 2 n (dn + dr)) and values (2 n dv) go; the rotary key's input (2 dr) is kept;
    - moe_act: the SwiGLU output is kept as the down projection's FP8 input only (k f,
      already so without recompute): no change."""
    none = _saved()
    assert none - _saved("layernorm") == S * H
    assert none - _saved("mla_up_proj") == S * (QL + KVL + 4 * N * (DN + DR) + 2 * N * DV
                                                 - 2 * DR)
    assert _saved("moe_act") == none
    both = none - _saved("layernorm", "mla_up_proj", "moe_act")
    assert both == S * (H + QL + KVL + 4 * N * (DN + DR) + 2 * N * DV - 2 * DR)


def test_a_mutated_module_table_breaks_the_closed_form(monkeypatch):
    """Mutation: mla_up_proj without the latent norms keeps their outputs (the closed form
    above then fails by q_lora + kv_lora bytes a token)."""
    roles = dict(rc.MODULE_ROLES)
    roles["mla_up_proj"] = roles["mla_up_proj"] - {"q_norm", "kv_norm"}
    monkeypatch.setattr(rc, "MODULE_ROLES", roles)
    drop = _saved() - _saved("mla_up_proj")
    assert drop != S * (QL + KVL + 4 * N * (DN + DR) + 2 * N * DV - 2 * DR)


def test_mla_and_expert_gemms_run_in_the_fp8_recipe():
    """Megatron-Core builds MLA's projections and the experts from Transformer Engine
    linears: under an FP8 recipe they run in FP8 (the router stays bf16)."""
    layer = _moe_layer()
    dtypes = {op.name: op.dtype for op in layer.fwd if isinstance(op, ComputeSpec)
              and op.kind == "gemm"}
    for kernel in ("q_down", "q_up", "kv_down", "kv_up", "proj", "expert_fc1", "expert_fc2",
                   "shared_fc1", "shared_fc2"):
        assert dtypes[kernel] == "fp8", kernel
    assert dtypes["router"] != "fp8"


@pytest.mark.parametrize("optimizer, dtype, state, k", [
    ("adam", "bf16", ("fp32", "bf16"), 8),   # DeepSeek-V3: fp32 master + 2 bf16 moments
    ("adam", "bf16", ("fp32", None), 12),    # ZeRO's 12
    ("adam", "bf16", ("bf16", "fp32"), 8),   # no master copy (bf16 weights), fp32 moments
    ("momentum", "bf16", ("fp32", "bf16"), 6),
    ("adam", "fp32", ("fp32", "bf16"), 4),   # fp32 training: no master copy
])
def test_moments_dtype_closed_form(optimizer, dtype, state, k):
    assert state_bytes_per_param(optimizer, dtype, state_dtype_of(*state)) == k


def test_moments_dtype_moves_the_optimizer_states_of_a_run():
    from simulator import simulate

    def states(*sets: str) -> float:
        r = simulate(load_scenario(GPT, list(sets)))
        return dict(r.memory.by_category)["optimizer_states"]

    assert states("training.moments_dtype=bf16") == pytest.approx(states() * 8 / 12,
                                                                   rel=1e-12)
    assert states("training.moments_dtype=fp32") == states()


@pytest.mark.parametrize("sets, key, message", [
    (("parallel.recompute_modules=[layernorm]",), "parallel.recompute_modules",
     "['layernorm'] names the parts recomputed under parallel.recompute selective (found "
     "none); set it, or remove the key"),
    (("parallel.recompute=selective", "parallel.recompute_modules=[layernorm,layernorm]"),
     "parallel.recompute_modules", "['layernorm', 'layernorm'] names a module twice (each "
     "at most once)"),
    (("parallel.recompute=selective", "parallel.recompute_modules=[moe_act]"),
     "parallel.recompute_modules[0]", "moe_act recomputes a part of model.moe, which this "
     "model does not have (allowed here: core_attn, layernorm)"),
])
def test_recompute_modules_refused_by_name(sets, key, message):
    with pytest.raises(InputError) as err:
        load_scenario(GPT, list(sets))
    assert err.value.key == key and err.value.message == message


def test_probs_in_activation_drops_the_combines_copy_of_the_expert_outputs():
    """Routing weights applied in the activation (Megatron-Core >= 0.13 grouped experts):
    the combine keeps no copy of the k expert outputs, 2 k h bytes a token in bf16."""
    drop = _saved() - _moe_layer("model.moe.probs_in_activation=true").saved_bytes
    assert drop == S * 2 * K * H


def test_probs_in_activation_follows_the_stack_unless_the_scenario_says():
    """Unset, `model.moe.probs_in_activation` is the framework profile's: NeMo 25.11 runs
    Megatron-Core 0.15, whose grouped experts weight the activation and whose combine
    (unpermute without probs) keeps nothing; the megatron-core profile (core_r0.8,
    `unpermute(..., probs=self.probs)`) keeps the k expert outputs. A stated value wins."""
    nemo = DS | {"framework": "nemo"}
    copy = S * 2 * K * H
    stack = _program(nemo).block("layer1").saved_bytes
    kept = _program(nemo, "model.moe.probs_in_activation=false").block("layer1").saved_bytes
    assert kept - stack == copy
    assert _program(nemo, "model.moe.probs_in_activation=true").block("layer1").saved_bytes \
        == stack
    # the r0.8 profile weights the combine: unset is false there, true drops the copy
    assert _saved() == _moe_layer("model.moe.probs_in_activation=false").saved_bytes
    assert framework_for(load_scenario(nemo).scenario, None).software.moe_probs_in_activation
    assert not framework_for(load_scenario(DS).scenario,
                             load_hardware(load_scenario(DS))).software.moe_probs_in_activation


def test_fp8_cached_activations_closed_form():
    """DeepSeek-V3's low-precision storage: the SwiGLU inputs (2 k f routed + 2 fs shared
    elements a token) at 1 + 4/128 bytes instead of 2; the attention output (n dv) at
    1.5 + 1/128 instead of 2."""
    none = _saved()
    act = none - _moe_layer("training.fp8_saved_activations=[moe_act_input]").saved_bytes
    assert act == pytest.approx(S * (2 * K * F + 2 * FS) * (2 - (1 + 4 / 128)), rel=1e-12)
    att = none - _moe_layer("training.fp8_saved_activations=[attention_output]").saved_bytes
    assert att == pytest.approx(S * N * DV * (2 - (1.5 + 1 / 128)), rel=1e-12)


def test_fp8_saved_activations_needs_an_fp8_model():
    bf16 = DS["model"] | {"dtype": "bf16"}
    with pytest.raises(InputError) as err:
        load_scenario(DS | {"model": bf16}, ["training.fp8_saved_activations=[moe_act_input]"])
    assert err.value.key == "training.fp8_saved_activations"
    assert err.value.message == (
        "['moe_act_input'] keeps activations of an FP8 recipe in a low-precision cache; it "
        "needs model.dtype fp8 (found bf16); set it, or remove the key")


def test_fp8_requantize_recomputed_keeps_no_fp8_copy_of_discarded_outputs():
    """DeepSeek-V3 (Sec. 3.2.3, 3.3.3): the recomputed RMSNorm outputs (h a token each, two
    norms) and the MoE SwiGLU outputs (k f routed + fs shared) are not stored, not even as
    the FP8 copies Transformer Engine's linears keep (one byte an element); the re-run casts
    them to FP8 again for the GEMMs that read them."""
    sets = ("parallel.recompute=selective", MODULES.format("layernorm,moe_act"))
    te = _moe_layer(*sets)
    ds = _moe_layer(*sets, "training.fp8_requantize_recomputed=true")
    assert te.saved_bytes - ds.saved_bytes == S * (2 * H + K * F + FS)
    extra = {op.name for op in ds.recompute} - {op.name for op in te.recompute}
    assert extra == {"q_down.fp8_cast_input", "kv_down.fp8_cast_input",
                     "shared_fc1.fp8_cast_input", "expert_fc2.fp8_cast_input",
                     "shared_fc2.fp8_cast_input"}


@pytest.mark.parametrize("sets, message", [
    (("model.dtype=bf16",),
     "true quantizes again the outputs a recompute module re-makes for FP8 GEMMs; it needs "
     "model.dtype fp8 (found bf16); set it, or remove the key"),
    (("parallel.recompute=selective", MODULES.format("core_attn")),
     "true applies to the outputs parallel.recompute_modules discards; it needs recompute: "
     "selective with one of ['layernorm', 'mla_up_proj', 'moe_act'] in "
     "parallel.recompute_modules (found recompute selective, modules ['core_attn'])"),
])
def test_fp8_requantize_recomputed_refused_by_name(sets, message):
    with pytest.raises(InputError) as err:
        load_scenario(DS, [*sets, "training.fp8_requantize_recomputed=true"])
    assert err.value.key == "training.fp8_requantize_recomputed"
    assert err.value.message == message
