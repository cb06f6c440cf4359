"""The one resumable part store (:mod:`obliviate.runs.parts`): a part is reused while its key matches, a failed
part stores nothing, and a store refuses the parts of another run config."""

import json
import os
import time
from pathlib import Path

import pytest
import torch

from obliviate.errors import ConfigError
from obliviate.runs.parts import PartStore, cached_part, cached_parts
from obliviate.train.distributed import two_at_a_time


def test_cached_part_reuses_a_part_while_its_key_matches(tmp_path):
    calls = []

    def fn(v=1):
        calls.append(v)
        return {"v": v, "pair": (1, 2)}

    path = tmp_path / "parts" / "a.json"
    res, secs = cached_part(path, {"k": 1}, fn)
    assert res == {"v": 1, "pair": [1, 2]} and secs >= 0 and calls == [1]  # read back as JSON: tuples are lists
    assert cached_part(path, {"k": 1}, lambda: fn(2))[0] == res and calls == [1]  # same key: not recomputed
    res, _ = cached_part(path, {"k": 2}, lambda: fn(3))  # another key: recomputed and replaced
    assert res["v"] == 3 and calls == [1, 3]
    assert json.loads(path.read_text())["key"] == {"k": 2}


def test_cached_part_stores_nothing_when_the_part_fails(tmp_path):
    def boom():
        raise RuntimeError("mid-part failure")

    path = tmp_path / "b.json"
    with pytest.raises(RuntimeError, match="mid-part"):
        cached_part(path, {}, boom)
    assert not path.exists()


def test_a_store_runs_each_part_once_and_keeps_its_time_apart(tmp_path):
    calls = []
    parts = PartStore(tmp_path / "parts", {"a": 1})
    assert parts.get("pretrain/1x8/remove@0.5+noise0.1", lambda: calls.append(1) or {"loss": 2.5}) == {"loss": 2.5}
    assert (tmp_path / "parts" / "pretrain__1x8__remove_at_0.5_noise0.1.json").is_file()
    again = PartStore(tmp_path / "parts", {"a": 1})
    assert again.get("pretrain/1x8/remove@0.5+noise0.1", lambda: calls.append(2) or {"loss": 9.0}) == {"loss": 2.5}
    assert calls == [1] and again.timings["pretrain/1x8/remove@0.5+noise0.1"] >= 0  # the time, not in the result


def test_parts_made_before_configs_were_recorded_are_taken(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "labels.json").write_text('{"x": 1, "seconds": 2.0}')
    parts = PartStore(tmp_path / "parts", {"a": 1})
    assert parts.get("labels", lambda: {"x": 2}) == {"x": 1}
    assert json.loads((tmp_path / "parts" / "config.json").read_text()) == {"a": 1}
    with pytest.raises(ConfigError, match="differs in: a"):
        PartStore(tmp_path / "parts", {"a": 2})


needs_two = pytest.mark.skipif(not two_at_a_time(), reason="needs two CPUs and the fork start method")


def _waits_for(marker: Path, mine: Path):
    """A part that writes ``mine`` and returns only once ``marker`` exists: two of them, each waiting for the
    other's file, finish only when two processes compute them at the same time."""
    def fn():
        mine.write_text(str(os.getpid()))
        deadline = time.monotonic() + 120
        while not marker.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{marker} never appeared: the parts did not run at the same time")
            time.sleep(0.01)
        return {"pid": os.getpid(), "threads": torch.get_num_threads()}
    return fn


@needs_two
def test_cached_parts_computes_two_at_a_time_on_one_thread_each(tmp_path):
    a, b = tmp_path / "a.flag", tmp_path / "b.flag"
    jobs = [(tmp_path / "a.json", {"k": 1}, _waits_for(b, a)), (tmp_path / "b.json", {"k": 2}, _waits_for(a, b))]
    threads = torch.get_num_threads()
    (ra, _), (rb, _) = cached_parts(jobs, parallel=True)
    assert ra["pid"] != rb["pid"] and os.getpid() in (ra["pid"], rb["pid"])
    assert ra["threads"] == rb["threads"] == 1 and torch.get_num_threads() == threads
    # stored: a second call computes nothing (the parts would wait forever for flags that are now gone)
    a.unlink(), b.unlink()
    assert [r for r, _ in cached_parts(jobs, parallel=True)] == [ra, rb]


@needs_two
def test_cached_parts_gives_what_one_process_gives(tmp_path):
    def part(seed):
        def fn():
            torch.manual_seed(seed)
            x = torch.randn(64, 96)
            w = torch.randn(96, 32, requires_grad=True)
            (x @ w).tanh().sum().backward()
            return {"grad": w.grad.sum().item()}
        return fn

    jobs = [(tmp_path / f"p{i}.json", i, part(i)) for i in range(5)]
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = [part(i)() for i in range(5)]
    finally:
        torch.set_num_threads(torch_threads)
    assert [r for r, _ in cached_parts(jobs, parallel=True)] == alone
    assert [r for r, _ in cached_parts(jobs, parallel=False)] == alone  # stored, read back


@needs_two
def test_a_part_failing_in_the_second_process_is_raised_here(tmp_path):
    def fails():
        raise ValueError("bad part")

    jobs = [(tmp_path / "ok.json", None, lambda: {"ok": 1}), (tmp_path / "bad.json", None, fails),
            (tmp_path / "ok2.json", None, lambda: {"ok": 2})]
    with pytest.raises(ValueError, match="bad part"):
        cached_parts(jobs, parallel=True)
    assert not (tmp_path / "bad.json").exists()


def test_a_store_gets_many_parts_and_their_times(tmp_path):
    store = PartStore(tmp_path / "parts")
    got = store.get_many({"x/1": lambda: {"v": 1}, "y": lambda: {"v": 2}}, parallel=two_at_a_time())
    assert got == {"x/1": {"v": 1}, "y": {"v": 2}} and set(store.timings) == {"x/1", "y"}
    assert store.get("x/1", lambda: {"v": 99}) == {"v": 1}
