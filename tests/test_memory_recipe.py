"""Memory of a training recipe's own settings: no dropout (no keep-masks), optimizer states
in bf16 (Apex DistributedFusedAdam `dtype`), FP8 weights (TE fp8_model_init), and the
interleaved schedule's in-flight count, pinned in closed form and on the Nemotron-4 340B runs
of scenarios/validation (TP 8, PP 8, VP 12, DP 2, 16 micro-batches)."""

from __future__ import annotations

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.config.scenario.schema import TransformerModel
from simulator.lower.pipeline import schedule_steps
from simulator.lower.state import model_state_bytes, state_bytes_per_param
from simulator.planner.memory import estimate_memory, layer_bytes, layer_params, workload_of
from simulator.planner.space import config_of
from simulator.simulation.simulate import simulate

NEMOTRON = "scenarios/validation/dgxc2411-h100-nemotron4-340b-bf16-128g.yaml"
NEMOTRON_FP8 = "scenarios/validation/dgxc2411-h100-nemotron4-340b-fp8-128g.yaml"
GPT = TransformerModel(layers=8, hidden_size=1024, num_heads=16, seq_length=2048,
                       vocab_size=51200)
NO_DROPOUT = GPT.model_copy(update={"dropout": 0.0})


def _load(name: str, *sets: str):
    loaded = load_scenario(name, list(sets))
    return loaded.scenario, load_hardware(loaded)


@pytest.mark.parametrize("t, sp, per_sbh", [
    # Korthikanti et al. 2022 Eq. 1 / Table 2 less the 2 sbh of the two keep-masks and, in
    # the attention core, the mask and dropout output (3as^2b): the softmax output stays
    (1, False, lambda a, s, h, t: 32 + 2 * a * s / h),
    (4, False, lambda a, s, h, t: 8 + 24 / t + 2 * a * s / (h * t)),
    (4, True, lambda a, s, h, t: 32 / t + 2 * a * s / (h * t)),
])
def test_layer_bytes_without_dropout(t, sp, per_sbh):
    b, s, h, a = 2, GPT.seq_length, GPT.hidden_size, GPT.num_heads
    got = layer_bytes(NO_DROPOUT, b, t, sp, "none", flash=False)
    assert got == pytest.approx(s * b * h * per_sbh(a, s, h, t), rel=1e-12)
    # with flash attention only the two masks go: 2 sbh (/t with sequence parallelism)
    drop = layer_bytes(GPT, b, t, sp, "none", True) - layer_bytes(NO_DROPOUT, b, t, sp,
                                                                   "none", True)
    assert drop == pytest.approx(2 * s * b * h / (t if sp else 1), rel=1e-12)


def test_nemotron_layer_bytes_closed_form():
    # per layer and micro-batch, TP 8 with sequence parallelism, flash attention, no
    # dropout, 8 query groups of 96 heads, FFN 4h: LN inputs 2+2, QKV and FC1 inputs 2+2,
    # Q K V 2(1 + 2*8/96), projection input 2, FFN 2*2*4 (all x sbh / 8), + 4 a s / 8 LSE
    sc, _ = _load(NEMOTRON)
    m = sc.model
    assert isinstance(m, TransformerModel) and m.dropout == 0.0
    s, h, a = m.seq_length, m.hidden_size, m.num_heads
    per_sbh = (2 + 2 + 2 + 2 + 2 * (1 + 2 * 8 / 96) + 2 + 16) / 8
    assert layer_bytes(m, 1, 8, True, "none", True) == pytest.approx(
        per_sbh * s * h + 4 * a * s / 8, rel=1e-12)


@pytest.mark.parametrize("optimizer, dtype, states, fp8, k", [
    ("adam", "bf16", "fp32", False, 12),   # ZeRO Sec. 3.1: fp32 master + 2 moments
    ("adam", "fp32", "fp32", False, 8),    # fp32 training: the weights are the master
    ("momentum", "bf16", "fp32", False, 8),
    ("sgd", "bf16", "fp32", False, 4),
    ("adam", "bf16", "bf16", False, 4),    # Apex dtype bf16, store_params False
    ("adam", "bf16", "bf16", True, 6),     # fp8_params: store_params True, a bf16 copy
    ("adam", "bf16", "fp32", True, 12),
])
def test_state_bytes_per_param(optimizer, dtype, states, fp8, k):
    assert state_bytes_per_param(optimizer, dtype, states, fp8) == k


def test_model_states_bf16_optimizer_sharded_over_dp():
    got = dict(model_state_bytes(1000, "bf16", "adam", 1, 2, state_dtype="bf16"))
    assert got == {"parameters": 2000.0, "gradients": 2000.0, "optimizer_states": 2000.0}


@pytest.mark.parametrize("stage, warmup", [(0, 102), (3, 96), (7, 88)])
def test_interleaved_in_flight_is_megatron_warmup(stage, warmup):
    # Megatron-Core schedules.py, interleaved: warm-up (p - rank - 1) * 2 + (v - 1) * p
    # chunk forwards (microbatch_group_size_per_vp_stage = p), then the steady state's
    # first forward before the first backward: 103 one-layer chunks on stage 0
    p, v, micro = 8, 12, 16
    assert (p - stage - 1) * 2 + (v - 1) * p == warmup
    steps = schedule_steps("interleaved_1f1b", stage, p, micro, v)
    assert next(i for i, (kind, _, _) in enumerate(steps) if kind == "B") == warmup + 1


