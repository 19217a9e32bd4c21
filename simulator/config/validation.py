"""Turn a pydantic ValidationError into one InputError: file, dotted key, found vs allowed.

Shared by every YAML schema (scenarios, hardware profiles) so all messages read alike.
"""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from simulator.config.yamlio import did_you_mean
from simulator.errors import InputError

__all__ = ["to_input_error", "validate_profile", "HIDDEN_FIELDS"]

HIDDEN_FIELDS = frozenset({"source"})
_WANT = {"int_type": "an integer", "int_parsing": "an integer", "float_type": "a number",
         "float_parsing": "a number", "bool_type": "true or false",
         "bool_parsing": "true or false", "string_type": "a string"}


def _members(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model class reachable in an annotation (unions, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out.extend(_members(arg))
    return out


def _tag(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("type")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    return str(args[0]) if args else None


def _walk(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[type[BaseModel] | None, str]:
    """The model owning the mapping at `loc`, and the dotted key for `loc`."""
    model: type[BaseModel] | None = root
    candidates: list[type[BaseModel]] = [root]
    key = ""
    for item in loc:
        if isinstance(item, int):
            key += f"[{item}]"
            continue
        tagged = [c for c in candidates if _tag(c) == item]
        if tagged and len(candidates) > 1:
            model, candidates = tagged[0], tagged
            continue
        key += f".{item}" if key else str(item)
        field = model.model_fields.get(item) if model else None
        candidates = _members(field.annotation) if field else []
        model = candidates[0] if len(candidates) == 1 else (candidates[0] if candidates
                                                            else None)
    return model, key


def _constraints(annotation: Any, metadata: list[Any]) -> list[Any]:
    """The annotated_types bounds (Ge, Gt, Le, Lt) of a field: its own metadata, else the
    first Annotated inside its annotation (`X | None`, `tuple[X, Y]`)."""
    found = [m for m in metadata if type(m).__name__ in ("Ge", "Gt", "Le", "Lt")]
    if found:
        return found
    for arg in typing.get_args(annotation):
        inner = getattr(arg, "metadata", None) if isinstance(arg, FieldInfo) else None
        found = _constraints(arg, inner or [])
        if found:
            return found
    return []


def _item(annotation: Any, index: int) -> Any:
    """The annotation of item `index` of a list or tuple annotation (`X | None` unwrapped)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and args:
        return _item(args[0], index)
    if typing.get_origin(annotation) is tuple and args and args[-1] is not Ellipsis:
        return args[min(index, len(args) - 1)]
    return args[0] if args else annotation


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _range(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """'from 0.001 to 100000' for the bounded field at `loc`, or '' when unknown."""
    last = max((i for i, x in enumerate(loc) if isinstance(x, str)), default=None)
    if last is None:
        return ""
    owner, _ = _walk(root, loc[:last])
    field = owner.model_fields.get(loc[last]) if owner else None
    if field is None:
        return ""
    annotation, metadata = field.annotation, list(field.metadata)
    for index in loc[last + 1:]:
        annotation, metadata = _item(annotation, index), []
    bounds = {type(m).__name__: getattr(m, type(m).__name__.lower()) for m in
              _constraints(annotation, metadata)}
    lo = (f"from {_num(bounds['Ge'])}" if "Ge" in bounds else
          f"above {_num(bounds['Gt'])}" if "Gt" in bounds else "")
    hi = (f"to {_num(bounds['Le'])}" if "Le" in bounds else
          f"below {_num(bounds['Lt'])}" if "Lt" in bounds else "")
    if lo.startswith("above") and hi:
        hi = "up " + hi if hi.startswith("to") else hi
        return f"{lo}, {hi}"
    return " ".join(x for x in (lo, hi) if x)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return str(value)


def to_input_error(exc: ValidationError, source: str, root: type[BaseModel]) -> InputError:
    """The first error of `exc` as an InputError against the schema rooted at `root`."""
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    etype, found, msg = err["type"], err.get("input"), err["msg"]
    _, key = _walk(root, loc)
    if etype == "extra_forbidden":
        owner, _ = _walk(root, loc[:-1])
        allowed = sorted(f for f in (owner.model_fields if owner else {})
                         if f not in HIDDEN_FIELDS)
        hint = did_you_mean(str(loc[-1]), allowed)
        return InputError(source, key, f"unknown key{hint}; allowed: {', '.join(allowed)}")
    if etype == "missing":
        return InputError(source, key, "is required but missing")
    if etype in ("union_tag_invalid", "union_tag_not_found"):
        expected = err.get("ctx", {}).get("expected_tags", "")
        tag_key = f"{key}.type"
        if etype == "union_tag_not_found":
            return InputError(source, tag_key, f"is required (allowed: {expected})")
        tag = err.get("ctx", {}).get("tag")
        options = [o.strip() for o in expected.replace("'", "").split(",")]
        return InputError(source, tag_key, f"found {_show(tag)}; allowed: "
                          f"{', '.join(options)}{did_you_mean(str(tag), options)}")
    if etype == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        options = [e.strip().strip("'") for e in expected.replace(" or ", ",").split(",")]
        hint = did_you_mean(str(found), [o for o in options if o])
        return InputError(source, key, f"found {_show(found)}; allowed: "
                          f"{', '.join(o for o in options if o)}{hint}")
    if etype in _WANT:
        return InputError(source, key, f"found {_show(found)}; expected {_WANT[etype]}")
    if etype.startswith(("greater_than", "less_than")) or etype == "finite_number":
        span = _range(root, loc)
        what = "a finite number" if etype == "finite_number" else "a value"
        bound = (f"{span} (a range a real system could have)" if span
                 else msg.removeprefix("Input should be "))
        return InputError(source, key, f"found {_show(found)}; expected {what} {bound}")
    if etype in ("model_type", "dict_type", "model_attributes_type"):
        return InputError(source, key, f"found {_show(found)}; expected a mapping")
    if etype == "list_type":
        return InputError(source, key, f"found {_show(found)}; expected a list")
    return InputError(source, key, f"found {_show(found)}; {msg}")


M = TypeVar("M", bound=BaseModel)


def validate_profile(model: type[M], data: dict, source: str) -> M:
    """A profile mapping validated into `model` (named after its file unless it names
    itself, `source` recorded); pydantic errors become the InputError users read."""
    data = dict(data)
    data.setdefault("name", source)
    data["source"] = source
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise to_input_error(exc, source, model) from None
