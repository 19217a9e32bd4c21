"""`parallel.strategy_ckpt_load_file` (MindSpore's `strategy_ckpt_load_file`): the
operators of a `type: graph` scenario take the strategies a strategy checkpoint holds
(written by `shardsim explain` under `parallel.strategy_ckpt_save_file`,
`sharding.strategy_ckpt`): each operator named in the file gets its `placements`, in place
of any strategy it had; an operator the file does not name keeps its own. The key is
consumed when the file is read: the parsed scenario holds the placements, not the path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.errors import InputError

__all__ = ["load_strategy_ckpt"]

_FORMAT = "shardsim strategy checkpoint 1"  # sharding.strategy_ckpt.FORMAT
_KEY = "parallel.strategy_ckpt_load_file"


def _read(ref: str, source: str) -> dict[str, Any]:
    path = Path(ref)
    if not path.is_file() and not path.is_absolute():
        path = Path(source).parent / ref  # relative to the scenario's folder
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(source, _KEY, f"cannot read strategy checkpoint {ref!r}: "
                         f"{exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT \
            or not isinstance(doc.get("ops"), dict):
        raise InputError(source, _KEY, f"{ref!r} is not a strategy checkpoint (expected a "
                         f"JSON object with format {_FORMAT!r} and ops, as `shardsim "
                         f"explain` writes under parallel.strategy_ckpt_save_file)")
    return doc


def load_strategy_ckpt(data: dict[str, Any], source: str) -> dict[str, Any]:
    """`data` (a scenario mapping) with the checkpoint's placements written into its
    operators; unchanged without the key. InputError for a model that is not a written
    graph, an unreadable file, or an operator the model does not have."""
    parallel = data.get("parallel")
    ref = parallel.get("strategy_ckpt_load_file") if isinstance(parallel, dict) else None
    if not isinstance(ref, str):  # (absent, or not a string: the schema says so)
        return data
    model = data.get("model")
    if not isinstance(model, dict) or model.get("type") != "graph":
        raise InputError(source, _KEY, "applies to model.type graph, whose operators take "
                         "strategies (the transformer, mlp and resnet build their own)")
    raw = model.get("ops")
    if not isinstance(raw, list) or not all(isinstance(op, dict) for op in raw):
        return data  # (the schema says what is wrong with model.ops)
    doc = _read(ref, source)
    ops = [dict(op) for op in raw]
    names = {op.get("name"): i for i, op in enumerate(ops)}
    for name, placements in doc["ops"].items():
        if name not in names:
            raise InputError(source, _KEY, f"{ref!r} holds operator {name!r}, which the "
                             f"model does not have (operators: {', '.join(map(str, names))})")
        op = ops[names[name]]
        for key in ("strategy", "out_strategy"):
            op.pop(key, None)
        op["placements"] = placements
    # the key is consumed: the scenario now holds the placements itself, so that a dump of
    # it (`plan`'s best scenario, `run`'s config) runs anywhere without the file
    assert isinstance(parallel, dict)  # (ref came from it)
    rest = {k: v for k, v in parallel.items() if k != "strategy_ckpt_load_file"}
    return {**data, "parallel": rest, "model": {**model, "ops": ops}}
