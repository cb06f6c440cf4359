"""The cache of the controls (:mod:`obliviate.runs.cache`, issue #56, item 13): an entry is found by what made it
(weights, task, settings), built once, written whole or not at all, checked on every read (a corrupt one is said in
one line and rebuilt), safe under two runs building it at once, and never in the user's home during the tests."""

import json
import logging
import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch

from obliviate.errors import ObliviateError
from obliviate.models import save_model, tiny_llama
from obliviate.models.load import load_model
import obliviate.runs.cache as cache_module
from obliviate.runs.cache import (OWNER, STALE_STAGING_SECONDS, ControlCache, cache_root, control_cache, key_digest,
                                  model_digest, place_model, runtime, settings_key, task_fingerprint, tokenizer_digest)
from obliviate.tasks.base import Data, EvalSet, PromptFormat, Task
from obliviate.utils import cache_dir


def _build(calls: list, value: int = 1):
    def build(folder: Path) -> dict:
        calls.append(value)
        (folder / "model").mkdir()
        (folder / "model" / "weights.bin").write_bytes(bytes([value]) * 64)
        return {"value": value, "pair": (1, 2), "nan": float("nan")}

    return build


def test_an_entry_is_built_once_and_read_back_as_stored(tmp_path, caplog):
    cache, calls = ControlCache(tmp_path / "c"), []
    first = cache.get("thing", {"k": 1}, _build(calls), what="the thing")
    assert not first.reused and calls == [1]
    assert dict(first) == {"value": 1, "pair": [1, 2], "nan": None}  # as a reader of the file reads it
    with caplog.at_level(logging.INFO, logger="obliviate.runs.cache"):
        again = cache.get("thing", {"k": 1}, _build(calls, 2), what="the thing")
    assert again.reused and dict(again) == dict(first) and calls == [1]  # not built again
    assert again.path == first.path and (again.path / "model" / "weights.bin").read_bytes() == bytes([1]) * 64
    assert f"the thing: reused from the cache ({again.path})" in caplog.text  # the line names the entry
    other = cache.get("thing", {"k": 2}, _build(calls, 3), what="the thing")  # another key: another entry
    assert not other.reused and other["value"] == 3 and other.path != first.path
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted([first.path.name, other.path.name])


@pytest.mark.parametrize("damage", ["file", "missing", "entry", "key"])
def test_a_corrupt_entry_is_said_in_one_line_and_rebuilt(tmp_path, caplog, damage):
    cache, calls = ControlCache(tmp_path / "c"), []
    path = cache.get("thing", {"k": 1}, _build(calls), what="the thing").path
    if damage == "file":
        (path / "model" / "weights.bin").write_bytes(b"\0" * 64)  # same size, other bytes
    elif damage == "missing":
        (path / "model" / "weights.bin").unlink()
    elif damage == "entry":
        (path / "entry.json").write_text("{half a")
    else:
        saved = json.loads((path / "entry.json").read_text())
        (path / "entry.json").write_text(json.dumps({**saved, "key": {"k": 9}}))
    with caplog.at_level(logging.INFO, logger="obliviate.runs.cache"):
        hit = cache.get("thing", {"k": 1}, _build(calls, 5), what="the thing")
    lines = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    assert len(lines) == 1 and str(path) in lines[0] and "rebuilding it" in lines[0]
    assert not hit.reused and hit["value"] == 5 and calls == [1, 5]
    assert (path / "model" / "weights.bin").read_bytes() == bytes([5]) * 64
    assert cache.get("thing", {"k": 1}, _build(calls, 6), what="the thing").reused  # sound again


def test_a_build_hashes_each_file_once_and_a_read_checks_them(tmp_path, monkeypatch):
    hashed, real = [], cache_module.file_sha256
    monkeypatch.setattr(cache_module, "file_sha256", lambda p: hashed.append(Path(p).name) or real(p))
    cache = ControlCache(tmp_path / "c")
    first = cache.get("thing", {"k": 1}, _build([]), what="the thing")
    assert hashed == ["weights.bin"]  # written and hashed once; not read back and hashed again
    assert dict(first) == {"value": 1, "pair": [1, 2], "nan": None}  # as a later read gives it
    assert not (first.path / OWNER).exists()  # the builder's lock is not one of the entry's files
    hashed.clear()
    again = cache.get("thing", {"k": 1}, _build([], 2), what="the thing")
    assert again.reused and dict(again) == dict(first) and hashed == ["weights.bin"]  # each read checks


def _staging(root: Path, name: str, *, owner: bool = True, age: float = 0.0) -> Path:
    folder = root / name
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "half.bin").write_bytes(b"x")
    if owner:
        (folder / OWNER).write_text("")
    then = os.path.getmtime(folder) - age
    os.utime(folder, (then, then))
    return folder


