"""GPT-OSS's YaRN rotary embedding as Megatron-Bridge 25.11 runs it (simulator/program/
yarn_rope.py): read from the Hugging Face config, refused without rotary positions, and in the
program as the eager ops of `_apply_rotary_pos_emb_bshd` in closed form, in place of the
fused rotary kernel, only for a stack that falls back and a model with YaRN."""

from __future__ import annotations

import pytest
import yaml

from simulator.config.framework.load import load_framework
from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.cost.specs import ComputeSpec
from simulator.errors import InputError
from simulator.program.model_program import transformer_program
from simulator.program.yarn_rope import BWD, FWD, TABLE_FWD, yarn_rope_ops
from simulator.simulation.simulate import simulate

GB200 = "validation/bridge2511-gb200-gpt-oss-120b-64g"


def _scenario(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _layers(s, framework: str = "nemo"):
    """The program's layer blocks (distinct): GPT-OSS's windowed and global layer."""
    fw = load_framework(framework)
    prog = transformer_program(s, fw.software)
    return list({b.name: b for b in prog.blocks if b.name.startswith("layer")}.values())


def test_the_config_sets_the_yarn_factor():
    """openai/gpt-oss-120b config.json: rope_scaling {rope_type: yarn, factor: 32.0}."""
    assert _scenario("gpt-oss-120b-64-h100").model.yarn_factor == 32.0


def test_yarn_needs_rotary_positions():
    with pytest.raises(InputError, match=r"model.yarn_factor: 32.0: YaRN rescales rotary "
                                         r"positions, and model.position is learned"):
        _scenario(GB200, ["model.position=learned"])


def test_kernels_in_closed_form():
    """GB200 row: 1 x 8192 tokens, 64 query and 8 key heads of 64, bf16: per element of the
    queries (keys) 12 accesses forward in 6 kernels, 17 backward in 9; the cos / sin tables
    (8192 x 64 fp32) in 6 small kernels per call."""
    fwd, bwd = yarn_rope_ops(_scenario(GB200), "bf16")
    q, k, table = 8192 * 64 * 64, 8192 * 8 * 64, 8192 * 64
    assert sum(a for _, a in FWD) == 12 and sum(a for _, a in BWD) == 17
    assert len(fwd) == 2 * (len(TABLE_FWD) + len(FWD)) == 24 and len(bwd) == 2 * len(BWD) == 18
    big = [o for o in fwd if o.name.split(".")[1] not in TABLE_FWD]
    assert sum(o.bytes_accessed for o in big) == (q + k) * 12 * 2
    assert sum(o.bytes_accessed for o in bwd) == (q + k) * 17 * 2
    tables = [o for o in fwd if o.name.split(".")[1] in TABLE_FWD]
    assert sum(o.bytes_accessed for o in tables) == 2 * 2 * table * (8 + 8 + 6)
    assert [o.name for o in fwd[:7]] == ["rope_q.cos", "rope_q.cos_scale", "rope_q.cos_cast",
                                         "rope_q.sin", "rope_q.sin_scale", "rope_q.sin_cast",
                                         "rope_q.mul_cos"]
    assert all(o.phase == "bwd" for o in bwd)


def test_they_replace_the_fused_rotary_kernel_in_the_layer():
    """Both representative layers (windowed and global) of the program run the eager ops in
    place of `rope` / `rope.bwd`; nothing else of the layer changes."""
    s = _scenario(GB200)
    layers = _layers(s)
    fused = _layers(_scenario(GB200, ["model.yarn_factor=null"]))
    assert [b.name for b in layers] == ["layer0", "layer1"]
    for layer, plain in zip(layers, fused, strict=True):
        names = [o.name for o in layer.fwd + layer.bwd]
        assert "rope" not in names and "rope.bwd" not in names
        assert names.count("rope_q.mul_cos") == 1 and names.count("rope_k.sum_input") == 1
        rest = [o for o in layer.fwd if not o.name.startswith("rope_")]
        assert rest == [o for o in plain.fwd if o.name != "rope"]
        i = [o.name for o in plain.fwd].index("rope")
        assert [o.name for o in layer.fwd][i:i + 24] == [o.name for o in
                                                         yarn_rope_ops(s, "bf16")[0]]


@pytest.mark.parametrize("keys,framework", [(["model.yarn_factor=null"], "nemo"),
                                            ([], "megatron-core")])
def test_plain_rope_or_a_stack_that_fuses_keeps_the_fused_kernel(keys, framework):
    """Without YaRN, or on a profile that does not state the fallback, one fused kernel of
    4 (forward) and 6 (backward) bytes per element of the queries and keys."""
    n = 8192 * (64 + 8) * 64
    for layer in _layers(_scenario(GB200, keys), framework):
        rope = [o for o in layer.fwd + layer.bwd if isinstance(o, ComputeSpec)
                and o.name.startswith("rope")]
        assert [(o.name, o.bytes_accessed) for o in rope] == [("rope", 4 * n),
                                                              ("rope.bwd", 6 * n)]


def test_the_unfused_rotation_costs_time():
    hw = load_profile("gb200-nvl72")
    fused = simulate(_scenario(GB200, ["model.yarn_factor=null"]), hw).iteration_time_s
    assert simulate(_scenario(GB200), hw).iteration_time_s > fused
