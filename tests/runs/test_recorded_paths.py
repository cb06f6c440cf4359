"""Issue #56, item 1: the paths a run records are absolute, so a later command run from another directory finds
them; a model card written before (a path relative to the directory its command ran in) is read against the card's
own directory; and a model that the cards name but that cannot be found fails in one line naming the card, before
--out is touched or any model is loaded. Also the finetune card's wording (issue #56, item 9)."""

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

import obliviate
import obliviate.cli.attack as attack_cli
import obliviate.cli.compare as compare_cli
from obliviate.cli.main import main
from obliviate.errors import ConfigError
from obliviate.models.load import load_model_and_tokenizer
from obliviate.pipelines.compare.oracle import retain_control_input
from obliviate.runs.card import read_model_card, untaught_model, write_model_card

from tests._cli_errors import one_error
from tests.tasks._userdata import save_tiny_model, write_user_files

QUICK_ATTACK = ["--no-progress", "attacks.relearn=false", "attacks.relearn_disjoint=false",
                "attacks.format_shift=false", "positive_control=false"]
QUICK_COMPARE = ["--no-progress", "methods=[gradascent]", "runs.gradascent.train.steps=2", "positive_control=false",
                 "attacks.relearn=false", "attacks.relearn_disjoint=false", "attacks.format_shift=false"]


