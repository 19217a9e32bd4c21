"""`parallel.strategy_ckpt_load_file` (MindSpore's `strategy_ckpt_load_file`): the
operators of a `type: graph` scenario take the strategies a strategy checkpoint holds
(written by `shardsim explain` under `parallel.strategy_ckpt_save_file`,
`sharding.strategy_ckpt`): each operator named in the file gets its `placements`, in place
of any strategy it had, and the explicit blocks of its first input's dim 0 where the file
holds them (`manual_split`, a Gather's uneven rows, in place of its own attribute; a row
without blocks leaves the attribute as the scenario has it, as MindSpore's primitive keeps
its `add_prim_attr` when a strategy is loaded); an operator the file does not name keeps its
own. Blocks that are not positive row counts summing to that dim are refused with the file
and their key path in it. The key is consumed when the file is read: the parsed scenario
holds the placements, not the path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.errors import InputError

__all__ = ["load_strategy_ckpt"]

_FORMAT = "shardsim strategy checkpoint 1"  # sharding.strategy_ckpt.FORMAT
_KEY = "parallel.strategy_ckpt_load_file"


def _read(ref: str, source: str) -> tuple[dict[str, Any], str]:
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
    return doc, str(path)


def _rows(model: dict[str, Any], tensor: Any) -> int | None:
    """Dim 0 of `tensor` as model.tensors gives it, None where it is not there."""
    for t in model.get("tensors") or []:
        if isinstance(t, dict) and t.get("name") == tensor:
            shape = t.get("shape")
            if isinstance(shape, list) and shape and isinstance(shape[0], int):
                return int(shape[0])
    return None


def _blocks(value: Any, op: dict[str, Any], model: dict[str, Any], ref: str, key: str,
            source: str) -> list[int]:
    """The checkpoint's explicit blocks of `op`'s first input: positive row counts summing
    to its dim 0, else InputError at the checkpoint file and `key` in it."""
    inputs = op.get("inputs")
    table = inputs[0] if isinstance(inputs, list) and inputs else None
    n = _rows(model, table)
    where = f"(loaded by {_KEY} of {source})"
    if not isinstance(value, list) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise InputError(ref, key, f"{value!r}: expected a list of positive row counts, one "
                         f"per slice of {table!r}'s dim 0 {where}")
    if n is not None and sum(value) != n:
        raise InputError(ref, key, f"{value} sums to {sum(value)}, not the {n} rows of "
                         f"{table!r} (dim 0) {where}")
    return list(value)


def _apply(op: dict[str, Any], row: Any, model: dict[str, Any],
           where: tuple[str, str, str]) -> None:
    """`op` (a copy) takes the checkpoint's `row`: its placements in place of any strategy,
    and its blocks (`manual_split`) in place of the op's own where the row has them."""
    for key in ("strategy", "out_strategy"):
        op.pop(key, None)
    placements = dict(row) if isinstance(row, dict) else row
    blocks = placements.pop("manual_split", None) if isinstance(row, dict) else None
    attrs = op.get("attrs")
    if blocks is not None and (isinstance(attrs, dict) or attrs is None):
        op["attrs"] = {**(attrs or {}), "manual_split": _blocks(blocks, op, model, *where)}
    op["placements"] = placements


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
    doc, path = _read(ref, source)
    ops = [dict(op) for op in raw]
    names = {op.get("name"): i for i, op in enumerate(ops)}
    for name, row in doc["ops"].items():
        if name not in names:
            raise InputError(source, _KEY, f"{ref!r} holds operator {name!r}, which the "
                             f"model does not have (operators: {', '.join(map(str, names))})")
        _apply(ops[names[name]], row, model, (path, f"ops.{name}.manual_split", source))
    # the key is consumed: the scenario now holds the placements itself, so that a dump of
    # it (`plan`'s best scenario, `run`'s config) runs anywhere without the file
    assert isinstance(parallel, dict)  # (ref came from it)
    rest = {k: v for k, v in parallel.items() if k != "strategy_ckpt_load_file"}
    return {**data, "parallel": rest, "model": {**model, "ops": ops}}
