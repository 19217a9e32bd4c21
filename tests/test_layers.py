"""The layers of docs/design.md hold: the import-linter contracts of pyproject.toml (layers in
order; numeric free of the timing path; only engine imports simpy; cli through the API) and
no import cycle between modules, on the import graph the same tool builds."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

from simulator.config.scenario.schema_models import ModelConfig

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    proc = subprocess.run([sys.executable, "-m", "importlinter.cli"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "No module named importlinter.cli" in proc.stderr:
        proc = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(adj):
        if root in index:
            continue
        work = [(root, iter(adj[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(adj[w])))
            elif w in on:
                low[v] = min(low[v], index[w])
    return found


def test_no_import_cycle_between_modules():
    # `if TYPE_CHECKING:` imports run nothing, as in the contracts (pyproject.toml)
    graph = grimp.build_graph("simulator", exclude_type_checking_imports=True)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def _model_classes() -> set[str]:
    """The names of the model types of the scenario schema (every ModelConfig subclass)."""
    names, todo = {ModelConfig.__name__}, [ModelConfig]
    while todo:
        for sub in todo.pop().__subclasses__():
            names.add(sub.__name__)
            todo.append(sub)
    return names


def _type_tests(source: str, classes: set[str]) -> list[int]:
    """Lines of `isinstance` / `issubclass` calls against one of `classes` in `source`."""
    def named(node: ast.expr) -> bool:
        if isinstance(node, ast.Tuple):
            return any(named(e) for e in node.elts)
        if isinstance(node, ast.Attribute):
            return node.attr in classes
        return isinstance(node, ast.Name) and node.id in classes

    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2
            and named(node.args[1])]


def test_only_models_tests_a_model_type():
    # issue 21: what differs between model types is the type's answer (its schema class in
    # config/scenario/schema_models.py, its family in simulator/models/), not a branch
    classes = _model_classes()
    assert {"TransformerModel", "MlpModel", "ResnetModel", "GraphModel"} <= classes
    found = [f"{path.relative_to(ROOT)}:{line}"
             for path in sorted((ROOT / "simulator").rglob("*.py"))
             if "models" not in path.relative_to(ROOT / "simulator").parts[:1]
             for line in _type_tests(path.read_text(), classes)]
    assert found == []


def test_the_type_test_finder_finds_one():
    code = ("if isinstance(m, schema.GraphModel) or isinstance(m, (int, MlpModel)):\n"
            "    pass\nisinstance(m, dict)\n")
    assert _type_tests(code, {"GraphModel", "MlpModel"}) == [1, 1]


def test_every_in_function_import_says_why():
    """An import of the package inside a function keeps start-up cheap, and a comment on
    it or above its block of imports says so; a cycle hidden that way would need one."""
    bare = []
    for path in sorted((ROOT / "simulator").rglob("*.py")):
        src = path.read_text()
        lines = src.splitlines()
        for fn in ast.walk(ast.parse(src)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "simulator"):
                    k = node.lineno - 1  # walk up the block of imports it is in
                    while k > 0 and "#" not in lines[k] and (
                            not lines[k - 1].strip() or lines[k - 1].lstrip().startswith(
                                ("from ", "import ", ")")) or lines[k - 1].rstrip().endswith(",")):
                        k -= 1
                    if "#" not in lines[k] and "#" not in lines[k - 1]:
                        bare.append(f"{path}:{node.lineno}")
    assert not bare, bare