def relative_paths(obj, where: Path) -> list[str]:
    """Every string in ``obj`` (parsed JSON or YAML) that is a relative path naming something in ``where``."""
    if isinstance(obj, dict):
        return [p for v in obj.values() for p in relative_paths(v, where)]
    if isinstance(obj, list):
        return [p for v in obj for p in relative_paths(v, where)]
    if isinstance(obj, str) and obj and not os.path.isabs(obj) and obj not in (".", "..") and "\n" not in obj:
        return [obj] if os.path.lexists(where / obj) else []
    return []


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A user's directory ``a`` (their data in ``a/data``, a random-init model ``a/user-model``) and another one
    ``b``; the working directory is ``a``."""
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir(parents=True)
    paths = write_user_files(a / "data", n_forget=8, n_retain=8)
    save_tiny_model(a / "user-model", "llama", paths["texts"], d_model=32)
    monkeypatch.chdir(a)
    files = ["--forget", "data/forget.jsonl", "--retain", "data/retain.csv", "--holdout", "data/retain.csv"]
    return {"a": a, "b": b, "files": files, "abs_files": [f if f.startswith("--") else str(a / f) for f in files]}


def _finetune(user, out="ft") -> Path:
    assert main(["finetune", "--no-progress", "--model", "user-model", *user["files"], "--out", out,
                 "finetune.epochs=1", "eval.max_new_tokens=2"]) == 0
    return user["a"] / out / "model"


def test_a_model_taught_in_one_directory_is_found_by_an_attack_from_another(user, capsys, monkeypatch):
    """The issue's case: `finetune --model user-model` with relative paths, then from another directory `attack
    --model /abs/... --base /abs/...` (and `attack` of an unlearned model, two cards away): the untaught model is
    found; nothing either run records is a path relative to where it ran."""
    a, b = user["a"], user["b"]
    ft = _finetune(user)
    card = read_model_card(ft)
    assert card["base_model"] == str(a / "user-model")
    ft_res = json.loads((a / "ft" / "results.json").read_text())
    assert ft_res["base_model_dir"] == str(a / "user-model") and ft_res["model_dir"] == str(ft)
    assert not relative_paths(ft_res, a) and not relative_paths(card, a)
    assert main(["unlearn", "--no-progress", "--method", "gradascent", "--model", "ft/model", *user["files"],
                 "--out", "npo", "unlearn.train.steps=1", "eval.max_new_tokens=2"]) == 0
    assert read_model_card(a / "npo" / "model")["base_model"] == str(ft)
    assert not relative_paths(json.loads((a / "npo" / "results.json").read_text()), a)

    monkeypatch.chdir(b)
    assert main(["attack", "--model", str(ft), "--base", str(ft), *user["abs_files"], "--out", "att",
                 *QUICK_ATTACK]) == 0
    res = json.loads((b / "att" / "results.json").read_text())
    assert res["untaught_model_dir"] == str(a / "user-model") and res["negative_control_kind"] == "retain-finetune"
    assert not relative_paths(res, b) and not relative_paths(res, a)
    assert main(["attack", "--model", str(a / "npo" / "model"), *user["abs_files"], "--out", "att2", "--control",
                 "untaught", *QUICK_ATTACK]) == 0
    res = json.loads((b / "att2" / "results.json").read_text())
    assert res["negative_control_dir"] == str(a / "user-model") and res["model_dir"] == str(a / "npo" / "model")


def test_a_card_written_with_a_relative_path_is_read_against_its_own_directory(tmp_path, monkeypatch):
    """A card written before paths were recorded absolute: its relative ``base_model`` is taken beside the card
    where it is there, else in the working directory (where its command ran); a hub id is never taken for a
    local path that is not there."""
    paths = write_user_files(tmp_path / "data", n_forget=4, n_retain=4)
    save_tiny_model(tmp_path / "user-model", "llama", paths["texts"], d_model=32)
    card = write_model_card(tmp_path / "runs" / "ft", base_model=str(tmp_path / "user-model"), task="files",
                            method="finetune", settings={}, metrics={})
    text = card.read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    card.write_text(text.replace(f"base_model: {tmp_path / 'user-model'}", "base_model: ../../user-model"))
    assert untaught_model(tmp_path / "runs" / "ft") == str(tmp_path / "user-model")  # beside the card
    card.write_text(text.replace(f"base_model: {tmp_path / 'user-model'}", "base_model: user-model"))
    monkeypatch.chdir(tmp_path)
    assert untaught_model("runs/ft") == str(tmp_path / "user-model")  # in the directory its command ran in
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError, match="names base_model 'user-model', which is no local directory"):
        untaught_model(tmp_path / "runs" / "ft")  # nor beside the card: a hub id, and not in the hub cache


@pytest.fixture
def stale(user, monkeypatch):
    """A fine-tuned model whose card names ``user-model`` relative to ``a`` (as obliviate wrote cards before), the
    working directory ``b``."""
    ft = _finetune(user)
    card = ft / "README.md"
    card.write_text(card.read_text().replace(f"base_model: {user['a'] / 'user-model'}", "base_model: user-model"))
    monkeypatch.chdir(user["b"])
    return ft


def _no_load(*a, **k):
    raise AssertionError("a model was loaded before the base was checked")


def test_a_base_that_cannot_be_found_fails_before_out_is_touched(user, stale, capsys, monkeypatch):
    """attack and compare, on the command line and in Python: one line naming the card and the missing model,
    saying --base-untrained; no model loaded, no --out made. --base-untrained DIR runs, and --control none reads
    no card."""
    b = user["b"]
    monkeypatch.setattr(attack_cli, "load_model_args", _no_load)
    monkeypatch.setattr(compare_cli, "load_model_args", _no_load)
    for argv in (["attack", "--model", str(stale), "--base", str(stale), *QUICK_ATTACK],
                 ["attack", "--model", str(stale), "--control", "untaught", *QUICK_ATTACK],
                 ["compare", "--model", str(stale), *QUICK_COMPARE]):
        assert main([*argv, *user["abs_files"], "--out", "out"]) == 2
        line = one_error(capsys)
        assert f"the model card {stale / 'README.md'} names base_model 'user-model'" in line, line
        assert "give --base-untrained DIR" in line and "--allow-hub" in line
        assert not (b / "out").exists()
    model, tok = load_model_and_tokenizer(str(stale))
    task = obliviate.load_task(forget=user["abs_files"][1], retain=user["abs_files"][3])
    with pytest.raises(ConfigError, match=r"README\.md names base_model 'user-model'.*give base_untrained=DIR"):
        obliviate.compare(model, tok, task, b / "api", methods="gradascent")
    assert not (b / "api").exists()
    monkeypatch.undo()
    monkeypatch.chdir(b)
    assert main(["attack", "--model", str(stale), "--control", "none", *user["abs_files"], "--out", "none",
                 *QUICK_ATTACK]) == 0
    assert main(["attack", "--model", str(stale), "--base-untrained", str(user["a"] / "user-model"),
                 *user["abs_files"], "--out", "given", *QUICK_ATTACK]) == 0
    assert json.loads((b / "given" / "results.json").read_text())["untaught_model_dir"] == \
        str(user["a"] / "user-model")


def test_a_broken_link_in_the_chain_of_cards_names_its_card(user, capsys):
    """An unlearned model whose card names a fine-tuned model that has gone: the line names the unlearned model's
    card; a card naming a model directory that is no model says why."""
    a = user["a"]
    ft = _finetune(user)
    assert main(["unlearn", "--no-progress", "--method", "gradascent", "--model", str(ft), *user["files"], "--out",
                 "npo", "unlearn.train.steps=1", "eval.max_new_tokens=2"]) == 0
    shutil.move(a / "ft", a / "moved")
    assert main(["attack", "--model", "npo/model", *user["files"], "--out", "out", *QUICK_ATTACK]) == 2
    line = one_error(capsys)
    assert f"the model card {a / 'npo' / 'model' / 'README.md'} names base_model '{ft}', which does not exist" in line
    shutil.move(a / "user-model", a / "gone")
    (a / "user-model").mkdir()  # a directory that is no model
    assert main(["attack", "--model", "moved/model", *user["files"], "--out", "out", *QUICK_ATTACK]) == 2
    line = one_error(capsys)
    assert f"the model card {a / 'moved' / 'model' / 'README.md'} names base_model" in line and \
        "has no config.json" in line
    assert not (a / "out").exists()


def test_a_hub_id_named_by_a_card_is_checked_in_the_cache_or_with_allow_hub(tmp_path, monkeypatch):
    """A card naming a hub id: taken where the local hub cache holds it; else one line saying --allow-hub, with
    which the hub is asked (here a stand-in that says whether it has the model)."""
    import huggingface_hub

    write_model_card(tmp_path / "ft", base_model="some-org/some-model", task="files", method="finetune",
                     settings={}, metrics={})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: None)
    with pytest.raises(ConfigError, match="not in the local hub cache: give base_untrained=DIR .* allow_hub=True"):
        untaught_model(tmp_path / "ft")
    asked = []
    monkeypatch.setattr(huggingface_hub, "file_exists", lambda repo, name: asked.append(repo) or False)
    with pytest.raises(ConfigError, match="not a model on the hub"):
        untaught_model(tmp_path / "ft", allow_hub=True)
    monkeypatch.setattr(huggingface_hub, "file_exists", lambda repo, name: True)
    assert untaught_model(tmp_path / "ft", allow_hub=True) == "some-org/some-model" and asked == ["some-org/some-model"]
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: "/cache/config.json")
    assert untaught_model(tmp_path / "ft") == "some-org/some-model"


def test_a_hub_model_in_the_middle_of_the_chain_ends_it_without_an_error(tmp_path, monkeypatch):
    """An unlearned model whose card names a hub model (unlearned straight from the hub): no finetune card on the
    way, so no untaught model is known (no negative control, "no verdict"), never an error, cached or not."""
    import huggingface_hub

    write_model_card(tmp_path / "u", base_model="some-org/some-model", task="files", method="npo", settings={},
                     metrics={})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: None)
    assert untaught_model(tmp_path / "u") is None
    write_model_card(tmp_path / "v", base_model=str(tmp_path / "gone"), task="files", method="npo", settings={},
                     metrics={})  # a local path that is missing: said, naming the card
    with pytest.raises(ConfigError, match=f"the model card {tmp_path / 'v' / 'README.md'} names base_model"):
        untaught_model(tmp_path / "v")


def test_compare_records_a_relative_base_untrained_absolute(user, monkeypatch):
    """compare --base-untrained user-model (relative): what it builds the oracle from is recorded absolute."""
    assert retain_control_input("m", base_untrained="user-model") == str(user["a"] / "user-model")
    assert retain_control_input("m", base_untrained="user-model", control="retain-finetune") == \
        str(user["a"] / "user-model")


def test_the_finetune_card_says_fine_tuned(tmp_path):
    """A fine-tuned model's card says it was taught the task, not unlearned; an unlearned one's says unlearned."""
    ft = write_model_card(tmp_path / "ft", base_model="org/base", task="files", method="finetune", settings={},
                          metrics={}).read_text()
    npo = write_model_card(tmp_path / "npo", base_model=str(tmp_path / "ft"), task="files", method="npo",
                           settings={}, metrics={}).read_text()
    assert "Fine-tuned with obliviate on task `files`: taught its training data, starting from `org/base`." in ft
    assert "Unlearned" not in ft and "# fine-tuned on files" in ft
    assert "Unlearned with obliviate, method `npo` on task `files`" in npo
    assert yaml.safe_load(ft.split("---\n")[1])["obliviate"]["method"] == "finetune"  # what the lookup reads
