"""Issue #42, item 4: a MUSE layout with parts missing (a partial download: no raw retain or holdout documents, no
scalability folds) gives every part its files allow, and every missing file listed at once; only what a requested
computation needs is required (``eval`` reads no raw retain documents; ``compare`` needs them and says so with every
missing file in one line)."""

from __future__ import annotations

import json
import shutil

from _userdata import save_tiny_model, write_muse
from obliviate.cli.main import main
from obliviate.tasks import load_task

GONE = ("raw/retain1.txt", "raw/retain2.txt", "raw/holdout.txt")


def _partial(root):
    d = write_muse(root)
    for f in GONE:
        (d / f).unlink()
    shutil.rmtree(d / "scal")  # scal/forget_2.txt, forget_3.txt
    return d


def test_every_computable_part_and_every_missing_file_at_once(tmp_path):
    d = _partial(tmp_path)
    task = load_task("muse:news", root=tmp_path)
    assert [e.name for e in task.evals] == ["knowmem_forget", "knowmem_retain", "verbmem_forget"]
    assert len(task.forget.docs) == 3 and not task.retain and task.holdout is None
    assert task.meta["mia"]["source"] == "privleak"  # MUSE's own samples: PrivLeak is still computable
    missing = task.summary()["missing"]
    for f in ("raw/retain1.txt", "raw/holdout.txt", "scal/forget_2.txt"):
        assert sum(str(d / f) in line for line in missing) == 1, (f, missing)
    assert "raw/retain2.txt" in missing[0]
    assert len(missing) == 3
    assert [len(f["docs"]) for f in task.meta["muse"]["sust"]] == [3, 1, 1]  # sustainability is whole


def test_without_the_forget_file_the_error_lists_every_missing_file(tmp_path):
    d = _partial(tmp_path)
    (d / "raw" / "forget.txt").unlink()
    (d / "verbmem" / "forget.json").unlink()
    try:
        load_task("muse:news", root=tmp_path)
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        msg = str(e)
    for f in ("raw/forget.txt", "raw/retain1.txt", "raw/holdout.txt", "verbmem/forget.json"):
        assert str(d / f) in msg, (f, msg)
    assert "\n" not in msg


def test_eval_computes_what_it_can_and_lists_the_rest_and_compare_names_what_it_needs(tmp_path, monkeypatch, capsys):
    d = _partial(tmp_path / "data")
    (d / "knowmem" / "retain_qa.json").unlink()
    monkeypatch.setenv("OBLIVIATE_DATA", str(tmp_path / "data"))
    texts = [p.read_text() for p in d.rglob("*.txt")]
    model = save_tiny_model(tmp_path / "model", "llama", texts * 4, d_model=32)
    out = tmp_path / "ev"
    assert main(["eval", "--task", "muse:news", "--model", str(model), "--out", str(out), "--no-progress"]) in (0, None)
    res = json.loads((out / "results.json").read_text())
    m = res["metrics"]["model"]
    assert m["verbmem_forget_loss"] > 0 and m["verbmem_forget_tokens"] > 0 and "knowmem_forget_em" in m
    assert "knowmem_retain_em" not in m and "retain_score" not in m
    missing = res["task"]["missing"]
    assert len(missing) == 4 and any(str(d / "knowmem" / "retain_qa.json") in x for x in missing)
    err = capsys.readouterr().err
    assert all(f"obliviate: {x}" in err for x in missing)
    assert main(["compare", "--task", "muse:news", "--model", str(model), "--out", str(tmp_path / "cmp"),
                 "--no-progress", "methods=[graddiff]"]) == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("obliviate: error:")]
    assert len(errors) == 1, errors
    line = errors[0]
    assert "no retain data" in line
    assert str(d / "raw" / "retain1.txt") in line and str(d / "raw" / "holdout.txt") in line
    assert not (tmp_path / "cmp").exists() or not any((tmp_path / "cmp").iterdir())
