"""Where the bundled YAML folders are: inside an installed wheel, or at the repository root.

The repository layout keeps `scenarios/`, `hardware_profiles/` and `framework_profiles/` at
the top level; the wheel
carries copies under `simulator/_bundled/` (see pyproject.toml). Only lookup lives here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["bundled_dir", "resolve_yaml", "list_bundled", "is_file"]

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


def is_file(path: Path) -> bool:
    """Path.is_file, False also for a path no file system can hold (a name over 255
    bytes, a path over PATH_MAX), which Path.is_file raises OSError for."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def resolve_yaml(name_or_path: str, kind: str) -> Path | None:
    """A path to an existing file, or a bundled name; None when neither exists. A bundled
    name is a relative path inside the bundled folder: one with `..`, or absolute, names
    no bundled file (it would read files outside the folder)."""
    path = Path(name_or_path)
    if is_file(path):
        return path
    if path.is_absolute() or ".." in path.parts:
        return None
    candidate = bundled_dir(kind) / f"{name_or_path}.yaml"
    return candidate if is_file(candidate) else None
