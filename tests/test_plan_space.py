"""The planner's search space and closed-form memory: counts in closed form on a tiny model,
Korthikanti et al. 2022 / ZeRO identities, and agreement with the simulator's memory."""

from __future__ import annotations

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.config.scenario.schema import TransformerModel
from simulator.planner.memory import (
    Workload,
    estimate_memory,
    layer_bytes,
    layer_params,
    workload_of,
)
from simulator.planner.space import Config, SpaceLimits, apply_config, config_of, enumerate_space


@pytest.fixture(scope="module")
def tiny_cpu():
    loaded = load_scenario("tiny-cpu", [])
    return loaded.scenario, load_hardware(loaded)


def _knobs(t: int, d: int) -> int:
    """sequence parallel (t > 1) x recompute (3) x ZeRO stage (d > 1: 4) x offload (2)."""
    return (2 if t > 1 else 1) * 3 * (4 if d > 1 else 1) * 2


def test_space_count_closed_form(tiny_cpu):
    sc, _ = tiny_cpu  # 4 devices, 2 layers, 4 heads, global batch 8
    # (t, p, d) with t | 4 heads, p | 2 layers, d | batch 8; micro-batch sizes | 8 / d;
    # one schedule: interleaving needs layers / p > 1 chunks
    layouts = {(1, 1, 4): 2, (1, 2, 2): 3, (2, 1, 2): 3, (2, 2, 1): 4, (4, 1, 1): 4}
    expected = sum(mbs * _knobs(t, d) for (t, p, d), mbs in layouts.items())
    space = enumerate_space(sc, 4)
    assert len(space) == expected == 360
    assert {(c.tensor, c.pipeline, c.data) for c in space} == set(layouts)
    assert len(set(space)) == len(space)


def test_space_interleaved_count(tiny_cpu):
    sc, _ = tiny_cpu
    four = apply_config(sc.model_copy(update={"model": sc.model.model_copy(
        update={"layers": 4})}), config_of(sc))
    space = enumerate_space(four, 4, limits=SpaceLimits(max_micro_batch=8))
    inter = [c for c in space if c.schedule == "interleaved_1f1b"]
    # p = 2 with v = 2 (4 layers / 2 stages) where the micro-batches are a multiple of 2:
    # (t1, d2): micro-batch 1 or 2 (4 or 2 micro-batches); (t2, d1): 1, 2, 4 (8, 4, 2)
    assert len(inter) == 2 * _knobs(1, 2) + 3 * _knobs(2, 1)
    assert {c.virtual_stages for c in inter} == {2}
    # selective recompute is dropped under a fused attention kernel
    assert len(enumerate_space(sc, 4, flash=True)) == 360 * 2 // 3


def test_apply_config_round_trip(tiny_cpu):
    sc, _ = tiny_cpu
    cfg = Config(1, 2, 2, 4, sequence_parallel=True, recompute="full", offload_optimizer=True)
    assert config_of(apply_config(sc, cfg)) == cfg
    assert str(cfg) == "d1 t2 p2 mb4 1f1b sp rc=full offload"


def test_candidates_without_a_recomputed_region_keep_the_comm_recompute_defaults(tiny_cpu):
    # recompute_comm acts on a recomputed region (and the optimizer option on the re-gather
    # of ZeRO-3 shards); the planner's candidates without one keep the defaults instead of
    # being refused as the scenario file would be
    sc, _ = tiny_cpu
    base = apply_config(sc, Config(2, 2, 1, 4, recompute="full", optimizer_shard=3))
    data = base.model_dump()
    data["parallel"]["recompute_comm"] = {"tensor": False, "optimizer": False}
    kept = type(base).model_validate(data)
    none = apply_config(kept, Config(2, 2, 1, 4, recompute="none", optimizer_shard=1))
    assert none.parallel.recompute_comm.tensor and none.parallel.recompute_comm.optimizer
    full = apply_config(kept, Config(2, 2, 1, 4, recompute="full", optimizer_shard=3))
    assert not (full.parallel.recompute_comm.tensor or full.parallel.recompute_comm.optimizer)


GPT = TransformerModel(layers=4, hidden_size=1024, num_heads=16, seq_length=512,
                       vocab_size=1000, dtype="bf16")


