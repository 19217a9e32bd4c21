"""`shardsim schema` explains every key (issue 25): each property of the scenario's JSON
Schema, at every depth, carries a description for an editor to show."""

from __future__ import annotations

from typing import Any

from simulator.config.json_schema import json_schema


def _undescribed(node: Any, where: str = "") -> tuple[int, list[str]]:
    """(properties seen, the dotted places of those without a description) under `node`."""
    seen, missing = 0, []
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            seen += 1
            if not (isinstance(prop, dict) and str(prop.get("description", "")).strip()):
                missing.append(f"{where}.{name}")
        for key, value in node.items():
            n, more = _undescribed(value, f"{where}/{key}")
            seen, missing = seen + n, missing + more
    elif isinstance(node, list):
        for i, value in enumerate(node):
            n, more = _undescribed(value, f"{where}[{i}]")
            seen, missing = seen + n, missing + more
    return seen, missing


def test_every_scenario_property_has_a_description():
    seen, missing = _undescribed(json_schema())
    assert seen > 100  # the walk reached the nested sections ($defs)
    assert missing == []


def test_the_walk_finds_a_property_without_one():
    doc = {"properties": {"a": {"type": "int", "description": "A."}},
           "$defs": {"B": {"properties": {"c": {"type": "int"}, "d": {"description": " "}}}}}
    assert _undescribed(doc) == (3, ["/$defs/B.c", "/$defs/B.d"])
