"""The sharding algebra and the schedule's closed-form Megatron program agree: the same
tensor-parallel collectives with the same bytes per layer, and the same GEMM FLOPs."""

import pytest
import yaml

from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.graph.builders import GptDims, build_gpt
from simulator.resources import resolve_yaml
from simulator.scenario import DTYPE_BYTES, parse_scenario
from simulator.schedule.transformer import transformer_program
from simulator.sharding.lower import forward_specs
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import build_plan
from simulator.sharding.transformer_plan import apply_transformer_plan


def _both(overrides):
    path = resolve_yaml("verify-tiny-dp2-tp4-sp", "scenarios")
    s = parse_scenario(yaml.safe_load(path.read_text()), str(path),
                       ["model.dtype=bf16", "model.seq_length=16", *overrides])
    m, p = s.model, s.parallel
    dims = GptDims(m.layers, m.hidden_size, m.num_heads, m.kv_heads, m.ffn, m.seq_length,
                   m.vocab_size, s.training.micro_batch_size * p.data,
                   swiglu=m.ffn_activation == "swiglu")
    graph = apply_transformer_plan(build_gpt(dims), p.sequence_parallel)
    plan = build_plan(graph, Mesh.of(dp=p.data, tp=p.tensor), DTYPE_BYTES[m.dtype])
    return forward_specs(plan, m.dtype, "l0."), transformer_program(s).layer_fwd


def _comms(ops):
    return sorted((op.collective, op.bytes) for op in ops
                  if isinstance(op, CommSpec) and op.axis == "tp")


def _gemm_flops(ops):
    return sum(op.flops for op in ops if isinstance(op, ComputeSpec) and op.kind == "gemm")


@pytest.mark.parametrize("overrides", [
    ["parallel.sequence_parallel=false"],
    ["parallel.sequence_parallel=true"],
    ["parallel.sequence_parallel=true", "model.num_kv_heads=4", "model.ffn_activation=swiglu"],
    ["parallel.data=8", "parallel.tensor=1", "parallel.sequence_parallel=false",
     "training.global_batch_size=8"],
])
def test_algebra_matches_megatron_program(overrides):
    algebra, program = _both(overrides)
    assert _comms(algebra) == _comms(program)
    assert _gemm_flops(algebra) == pytest.approx(_gemm_flops(program), rel=1e-12)
