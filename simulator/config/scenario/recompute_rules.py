"""Rules of `parallel.recompute_modules` (Megatron-Core's --recompute-modules): they name
parts of a transformer layer recomputed under `recompute: selective`, so they need that
granularity and a model that has the parts named (simulator/program/recompute_modules.py)."""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.schema import Scenario

__all__ = ["recompute_modules", "expert_dispatcher", "fp8_saved_activations",
           "slice_activation"]

Problem = tuple[str, str]
# the output-discarding modules (models.recompute.DISCARDING; config sits below models)
_DISCARDING = ("layernorm", "mla_up_proj", "moe_act")

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


def expert_dispatcher(s: Scenario) -> Iterator[Problem]:
    """`expert_dispatcher: deepep | hybridep` moves a mixture of experts' tokens: it needs
    one and an expert-parallel degree above 1."""
    p = s.parallel
    if p.expert_dispatcher == "alltoall":
        return
    if getattr(s.model, "moe", None) is None or p.expert <= 1:
        yield "parallel.expert_dispatcher", (
            f"{p.expert_dispatcher} moves the tokens of a mixture of experts between "
            f"expert-parallel ranks; it needs model.moe and parallel.expert above 1 "
            f"(found expert {p.expert}"
            f"{'' if getattr(s.model, 'moe', None) is not None else ', no model.moe'}; "
            f"allowed here: alltoall)")


def fp8_saved_activations(s: Scenario) -> Iterator[Problem]:
    """`training.fp8_saved_activations` caches activations of an FP8 recipe: it needs
    `model.dtype: fp8`, no repeated entry, and moe_act_input a mixture of experts; and
    `training.fp8_requantize_recomputed` (`_requantize`)."""
    yield from _requantize(s)
    yield from _cached(s)


def _requantize(s: Scenario) -> Iterator[Problem]:
    """`training.fp8_requantize_recomputed` changes what FP8 GEMMs keep of the outputs an
    output-discarding recompute module drops: it needs model.dtype fp8 and such a module."""
    if not s.training.fp8_requantize_recomputed:
        return
    key, p = "training.fp8_requantize_recomputed", s.parallel
    if getattr(s.model, "dtype", None) != "fp8":
        yield key, ("true quantizes again the outputs a recompute module re-makes for FP8 "
                    f"GEMMs; it needs model.dtype fp8 (found {getattr(s.model, 'dtype', None)})"
                    "; set it, or remove the key")
    elif p.recompute != "selective" or not set(p.recompute_modules or ()) & set(_DISCARDING):
        yield key, ("true applies to the outputs parallel.recompute_modules discards; it "
                    f"needs recompute: selective with one of {list(_DISCARDING)} in "
                    f"parallel.recompute_modules (found recompute {p.recompute}, modules "
                    f"{list(p.recompute_modules or ())})")


def _cached(s: Scenario) -> Iterator[Problem]:
    which = s.training.fp8_saved_activations
    if not which:
        return
    key = "training.fp8_saved_activations"
    if getattr(s.model, "dtype", None) != "fp8":
        yield key, (f"{list(which)} keeps activations of an FP8 recipe in a low-precision "
                    f"cache; it needs model.dtype fp8 (found "
                    f"{getattr(s.model, 'dtype', None)}); set it, or remove the key")
    elif len(set(which)) != len(which):
        yield key, f"{list(which)} names an activation twice (each at most once)"
    elif "moe_act_input" in which and getattr(s.model, "moe", None) is None:
        yield f"{key}[{list(which).index('moe_act_input')}]", (
            "moe_act_input caches the inputs of the experts' activation; this model has no "
            "model.moe (allowed here: attention_output)")


def slice_activation(s: Scenario) -> Iterator[Problem]:
    """`recompute_slice_activation` splits the input a layer keeps under a full recompute
    over the tensor ranks of a transformer: it needs all three, and no sequence parallel,
    whose layer input is already split there (Megatron-Core TransformerConfig.__post_init__
    raises the same: distribute_saved_activations must be false under sequence parallel)."""
    p = s.parallel
    if not p.recompute_slice_activation:
        return
    key = "parallel.recompute_slice_activation"
    if s.model.type != "transformer":
        yield key, (f"true slices a transformer layer's kept input; a model of type "
                    f"'{s.model.type}' has none (allowed: false)")
    elif p.recompute != "full":
        yield key, (f"true slices the input a layer keeps under parallel.recompute full "
                    f"(found {p.recompute}; allowed: false)")
    elif p.tensor == 1 or p.tensor_nd is not None:
        yield key, ("true splits the kept input over parallel.tensor ranks, which is 1 "
                    "here (allowed: false)" if p.tensor == 1 else
                    "true with parallel.tensor_nd is not simulated (allowed: false)")
    elif p.sequence_parallel:
        yield key, ("true with parallel.sequence_parallel: the kept input is already split "
                    "over the tensor ranks (allowed: false, as Megatron-Core requires)")
