"""Structure figures of the package (issue 21's before/after): modules over 400 lines, the
longest functions, and imports of the package made inside functions.

    python -m benchmarks.structure [--root DIR]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES = 400


def figures(root: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]], int]:
    """(modules over MODULE_LINES lines, functions by length, in-function imports of
    `simulator`), over root/simulator/**/*.py."""
    big: list[tuple[int, str]] = []
    funcs: list[tuple[int, str]] = []
    inner = 0
    for path in sorted((root / "simulator").rglob("*.py")):
        src = path.read_text(encoding="utf-8")
        name = path.relative_to(root).as_posix()
        if src.count("\n") > MODULE_LINES:
            big.append((src.count("\n"), name))
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            funcs.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))
            for sub in ast.walk(node):
                mod = sub.module if isinstance(sub, ast.ImportFrom) else (
                    sub.names[0].name if isinstance(sub, ast.Import) else None)
                inner += bool(mod and mod.startswith("simulator"))
    return sorted(big, reverse=True), sorted(funcs, reverse=True), inner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="a checkout (default: this one)")
    big, funcs, inner = figures(ap.parse_args().root)
    print(f"modules over {MODULE_LINES} lines: {len(big)}")
    for n, name in big:
        print(f"  {n:4d} {name}")
    print("longest functions:")
    for n, name in funcs[:5]:
        print(f"  {n:4d} {name}")
    print(f"imports of simulator inside functions: {inner}")


if __name__ == "__main__":
    main()
