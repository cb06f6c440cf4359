"""The package's shape (issues #19, #26, #43, #58): the folders stand in the layers of docs/architecture.md, each
importing only below it (imports at the top of a module, inside functions, and through ``importlib``); the
import graph has no cycle and is at most 14 levels deep, and inside a folder the modules' top-level imports form
no cycle either; the package imports its own modules at the top of a file (a few named exceptions); the root
holds at most 8 modules and few file names repeat; the training loop stays short.

A *unit* is a folder of ``obliviate`` (``obliviate.train``) or a top-level module (``obliviate.api``).
"""

import ast
from pathlib import Path

import obliviate

SRC = Path(obliviate.__file__).resolve().parent
MAX_LEVELS = 14
"""The methods' machinery in a layer of its own (``unlearning``, issue #43) is one level more than when it sat inside
``methods``; ``config`` above ``utils`` (the seed range, ``utils.SEED_LIMIT``, checked by both) one more; the
paper reproductions above the pipelines they run (``papers -> pipelines``, issue #43) one more; and the evidence (the
harness, the controls, the verdict) above the attacks it runs (``evidence -> attacks``, issue #58) one more."""
LAYERS = [("cli", "api"), ("papers",), ("pipelines",), ("evidence",), ("attacks",), ("integrations",), ("methods",),
          ("unlearning",), ("filtering",), ("runs",),
          ("train",), ("eval",), ("data",), ("losses",), ("tasks", "models"), ("world",),
          ("registry", "config"), ("utils",), ("errors",)]
"""Top to bottom, as docs/architecture.md lists them: a unit imports only units of lower layers."""
REPEATED_NAMES_ALLOWED = 4


def unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def module_name(path: Path, src: Path = SRC) -> str:
    parts = ["obliviate", *path.relative_to(src).with_suffix("").parts]
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
    assert "obliviate.train" in graph and "obliviate.papers" in graph
    two_way = sorted({tuple(sorted((u, v))) for u, vs in graph.items() for v in vs if u in graph.get(v, ())})
    assert not two_way, f"folders that import each other: {two_way}"
    found = cycle(graph)
    assert found is None, "an import cycle between folders: " + " -> ".join(found)


def test_the_import_graph_is_at_most_fourteen_levels_deep():
    graph = top_level_graph()
    assert cycle(graph) is None  # levels are counted on an acyclic graph (the test above names the cycle)
    n, chain = levels(graph)
    assert n <= MAX_LEVELS, f"{n} import levels: " + " -> ".join(chain)


