"""The world has one door (issue #14): outside ``obliviate/world/``, only ``obliviate/tasks/world.py`` and the
demo (``obliviate/pipelines/compare/run.py``) import it; ``attacks``, ``eval``, ``executor``, ``methods`` and
``tasks`` load without it."""

import ast
import subprocess
import sys
from pathlib import Path

import obliviate

SRC = Path(obliviate.__file__).resolve().parent
ALLOWED = {"tasks/world.py", "pipelines/compare.py"}
WORLD = "obliviate.world"


def _is_world(name: str | None) -> bool:
    return name is not None and (name == WORLD or name.startswith(WORLD + "."))


def _package(path: Path, root: Path) -> list[str]:
    """The package a module's relative imports start from: ``obliviate.tasks`` for tasks/files.py and
    tasks/__init__.py."""
    parts = ["obliviate", *path.relative_to(root).with_suffix("").parts]
    return parts[:-1]  # the module's own name, or "__init__"


def world_imports(path: Path, root: Path = SRC) -> list[str]:
    """``"line: statement"`` for every import of the world in ``path`` (top level or inside functions),
    ``root`` being the directory of the ``obliviate`` package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = _package(path, root)
                base = pkg[:len(pkg) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if fname not in ("import_module", "__import__") or not isinstance(node.args[0].value, str):
                continue
            names = [node.args[0].value]
        else:
            continue
        if any(_is_world(n) for n in names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_sees_every_form_of_import(tmp_path):
    pkg = tmp_path / "obliviate"
    (pkg / "tasks").mkdir(parents=True)
    forms = ["import obliviate.world", "from obliviate.world import WorldConfig",
             "from obliviate.world.toxic import TOXIC_LEXICON", "from obliviate import world",
             "from obliviate import data, world as w", "from .. import world", "from ..world.names import words_of",
             "def f():\n    from obliviate.world import generate_world",
             "import importlib\nimportlib.import_module('obliviate.world')"]
    for i, form in enumerate(forms):
        f = pkg / "tasks" / f"m{i}.py"
        f.write_text(form + "\n")
        assert world_imports(f, pkg), form
    (pkg / "__init__.py").write_text("from . import world\n")
    assert world_imports(pkg / "__init__.py", pkg) == ["1: from . import world"]
    # obliviate.tasks.world is the world's door, not the world
    clean = pkg / "tasks" / "clean.py"
    clean.write_text("import obliviate.worldly\nfrom obliviate.tasks.world import World\nfrom . import world\n"
                     "from .world import evaluate_world\nfrom obliviate import tasks\n")
    assert world_imports(clean, pkg) == []


def test_only_the_world_package_its_task_and_the_demo_import_the_world():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50
    bad = {}
    for path in files:
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("world/") or rel in ALLOWED:
            continue
        hits = world_imports(path)
        if hits:
            bad[rel] = hits
    assert not bad, ("import the world through obliviate.tasks.world instead:\n"
                     + "\n".join(f"  {f}:{h}" for f, hs in bad.items() for h in hs))


def test_the_core_packages_load_without_the_world():
    code = ("import sys\n"
            "import obliviate.attacks, obliviate.eval, obliviate.unlearning.engine, obliviate.methods, "
            "obliviate.tasks\n"
            f"print(sorted(m for m in sys.modules if m == {WORLD!r} or m.startswith({WORLD + '.'!r})))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", f"loaded the world: {r.stdout.strip()}"