@pytest.mark.skipif(cache_module.fcntl is None, reason="needs fcntl.flock")
def test_a_build_sweeps_only_the_staging_folders_whose_builder_is_gone(tmp_path):
    import fcntl

    root = tmp_path / "c"
    old = STALE_STAGING_SECONDS + 3600
    building = _staging(root, ".thing-aa.otherhost.4242.x1.tmp", age=old)  # days old, its builder still at it
    held = open(building / OWNER, "rb")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    killed = _staging(root, ".thing-bb.otherhost.4243.x2.tmp")  # fresh, but nobody holds it: its builder is gone
    legacy_old = _staging(root, ".thing-cc.x3.tmp", owner=False, age=old)  # an older obliviate's, by its age
    legacy_new = _staging(root, ".thing-dd.x4.tmp", owner=False)
    try:
        ControlCache(root).get("thing", {"k": 1}, _build([]), what="the thing")
        assert building.is_dir() and (building / "model" / "half.bin").is_file()
        assert not killed.exists() and not legacy_old.exists() and legacy_new.is_dir()
    finally:
        held.close()
    ControlCache(root).get("thing", {"k": 2}, _build([]), what="the thing")
    assert not building.exists()  # let go: its builder is gone now


def _build_held(root: str, started, release, out) -> None:
    def build(folder: Path) -> dict:
        (folder / "model").mkdir()
        (folder / "model" / "w.bin").write_bytes(b"w" * 8)
        then = os.path.getmtime(folder) - STALE_STAGING_SECONDS - 3600
        os.utime(folder, (then, then))  # a build that has run for days
        started.set()
        release.wait(60)
        return {"slow": True}

    hit = ControlCache(root).get("slow", {"k": 1}, build, what="the slow thing")
    out.put(dict(hit))


@pytest.mark.skipif("fork" not in mp.get_all_start_methods() or cache_module.fcntl is None,
                    reason="needs fork and fcntl.flock")
def test_a_long_build_in_another_process_is_never_swept(tmp_path):
    ctx = mp.get_context("fork")
    started, release, out = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_build_held, args=(str(tmp_path / "c"), started, release, out))
    child.start()
    try:
        assert started.wait(60)
        ControlCache(tmp_path / "c").get("thing", {"k": 1}, _build([]), what="the thing")  # sweeps
        assert [p.name.startswith(".slow-") for p in (tmp_path / "c").glob(".*.tmp")] == [True]  # still building
    finally:
        release.set()
    assert out.get(timeout=60) == {"slow": True}
    child.join(timeout=60)
    assert child.exitcode == 0
    assert ControlCache(tmp_path / "c").get("slow", {"k": 1}, _build([]), what="the slow thing").reused
    assert not list((tmp_path / "c").glob(".*"))  # nothing staged is left


def test_a_failed_build_leaves_no_entry_and_no_staging(tmp_path):
    cache = ControlCache(tmp_path / "c")

    def boom(folder: Path) -> dict:
        (folder / "half.bin").write_bytes(b"x" * 10)
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError, match="mid-build"):
        cache.get("thing", {"k": 1}, boom, what="the thing")
    assert list((tmp_path / "c").iterdir()) == []  # nothing a reader could take for an entry


def _build_in_child(root: str, barrier, out) -> None:
    barrier.wait()
    hit = ControlCache(root).get("thing", {"k": 1}, _slow_build, what="the thing")
    out.put((hit["pid"], str(hit.path)))


