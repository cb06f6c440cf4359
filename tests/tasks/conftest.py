"""Fixtures of tests/tasks (the helpers they use are in _userdata.py, importable by the test modules)."""

from __future__ import annotations

import pytest

from _userdata import _mcq, _mmlu_csv, save_tiny_model, write_json, write_jsonl, write_user_files
from obliviate.tasks.wmdp import MMLU_PER_SUBJECT


@pytest.fixture(scope="session")
def user_files(tmp_path_factory):
    return write_user_files(tmp_path_factory.mktemp("userdata"))


@pytest.fixture(scope="session")
def user_models(tmp_path_factory, user_files):
    """``{arch: directory}`` of saved random-init models, built on first use."""
    root = tmp_path_factory.mktemp("models")
    cache: dict = {}

    class Models(dict):
        def __missing__(self, arch):
            d = save_tiny_model(root / arch, arch, user_files["texts"])
            self[arch] = d
            return d

    return Models(cache)


@pytest.fixture
def tiny_wmdp(tmp_path):
    write_json(tmp_path / "wmdp" / "bio_questions.json", [_mcq(i, "bio") for i in range(6)])
    write_json(tmp_path / "wmdp" / "cyber_questions.json", [_mcq(i, "cyber") for i in range(6)])
    for part in ("forget", "retain"):
        write_jsonl(tmp_path / "wmdp" / f"bio-{part}-corpus.jsonl",
                    [{"text": f"bio {part} document {i}.", "title": "t"} for i in range(7)])
    for subject, n in (("college_biology", 3), ("virology", 2), ("anatomy", MMLU_PER_SUBJECT + 5),
                       ("astronomy", 4), ("college_computer_science", 2), ("computer_security", 2)):
        _mmlu_csv(tmp_path / "mmlu" / "test" / f"{subject}_test.csv", subject, n)
    return tmp_path


@pytest.fixture
def tiny_muse(tmp_path):
    d = tmp_path / "muse" / "news"
    (d / "raw").mkdir(parents=True)
    (d / "raw" / "forget.txt").write_text("Forget article one.\nStill one.\n\nForget article two.\n\n\n"
                                          "Forget article three.\n", encoding="utf-8")
    (d / "raw" / "retain1.txt").write_text("Retain one.\n\nRetain two.\n", encoding="utf-8")
    (d / "raw" / "holdout.txt").write_text("Holdout one.\n  \nHoldout two.\n\nHoldout three.", encoding="utf-8")
    write_json(d / "knowmem" / "forget_qa.json", [{"question": f"Forget q{i}?", "answer": f"fa{i}"} for i in range(4)])
    write_json(d / "knowmem" / "retain_qa.json", [{"question": f"Retain q{i}?", "answer": f"ra{i}"} for i in range(3)])
    write_json(d / "verbmem" / "forget.json", [{"prompt": f"Once {i}", "gt": f" upon a time {i}."} for i in range(2)])
    return tmp_path
