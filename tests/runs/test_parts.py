"""The one resumable part store (:mod:`obliviate.runs.parts`): a part is reused while its key matches, a failed
part stores nothing, and a store refuses the parts of another run config."""

import json

import pytest

from obliviate.errors import ConfigError
from obliviate.runs.parts import PartStore, cached_part


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