def _slow_build(folder: Path) -> dict:
    import time

    (folder / "model").mkdir()
    for i in range(5):
        (folder / "model" / f"part{i}.bin").write_bytes(str(os.getpid()).encode() * 100)
        time.sleep(0.02)
    return {"pid": os.getpid()}


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_two_runs_building_the_same_entry_at_once_both_finish_on_one_entry(tmp_path):
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_build_in_child, args=(str(tmp_path / "c"), barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert got[0] == got[1]  # both read the one entry that won the rename, whoever built it
    entry = Path(got[0][1])
    assert [p.name for p in (tmp_path / "c").iterdir()] == [entry.name]  # no staging folder left
    assert {f.read_bytes() for f in (entry / "model").iterdir()} == {str(got[0][0]).encode() * 100}  # not mixed


def test_the_cache_lives_where_the_environment_says_never_in_the_repo(tmp_path, monkeypatch):
    assert os.environ["OBLIVIATE_CACHE"] and cache_root() == cache_dir() / "controls"  # the tests' own (conftest)
    assert Path(os.environ["OBLIVIATE_CACHE"]).resolve() == cache_dir().resolve()
    monkeypatch.delenv("OBLIVIATE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "obliviate"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "obliviate"  # the same from any working directory
    monkeypatch.chdir(tmp_path)  # a relative $OBLIVIATE_CACHE is made here, never in the directory the tests run in
    monkeypatch.setenv("OBLIVIATE_CACHE", "rel/cache")
    assert cache_dir().is_absolute() and cache_dir().resolve() == (tmp_path / "rel" / "cache").resolve()
    assert control_cache(False) is None and control_cache(True).root == cache_dir() / "controls"


def test_the_weights_digest_reads_the_tensors_not_the_path(tmp_path):
    model = tiny_llama(vocab_size=64, n_layer=2, d_model=16, n_head=2, seed=0)
    save_model(model, tmp_path / "a")
    save_model(model, tmp_path / "b")
    a, b = load_model(tmp_path / "a"), load_model(tmp_path / "b")
    assert model_digest(a) == model_digest(b) == model_digest(model)  # another path, another file time: the same
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-3
    assert model_digest(b) != model_digest(a)  # one weight moved
    assert model_digest(a.to(torch.bfloat16)) != model_digest(model)  # another dtype computes other numbers
    assert model_digest(tiny_llama(vocab_size=64, n_layer=2, d_model=16, n_head=2, seed=1)) != model_digest(model)


def test_the_tokenizer_digest_changes_with_what_it_does(tiny_tokenizer):
    import copy

    other = copy.deepcopy(tiny_tokenizer)
    assert tokenizer_digest(other) == tokenizer_digest(tiny_tokenizer)
    other.padding_side = "left" if tiny_tokenizer.padding_side == "right" else "right"
    assert tokenizer_digest(other) != tokenizer_digest(tiny_tokenizer)


def _task(answer: str = "blue", meta: dict | None = None, template: str = "Question: {question}\nAnswer:") -> Task:
    return Task("files", forget=Data(qa=[("What colour is the sky?", answer)]),
                retain=Data(qa=[("What do cows drink?", "water")]), prompt=PromptFormat(template=template),
                evals=[EvalSet("forget", "forget", "qa", [{"question": "What colour is the sky?", "answer": answer}])],
                meta=dict(meta or {}))


def test_the_task_fingerprint_reads_the_data_not_where_it_came_from():
    base = task_fingerprint(_task(meta={"files": {"forget": ["/a/forget.jsonl"]}, "notes": ["read from /a"]}))
    assert task_fingerprint(_task(meta={"files": {"forget": ["/b/f.jsonl"]}, "notes": ["read from /b"]})) == base
    assert task_fingerprint(_task("grey")) != base  # another answer
    assert task_fingerprint(_task(template="Q: {question}\nA:")) != base  # another prompt format
    assert task_fingerprint(_task(meta={"retain_heldout": 2})) != base  # meta that changes what is trained on


def test_a_key_holds_every_setting_but_the_display_ones():
    a = settings_key({"relearn": {"steps": 2, "progress": True, "desc": "bar"}, "seed": 0})
    assert a == settings_key({"relearn": {"steps": 2, "progress": False}, "seed": 0}) == {"relearn": {"steps": 2},
                                                                                        "seed": 0}
    assert key_digest("attacked", {"s": a}) != key_digest("attacked", {"s": {**a, "seed": 1}})
    assert key_digest("attacked", {"s": a}) != key_digest("positive-control", {"s": a})


def test_a_key_holds_the_libraries_and_the_gpu_that_compute_it(monkeypatch):
    import tokenizers
    import transformers

    got = runtime()
    assert (got["torch"], got["transformers"], got["tokenizers"]) == (torch.__version__, transformers.__version__,
                                                                      tokenizers.__version__)
    assert "peft" in got  # its version, or None where it is not installed
    base = key_digest("attacked", {"k": 1})
    versions = cache_module.library_versions()
    monkeypatch.setattr(cache_module, "library_versions", lambda: {**versions, "transformers": "0.0.1"})
    assert key_digest("attacked", {"k": 1}) != base  # another transformers: another entry
    monkeypatch.undo()
    assert key_digest("attacked", {"k": 1}) == base
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    digests = set()
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, name=name: name)
        assert runtime()["cuda"]["device"] == name
        digests.add(key_digest("attacked", {"k": 1}))
    assert len(digests) == 2 and base not in digests  # another GPU: another entry


def test_a_cached_model_is_linked_into_the_run_and_left_alone_when_it_is_there(tmp_path):
    src = tmp_path / "entry" / "model"
    src.mkdir(parents=True)
    (src / "model.safetensors").write_bytes(b"w" * 32)
    (src / "config.json").write_text("{}")
    dst = place_model(src, tmp_path / "run" / "control" / "model")
    assert sorted(p.name for p in dst.iterdir()) == ["config.json", "model.safetensors"]
    assert (dst / "model.safetensors").read_bytes() == b"w" * 32
    inode = (dst / "model.safetensors").stat().st_ino
    assert place_model(src, dst) == dst and (dst / "model.safetensors").stat().st_ino == inode  # kept
    (dst / "extra.txt").write_text("stale")
    place_model(src, dst)
    assert not (dst / "extra.txt").exists()  # replaced whole: no stale file among the entry's


def test_an_unwritable_cache_is_said_once_and_left_out(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("OBLIVIATE_CACHE", str(blocker))  # its controls/ cannot be made
    with caplog.at_level(logging.INFO, logger="obliviate.runs.cache"):
        assert control_cache(True) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and str(blocker) in lines[0] and "not writable" in lines[0]
    with pytest.raises(ObliviateError, match="cannot write the cache of the controls"):  # one line, never a traceback
        ControlCache(blocker / "controls").get("thing", {"k": 1}, _build([]), what="the thing")
