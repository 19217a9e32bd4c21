"""Where the bundled YAML folders are: inside an installed wheel, or at the repository root.

The repository layout keeps `scenarios/`, `hardware_profiles/` and `framework_profiles/` at
the top level; the wheel
carries copies under `simulator/_bundled/` (see pyproject.toml). Only lookup lives here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["bundled_dir", "resolve_yaml", "list_bundled"]

_PKG = Path(__file__).resolve().parent.parent  # simulator/


def bundled_dir(kind: str) -> Path:
    """The folder holding bundled `kind` files ('scenarios', 'hardware_profiles' or
    'framework_profiles')."""
    installed = _PKG / "_bundled" / kind
    if installed.is_dir():
        return installed
    return _PKG.parent / kind


def list_bundled(kind: str) -> list[str]:
    """Names of the bundled YAML files of `kind` (relative path without `.yaml`), sorted."""
    folder = bundled_dir(kind)
    if not folder.is_dir():
        return []
    return sorted(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml"))


def resolve_yaml(name_or_path: str, kind: str) -> Path | None:
    """A path to an existing file, or a bundled name; None when neither exists."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidate = bundled_dir(kind) / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    return None
