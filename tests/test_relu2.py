"""Squared-ReLU FFNs (`model.ffn_activation: relu2`; So et al. 2021, "Primer",
arXiv:2109.08668, Sec. 4; Nemotron-H's relu2 MLPs): the operator against its closed form,
the graph (two GEMMs and no biases, as NemotronHMLP builds it), verify proving a tiny hybrid
with it against one device and failing when the activation is a plain ReLU on the sharded
side, and the Nemotron-H import stating it with no position embedding, RMSNorm and its
untied head, the simulated parameters equal to the Hugging Face count."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.hf import load_hf
from simulator.graph.graph import Graph
from simulator.graph.ops import KernelCtx, get_family
from simulator.models.layers import layer_kinds
from simulator.models.params import transformer_params
from simulator.models.transformer import gpt_case
from simulator.models.transformer_plan import gpt_dims
from simulator.numeric.verify import verify_case
from simulator.simulation.simulate import simulate


def _bundled(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def test_the_operator_is_relu_squared_and_its_slope_twice_relu():
    x = np.array([[-2.0, -0.5, 0.0, 0.5, 3.0]])
    fam = get_family("SquaredReLU")
    ctx = KernelCtx.whole([x.shape], x.shape)
    np.testing.assert_array_equal(fam.forward([x], {}, ctx), [[0.0, 0.0, 0.0, 0.25, 9.0]])
    dy = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])
    (dx,) = fam.vjp([x], fam.forward([x], {}, ctx), dy, {}, ctx)
    np.testing.assert_array_equal(dx, [[0.0, 0.0, 0.0, 4.0, 30.0]])


def _case(name="hybrid-tiny-verify", overrides=()):
    s = _bundled(name, overrides)
    dims = dataclasses.replace(gpt_dims(s, False), batch=s.training.micro_batch_size,
                               kinds=layer_kinds(s.model))
    return gpt_case(s, dims, [])


def test_a_relu2_mlp_has_two_matrices_and_no_biases():
    g = _case().whole
    acts = [op for op in g.ops if op.name == "l2.act"]
    assert [op.type for op in acts] == ["SquaredReLU"]
    assert [t for t in g.tensors if t.startswith("l2.") and g.tensors[t].kind == "parameter"] \
        == ["l2.ln2.g", "l2.w1", "l2.w2"]
    gelu = _case(overrides=["model.ffn_activation=gelu"]).whole
    assert [op.type for op in gelu.ops if op.name == "l2.act"] == ["GeLU"]
    assert [t for t in gelu.tensors if t.startswith("l2.") and
            gelu.tensors[t].kind == "parameter"] == \
        ["l2.ln2.g", "l2.w1", "l2.fc1.bias", "l2.w2", "l2.fc2.bias"]


def test_verify_proves_relu2_and_fails_on_a_plain_relu():
    case = _case()
    result = verify_case(case)
    assert result.ok
    assert {"l2.act", "l2.w1.grad"} <= {c.tensor for c in result.checks}
    ops = tuple(dataclasses.replace(op, type="ReLU") if op.type == "SquaredReLU" else op
                for op in case.sharded.ops)
    broken = verify_case(dataclasses.replace(case, sharded=Graph(case.sharded.tensors, ops)))
    by = {c.tensor: c.ok for c in broken.checks}
    assert not broken.ok and by["l2.fc1_mm"] and not by["l2.act"]


def test_nemotron_h_is_imported_with_relu2_no_positions_rmsnorm_and_its_own_head():
    m = _bundled("nemotron-h-56b-32-h100").model
    assert (m.ffn_activation, m.positions, m.norm_kind, m.tied) == \
        ("relu2", "none", "rmsnorm", False)
    assert transformer_params(m).total == load_hf("nemotron-h-56b").param_count() \
        == 56_324_350_464


def test_gpt_oss_simulated_parameters_are_the_count_less_its_unpriced_biases():
    """The simulated GPT-OSS-120B has every parameter but the biases its notes name: the
    output projection's (h per layer), the experts' (2 f + h each) and the router's."""
    m = _bundled("gpt-oss-120b-64-h100").model
    h, f = 2880, 2880
    biases = 36 * (h + 128 * (2 * f + h) + 128)
    assert transformer_params(m).total + biases == load_hf("gpt-oss-120b").param_count()


@pytest.mark.parametrize("name", ["hybrid-tiny-verify", "nemotron-h-56b-32-h100"])
def test_relu2_keeps_the_gelu_model_flops(name):
    """Squared ReLU and GeLU FFNs have the same two GEMMs: the same model FLOPs."""
    s = _bundled(name)
    relu2 = simulate(s, load_profile(s.hardware)).model_flops
    gelu = simulate(_bundled(name, ["model.ffn_activation=gelu"]),
                    load_profile(s.hardware)).model_flops
    assert relu2 == gelu
