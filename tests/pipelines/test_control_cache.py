"""Issue #56, items 13 and 8, end to end on a user's files and a random-init Llama that ``obliviate finetune`` taught:
a second verdict-bearing ``attack`` (or ``compare``) on the same base, into another ``--out``, reuses the controls
from the cache and attacks only the new model, with the same numbers as a run that builds them (``--no-cache``); a
corrupt entry is rebuilt; ``unlearn``, ``attack``, ``compare`` (and ``finetune``) print and record their cost."""

import json
import logging

import pytest

from obliviate.cli.main import main
from obliviate.runs.card import read_model_card
from obliviate.utils import cache_dir

from tests.tasks._userdata import taught_user

ATTACKS = ["--attacks", "relearn_disjoint,mia", "attacks.relearn.steps=2", "attacks.relearn.eval_every=1",
           "attacks.lr_grid=[1e-3]", "attacks.lora=false"]
CONTROLS = ["positive_control_args.max_steps=10", "small_norm_args.max_steps=10"]
SAME = ("metrics", "reference_metrics", "verdict")
"""What the same seed must give alike with the cache and without (the metrics hold the negative control's; the
controls' build info holds wall seconds)."""


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's files, the random-init model and the model ``obliviate finetune`` taught from it."""
    return taught_user(tmp_path_factory.mktemp("user"), "finetune.epochs=8")  # what it learns does not matter here


def _results(out) -> dict:
    return json.loads((out / "results.json").read_text())


def _entries() -> set:
    root = cache_dir() / "controls"
    return {p.name for p in root.iterdir() if not p.name.startswith(".")} if root.is_dir() else set()


@pytest.mark.heavy(8)
def test_a_second_attack_on_the_same_base_reuses_the_controls_with_the_same_numbers(user, tmp_path, caplog):
    attack = ["attack", "--base", user["base"], *user["files"], *ATTACKS, *CONTROLS, "--seed", "3"]
    before = _entries()
    assert main([*attack, "--model", user["base"], "--out", str(tmp_path / "first")]) == 0
    made = _entries() - before
    assert {n.split("-")[0] for n in made} >= {"retain", "positive", "attacked"}  # every control, and its attacks
    first = _results(tmp_path / "first")
    assert first["cost"]["controls"]["cache"] == "miss"

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="obliviate"):  # another model, another --out, the same base
        assert main([*attack, "--model", user["random"], "--out", str(tmp_path / "second")]) == 0
    second = _results(tmp_path / "second")
    assert _entries() - before == made  # nothing new built
    reused = [r.getMessage() for r in caplog.records if "reused from the cache" in r.getMessage()]
    assert len(reused) == 5 and all(str(cache_dir()) in line for line in reused)  # each says which entry
    assert second["cost"]["controls"]["cache"] == "hit" and second["cost"]["controls"]["tokens"] == 0
    assert second["negative_control_build"]["reused"] is True
    assert second["negative_control_build"]["untaught"] == first["negative_control_build"]["untaught"]  # this run's
    for name, info in second["positive_controls"].items():  # found made: cached, not the first run's seconds
        assert info.get("cached") is True and "seconds" not in info, name
        assert "seconds" in first["positive_controls"][name] and "cached" not in first["positive_controls"][name]
    assert (tmp_path / "second" / "control" / "model" / "config.json").is_file()  # the control is in the run too
    assert second["reference_metrics"] == first["reference_metrics"]  # the controls' numbers, whatever is attacked
    assert second["metrics"]["negative_control"] == first["metrics"]["negative_control"]

    assert main([*attack, "--model", user["random"], "--out", str(tmp_path / "built"), "--no-cache"]) == 0
    built = _results(tmp_path / "built")
    assert _entries() - before == made  # --no-cache neither reads nor writes the cache
    assert built["cost"]["controls"]["cache"] == "miss" and built["config"]["cache"] is False
    for key in SAME:
        assert built[key] == second[key], key  # same seed, same metrics, with the cache or without


@pytest.mark.heavy(2)
def test_a_corrupt_control_in_the_cache_is_said_and_rebuilt(user, tmp_path, caplog):
    attack = ["attack", "--model", user["random"], "--base", user["base"], *user["files"], *ATTACKS, "--seed", "4",
              "positive_control=false"]
    assert main([*attack, "--out", str(tmp_path / "a")]) == 0
    first = _results(tmp_path / "a")
    entry = first["negative_control_build"]["cache"]
    weights = next((cache_dir() / "controls" / entry.rsplit("/", 1)[1] / "model").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)  # a flipped tail, same size
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="obliviate"):
        assert main([*attack, "--out", str(tmp_path / "b")]) == 0
    corrupt = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    assert len(corrupt) == 1 and entry in corrupt[0] and "does not match its SHA-256" in corrupt[0]
    again = _results(tmp_path / "b")
    assert again["negative_control_build"]["reused"] is False
    for key in SAME:
        assert again[key] == first[key], key


