"""The token dispatcher in the Megatron-LM and Megatron-Bridge importers and their emitters
(`parallel.expert_dispatcher`): --moe-token-dispatcher-type alltoall | flex with
--moe-flex-dispatcher-backend deepep (Megatron-Core's default) | hybridep, the deprecated
--moe-enable-deepep, and what Megatron-Core refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_import_bridge import _error
from tests.test_import_megatron import BASE, _run, _scenario
from tests.test_import_megatron_emit import _round_trip

MOE = BASE + " --num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 2"
MIXTRAL = str(Path(__file__).parent.parent / "scenarios/moe-mixtral-8x7b-64-h100.yaml")


@pytest.mark.parametrize(("flags", "dispatcher"), [
    ("", None),
    (" --moe-token-dispatcher-type alltoall", "alltoall"),
    (" --moe-token-dispatcher-type flex", "deepep"),
    (" --moe-token-dispatcher-type flex --moe-enable-deepep", "deepep"),
    (" --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep", "hybridep"),
])
def test_megatron_flags_set_the_dispatcher(tmp_path: Path, flags: str, dispatcher) -> None:
    s = _scenario(tmp_path, MOE + flags, "--nodes", "1", "--devices-per-node", "2")
    assert s["parallel"].get("expert_dispatcher") == dispatcher


@pytest.mark.parametrize(("flags", "message"), [
    (" --moe-enable-deepep", "--moe-enable-deepep: needs --moe-token-dispatcher-type flex"),
    (" --moe-token-dispatcher-type flex --moe-enable-deepep --moe-flex-dispatcher-backend "
     "hybridep", "--moe-enable-deepep: with --moe-flex-dispatcher-backend hybridep"),
    (" --moe-token-dispatcher-type allgather", "--moe-token-dispatcher-type: found "
     "'allgather'; the all-gather dispatcher is not modelled (allowed: alltoall, flex)"),
    (" --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend nccl",
     "--moe-flex-dispatcher-backend: found 'nccl'; allowed: deepep, hybridep"),
])
def test_megatron_refuses_what_megatron_core_refuses(tmp_path: Path, flags: str,
                                                     message: str) -> None:
    code, _, err = _run(tmp_path, MOE + flags, "--nodes", "1", "--devices-per-node", "2")
    assert code == 2 and message in err, err


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep", "hybridep"])
def test_megatron_emit_writes_the_dispatcher_back(tmp_path: Path, dispatcher: str) -> None:
    _round_trip(tmp_path, MIXTRAL, [f"parallel.expert_dispatcher={dispatcher}"])


@pytest.mark.parametrize(("edits", "message"), [
    ({"model.moe_token_dispatcher_type": "allgather"}, "model.moe_token_dispatcher_type: "
     "found 'allgather'; allowed: 'alltoall', 'flex'"),
    ({"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend": "x"},
     "model.moe_flex_dispatcher_backend: found 'x'; allowed: 'deepep', 'hybridep'"),
    ({"model.moe_enable_deepep": True}, "model.moe_enable_deepep: true needs "
     "moe_token_dispatcher_type flex"),
    # read, then refused on a dense model as any scenario would be, naming both keys
    ({"model.moe_token_dispatcher_type": "flex", "model.moe_flex_dispatcher_backend":
      "hybridep"}, "allowed here: alltoall) (scenario key parallel.expert_dispatcher)"),
])
def test_bridge_reads_the_dispatcher_keys(tmp_path: Path, edits: dict, message: str) -> None:
    assert message in _error(tmp_path, edits)
