"""Operator attributes in a `type: graph` model: an attribute the operator's family does not
read is an input error naming it (`primitive_target: CPU` used to be accepted and ignored;
tests/test_host_placement.py now pins what it does), and MindSpore's scheduling attributes
take only their values (`recompute`: tests/test_graph_recompute.py pins what it does)."""

from __future__ import annotations

import pytest
import yaml
from model_kinds import refused_flat

from simulator.config.resources import resolve_yaml


def _with_attrs(tmp_path, op_index: int, attrs: dict) -> str:
    doc = yaml.safe_load(resolve_yaml("seed-a-weight-ops", "scenarios").read_text())
    doc["model"]["ops"][op_index]["attrs"] = {**doc["model"]["ops"][op_index].get("attrs", {}),
                                              **attrs}
    path = tmp_path / "graph.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("index,attrs,message", [
    (0, {"primitive_target": "NPU"}, "model.ops[0].attrs.primitive_target: 'NPU': not a "
     "placement (allowed: CPU, GPU, Ascend)"),
    (2, {"recompute": "yes"}, "model.ops[2].attrs.recompute: 'yes': not a boolean "
     "(allowed: true, false)"),
    (2, {"transpose_c": True}, "model.ops[2].attrs.transpose_c: unknown attribute of Einsum "
     "(allowed: equation, transpose_a, transpose_b, batch)"),
    (0, {"axis": 1}, "model.ops[0].attrs.axis: unknown attribute of Gather (allowed: none)"),
])
def test_attributes_the_family_does_not_read_are_refused(invoke_cli, tmp_path, index, attrs,
                                                         message):
    result = invoke_cli("run", _with_attrs(tmp_path, index, attrs))
    text = refused_flat(result)
    assert message in text


def test_attributes_the_family_reads_are_accepted(invoke_cli, tmp_path):
    result = invoke_cli("run", _with_attrs(tmp_path, 2, {"transpose_b": False}), "--json")
    assert result.exit_code == 0, result.output
