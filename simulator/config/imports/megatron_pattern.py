"""Megatron-LM's layer patterns: `--moe-layer-freq` as a scenario's `moe.first_dense` and
`moe.every`, and back.

`--moe-layer-freq` is an integer N (layer i has experts when i % N == 0: Megatron-Core
gpt_layer_specs.py `get_gpt_decoder_block_spec`, 'moe_layer_pattern = [1 if (i %
config.moe_layer_freq == 0) else 0 for i in range(config.num_layers)]') or a Python list
expression such as "([0]*3+[1]*58)" or "([1]*3+[0]*1)*3" (arguments.py `moe_freq_type`,
which evaluates it; read here without eval: list literals of 0 and 1, `+`, `*` by a whole
number, parentheses). A scenario's MoE layers are the first_dense dense layers, then every
every-th layer (`MoeSpec.is_moe`): a pattern of that form maps exactly, any other is refused.
"""

from __future__ import annotations

import ast

__all__ = ["parse_pattern", "as_first_dense_every", "pattern_text", "PatternError"]

_MAX_LAYERS = 100_000


class PatternError(ValueError):
    """A pattern that is not a list expression of 0 and 1 (the message says why)."""


def _value(node: ast.AST) -> list[int] | int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.List):
        items = [_value(e) for e in node.elts]
        if not all(isinstance(i, int) and i in (0, 1) for i in items):
            raise PatternError("a list holds 0 (dense) and 1 (experts) only")
        return [int(i) for i in items]  # type: ignore[arg-type]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            out = left + right
        elif isinstance(node.op, ast.Mult) and isinstance(left, list) != isinstance(right, list):
            seq, times = (left, right) if isinstance(left, list) else (right, left)
            assert isinstance(seq, list) and isinstance(times, int)
            if times < 0 or len(seq) * times > _MAX_LAYERS:
                raise PatternError(f"a repeat of {times} is out of range")
            out = seq * times
        else:
            raise PatternError("'+' joins two lists and '*' repeats a list a whole number of "
                               "times")
        if len(out) > _MAX_LAYERS:
            raise PatternError(f"more than {_MAX_LAYERS:,} layers")
        return out
    raise PatternError("only list literals, '+', '*' and parentheses are read")


def parse_pattern(text: str, layers: int) -> list[int]:
    """The per-layer pattern (1: experts) `--moe-layer-freq text` gives a model of `layers`
    layers; PatternError saying what is wrong."""
    text = text.strip()
    if not text.startswith(("[", "(")):
        try:
            every = int(text, 10)
        except ValueError:
            raise PatternError("expected a whole number or a list expression such as "
                               "\"([0]*3+[1]*58)\"") from None
        if every < 1:
            raise PatternError("expected a whole number of at least 1")
        return [1 if i % every == 0 else 0 for i in range(layers)]
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise PatternError("not a Python list expression") from None
    value = _value(tree.body)
    if not isinstance(value, list):
        raise PatternError("the expression is a number, not a list")
    if len(value) != layers:
        raise PatternError(f"{len(value)} entries for --num-layers {layers} (Megatron-Core "
                           "requires one per layer)")
    return value


def _matches(pattern: list[int], first: int, every: int) -> bool:
    return all(bool(p) == (i >= first and (i - first + 1) % every == 0)
               for i, p in enumerate(pattern))


def as_first_dense_every(pattern: list[int]) -> tuple[int, int] | None:
    """(first_dense, every) whose MoE layers are the pattern's, or None: `every` is the gap
    between the first two MoE layers (one MoE layer: the fewest layers after it, so no
    other follows), first_dense the layers before the first MoE layer's group."""
    ones = [i for i, p in enumerate(pattern) if p]
    if not ones:
        return None
    every = ones[1] - ones[0] if len(ones) > 1 else len(pattern) - ones[0]
    first = ones[0] + 1 - every
    if first < 0 or not _matches(pattern, first, every):
        return None
    return first, every


def pattern_text(layers: int, first_dense: int, every: int) -> str:
    """The `--moe-layer-freq` list expression of first_dense dense layers, then one MoE
    layer in every `every`."""
    groups, rest = divmod(layers - first_dense, every)
    parts = [f"[0]*{first_dense}"] if first_dense else []
    parts.append(f"([0]*{every - 1}+[1])*{groups}" if every > 1 else f"[1]*{groups}")
    if rest:
        parts.append(f"[0]*{rest}")
    return "(" + "+".join(parts) + ")"
