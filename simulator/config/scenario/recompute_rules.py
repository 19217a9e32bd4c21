"""Rules of `parallel.recompute_modules` (Megatron-Core's --recompute-modules): they name
parts of a transformer layer recomputed under `recompute: selective`, so they need that
granularity and a model that has the parts named (simulator/program/recompute_modules.py)."""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.schema import Scenario

__all__ = ["recompute_modules"]

Problem = tuple[str, str]

# the model key a module needs (None: every transformer has the part)
_NEEDS = {"core_attn": None, "layernorm": None, "mla_up_proj": "mla", "moe_act": "moe"}


def recompute_modules(s: Scenario) -> Iterator[Problem]:
    """`recompute_modules` needs `recompute: selective`, a transformer, no repeated module,
    and the model parts it names (mla_up_proj: model.mla; moe_act: model.moe)."""
    mods = s.parallel.recompute_modules
    if mods is None:
        return
    key = "parallel.recompute_modules"
    if s.parallel.recompute != "selective":
        yield key, (f"{list(mods)} names the parts recomputed under parallel.recompute "
                    f"selective (found {s.parallel.recompute}); set it, or remove the key")
        return
    if s.model.type != "transformer":
        yield key, (f"names parts of a transformer layer; a model of type '{s.model.type}' "
                    f"has none (remove the key)")
        return
    if len(set(mods)) != len(mods):
        yield key, f"{list(mods)} names a module twice (each at most once)"
        return
    allowed = [k for k, v in _NEEDS.items() if v is None or getattr(s.model, v, None) is not None]
    for i, m in enumerate(mods):
        if m not in allowed:
            yield f"{key}[{i}]", (f"{m} recomputes a part of model.{_NEEDS[m]}, which this "
                                  f"model does not have (allowed here: {', '.join(allowed)})")
            return