@pytest.mark.parametrize("t, sp, recompute, per_sbh", [
    (1, False, "none", lambda a, s, h, t: 34 + 5 * a * s / h),
    (4, False, "none", lambda a, s, h, t: 10 + 24 / t + 5 * a * s / (h * t)),
    (4, True, "none", lambda a, s, h, t: 34 / t + 5 * a * s / (h * t)),
    (4, False, "selective", lambda a, s, h, t: 10 + 24 / t),
    (4, True, "selective", lambda a, s, h, t: 34 / t),
    (4, False, "full", lambda a, s, h, t: 2),
    (4, True, "full", lambda a, s, h, t: 2 / t),
])
def test_layer_bytes_korthikanti_table2(t, sp, recompute, per_sbh):
    b, s, h, a = 2, GPT.seq_length, GPT.hidden_size, GPT.num_heads
    got = layer_bytes(GPT, b, t, sp, recompute, flash=False)
    assert got == pytest.approx(s * b * h * per_sbh(a, s, h, t), rel=1e-12)


@pytest.mark.parametrize("shard, factors", [(0, (2, 2, 12)), (1, (2, 2, 12 / 8)),
                                            (2, (2, 2 / 8, 12 / 8)), (3, (2 / 8, 2 / 8, 12 / 8))])
def test_model_states_zero(shard, factors):
    w = Workload(GPT, global_batch=64, optimizer="adam", flash=False, grad_bytes=2)
    cfg = Config(8, 1, 1, 1, recompute="full", optimizer_shard=shard)
    est = estimate_memory(w, cfg)
    psi = est.optimizer_states / factors[2]  # ZeRO Fig. 1: 2 + 2 + 12 bytes per parameter
    # ZeRO-3 / FSDP also holds the unit it computes and the prefetched next one, whole
    gathered = 2 * layer_params(GPT, 1) * 2 if shard == 3 else 0.0
    assert (est.parameters, est.gradients) == pytest.approx(
        (factors[0] * psi + gathered, factors[1] * psi), rel=1e-12)


# Configurations of the bundled scenarios without per-micro-batch ZeRO-2/3 buffers (whose
# overlap with activations depends on timing): the estimate is within 2% of the simulated
# peak; for any configuration the floor is at most the simulated peak.
AGREE = [
    ("gpt3-175b-1024-a100", Config(8, 8, 16, 1, recompute="full")),
    ("gpt3-175b-1024-a100", Config(32, 8, 4, 2, "interleaved_1f1b", 3, True, "selective", 1)),
    ("llama2-70b-64-h100", Config(8, 8, 1, 1, optimizer_shard=1)),
    ("llama2-7b-8-ascend910b", Config(2, 4, 1, 2, sequence_parallel=True, recompute="full")),
]


@pytest.mark.parametrize("name, cfg", AGREE, ids=[f"{n}:{c}" for n, c in AGREE])
def test_memory_estimate_matches_simulator(name, cfg):
    from simulator.simulation.simulate import simulate

    loaded = load_scenario(name, [])
    sc, hw = loaded.scenario, load_hardware(loaded)
    est = estimate_memory(workload_of(sc, hw), cfg)
    sim = simulate(apply_config(sc, cfg), hw).memory.peak_bytes
    assert est.peak_bytes == pytest.approx(sim, rel=0.02)
    assert est.floor_bytes <= sim * (1 + 1e-9)


def test_candidates_take_the_comm_fusion_their_zero_stage_can_use(tiny_cpu):
    # a size rule (or a reduce-scatter entry) means nothing to a ZeRO-3 candidate, which
    # gathers and reduce-scatters unit by unit: it runs with the default instead of being
    # refused as a scenario file stating it would be
    sc, _ = tiny_cpu
    data = apply_config(sc, Config(2, 2, 1, 4, optimizer_shard=1)).model_dump()
    data["parallel"]["comm_fusion"] = {"mode": "size", "bucket_mb": 200,
                                       "reduce_scatter": {"mode": "size", "bucket_mb": 50}}
    base = type(sc).model_validate(data)
    z3 = apply_config(base, Config(2, 2, 1, 4, optimizer_shard=3))
    assert z3.parallel.comm_fusion == type(z3.parallel.comm_fusion)()
    z0 = apply_config(base, Config(2, 2, 1, 4, optimizer_shard=0))
    assert z0.parallel.comm_fusion.reduce_scatter is None
    assert z0.parallel.comm_fusion.bucket_mb == 200
    z1 = apply_config(base, Config(2, 2, 1, 4, optimizer_shard=1))
    assert z1.parallel.comm_fusion.reduce_scatter.bucket_mb == 50
