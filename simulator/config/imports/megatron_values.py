"""The arguments of a Megatron-LM command line as checked values: every flag known (a
did-you-mean against Megatron-LM's own names otherwise), given the number of values it takes,
each value of the type and range it must have; errors name the file, the line and the flag.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from simulator.config.imports.megatron_flags import FLAGS, REFUSE
from simulator.config.imports.megatron_names import ARGUMENT_NAMES
from simulator.config.imports.megatron_source import Arg, Source
from simulator.config.yamlio import did_you_mean
from simulator.errors import InputError

__all__ = ["Values", "check_flags", "bad"]

_MAX = 10**9  # a size no real system reaches (the scenario's own bounds are tighter)


def bad(source: Source, arg: Arg, message: str) -> InputError:
    """The error for `arg`: `FILE:LINE: --flag: message`."""
    return InputError(f"{source.path}:{arg.line}", arg.flag, message)


def _unknown(source: Source, arg: Arg) -> InputError:
    hint = did_you_mean(arg.flag[2:], sorted(ARGUMENT_NAMES))
    hint = hint.replace("'", "'--", 1) if hint else ""
    return bad(source, arg, f"not an argument of Megatron-LM's pretrain_gpt.py{hint} "
               "(megatron/training/arguments.py)")


def check_flags(source: Source, lenient: bool) -> tuple[dict[str, Arg], list[str]]:
    """The arguments by flag (the last of a repeated flag wins, as in argparse) and the notes
    of what --lenient let through; InputError for an unknown flag, a wrong number of values,
    or a refused flag without --lenient."""
    seen: dict[str, Arg] = {}
    notes: list[str] = []
    for arg in source.args:
        name = arg.flag[2:]
        rule = FLAGS.get(arg.flag)
        if rule is None and name not in ARGUMENT_NAMES:
            raise _unknown(source, arg)
        if rule is not None and rule.values is not None and len(arg.values) != rule.values:
            want = "no value (a switch)" if rule.values == 0 else f"{rule.values} value"
            raise bad(source, arg, f"found {len(arg.values)} value(s) "
                      f"{' '.join(arg.values)!r}; expected {want}")
        if rule is None or rule.kind == REFUSE:
            why = rule.why if rule else "a Megatron-LM argument this importer does not read"
            if not lenient:
                raise bad(source, arg, f"changes what Megatron-LM runs and has no scenario "
                          f"key ({why}); --lenient imports without it")
            notes.append(f"{arg.flag} (line {arg.line}) left out: {why}")
        seen[arg.flag] = arg
    return seen, notes


@dataclass
class Values:
    """Typed access to the checked arguments; `used` records what each scenario key came
    from, for the table and for naming the flag behind a later error."""

    source: Source
    args: dict[str, Arg]
    used: dict[str, list[Arg]] = field(default_factory=dict)

    def has(self, flag: str) -> bool:
        return flag in self.args

    def arg(self, flag: str) -> Arg | None:
        return self.args.get(flag)

    def error(self, flag: str, message: str) -> InputError:
        arg = self.args.get(flag)
        if arg is None:
            return InputError(self.source.path, flag, message)
        return bad(self.source, arg, message)

    def text(self, flag: str, default: str | None = None,
             choices: tuple[str, ...] = ()) -> str | None:
        arg = self.args.get(flag)
        if arg is None:
            return default
        value = arg.values[0]
        if choices and value not in choices:
            raise bad(self.source, arg, f"found {value!r}; allowed: {', '.join(choices)}")
        return value

    def integer(self, flag: str, default: int | None = None, lo: int = 1, hi: int = _MAX
            ) -> int | None:
        arg = self.args.get(flag)
        if arg is None:
            return default
        value = arg.values[0]
        try:
            number = int(value, 10)
        except ValueError:
            number = None
        if number is None or not lo <= number <= hi:
            raise bad(self.source, arg, f"found {value!r}; expected a whole number from {lo} "
                      f"to {hi:,}")
        return number

    def need(self, flag: str, lo: int = 1) -> int:
        number = self.integer(flag, lo=lo)
        if number is None:
            raise InputError(self.source.path, flag, "missing; Megatron-LM requires it "
                             "(megatron/training/arguments.py validate_args)")
        return number

    def number(self, flag: str, default: float, lo: float, hi: float) -> float:
        arg = self.args.get(flag)
        if arg is None:
            return default
        try:
            number = float(arg.values[0])
        except ValueError:
            number = float("nan")
        if not lo <= number <= hi:
            raise bad(self.source, arg, f"found {arg.values[0]!r}; expected a number from "
                      f"{lo:g} to {hi:g}")
        return number

    def flags(self, *names: str) -> Iterator[Arg]:
        return (self.args[n] for n in names if n in self.args)
