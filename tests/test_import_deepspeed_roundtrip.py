"""The DeepSpeed half of a published launch imports to its hand-written validation scenario
(issue 27): AscendSpeed's LLaMA2-7B ZeRO-2 example (examples/llama2/pretrain_llama2_7b_zero_8p.sh
@1454fa07) writes the ds_config bundled as scenarios/deepspeed/ascendspeed-llama2-7b-zero2-8p.json;
`from: {deepspeed_config: ...}` beside what the script's Megatron arguments say (the model:
32 x 4096, FFN 11008, 32 heads, RoPE, RMSNorm, seq 4096, Llama-2's 32000 tokens = HF
llama-2-7b; --hidden/--attention-dropout left at Megatron-LM's 0.1; --triangle-attn: unfused
attention; --deepspeed-activation-checkpointing: full recompute; the ascendspeed stack on 8
Ascend 910B) gives ascendspeed-910b-llama2-7b-zero2-8p: ZeRO stage 2, fp16, the 1e8-element
(200 MB) buckets, GBS 32 and MBS 2 from the ds_config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator import api
from tests.test_import_mindformers import _sections

ROOT = Path(__file__).parent.parent
HAND = ROOT / "scenarios" / "validation" / "ascendspeed-910b-llama2-7b-zero2-8p.yaml"
SCENARIO = """name: AscendSpeed LLaMA2-7B ZeRO-2 from its ds_config
hardware: ascend-910b
framework: ascendspeed
cluster: {nodes: 1, devices_per_node: 8}
from: {deepspeed_config: ascendspeed-llama2-7b-zero2-8p}
model: {from_hf: llama-2-7b, seq_length: 4096, attention: standard, dropout: 0.1}
parallel: {recompute: full}
"""


def _same_model(sections: dict[str, Any]) -> dict[str, Any]:
    """num_kv_heads null and equal to num_heads are the same attention (from_hf states it)."""
    if sections.get("model.num_kv_heads") is None:
        sections["model.num_kv_heads"] = sections["model.num_heads"]
    return sections


def test_the_ds_config_imports_to_the_hand_written_scenario(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    got = _same_model(_sections(api.load_scenario(str(tmp_path / "s.yaml")).scenario))
    want = _same_model(_sections(api.load_scenario(str(HAND)).scenario))
    assert {k: (want[k], got.get(k)) for k in want if want[k] != got.get(k)} == {}
    # what the ds_config alone decides
    assert (got["parallel.optimizer_shard"], got["parallel.comm_fusion.bucket_mb"],
            got["model.dtype"], got["training.global_batch_size"]) == (2, 200.0, "fp16", 32)


def test_a_changed_ds_config_is_seen(tmp_path: Path) -> None:
    """The test can fail: ZeRO stage 1 in the ds_config differs from the run."""
    text = (ROOT / "scenarios" / "deepspeed" / "ascendspeed-llama2-7b-zero2-8p.json").read_text()
    (tmp_path / "ds.json").write_text(text.replace('"stage": 2', '"stage": 1'))
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("ascendspeed-llama2-7b-zero2-8p}",
                                                      "ds.json}"))
    got = _sections(api.load_scenario(str(tmp_path / "s.yaml")).scenario)
    assert got["parallel.optimizer_shard"] == 1
