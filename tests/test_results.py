import json
import math
import os
import stat

import pytest

from obliviate.errors import ObliviateError
from obliviate.runs.results import atomic_write_json, prepare_out_dir, read_results, write_results


def test_write_results_contract(tmp_path):
    write_results(tmp_path, seed=3, config={"a": 1}, metrics={"x": 0.5, "bad": math.nan})
    r = read_results(tmp_path)
    assert r["status"] == "complete" and r["seed"] == 3 and r["config"] == {"a": 1}
    assert r["metrics"]["x"] == 0.5 and r["metrics"]["bad"] is None
    assert "torch" in r["versions"]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    p = tmp_path / "r.json"
    atomic_write_json(p, {"v": 1})
    with pytest.raises(TypeError):
        atomic_write_json(p, {"v": object()})
    assert json.loads(p.read_text()) == {"v": 1}
    assert [f.name for f in tmp_path.iterdir()] == ["r.json"]


def test_prepare_out_dir_removes_stale_results(tmp_path):
    (tmp_path / "results.json").write_text("{}")
    prepare_out_dir(tmp_path)
    assert not (tmp_path / "results.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_out_dir(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    with pytest.raises(ObliviateError, match="not writable"):
        prepare_out_dir(d / "sub")


def test_out_dir_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ObliviateError) as err:
        prepare_out_dir(f)
    assert str(err.value) == f"output directory {f} is a file, not a directory"  # not "not writable: File exists"
    with pytest.raises(ObliviateError) as err:
        prepare_out_dir(f / "run")
    assert str(err.value) == f"output directory {f / 'run'}: {f} is a file, not a directory"


def test_atomic_writes_make_ordinary_permission_files(tmp_path):
    import os
    import stat

    from obliviate.runs.results import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
