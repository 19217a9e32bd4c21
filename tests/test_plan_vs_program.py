"""`run` times the plan `verify` proves: for every bundled transformer scenario, the
collectives (kind, mesh axis, bytes) and the matrix FLOPs of the program `run` prices equal
those the numeric backend executes on the same plan, for every layer, forward and backward,
the head, and the optimizer step's gradient reductions; and mutating the plan changes both.

Scenarios are compared at verify's shrunk dimensions (same parallel configuration), with
data parallelism capped at 2 so that the numeric run stays small (the data-parallel
reduction's bytes per device do not depend on its degree)."""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
import pytest
import yaml

from simulator.config.framework.load import framework_for
from simulator.config.hardware import load_profile
from simulator.config.resources import list_bundled, resolve_yaml
from simulator.config.scenario import DTYPE_BYTES, parse_scenario
from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.lower.framework_apply import fp8_recipe
from simulator.models import transformer_plan
from simulator.models.cases import build_case
from simulator.models.transformer import small_gpt
from simulator.models.transformer_plan import uses_flash
from simulator.numeric.dist import distribute
from simulator.numeric.execute import run_microbatch
from simulator.numeric.execution import Execution
from simulator.numeric.sharded_step import _opt_layout, reduce_grad
from simulator.program.model_program import transformer_program
from simulator.sharding.lower import local_shapes
from simulator.sharding.plan import build_plan

TRANSFORMERS = [n for n in list_bundled("scenarios")
                if yaml.safe_load(resolve_yaml(n, "scenarios").read_text())
                .get("model", {}).get("type") == "transformer"]


def _raw(name: str) -> dict:
    return yaml.safe_load(resolve_yaml(name, "scenarios").read_text())


def _small(name: str) -> dict:
    """The scenario with at most 2 data-parallel replicas and one pipeline stage."""
    raw = _raw(name)
    par = raw.setdefault("parallel", {})
    # at least the expert-parallel degree, which divides the data-parallel one
    par["data"] = min(par.get("data", 1), max(2, par.get("expert", 1)))
    par["pipeline"] = 1
    par.pop("virtual_stages", None)
    par.pop("pipeline_layers", None)  # one stage: no per-stage split
    par["schedule"] = "1f1b"
    devices = par["data"] * par.get("tensor", 1) * par.get("context", 1)
    raw["cluster"] = {"nodes": 1, "devices_per_node": devices}
    mb = raw["training"].get("micro_batch_size", 1)
    raw["training"]["global_batch_size"] = mb * par["data"] * 2
    return raw


def _scenario(raw: dict, overrides=()):
    return parse_scenario(raw, "test", list(overrides))


def _shrunk_like(raw: dict, dims) -> dict:
    """The scenario at the verify case's dimensions."""
    out = yaml.safe_load(yaml.safe_dump(raw))
    out["model"].update(layers=dims.layers, hidden_size=dims.hidden, num_heads=dims.heads,
                        num_kv_heads=dims.kv_heads, ffn_hidden_size=dims.ffn,
                        seq_length=dims.seq, vocab_size=dims.vocab)
    if dims.experts:
        out["model"]["moe"].update(experts=dims.experts, top_k=dims.top_k,
                                   every=dims.moe_every)
    if dims.kv_lora_rank:
        out["model"]["mla"].update(q_lora_rank=dims.q_lora_rank or None,
                                   kv_lora_rank=dims.kv_lora_rank,
                                   qk_nope_head_dim=dims.qk_nope_head_dim,
                                   qk_rope_head_dim=dims.qk_rope_head_dim,
                                   v_head_dim=dims.v_head_dim)
    out["training"]["micro_batch_size"] = dims.batch
    out["training"]["global_batch_size"] = dims.batch * out["parallel"]["data"] * 2
    return out


def _key(c, e: float) -> tuple[str, str, float]:
    return c[0], c[1], round(c[2] / e, 6)


def _executed(case, e: int, shard: bool):
    """(one micro-batch's collectives, the optimizer step's) as the numeric backend runs
    them, with bytes at the model dtype's size; and the plan's local matrix FLOPs."""
    plan = build_plan(case.sharded, case.mesh, e)
    rng = np.random.default_rng(0)
    g = case.sharded
    params = {t.name: distribute(rng.standard_normal(t.shape), plan.layouts[t.name], plan.mesh)
              for t in g.of_kind("parameter")}
    batch = {t.name: (rng.integers(0, 2, t.shape)) for t in g.tensors.values()
             if t.kind in ("input", "label")}
    ex = Execution(plan)
    grads = run_microbatch(ex, params, batch, 1.0)
    micro = [(s.kind, plan.mesh.names[s.axis], s.bytes) for s in ex.comm_log]
    ex.comm_log = []
    for name, grad in grads.items():
        target = _opt_layout(plan, name, shard)
        reduce_grad(ex, plan, grad, target)
    step = [(s.kind, plan.mesh.names[s.axis], s.bytes) for s in ex.comm_log]
    flops = 0.0
    for p in plan.ops:
        if p.op.family.kind in ("gemm", "attention"):
            ins, out = local_shapes(plan, p)
            flops += p.op.family.flops(ins, out, p.op.attrs)
    return micro, step, flops


