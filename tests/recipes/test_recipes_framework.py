import json

import pytest

from obliviate.recipes import cached_part


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
