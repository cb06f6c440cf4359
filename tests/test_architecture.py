"""The package's shape (issue #19): the import graph between its folders has no cycle, so no folder
imports a folder that imports it back, it is at most 10 levels deep, and the training loop stays short.

A *unit* is a folder of ``obliviate`` (``obliviate.train``) or a top-level module (``obliviate.train.pretrain``);
an arrow is an import at the top of a module (function-level imports are left out: they are kept for
optional heavy dependencies).
"""

import ast
from pathlib import Path

import obliviate

SRC = Path(obliviate.__file__).resolve().parent
MAX_LEVELS = 10


def unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def module_name(path: Path) -> str:
    parts = ["obliviate", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        here = unit(module_name(path))
        edges = graph.setdefault(here, set())
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            edges.update(unit(n) for n in names if n.startswith("obliviate.") and unit(n) != here)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of units, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state and (found := visit(v)):
                return found
        state[u] = 2
        stack.pop()
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


def levels(graph: dict[str, set[str]]) -> tuple[int, list[str]]:
    """The longest import chain of an acyclic ``graph``: its length in units, and the chain."""
    memo: dict[str, list[str]] = {}

    def chain(u):
        if u not in memo:
            memo[u] = [u] + max((chain(v) for v in graph.get(u, ())), key=len, default=[])
        return memo[u]

    longest = max((chain(u) for u in graph), key=len)
    return len(longest), longest


def test_the_graph_helpers_on_a_hand_made_graph():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert levels({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == (3, ["a", "b", "c"])


def test_no_folder_imports_a_folder_that_imports_it_back():
    graph = top_level_graph()
    assert "obliviate.train" in graph and "obliviate.recipes" in graph
    two_way = sorted({tuple(sorted((u, v))) for u, vs in graph.items() for v in vs if u in graph.get(v, ())})
    assert not two_way, f"folders that import each other: {two_way}"
    found = cycle(graph)
    assert found is None, "an import cycle between folders: " + " -> ".join(found)


def test_the_import_graph_is_at_most_ten_levels_deep():
    graph = top_level_graph()
    assert cycle(graph) is None  # levels are counted on an acyclic graph (the test above names the cycle)
    n, chain = levels(graph)
    assert n <= MAX_LEVELS, f"{n} import levels: " + " -> ".join(chain)


def test_the_training_loop_stays_short():
    assert len((SRC / "train" / "loop.py").read_text().splitlines()) <= 300