def module_path(name: str, src: Path = SRC) -> Path | None:
    """The file of module ``obliviate....`` (a package's ``__init__.py``) under ``src``, or None when there is none."""
    base = src.joinpath(*name.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def folder_graphs(src: Path = SRC) -> dict[Path, dict[str, set[str]]]:
    """Per folder, ``module -> modules of the same folder`` that it imports at module level (at the top, or in a
    top-level ``if``/``try``, ``TYPE_CHECKING`` included; not inside functions). ``from pkg import name`` counts the
    submodule ``pkg.name`` where there is one, else ``pkg`` itself (its ``__init__.py``)."""
    graphs: dict[Path, dict[str, set[str]]] = {}
    for path in src.rglob("*.py"):
        here = module_name(path, src)
        package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
        edges = graphs.setdefault(path.parent, {}).setdefault(here, set())
        nodes = list(ast.parse(path.read_text(), str(path)).body)
        while nodes:
            node = nodes.pop()
            if isinstance(node, (ast.If, ast.Try)):
                nodes += node.body + node.orelse + getattr(node, "finalbody", []) + \
                    [n for h in getattr(node, "handlers", []) for n in h.body]
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                names = [f"{base}.{a.name}" if module_path(f"{base}.{a.name}", src) else base for a in node.names]
            else:
                continue
            for name in names:
                target = module_path(name, src) if name.startswith("obliviate") else None
                if target is not None and target.parent == path.parent and name != here:
                    edges.add(name)
    return graphs


def test_no_folder_has_an_import_cycle_between_its_modules():
    graphs = folder_graphs()
    assert "obliviate.unlearning.engine" in graphs[SRC / "unlearning"]
    found = {str(folder.relative_to(SRC)): c for folder, g in graphs.items() if (c := cycle(g))}
    assert not found, "import cycles inside a folder: " + "; ".join(f"{f}: {' -> '.join(c)}" for f, c in found.items())


def test_the_folder_cycle_check_sees_a_cycle_under_type_checking(tmp_path):
    root = tmp_path / "obliviate"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "a.py").write_text("from obliviate.pkg.b import f\n")
    (root / "pkg" / "b.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                       "    from obliviate.pkg import a\n")
    graph = folder_graphs(root)[root / "pkg"]
    assert cycle(graph) in (["obliviate.pkg.a", "obliviate.pkg.b", "obliviate.pkg.a"],
                            ["obliviate.pkg.b", "obliviate.pkg.a", "obliviate.pkg.b"])


def test_the_training_loop_stays_short():
    assert len((SRC / "train" / "loop.py").read_text().splitlines()) <= 300


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of ``obliviate`` modules in ``path``: at the top, inside functions, and
    ``importlib.import_module("obliviate....")`` (a formatted name counts by its constant start)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + ([f"obliviate.{a.name}" for a in node.names] if node.module == "obliviate" else [])
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif (isinstance(node, ast.Call) and node.args
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names = [arg.value]
            elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                names = [str(arg.values[0].value).rstrip(".")]
        found += [(node.lineno, n) for n in names if n.startswith("obliviate.")]
    return found


def layer_violations(files) -> list[str]:
    level = {f"obliviate.{name}": i for i, names in enumerate(LAYERS) for name in names}
    bad = []
    for path in files:
        here = unit(module_name(path))
        for line, name in imports_of(path):
            there = unit(name)
            if there != here and here != "obliviate" and not level.get(here, -1) < level.get(there, -1):
                bad.append(f"{path.relative_to(SRC)}:{line} {here} imports {there}")
    return bad


def test_every_folder_is_in_one_layer():
    units = {unit(module_name(p)) for p in SRC.rglob("*.py")} - {"obliviate"}
    named = [f"obliviate.{n}" for names in LAYERS for n in names]
    assert len(named) == len(set(named)) and units == set(named), sorted(units ^ set(named))


def test_each_layer_imports_only_below_it():
    assert not layer_violations(SRC.rglob("*.py")), "\n".join(layer_violations(SRC.rglob("*.py")))


def test_the_layer_check_sees_function_level_and_importlib_imports(tmp_path):
    fake = SRC / "eval" / "_layer_probe_fixture.py"
    fake.write_text("import importlib\n\ndef f(name):\n    from obliviate.attacks import suite\n"
                    "    return importlib.import_module(f'obliviate.papers.{name}')\n")
    try:
        bad = layer_violations([fake])
    finally:
        fake.unlink()
    assert bad == ["eval/_layer_probe_fixture.py:4 obliviate.eval imports obliviate.attacks",
                   "eval/_layer_probe_fixture.py:5 obliviate.eval imports obliviate.papers"]


def test_the_root_holds_the_api_and_foundations_only():
    root = sorted(p.name for p in SRC.glob("*.py"))
    assert len(root) <= 8, root
    commands = {p.stem for p in (SRC / "cli").glob("*.py")}
    names = [p.name for p in SRC.rglob("*.py") if p.name not in ("__init__.py", "config.py")
             and p.parent.name != "cli"  # a command's module is named after its command, as its pipeline is
             and not (p.parent.name == "pipelines" and p.stem in commands)  # pipelines/finetune.py, cli/finetune.py
             and not (p.parent.parent.name in ("papers", "pipelines")
                      and p.name in ("run.py", "claims.py", "report.py"))]
    repeated = sorted({n for n in names if names.count(n) > 1})
    assert len(repeated) <= REPEATED_NAMES_ALLOWED, repeated


FUNCTION_LEVEL_IMPORTS_ALLOWED = {
    "__init__.py": "the package's API is loaded on first use: `import obliviate` stays cheap",
    "cli/main.py": "torch and transformers load only for a command that needs them: `--help` stays fast",
    "runs/results.py": "the distributed helpers load torch; writing results.json and the moved-run note need none",
    "losses.py": "models.layers at the top would make the import graph a level deeper (MAX_LEVELS)",
}
"""The modules that may import a package module inside a function, and why: everywhere else the package's own
imports go at the top of the file (function-level imports are for optional heavy dependencies only)."""


def function_level_imports(files) -> list[str]:
    bad = []
    for path in files:
        rel = path.relative_to(SRC) if path.is_relative_to(SRC) else path.name
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bad += [f"{rel}:{n.lineno} in {node.name}()" for n in ast.walk(node)
                        if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("obliviate"))
                        or isinstance(n, ast.Import) and any(a.name.startswith("obliviate") for a in n.names)]
    return bad


def test_the_package_imports_its_own_modules_at_the_top(tmp_path):
    files = [p for p in SRC.rglob("*.py") if str(p.relative_to(SRC)) not in FUNCTION_LEVEL_IMPORTS_ALLOWED]
    assert not function_level_imports(files), "\n".join(function_level_imports(files))
    assert all((SRC / f).exists() for f in FUNCTION_LEVEL_IMPORTS_ALLOWED)
    fake = tmp_path / "fixture.py"
    fake.write_text("def f():\n    from obliviate.losses import token_nll\n    import torch\n"
                    "    return torch, token_nll\n")
    assert function_level_imports([fake]) == ["fixture.py:2 in f()"]
