"""compare --model M --control retain-finetune (issue #28, item 9): obliviate builds the oracle, the negative
control, from the model before it was taught the task, fine-tuned on the retain data only; the probe and MIA
figures then stand beside it."""

from obliviate.cli.main import main
from obliviate.runs.results import read_results

from tests._cli_errors import one_error
from tests.evidence.test_negative_control import _user_models

SETTINGS = {"epochs": 2, "lr": 2e-3, "batch_size": 4, "max_len": 64, "warmup_frac": 0.0, "weight_decay": 0.0,
            "data": "both", "seed": 0, "steps": 8, "preset": "tiny"}
QUICK = ["methods=[gradascent]", "runs.gradascent.train.steps=2", "positive_control=false",
         "attacks.select=[mia]"]  # the one attack read here


def test_compare_builds_a_retain_only_oracle_from_the_untaught_model(tmp_path, capsys):
    files, rest = _user_models(tmp_path, SETTINGS)
    out = tmp_path / "cmp"
    assert main(["compare", "--model", str(tmp_path / "ft"), *files, "--out", str(out), "--control",
                 "retain-finetune", *rest[:1], *QUICK]) == 0
    res = read_results(out)
    oracle = out / "models" / "oracle_retain"
    assert res["model_dirs"]["oracle"] == str(oracle / "model")
    built = res["oracle_build"]["finetune"]
    assert built["data"] == "retain" and built["steps"] == 4  # 2 epochs of 8 retain pairs in batches of 4
    m = res["metrics"]
    assert m["gradascent"]["mia_auc_min_k_control"] == m["oracle"]["mia_auc_min_k"]
    assert "fine-tuned on the retain data only" in capsys.readouterr().err


def test_compare_control_errors_are_one_line(tmp_path, capsys):
    files, rest = _user_models(tmp_path, {})
    out = str(tmp_path / "cmp")
    for argv, want in (([*files], "give --model"),
                       (["--model", str(tmp_path / "ft"), "--oracle", str(tmp_path / "random"), *files], "no --oracle"),
                       (["--model", str(tmp_path / "random"), *files], "--base-untrained DIR")):
        assert main(["compare", *argv, "--out", out, "--control", "retain-finetune", *rest[:1], *QUICK]) == 2
        assert want in one_error(capsys)
    for argv in ([], ["--model", str(tmp_path / "ft"), "--oracle", str(tmp_path / "random")]):
        assert main(["compare", *argv, *files, "--out", out, "--control", "none", *rest[:1], *QUICK]) == 2
        assert "--control none applies to --model without --oracle" in one_error(capsys)
    for argv, want in ((["--model", str(tmp_path / "ft"), "--control", "none"], "--control none"),
                       (["--model", str(tmp_path / "ft"), "--oracle", str(tmp_path / "random")], "no --oracle"),
                       ([], "give --model")):
        assert main(["compare", *argv, *files, "--out", out, "--base-untrained", str(tmp_path / "random"),
                     *rest[:1], *QUICK]) == 2
        assert want in one_error(capsys)
    assert not (tmp_path / "cmp").exists()
