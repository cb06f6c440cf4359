"""Issue #56, item 2: ``--allow-hub`` never makes fatal a file that is optional without it. With the hub unreachable
(``HF_HUB_OFFLINE=1``, an empty cache: tests/_hub.py's :func:`go_offline`), every provider that can do without a file
does so with ``allow_hub=True`` as it does without it: the same sets, the same data, the same "left out" lines (each
the line without the hub, plus the hub's reason); a required file that neither gives is one line naming it."""

from __future__ import annotations

import json
import shutil

import pytest

from _userdata import write_jsonl, write_muse, write_rwku
from obliviate.cli.main import main
from obliviate.errors import DataError
from obliviate.tasks import load_task
from obliviate.tasks.sources._hub import hub_records, optional_hub_records
from obliviate.tasks.sources._io import MissingFile
from tests._hub import go_offline
from tests._run_dirs import tiny_model_dir


@pytest.fixture
def offline(monkeypatch, tmp_path):
    go_offline(monkeypatch, tmp_path / "hf-cache")


def test_an_optional_file_the_hub_cannot_give_is_none_and_a_required_one_names_it(tmp_path, offline):
    """The one helper every provider reads an optional file's hub copy with (MUSE's few-shot examples, folds and
    privleak samples, TOFU's holdout): None where the hub gives nothing, where ``hub_records`` raises the absence."""
    missing = tmp_path / "muse" / "news" / "privleak" / "forget.json"
    assert optional_hub_records("muse-bench/MUSE-News", "privleak", "forget", missing) is None
    with pytest.raises(MissingFile) as err:
        next(hub_records("muse-bench/MUSE-News", "privleak", "forget", str(missing)))
    assert err.value.path == missing and "OfflineModeIsEnabled" in err.value.hub


def partial_muse(root):
    """MUSE News with every optional part gone: raw retain and holdout, privleak samples, few-shot examples, scal."""
    d = write_muse(root)
    for f in ("raw/retain1.txt", "raw/retain2.txt", "raw/holdout.txt", "knowmem/forget_qa_icl.json",
              "knowmem/retain_qa.json"):
        (d / f).unlink()
    for sub in ("scal", "privleak"):
        shutil.rmtree(d / sub)
    return d


def same_task_either_way(spec: str, root) -> tuple[list[str], list[str]]:
    """Load ``spec`` without and with the (unreachable) hub; check that both tasks hold the same data; return their
    "left out" lines."""
    without, with_hub = load_task(spec, root=root), load_task(spec, root=root, allow_hub=True)
    assert [(e.name, e.role, len(e.items)) for e in with_hub.evals] == \
           [(e.name, e.role, len(e.items)) for e in without.evals]
    assert with_hub.forget == without.forget and with_hub.retain == without.retain
    assert with_hub.holdout == without.holdout
    return without.summary().get("missing") or [], with_hub.summary().get("missing") or []


def assert_same_lines(without: list[str], with_hub: list[str]) -> None:
    """Each "left out" line with the hub is the line without it, the hub's reason at most appended."""
    assert without and len(with_hub) == len(without), (without, with_hub)
    for a, b in zip(without, with_hub):
        assert b.startswith(a), (a, b)
    assert any("OfflineModeIsEnabled" in b for b in with_hub)  # the hub was asked, and said why it gave nothing


def test_muse_optional_files_stay_optional_with_an_unreachable_hub(tmp_path, offline):
    d = partial_muse(tmp_path / "data")
    without, with_hub = same_task_either_way("muse:news", tmp_path / "data")
    assert_same_lines(without, with_hub)
    for f in ("raw/retain1.txt", "raw/retain2.txt", "raw/holdout.txt", "knowmem/retain_qa.json",
              "knowmem/forget_qa_icl.json", "scal/forget_2.txt"):
        assert sum(str(d / f) in line for line in with_hub) == 1, (f, with_hub)


def test_muse_required_forget_file_is_one_line_naming_it_and_the_others(tmp_path, offline):
    d = partial_muse(tmp_path / "data")
    (d / "raw" / "forget.txt").unlink()
    with pytest.raises(DataError) as err:
        load_task("muse:news", root=tmp_path / "data", allow_hub=True)
    msg = str(err.value)
    assert "\n" not in msg and str(d / "raw" / "forget.txt") in msg and str(d / "raw" / "holdout.txt") in msg