@pytest.mark.heavy(5)
def test_a_second_comparison_on_the_same_base_runs_only_its_methods(user, tmp_path, capsys, caplog, monkeypatch):
    compare = ["compare", "--model", user["base"], *user["files"], *ATTACKS, *CONTROLS, "methods=[npo]",
               "runs.npo.train.steps=2", "--seed", "5"]
    assert main([*compare, "--out", str(tmp_path / "first")]) == 0
    assert main([*compare, "--out", str(tmp_path / "second")]) == 0
    second = _results(tmp_path / "second")
    stages = second["cost"]["stages"]
    assert stages["build:oracle"]["cached"] and stages["attack:oracle:relearn_disjoint"]["cached"]
    assert stages["build:positive_control"]["cached"] and not stages["unlearn:npo"].get("cached")
    assert stages["evaluate:oracle"]["cached"] and second["cost"]["controls"]["cache"] == "hit"
    assert (tmp_path / "second" / "models" / "positive_control" / "config.json").is_file()
    built_info, found_info = _results(tmp_path / "first")["timings"], second["timings"]
    assert "seconds" in built_info["positive_control"] and found_info["positive_control"].get("cached") is True
    assert "seconds" not in found_info["positive_control"]  # not the first run's seconds
    assert main([*compare, "--out", str(tmp_path / "built"), "--no-cache"]) == 0
    built = _results(tmp_path / "built")
    assert built["metrics"] == second["metrics"] and built["robustness"] == second["robustness"]
    share = second["cost"]["share_of_oracle_pretraining"]["npo"]
    oracle = second["cost"]["oracle_pretraining"]
    npo = stages["unlearn:npo"]
    assert share == pytest.approx(npo["tokens"] / sum(oracle["passes"][k] for k in ("forward_tokens",
                                                                                    "backward_tokens")))
    assert "fine-tuned on the retain data only" in oracle["what"]
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("cost: ") and "(controls" in line for line in out)
    assert any(line.startswith("cost: each model's unlearning or making against the oracle's pretraining")
               and "npo " in line and "oracle 100% " in line for line in out)  # the oracle's is its own: 1

    # A rerun into an --out whose oracle an obliviate before costs kept there (its part has no cost), with a cache
    # that cannot be written: said once, and the run goes on as with --no-cache, its cost line saying why no share.
    part = tmp_path / "built" / "models" / "oracle_retain" / "part.json"
    saved = json.loads(part.read_text())
    del saved["result"]["cost"]
    part.write_text(json.dumps(saved))
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    monkeypatch.setenv("OBLIVIATE_CACHE", str(blocker))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="obliviate"):
        assert main([*compare, "--out", str(tmp_path / "built")]) == 0
    assert len([r for r in caplog.records if "is not writable" in r.getMessage()]) == 1
    again = _results(tmp_path / "built")
    assert again["metrics"] == built["metrics"]
    assert again["cost"]["oracle_pretraining"]["passes"] is None and not again["cost"]["share_of_oracle_pretraining"]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cost: ")]
    assert len(lines) == 2 and lines[1].startswith("cost: no share of the oracle's pretraining: unknown: "), lines


def test_unlearn_prints_and_records_its_cost(user, tmp_path, capsys):
    out = tmp_path / "u"
    assert main(["unlearn", "--model", user["base"], "--method", "npo", *user["files"], "--out", str(out),
                 "unlearn.train.steps=3", "unlearn.batch_size=4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("outcome: ") and lines[-2].startswith("cost: ")  # the outcome stays last
    cost = _results(out)["cost"]
    assert set(cost["stages"]) == {"evaluate:before", "unlearn", "evaluate:after"}
    unlearn = cost["stages"]["unlearn"]
    assert unlearn == {**unlearn, **{k: v for k, v in _results(out)["passes"].items()}}  # the method's own count
    assert unlearn["backwards"] == 3 * 2 and unlearn["tokens"] > 0  # 3 steps, a forget and a retain pass each
    assert cost["controls"] is None and cost["wall_seconds"] >= cost["total"]["seconds"] > 0
    card = read_model_card(out / "model")["obliviate"]["cost"]
    assert card["tokens"] == cost["total"]["tokens"] and "## Cost" in (out / "model" / "README.md").read_text()
    taught = _results(user["root"] / "ft")["cost"]  # finetune, which trains too, records its own
    assert set(taught["stages"]) == {"finetune", "evaluate:after"} and taught["stages"]["finetune"]["backwards"] > 0
    assert read_model_card(user["base"])["obliviate"]["cost"]["tokens"] == taught["total"]["tokens"]
