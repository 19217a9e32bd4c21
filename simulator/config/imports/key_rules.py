"""Building blocks of the importers' key tables (deepspeed, mindformers, nemo, torchtitan):
one Flag per dotted config key, and the lookup of a key's rule in a table of keys and of
sections read whole."""

from __future__ import annotations

from simulator.config.imports.megatron_flags import APPROX, IGNORE, MAP, REFUSE, Flag

__all__ = ["mapped", "ignored", "approximated", "refused", "section_rule"]


def mapped(key: str) -> Flag:
    return Flag(MAP, key, "")


def ignored(why: str) -> Flag:
    return Flag(IGNORE, "", why)


def approximated(why: str) -> Flag:
    return Flag(APPROX, "", why)


def refused(why: str) -> Flag:
    return Flag(REFUSE, "", why)


def section_rule(key: str, keys: dict[str, Flag], sections: dict[str, Flag]) -> Flag | None:
    """The rule of dotted `key`: its own, else a section read whole that encloses it (the
    nearest), else the section named `key` itself, else None."""
    if key in keys:
        return keys[key]
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        found = sections.get(".".join(parts[:end]))
        if found is not None:
            return found
    return sections.get(key)