def tofu_layout(root, *, forget=True):
    """TOFU forget01 without retain99.json (derived from full.json) and without holdout01.json: both optional."""
    d = root / "tofu"
    qa = lambda tag, i: {"question": f"{tag} question {i}?", "answer": f"{tag} answer {i}."}  # noqa: E731
    pert = lambda tag, i: {**qa(tag, i), "perturbed_answer": ["x.", "y."], "paraphrased_question": "p?",  # noqa: E731
                           "paraphrased_answer": "pa."}
    if forget:
        write_jsonl(d / "forget01.json", [qa("author", i) for i in range(2)])
    write_jsonl(d / "full.json", [qa("author", i) for i in range(2)] + [qa("other", i) for i in range(3)])
    write_jsonl(d / "forget01_perturbed.json", [pert("author", i) for i in range(2)])
    write_jsonl(d / "retain_perturbed.json", [pert("other", i) for i in range(3)])
    for s in ("real_authors", "world_facts"):
        rows = [{"question": f"{s} {i}?", "answer": "B", "option1": "A", "option2": "B", "option3": "C",
                 "option4": "D"} for i in range(3)]
        write_jsonl(d / f"{s}.json", rows)
        write_jsonl(d / f"{s}_perturbed.json", [{"question": r["question"], "answer": "B",
                                                 "perturbed_answer": ["A", "C", "D"]} for r in rows])
    return root


def test_tofu_retain_is_derived_and_holdout_left_out_with_an_unreachable_hub(tmp_path, offline):
    root = tofu_layout(tmp_path / "data")
    same_task_either_way("tofu:forget01", root)
    task = load_task("tofu:forget01", root=root, allow_hub=True)
    assert task.meta["retain_derived"] is True and task.holdout is None and task.meta["holdout_split"] is None
    assert [q for q, _ in task.retain.qa] == [f"other question {i}?" for i in range(3)]


def test_tofu_required_forget_split_is_one_line(tmp_path, offline):
    root = tofu_layout(tmp_path / "data", forget=False)
    with pytest.raises(DataError) as err:
        load_task("tofu:forget01", root=root, allow_hub=True)
    msg = str(err.value)
    assert "\n" not in msg and str(root / "tofu" / "forget01.json") in msg and "OfflineModeIsEnabled" in msg


def test_rwku_missing_parts_are_lines_with_an_unreachable_hub_and_the_passages_one_error(tmp_path, offline):
    d = write_rwku(tmp_path / "data")
    for part in ("triviaqa", "neighbor_level2"):
        (d / f"{part}.json").unlink()
    without, with_hub = same_task_either_way("rwku:stephen_king", tmp_path / "data")
    assert_same_lines(without, with_hub)
    assert [x.split(":")[0] for x in with_hub] == ["neighbor_level2", "triviaqa"]
    (d / "passage.json").unlink()
    with pytest.raises(DataError) as err:
        load_task("rwku:stephen_king", root=tmp_path / "data", allow_hub=True)
    assert "\n" not in str(err.value) and str(d / "passage.json") in str(err.value)


def test_eval_allow_hub_offline_computes_what_it_can_and_names_the_rest(tmp_path, offline, monkeypatch, capsys):
    """The researcher's case: ``eval --task muse:news --allow-hub`` on a partial layout, offline."""
    d = partial_muse(tmp_path / "data")
    monkeypatch.setenv("OBLIVIATE_DATA", str(tmp_path / "data"))
    model = tiny_model_dir(tmp_path)
    out = tmp_path / "ev"
    rc = main(["eval", "--task", "muse:news", "--allow-hub", "--model", str(model), "--out", str(out),
               "--no-progress", "--limit", "2", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert rc in (0, None), err
    missing = json.loads((out / "results.json").read_text())["task"]["missing"]
    assert any(str(d / "raw" / "retain1.txt") in x and "nor on the hub" in x for x in missing)
    assert all(f"obliviate: {x}" in err for x in missing)
    (d / "raw" / "forget.txt").unlink()
    assert main(["eval", "--task", "muse:news", "--allow-hub", "--model", str(model), "--out", str(tmp_path / "ev2"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("obliviate: error:")]
    assert len(errors) == 1 and "Traceback" not in err and str(d / "raw" / "forget.txt") in errors[0]
