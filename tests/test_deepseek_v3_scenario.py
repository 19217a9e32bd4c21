"""The bundled DeepSeek-V3 scenario (`deepseek-v3-2048-h800`, arXiv:2412.19437's published
setup): what its run keeps on device 0 against the report's statements, and `verify` of its
plan on fewer data ranks (the full 2048-device shrunk case needs about 32 GB of host memory:
golden's VERIFY_SKIP), which fails when the experts' all-to-all is dropped."""

from __future__ import annotations

import yaml

from simulator.config.hardware import load_profile
from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.models.cases import build_case
from simulator.numeric.execution import Faults
from simulator.sharding.plan import build_plan
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario

NAME = "deepseek-v3-2048-h800"
# the same plan on 4 data ranks with 4 expert ranks: 64 devices instead of 2048
FEWER = ["cluster.nodes=8", "parallel.data=4", "parallel.expert=4",
         "training.global_batch_size=128"]


def _load(*sets: str):
    path = resolve_yaml(NAME, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(sets))


def _device0(*sets: str) -> dict[str, float]:
    s = _load(*sets)
    r = simulate(s, load_profile(s.hardware))
    return dict(r.plan.static_memory[0])


def test_the_embedding_the_mtp_module_shares_is_held_once():
    """Sec. 3.2.3: DualPipe puts stage 0 (the embedding) and stage 15 (head, MTP module) on
    one device, sharing the table physically: device 0 holds it once, 1F1B's last stage a
    copy (vocabulary x hidden elements, 2 bytes each as FP8-recipe weights stay bf16)."""
    dual = _device0()["parameters"]
    s = _load()
    table = s.model.vocab_size * s.model.hidden_size
    one = _device0("parallel.schedule=1f1b")["parameters"]
    last = dict(simulate(_load("parallel.schedule=1f1b"), load_profile(s.hardware))
                .plan.static_memory[-1])["parameters"]
    assert dual == one + last - 2 * table


def test_verify_passes_and_fails_without_the_dispatch():
    s = _load(*FEWER)
    assert verify_scenario(s).ok
    case = build_case(s)
    plan = build_plan(case.sharded, case.mesh, case.mesh.size)
    comms = [st for _, st in plan.forward_steps() if st.is_comm]
    first = next(i for i, st in enumerate(comms) if st.kind == "all_to_all")
    assert not verify_scenario(s, faults=Faults(drop_comm=first)).ok


def test_the_bundled_file_states_deepseeks_storage():
    """The settings the report states are in the file, not left at their defaults."""
    s = _load()
    assert s.training.fp8_requantize_recomputed
    assert s.training.fp8_saved_activations == ["moe_act_input", "attention_output"]
    assert s.training.moments_dtype == "bf16"
    assert s.parallel.recompute_modules == ["layernorm", "mla_up_proj", "moe_act"]
