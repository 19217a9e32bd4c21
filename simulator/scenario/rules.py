"""Cross-field rules of a scenario (CONTRACT.md section 2), each with a message that says how
to fix it. A rule returns (dotted key, message) pairs; `check_rules` raises the first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from simulator.errors import InputError
from simulator.scenario.schema import GraphModel, Scenario, TransformerModel

__all__ = ["check_rules", "divisors", "cluster_problems"]

Problem = tuple[str, str]


def divisors(n: int, limit: int = 8) -> str:
    """'1, 2, 4, 8, ...' : the first `limit` divisors of n, for hints."""
    ds = [d for d in range(1, n + 1) if n % d == 0]
    text = ", ".join(str(d) for d in ds[:limit])
    return text + (", ..." if len(ds) > limit else "")


def _must_divide(key: str, value: int, other_key: str, other: int) -> Iterator[Problem]:
    if other % value:
        yield key, (
            f"{value} must divide {other_key}={other} (valid: {divisors(other)})"
        )


def _devices(s: Scenario) -> Iterator[Problem]:
    p, c = s.parallel, s.cluster
    if isinstance(s.model, GraphModel):
        return
    if p.devices != c.devices:
        yield "parallel", (
            f"data*tensor*pipeline = {p.data}*{p.tensor}*{p.pipeline} = {p.devices} must equal "
            f"cluster.nodes*cluster.devices_per_node = {c.nodes}*{c.devices_per_node} = "
            f"{c.devices}"
        )


_HETERO_MAX_DEVICES = 1_000_000  # per-device speeds are arrays of this length at most


def cluster_problems(s: Scenario) -> Iterator[Problem]:
    """node_types cover the nodes exactly; slow entries name devices and nodes that exist."""
    c = s.cluster
    if c.node_types is not None and sum(t.nodes for t in c.node_types) != c.nodes:
        counts = "+".join(str(t.nodes) for t in c.node_types)
        yield "cluster.node_types", (f"nodes add up to {counts} = "
                                     f"{sum(t.nodes for t in c.node_types)}; expected "
                                     f"cluster.nodes = {c.nodes}")
    for i, slow in enumerate(c.slow):
        where = f"cluster.slow[{i}]"
        if not slow.devices and not slow.nodes:
            yield where, "names no device; give devices: [ranks] or nodes: [indices]"
        for key, ids, n in (("devices", slow.devices, c.devices), ("nodes", slow.nodes, c.nodes)):
            bad = [x for x in ids if x >= n]
            if bad:
                yield f"{where}.{key}", f"{bad[0]} is out of range (allowed: 0..{n - 1})"
    if not c.uniform and c.devices > _HETERO_MAX_DEVICES:
        yield "cluster", (f"{c.devices} devices with node_types, slow or jitter; at most "
                          f"{_HETERO_MAX_DEVICES} are simulated with per-device speeds")


def _batch(s: Scenario) -> Iterator[Problem]:
    t, p = s.training, s.parallel
    per_step = t.micro_batch_size * p.data
    if isinstance(s.model, GraphModel):
        return
    if t.global_batch_size % per_step:
        yield "training.global_batch_size", (
            f"{t.global_batch_size} must be a multiple of training.micro_batch_size*"
            f"parallel.data = {t.micro_batch_size}*{p.data} = {per_step} "
            f"(gradient-accumulation steps must be whole)"
        )


def _transformer(s: Scenario) -> Iterator[Problem]:
    m, p = s.model, s.parallel
    if not isinstance(m, TransformerModel):
        return
    yield from _must_divide("model.num_heads", m.num_heads, "model.hidden_size", m.hidden_size)
    yield from _must_divide("parallel.tensor", p.tensor, "model.num_heads", m.num_heads)
    if m.num_kv_heads is not None:
        yield from _must_divide("model.num_kv_heads", m.kv_heads, "model.num_heads", m.num_heads)
        yield from _must_divide("parallel.tensor", p.tensor, "model.num_kv_heads", m.kv_heads)
    yield from _must_divide("parallel.tensor", p.tensor, "model.ffn_hidden_size", m.ffn)
    if m.vocab_size % p.tensor:
        # the embedding and LM head split the vocabulary across tensor-parallel ranks;
        # Megatron-LM pads it (--make-vocab-size-divisible-by, megatron/training/tokenizer)
        padded = -(-m.vocab_size // (128 * p.tensor)) * 128 * p.tensor
        yield "model.vocab_size", (
            f"{m.vocab_size} must be a multiple of parallel.tensor={p.tensor} (the "
            f"embedding is split across tensor-parallel ranks; Megatron-LM pads it to "
            f"{padded})")
    yield from _stage_layers(m.layers, p)
    if p.sequence_parallel:
        yield from _must_divide("parallel.tensor", p.tensor, "model.seq_length", m.seq_length)


def _stage_layers(layers: int, p) -> Iterator[Problem]:
    """Explicit per-stage layer counts: one per virtual stage, adding up to the model's
    layers; only the first and last stage (which hold the embedding and the head) may have
    none. Without them every stage needs at least one layer."""
    chunks = p.pipeline * (p.virtual_stages if p.schedule == "interleaved_1f1b" else 1)
    given = p.pipeline_layers
    if given is None:
        if layers < chunks:
            yield "parallel.pipeline", (
                f"{p.pipeline} stages x {chunks // p.pipeline} chunks need at least "
                f"{chunks} layers; model.layers is {layers}")
        return
    if len(given) != chunks:
        yield "parallel.pipeline_layers", (
            f"has {len(given)} entries; expected one per virtual stage, "
            f"parallel.pipeline*virtual_stages = {chunks}")
    elif sum(given) != layers:
        yield "parallel.pipeline_layers", (
            f"adds up to {sum(given)} layers; expected model.layers = {layers}")
    elif any(n == 0 for n in given[1:-1]):
        yield "parallel.pipeline_layers", (
            f"{given}: only the first and last stage may have 0 layers")


def _graph(s: Scenario) -> Iterator[Problem]:
    """An operator graph carries its own batch (its input tensors) and its own device mesh
    (`model.mesh` and the strategies): the batch and degree keys do not apply."""
    if not isinstance(s.model, GraphModel):
        return
    fixed = (("parallel.data", s.parallel.data), ("parallel.tensor", s.parallel.tensor),
             ("training.micro_batch_size", s.training.micro_batch_size),
             ("training.global_batch_size", s.training.global_batch_size))
    for key, value in fixed:
        if value != 1:
            yield key, (f"{value} does not apply to model.type graph, whose batch is its "
                        f"input tensors' first dim and whose split is model.mesh with the "
                        f"operators' strategies (allowed: 1)")


def _one_block(s: Scenario) -> Iterator[Problem]:
    """mlp, resnet and graph models are one block of the program (the embedding / layer /
    head split is the transformer's): a pipeline has nothing to partition. Shared by run
    and verify."""
    if isinstance(s.model, TransformerModel) or s.parallel.pipeline == 1:
        return
    yield "parallel.pipeline", (
        f"{s.parallel.pipeline} needs a model the pipeline can partition into stages; a "
        f"model of type '{s.model.type}' is one block (allowed: 1)")


def _schedule(s: Scenario) -> Iterator[Problem]:
    p = s.parallel
    if p.virtual_stages > 1 and p.schedule != "interleaved_1f1b":
        yield "parallel.virtual_stages", (
            f"{p.virtual_stages} needs parallel.schedule=interleaved_1f1b "
            f"(found {p.schedule})"
        )


def _offload(s: Scenario) -> Iterator[Problem]:
    """Offloads the simulator does not model: refused here, for `run` and `verify` alike
    (the lowering, simulator/schedule/lowering.py, refuses them with the same words)."""
    off = s.parallel.offload
    for key, on in (("parameters", off.parameters), ("activations", off.activations)):
        if on:
            yield (f"parallel.offload.{key}",
                   "true is not simulated yet (supported: offload.optimizer_states)")


RULES: tuple[Callable[[Scenario], Iterator[Problem]], ...] = (
    _devices,
    cluster_problems,
    _batch,
    _transformer,
    _graph,
    _one_block,
    _schedule,
    _offload,
)


def check_rules(s: Scenario) -> None:
    """Raise InputError for the first rule the scenario breaks."""
    for rule in RULES:
        for key, message in rule(s):
            raise InputError(s.source, key, message)
