"""Walk one value through the package: the functions of ``obliviate`` that a command hands it to, and the rooms
(modules) and layers they sit in (issue #43's measure of how hard the house is to follow).

Runs ``obliviate ARGS`` in this process under a profiler. The value is the argument of ``--value-of`` (default
``--model``): the path string, then every object a call that held it returns (the loaded model, its copies, the
unlearned model), followed into nested arguments one level deep (an argparse namespace, a dataclass, a dict, a
tuple). Each ``obliviate`` function that receives it is a *stop*; each module a stop is in is a *room*; a stop
called from a module of a lower layer than its own (the layers of ``tests/test_architecture.py`` in the tree that
runs) is a *climb*. Distinct functions, modules and (caller, callee) pairs are counted, so a loop over training
steps counts once.

    .venv/bin/python scripts/walk.py --make-inputs /tmp/walk
    .venv/bin/python scripts/walk.py --tests tests -- unlearn --out /tmp/walk/run --model /tmp/walk/model \\
        --method npo --forget /tmp/walk/data/forget.jsonl --retain /tmp/walk/data/retain.csv unlearn.train.steps=2
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import sys
from pathlib import Path


def layers_of(tests_dir: Path) -> dict[str, int]:
    """``{unit: layer index}`` from ``LAYERS`` in ``tests_dir/test_architecture.py`` (0: the top)."""
    tree = ast.parse((tests_dir / "test_architecture.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LAYERS" for t in node.targets):
            return {name: i for i, names in enumerate(ast.literal_eval(node.value)) for name in names}
    raise SystemExit(f"no LAYERS in {tests_dir / 'test_architecture.py'}")


def walk(argv: list[str], value: str, layer: dict[str, int]) -> dict:
    import torch

    import obliviate
    from obliviate.cli.main import main

    src = str(Path(obliviate.__file__).resolve().parent)
    tracked_ids: set[int] = set()
    keep: list = []  # the tracked objects stay alive, so that an id is never reused by another object
    path = str(Path(value))

    def holds(v, depth: int = 0) -> bool:
        if isinstance(v, (str, Path)):
            return str(v) == value or str(v) == path
        if id(v) in tracked_ids:
            return True
        if depth >= 1:
            return False
        if isinstance(v, argparse.Namespace):
            return any(holds(x, depth + 1) for x in vars(v).values())
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return any(holds(getattr(v, f.name, None), depth + 1) for f in dataclasses.fields(v))
        if isinstance(v, dict):
            return any(holds(x, depth + 1) for x in v.values())
        if isinstance(v, (list, tuple)):
            return any(holds(x, depth + 1) for x in v[:8])
        return False

    def track(v) -> None:
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, torch.nn.Module) and id(x) not in tracked_ids:
                tracked_ids.add(id(x))
                keep.append(x)

    def unit_of(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    def module_of(filename: str) -> str | None:
        if not filename.startswith(src):
            return None
        rel = Path(filename).relative_to(src).with_suffix("")
        return ".".join(["obliviate", *[p for p in rel.parts if p != "__init__"]])

    stops: dict[str, str] = {}  # function -> module, in order
    climbs: set[tuple[str, str]] = set()
    held: set[int] = set()  # frames that received the value (their return is followed)

    def caller_module(frame) -> tuple[str | None, str | None]:
        f = frame.f_back
        while f is not None:
            m = module_of(f.f_code.co_filename)
            if m is not None:
                return m, f"{m}.{f.f_code.co_qualname}"
            f = f.f_back
        return None, None

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call":
            mod = module_of(code.co_filename)
            is_copy = code.co_filename.endswith("copy.py") and code.co_name == "deepcopy"
            if mod is None and not is_copy:
                return
            names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            args = [frame.f_locals.get(n) for n in names]
            if not any(holds(a) for a in args):
                return
            held.add(id(frame))
            if mod is None:
                return
            fn = f"{mod}.{code.co_qualname}"
            stops.setdefault(fn, mod)
            cmod, cfn = caller_module(frame)
            if cmod is not None and cmod != mod:
                up, me = layer.get(unit_of(cmod)), layer.get(unit_of(mod))
                if up is not None and me is not None and me < up:
                    climbs.add((cfn, fn))
        elif event == "return" and id(frame) in held:
            held.discard(id(frame))
            track(arg)

    sys.setprofile(profile)
    try:
        rc = main(argv)
    finally:
        sys.setprofile(None)
    rooms = sorted(set(stops.values()))
    folders = sorted({unit_of(m) for m in rooms if Path(src, *m.split(".")[1:2]).is_dir()})
    order = [layer.get(unit_of(m)) for m in stops.values()]
    ups = sum(1 for a, b in zip(order, order[1:]) if a is not None and b is not None and b < a)
    return {"argv": argv, "value": value, "rc": rc, "stops": len(stops), "rooms": len(rooms),
            "folders": len(folders), "climbs": len(climbs), "moves_up": ups, "room_list": rooms,
            "folder_list": folders, "stop_list": list(stops),
            "climb_list": sorted(f"{a} -> {b}" for a, b in climbs)}


def make_inputs(root: Path) -> None:
    """A user's files and a random-init Llama with its own tokenizer (tests/tasks/_userdata.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tasks"))
    from _userdata import save_tiny_model, write_user_files

    files = write_user_files(root / "data", n_forget=8, n_retain=8)
    save_tiny_model(root / "model", "llama", files["texts"], d_model=32)
    print(json.dumps({k: str(v) for k, v in files.items() if k != "texts"}, indent=1))


def main_(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--make-inputs", type=Path, help="write a user's files and a tiny model here, then stop")
    p.add_argument("--tests", type=Path, default=Path("tests"), help="the tree's tests/ (its LAYERS)")
    p.add_argument("--value-of", default="--model", help="the command's flag whose value is followed")
    p.add_argument("--json", type=Path, help="write the whole walk here")
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.make_inputs:
        make_inputs(args.make_inputs)
        return 0
    if args.value_of not in cmd:
        raise SystemExit(f"the command after -- has no {args.value_of}")
    res = walk(cmd, cmd[cmd.index(args.value_of) + 1], layers_of(args.tests))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    print(f"{args.value_of} of `obliviate {cmd[0]}`: {res['stops']} stops in {res['rooms']} rooms "
          f"({res['folders']} folders), {res['climbs']} climbs back up, {res['moves_up']} moves up between "
          f"consecutive stops (exit {res['rc']})")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