def test_nemotron_stage0_peak_closed_form():
    # stage 0 of the 128-GPU run at its first backward: 12 layers + the untied embedding
    # (V h / 8; rotary positions, no position table: NeMo's NemotronConfig) in bf16
    # weights, bf16 grads, Adam in bf16 over DP 2 (2 + 2 + 4 / 2 bytes), 103 layers'
    # activations in flight: the planner's closed form is the simulated peak
    sc, hw = _load(NEMOTRON)
    m = sc.model
    assert isinstance(m, TransformerModel)
    est = estimate_memory(workload_of(sc, hw), config_of(sc))
    params = 12 * layer_params(m, 8) + m.vocab_size // 8 * m.hidden_size
    assert (est.parameters, est.gradients, est.optimizer_states) == pytest.approx(
        (2 * params, 2 * params, 2 * params), rel=1e-3)
    # selective recompute (the recipe's): no attention statistics kept, and one layer's
    # core attention alive again while it is recomputed
    sel, full = (layer_bytes(m, 1, 8, True, r, True) for r in ("selective", "none"))
    sim = simulate(sc, hw).memory
    assert dict(sim.by_category)["activations"] == pytest.approx(103 * sel + full - sel,
                                                                 rel=1e-9)
    # the planner lends one 25 MB gradient bucket of them to the data-parallel buffer
    assert est.activations == pytest.approx(103 * sel + full - sel - 25e6, rel=1e-9)
    assert est.peak_bytes == pytest.approx(sim.peak_bytes, rel=0.001)
    assert dict(sim.by_category)["optimizer_states"] == pytest.approx(2 * params, rel=1e-3)


def test_fp8_layer_bytes_keep_the_fp8_copies():
    # an FP8 recipe keeps bf16 activations except the inputs only an FP8 GEMM keeps (TE
    # Linear saves its FP8 input): QKV, FC1 and FC2 inputs at 1 byte; the projection's input
    # stays bf16 under fused attention, which keeps it as its output
    sc, _ = _load(NEMOTRON_FP8)
    m = sc.model
    assert isinstance(m, TransformerModel) and m.dtype == "fp8"
    s, h = m.seq_length, m.hidden_size
    per_sbh = (2 + 2 + 1 + 1 + 2 * (1 + 2 * 8 / 96) + 2 + (2 + 1) * 4) / 8
    assert layer_bytes(m, 1, 8, True, "selective", True) == pytest.approx(per_sbh * s * h,
                                                                         rel=1e-12)


@pytest.mark.parametrize("name", [NEMOTRON_FP8,
                                  "scenarios/validation/nemo2407-h100-nemotron-340b-128g.yaml",
                                  "scenarios/validation/nemo2407-h100-gpt3-175b-128g.yaml"])
def test_fp8_estimate_matches_simulator(name):
    # the planner counts FP8 runs as the simulator does: bf16 weights, gradients and
    # activations, FP8 copies of the weights and of the inputs FP8 GEMMs keep
    sc, hw = _load(name)
    est = estimate_memory(workload_of(sc, hw), config_of(sc))
    sim = simulate(sc, hw).memory.peak_bytes
    assert est.peak_bytes == pytest.approx(sim, rel=0.005)
    assert est.floor_bytes <= sim


def test_dropout_zero_saves_exactly_the_masks():
    sc, hw = _load(NEMOTRON)
    with_masks = simulate(*_load(NEMOTRON, "model.dropout=0.1")).memory
    acts = dict(simulate(sc, hw).memory.by_category)["activations"]
    m = sc.model
    assert isinstance(m, TransformerModel)
    # two keep-masks of s/8 x h bytes per layer, 103 layers in flight, and the embedding's
    # mask of all 16 micro-batches: the 104th forward (micro-batch 15's first chunk) runs
    # after the first backward, still 103 chunks in flight, every first chunk among them
    tokens = m.seq_length // 8 * m.hidden_size
    extra = dict(with_masks.by_category)["activations"] - acts
    assert extra == pytest.approx((103 * 2 + 16) * tokens, rel=1e-12)


def test_fp8_params_replace_the_bf16_weights():
    # TE fp8_model_init: an FP8 GEMM's weight is its FP8 data and transpose (2 bytes), in
    # place of the bf16 weight; without it the copies sit beside the bf16 weight (+2 bytes)
    bf16 = dict(simulate(*_load(NEMOTRON)).memory.by_category)
    fp8 = dict(simulate(*_load(NEMOTRON_FP8)).memory.by_category)
    copies = dict(simulate(*_load(NEMOTRON_FP8, "training.fp8_params=false")).memory
                  .by_category)
    assert fp8["parameters"] == pytest.approx(bf16["parameters"], rel=1e-12)
    sc, _ = _load(NEMOTRON)
    m = sc.model
    assert isinstance(m, TransformerModel)
    # the copies are 2 bytes for the share of the model's parameters that feed FP8 GEMMs
    # (the 96 layers', not the embedding's and output layer's V h / 8 each), of the
    # device's parameters (framework/apply.py `_fp8_share`)
    layers = 96 * layer_params(m, 8)
    share = layers / (layers + 2 * m.vocab_size // 8 * m.hidden_size)
    assert copies["parameters"] - fp8["parameters"] == pytest.approx(
        2 * share * bf16["parameters"] / 2, rel=2e-3)
    # the optimizer keeps a bf16 copy of the FP8 weights: 6 bytes over DP 2 instead of 4
    assert fp8["optimizer_states"] == pytest.approx(1.5 * bf16["optimizer_states"], rel=1e-12)


def test_fp8_params_needs_an_fp8_model():
    from simulator.errors import InputError

    with pytest.raises(InputError, match="training.fp8_params: true stores the weights of "
                       "the FP8 GEMMs in FP8; it needs model.dtype: fp8 \\(found bf16\\)"):
        _load(NEMOTRON, "training.fp8_params=true")
