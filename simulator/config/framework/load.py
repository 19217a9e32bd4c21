"""Finding, reading and validating framework profiles (bundled names or paths), and the
profile a scenario runs with: its `framework:` key, else its hardware profile's
`default_framework`.

Every bad input becomes one InputError naming the file and the dotted key, like hardware
profiles (`simulator.config.hardware.load`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from simulator.config.framework.schema import FrameworkProfile
from simulator.config.resources import bundled_dir, list_bundled, resolve_yaml
from simulator.config.validation import validate_profile
from simulator.config.yamlio import did_you_mean, read_yaml_file
from simulator.errors import InputError

__all__ = ["load_framework", "parse_framework", "list_frameworks", "framework_for"]

_KIND = "framework_profiles"


def parse_framework(data: dict[str, Any], source: str) -> FrameworkProfile:
    """Validate a mapping into a framework profile."""
    return validate_profile(FrameworkProfile, data, source)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(bundled_dir(_KIND).resolve().parent))
    except ValueError:
        return str(path)


@lru_cache(maxsize=64)
def _load_path(path: Path) -> FrameworkProfile:
    return parse_framework(read_yaml_file(path, _display(path)), _display(path))


def load_framework(name_or_path: str, base_dir: Path | None = None, where: str = "framework",
                   key: str = "") -> FrameworkProfile:
    """The framework profile `name_or_path`: a bundled name such as 'megatron-core', a YAML
    path, or a path relative to `base_dir` (the scenario's folder). `where`/`key` name the
    file and key that gave the name, for the error when there is no such profile."""
    path = resolve_yaml(name_or_path, _KIND)
    if path is None and base_dir is not None and (base_dir / name_or_path).is_file():
        path = base_dir / name_or_path
    if path is None:
        names = list_bundled(_KIND)
        raise InputError(where, key, f"found {name_or_path!r}, which is neither a bundled "
                         f"framework profile nor a file{did_you_mean(name_or_path, names)}; "
                         f"bundled: {', '.join(names) or '(none)'}")
    try:
        return _load_path(path.resolve())
    except InputError as err:  # the file is not a framework profile: say who named it
        if not key:
            raise
        raise InputError(where, key, str(err)) from None


def list_frameworks() -> list[FrameworkProfile]:
    """Every bundled framework profile, sorted by name."""
    return [load_framework(name) for name in list_bundled(_KIND)]


def framework_for(scenario: Any, hw: Any) -> FrameworkProfile:
    """The profile `scenario` runs with: its `framework:` (a bundled name, a path, or a path
    relative to the scenario file), else the hardware profile's `default_framework`."""
    name = getattr(scenario, "framework", None)
    if name is None:
        return load_framework(hw.default_framework, where=hw.source, key="default_framework")
    source = str(scenario.source)
    base = Path(source).parent if Path(source).is_file() else None
    return load_framework(name, base, where=source, key="framework")
