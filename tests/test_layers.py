"""The layers of docs/design.md hold: the import-linter contracts of pyproject.toml (layers in
order; numeric free of the timing path; only engine imports simpy; cli through the API) and
no import cycle between modules, on the import graph the same tool builds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

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
