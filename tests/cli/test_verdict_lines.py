"""Issue #41, item 6: the verdict wherever a user looks. On a user's QA files and a random-init Llama with its own
tokenizer that ``obliviate finetune`` taught (so its model card names the untaught model), ``compare --model M``
and ``attack --model U --base M`` build the negative control by default (the untaught model fine-tuned on the
retain data only) and end with the verdict; ``unlearn`` ends with its outcome, which points to them; without a
negative control (or without ``--base``) there is no verdict, and one line says what to add."""

import json

import pytest

from obliviate.cli.main import main
from obliviate.runs.card import untaught_model

from tests.tasks._userdata import taught_user

ATTACKS = ["--attacks", "relearn_disjoint,mia", "attacks.relearn.steps=2", "attacks.relearn.eval_every=1",
           "attacks.lr_grid=[1e-3]", "attacks.lora=false"]
CONTROLS = ["positive_control_args.max_steps=10", "small_norm_args.max_steps=10"]


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's files, the random-init model and the model ``obliviate finetune`` taught them."""
    user = taught_user(tmp_path_factory.mktemp("user"))
    assert _results(user["root"] / "ft")["metrics"]["finetuned"]["forget_score"] >= 0.5  # it knows the facts
    assert untaught_model(user["base"]) == user["random"]
    return {**user, "model": user["base"]}


def _results(out) -> dict:
    return json.loads((out / "results.json").read_text())


@pytest.mark.heavy(12)
def test_compare_on_a_users_model_ends_with_a_verdict_per_method(user, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--model", user["model"], *user["files"], "--out", str(out), "methods=[npo]",
                 "runs.npo.train.steps=2", *ATTACKS, *CONTROLS]) == 0
    captured = capsys.readouterr()
    assert "fine-tuned on the retain data only" in captured.err  # the oracle, built by default
    res = _results(out)
    assert res["model_dirs"]["oracle"] == str(out / "models" / "oracle_retain" / "model")
    assert {"oracle", "positive_control", "npo"} <= set(res["metrics"])
    v = res["robustness"]["verdicts"]["npo"]
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith(f"verdict: npo: {v['verdict']}") and v["reason"] in last
    assert "no verdict" not in captured.out


@pytest.mark.heavy(2)
def test_compare_without_a_negative_control_says_what_to_add(user, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--model", user["model"], *user["files"], "--out", str(out), "--control", "none",
                 "methods=[npo]", "runs.npo.train.steps=1", "positive_control=false", *ATTACKS]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("no verdict: no negative control")
    assert "--oracle DIR" in lines[-1] and "--base-untrained DIR" in lines[-1] and "--control none" in lines[-1]
    assert not any(line.startswith("verdict:") for line in lines)
    assert "oracle" not in _results(out)["model_dirs"]


@pytest.mark.heavy(6)
def test_attack_with_base_ends_with_the_verdict(user, tmp_path, capsys):
    unlearned = tmp_path / "u"
    assert main(["unlearn", "--model", user["model"], "--method", "npo", *user["files"], "--out", str(unlearned),
                 "unlearn.train.steps=2", "unlearn.batch_size=4"]) == 0
    outcome = capsys.readouterr().out.strip().splitlines()[-1]
    assert outcome.startswith("outcome: ") and "verdict" not in _results(unlearned)["unlearn_outcome"]
    out = tmp_path / "att"
    argv = ["attack", "--model", str(unlearned / "model"), "--base", user["model"], *user["files"], *ATTACKS,
            *CONTROLS]
    assert main([*argv, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    res = _results(out)
    assert res["negative_control_kind"] == "retain-finetune"  # the default: the card chain names the untaught model
    assert res["negative_control_dir"] == str(out / "control" / "model")
    v = res["verdict"]
    assert v["verdict"] in ("removed", "suppressed", "inconclusive", "not unlearned")
    assert v["line"].startswith(f"verdict: {v['verdict']}") and v["line"].endswith(f": {v['reason']}")
    assert (f"({v['attack']}" in v["line"]) == bool(v["attack"])
    assert (f"calibrated on {v['control']})" in v["line"]) == bool(v["control"])
    assert captured.out.strip().splitlines()[-1] == v["line"]  # results on stdout, the verdict last (issue #56)
    assert v["line"] not in captured.err  # stderr holds the run's log lines only
    json.loads(captured.out[:captured.out.index("\n}\n") + 2])  # stdout starts with the metrics' JSON
    assert {"base", "positive_control", "positive_control_smallnorm"} <= set(res["reference_metrics"])
    assert "forget_score" in res["metrics"] and "no_verdict" not in res

    # without --base: attacked beside the negative control, no verdict, one line saying what to add
    assert main([*argv[:3], *argv[5:], "--out", str(tmp_path / "nobase"), "--control", "untaught"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("no verdict: ") and "--base DIR" in last
    res = _results(tmp_path / "nobase")
    assert res["verdict"] is None and res["no_verdict"] == last and res["negative_control_kind"] == "untaught"


@pytest.mark.heavy(3)
def test_attack_takes_an_oracle_as_its_negative_control(user, tmp_path, capsys):
    from tests._cli_errors import one_error

    random = str(user["root"] / "random")  # never saw the forget facts
    argv = ["attack", "--model", user["model"], "--base", user["model"], "--oracle", random, *user["files"],
            *ATTACKS, "positive_control=false"]
    assert main([*argv, "--out", str(tmp_path / "att")]) == 0
    res = _results(tmp_path / "att")
    assert (res["negative_control_kind"], res["negative_control_dir"]) == ("oracle", random)
    assert res["untaught_model_dir"] is None and capsys.readouterr().out.strip().splitlines()[-1] == \
        res["verdict"]["line"]
    assert res["verdict"]["verdict"] == "not unlearned"  # the model before unlearning, judged against itself
    assert main([*argv, "--out", str(tmp_path / "bad"), "--control", "none"]) == 2
    assert "--oracle is the negative control" in one_error(capsys) and not (tmp_path / "bad").exists()
