"""Reading a Megatron-LM argument list: a text file of arguments, or a launch script whose
`torchrun ... pretrain_gpt.py ARGS` line (or `python -m torch.distributed.run`, `deepspeed`
is not read) starts the training; each argument with the line it came from.

A launch script is read as bash writes it, as far as a launch needs: lines continued by a
backslash, `#` comments, quoting, and variables set earlier in the file (`TP=8`,
`GPT_ARGS="--num-layers 24 ..."`, bash arrays `GPT_ARGS=(--num-layers 24 ...)`) expanded
where the launch line uses them (`$TP`, `${TP}`, `${GPT_ARGS[@]}`). The launcher's own
`--nnodes` and `--nproc-per-node` (or `--nproc_per_node`) give the world size.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from simulator.errors import InputError

__all__ = ["Arg", "Source", "read_source"]

_ENTRY = re.compile(r"(^|/)pretrain_\w+\.py$")
_ASSIGN = re.compile(r"^(?:export\s+|declare\s+(?:-a\s+)?)?([A-Za-z_]\w*)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?:\[@\]|\[\*\])?\}|\$([A-Za-z_]\w*)")
_LAUNCHER = {"nnodes": ("--nnodes",), "nproc": ("--nproc-per-node", "--nproc_per_node")}


@dataclass(frozen=True)
class Arg:
    """One `--flag [values...]` of the argument list; `line` is its line in the file."""

    flag: str
    values: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class Source:
    """The arguments of a file, in order, and what its launcher says (None: not given)."""

    path: str
    args: tuple[Arg, ...]
    nnodes: tuple[int, int] | None = None   # (value, line)
    nproc: tuple[int, int] | None = None
    script: str = ""  # the training script named on the launch line ('' for an args file)
    notes: tuple[str, ...] = field(default=())


Token = tuple[str, int]


Line = list[tuple[str, int]]  # a logical line: its physical pieces and their numbers


def _logical_lines(text: str) -> list[Line]:
    """The lines of `text` with their backslash continuations, each piece with its number."""
    out: list[Line] = []
    buf: Line = []
    for no, raw in enumerate(text.splitlines(), 1):
        if raw.rstrip().endswith("\\"):
            buf.append((raw.rstrip()[:-1], no))
            continue
        out.append(buf + [(raw, no)])
        buf = []
    if buf:
        out.append(buf)
    return out


def _words(line: Line, path: str) -> list[Token]:
    return [(w, no) for piece, no in line for w in _split(piece, path, no)]


def _split(text: str, path: str, line: int) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # an unclosed quote
        raise InputError(f"{path}:{line}", "", f"cannot split the line into arguments ({exc})"
                         ) from None


def _expand_tokens(words: list[Token], env: dict[str, list[Token]]) -> list[Token]:
    """Each word with the variables set earlier substituted: a word that is one variable
    becomes that variable's tokens (each with the line it was written on); a variable inside
    a word is replaced by its text."""
    out: list[Token] = []
    for word, line in words:
        m = _VAR.fullmatch(word)
        name = m and (m.group(1) or m.group(2))
        if name and name in env:
            out.extend(env[name])
            continue
        text = _VAR.sub(lambda v: " ".join(t for t, _ in env.get(v.group(1) or v.group(2),
                                                                 [(v.group(0), 0)])), word)
        out.append((text, line))
    return out


def _array(lines: list[Line], i: int, first: Line, path: str,
           env: dict[str, list[Token]]) -> tuple[list[Token], int]:
    """The tokens of a bash array `NAME=( ... )` whose body starts with `first` (the text
    after the parenthesis), and the index of its last line."""
    body: list[Token] = []
    line = first
    while True:
        last_text, last_no = line[-1]
        closed = last_text.rstrip().endswith(")")
        if closed:
            line = line[:-1] + [(last_text.rstrip()[:-1], last_no)]
        body.extend(_expand_tokens(_words(line, path), env))
        if closed or i + 1 >= len(lines):
            return body, i
        i += 1
        line = lines[i]


def _assignments(lines: list[Line], path: str
                 ) -> tuple[dict[str, list[Token]], list[Line]]:
    """The variables the script sets (arrays spanning lines included) and its other lines."""
    env: dict[str, list[Token]] = {}
    rest: list[Line] = []
    i = 0
    while i < len(lines):
        (head, no), *more = lines[i]
        m = _ASSIGN.match(head.strip())
        if not m:
            rest.append(lines[i])
            i += 1
            continue
        name, value = m.group(1), m.group(2).strip()
        if value.startswith("("):  # a bash array, maybe over several lines
            env[name], i = _array(lines, i, [(value[1:], no), *more], path, env)
        else:  # a string: its words, split again as bash splits an unquoted $NAME
            words = _words([(value, no), *more], path)
            env[name] = _expand_tokens([(w, at) for word, at in words
                                        for w in word.split()], env)
        i += 1
    return env, rest


def _launch(tokens: list[Token], path: str) -> tuple[list[Token], Source]:
    """The arguments after the training script, and the launcher's node and process counts."""
    at = next(i for i, (t, _) in enumerate(tokens) if _ENTRY.search(t))
    found: dict[str, tuple[int, int]] = {}
    pre = tokens[:at]
    for j, (word, line) in enumerate(pre):
        flag, _, inline = word.partition("=")
        for key, names in _LAUNCHER.items():
            if flag in names:
                value = inline or (pre[j + 1][0] if j + 1 < len(pre) else "")
                if not value.isdigit() or int(value) < 1:
                    raise InputError(f"{path}:{line}", flag, f"found {value!r}; expected a "
                                     "positive whole number (a variable the file does not set "
                                     "cannot be read: write the number, or give --nodes and "
                                     "--devices-per-node)")
                found[key] = (int(value), line)
    return tokens[at + 1:], Source(path, (), found.get("nnodes"), found.get("nproc"),
                                   tokens[at][0])


def _group(tokens: list[Token], path: str) -> tuple[Arg, ...]:
    """`--flag v1 v2` and `--flag=v` as Args; a value before any flag is an error."""
    args: list[Arg] = []
    for word, line in tokens:
        if word.startswith("--") and len(word) > 2:
            flag, eq, inline = word.partition("=")
            args.append(Arg(flag, (inline,) if eq else (), line))
        elif not args:
            raise InputError(f"{path}:{line}", "", f"found {word!r} before any --flag; "
                             "expected Megatron-LM arguments (--num-layers 24 ...) or a launch "
                             "script with a `torchrun ... pretrain_gpt.py ...` line")
        else:
            last = args[-1]
            args[-1] = Arg(last.flag, last.values + (word,), last.line)
    return tuple(args)


def read_source(text: str, path: str) -> Source:
    """The arguments of `text` (the contents of file `path`), script or argument list."""
    lines = _logical_lines(text)
    if not any(_ENTRY.search(w) for line in lines for piece, _ in line for w in piece.split()):
        return Source(path, _group([t for line in lines for t in _words(line, path)], path))
    env, rest = _assignments(lines, path)
    for line in rest:
        tokens = _expand_tokens(_words(line, path), env)
        if any(_ENTRY.search(t) for t, _ in tokens):
            args, launch = _launch(tokens, path)
            return Source(path, _group(args, path), launch.nnodes, launch.nproc, launch.script)
    raise InputError(path, "", "the launch line names pretrain_*.py inside a variable or a "
                     "quoted command this reader cannot follow; write the arguments in a file")