def _timed(prog, layers: int):
    # the program's layer groups, each copy once (a group may be a block of k layers: MoE
    # every k layers)
    seq = prog.sequence()
    assert sum(b.layers for b in seq) == layers
    fwd = prog.block("embed").fwd + sum((b.fwd for b in seq), ()) + prog.block("head").fwd
    bwd = prog.block("head").bwd + sum((b.bwd for b in reversed(seq)), ()) + \
        prog.block("embed").bwd
    # a gather Transformer Engine runs in FP8 (name `.fp8`, schedule.fp8) moves the same
    # elements at 1 byte instead of the bf16 program's 2
    comms = [(c.collective, c.axis, c.bytes * (2 if c.name.endswith(".fp8") else 1))
             for c in fwd + bwd if isinstance(c, CommSpec)]
    sync = (prog.block("embed").grad_sync + sum((b.grad_sync for b in seq), ())
            + prog.block("head").grad_sync)
    flops = sum(c.flops for c in fwd if isinstance(c, ComputeSpec)
                and c.kind in ("gemm", "attention"))
    return comms, [(c.collective, c.axis, c.bytes) for c in sync], flops


def _compare(name: str):
    """The comparison for a scenario; scenarios whose verify case is the same (same
    parallel configuration and model features once shrunk) share one."""
    raw = _small(name)
    s = _scenario(raw)
    hw = load_profile(s.hardware)
    fw = framework_for(s, hw)
    m, p = s.model, s.parallel
    key = (s.hardware, fw.name, m.dtype, m.ffn_activation, m.kv_heads < m.num_heads,
           fw.software.fused_attention if m.attention == "auto" else m.attention,
           p.data, p.tensor, p.sequence_parallel, p.optimizer_shard,
           s.training.micro_batch_size, p.expert, p.context, str(p.tensor_nd),
           yaml.safe_dump(raw["model"].get("moe")),
           yaml.safe_dump(raw["model"]) if _fits(s) else "")
    return _compare_case(name, key)


def _fits(s) -> bool:
    """Small enough that verify runs it at its own dimensions (no shared key)."""
    m = s.model
    return m.hidden_size <= 128 and m.layers <= 4 and m.seq_length <= 32


@functools.cache
def _compare_case(name: str, key: tuple):
    raw = _small(name)
    s = _scenario(raw)
    hw = load_profile(s.hardware)
    fw = framework_for(s, hw)
    case = build_case(s, fw.software.fused_attention)
    # the dimensions the verify case was built with (per replica micro-batch)
    dims = small_gpt(s.model, s, uses_flash(s, fw.software.fused_attention))[0]
    small = _scenario(_shrunk_like(raw, dims))
    prog = transformer_program(small, fw.software, hw.compute_units, fp8_recipe(small, fw))
    comms, sync, tflops = _timed(prog, dims.layers)
    e = DTYPE_BYTES[prog.dtype]  # activations move in the program's dtype (bf16 under FP8)
    micro, step, flops = _executed(case, e, s.parallel.optimizer_shard >= 1)
    return micro, step, flops, comms, sync, tflops, prog, dims, e


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_run_prices_the_collectives_and_flops_verify_executes(name):
    micro, step, flops, comms, sync, tflops, prog, dims, e = _compare(name)
    assert Counter(_key(c, e) for c in comms) == Counter(_key(c, e) for c in micro)
    assert tflops == pytest.approx(flops, rel=1e-12)
    # the optimizer step: reductions on the non-dp axes are the program's grad_sync (one
    # coalesced buffer per collective); on dp the lowering reduces every gradient element
    executed, timed = Counter(), Counter()
    for kind, axis, nbytes in step:
        if axis != "dp":
            executed[(kind, axis)] += nbytes
    for kind, axis, nbytes in sync:
        timed[(kind, axis)] += nbytes
    assert executed == timed
    dp_elems = sum(b for k, a, b in step if a == "dp" and k in ("all_reduce", "reduce_scatter"))
    params = (sum(b.params for b in prog.sequence())
              + prog.block("embed").params + prog.block("head").params)
    if any(a == "dp" for _, a, _ in step):
        assert dp_elems == pytest.approx(params * e)


def test_every_layer_and_the_lm_head_are_compared():
    """The vocabulary-parallel cross-entropy is part of what is compared: three fp32
    all-reduces of one value per token on tp, forward only, in both."""
    micro, _, _, comms, _, _, _, dims, e = _compare("verify-tiny-tp8")
    tokens = dims.batch * dims.seq
    ce = [c for c in micro if c[0] == "all_reduce" and c[2] == 4 * tokens]
    assert len(ce) == 3
    per_layer = 4  # two all-reduces forward (Megatron's g), two backward (f)
    embed_head = 1 + 1 + 3  # embedding all-reduce, LM-head f backward, cross-entropy stats
    assert len(micro) == len(comms) == dims.layers * per_layer + embed_head


def test_mutating_the_plan_changes_both(monkeypatch):
    """Dropout on the row-parallel GEMM's Partial output, before its all-reduce: the bias
    add still needs the whole value, so one more all-reduce appears, in both."""
    before = _compare("verify-tiny-tp8")
    monkeypatch.setitem(transformer_plan.TP_ROLES, "proj_drop", ("P0", "d1"))
    _compare_case.cache_clear()
    try:
        micro, _, _, comms, *_rest, e = _compare("verify-tiny-tp8")
    finally:
        _compare_case.cache_clear()
    assert Counter(_key(c, e) for c in comms) == Counter(_key(c, e) for c in micro)
    assert len(micro) > len(before[0])
    assert len(comms) > len(before[3])


def test_transformer_list_covers_the_headline_and_published_runs():
    assert {"gpt3-175b-1024-a100", "llama2-70b-64-h100", "tiny-cpu"} <= set(TRANSFORMERS)
    assert sum(n.startswith("validation/") for n in TRANSFORMERS) >= 19
    assert sum(n.startswith("calibration/") for n in TRANSFORMERS) >= 4
