"""Issue #56, item 6: a rerun moves every result of the previous run (eval's predictions too) into previous/, and
keeps what it resumes from (checkpoints, run.json, parts, cached models) and what no run wrote."""

import json
import os

from obliviate.cli.main import main
from obliviate.runs.results import RUN_OUTPUTS, prepare_out_dir, previous_outputs

from tests._cli_errors import SMALL_WORLD
from tests._run_dirs import snapshot, tiny_model_dir
from tests.tasks._userdata import write_user_files

STATE = {"train", "run.json", ".obliviate.lock", "previous", "control", "checkpoints", "metrics.jsonl", "parts",
         "models", "methods", "controls", "attacks", "known", "sequential", "tune", "unlearn", "runs", "muse"}
"""What a run directory keeps for a rerun to resume from (RUN_OUTPUTS' docstring), besides its outputs."""
EVAL = ["eval", "--no-progress", *SMALL_WORLD, "eval.max_new_tokens=2", "eval.batch_size=8"]


def _last_line(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_rerun_of_eval_moves_its_predictions_too(tmp_path, capsys):
    """eval twice into one --out: the first run's results.json and predictions.json are in previous/, byte for
    byte, and the last line says so; the second run's are in --out."""
    model, out = tiny_model_dir(tmp_path), tmp_path / "ev"
    assert main([*EVAL, "--model", str(model), "--out", str(out)]) == 0
    first = {k: v for k, v in snapshot(out).items() if k in ("results.json", "predictions.json")}
    assert set(first) == {"results.json", "predictions.json"}
    capsys.readouterr()
    assert main([*EVAL, "--model", str(model), "--out", str(out), "eval.max_new_tokens=3"]) == 0
    assert _last_line(capsys) == \
        f"obliviate: the previous run's results.json and predictions.json moved to {out}/previous/"
    assert snapshot(out / "previous") == first
    assert json.loads((out / "results.json").read_text())["config"]["eval"]["max_new_tokens"] == 3
    assert (out / "predictions.json").exists()


def test_a_rerun_of_finetune_moves_its_results_and_keeps_its_checkpoints(tmp_path, capsys):
    """finetune twice with the same settings: the model with its card, the loss plot and results.json move to
    previous/; the checkpoints (train/) and run.json stay, and the rerun resumes them. Every entry of the run
    directory is either a result that moves or state that stays."""
    paths = write_user_files(tmp_path / "data", n_forget=4, n_retain=4)
    model, out = tiny_model_dir(tmp_path), tmp_path / "ft"
    argv = ["finetune", "--no-progress", "--model", str(model), "--forget", str(paths["forget"]), "--retain",
            str(paths["retain_qa"]), "--out", str(out), "finetune.epochs=1", "eval.max_new_tokens=2",
            "finetune.checkpoint_every=1"]
    assert main(argv) == 0
    results = previous_outputs(out)
    assert set(results) == {"results.json", "model", "loss.png"}
    assert set(os.listdir(out)) - set(results) <= STATE, os.listdir(out)
    moved = {k: v for k, v in snapshot(out).items() if k.split("/")[0] in results}
    state = {k: v for k, v in snapshot(out).items() if k.startswith("train/") or k == "run.json"}
    assert any(k.startswith("train/") for k in state)
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == \
        f"obliviate: the previous run's results.json, model and loss.png moved to {out}/previous/"
    assert "starting afresh" not in err
    assert snapshot(out / "previous") == moved
    assert (out / "run.json").read_bytes() == state["run.json"] and (out / "train").is_dir()  # kept: resumed


def test_only_a_finished_run_is_moved_and_nothing_a_run_did_not_write(tmp_path):
    """prepare_out_dir on a run directory holding one of each kind: every result (RUN_OUTPUTS, a plot and the
    tuning report inside tune/ too) moves to previous/, replacing an older one; the state and a file no run writes
    stay. Without results.json (an unfinished run) nothing moves, and previous/ keeps the last finished run."""
    out = tmp_path / "run"
    outputs = ["results.json", "model/model.safetensors", "model/README.md", "predictions.json", "per_example.json",
               "pretrain.json", "report.md", "report.html", "plots/a.png", "bench.md", "tuned.yaml",
               "world/world.json", "loss.png", "relearn_curve.png", "tune/report.md", "tune/search.png"]
    state = ["train/checkpoints/step-1/x", "run.json", "control/model/config.json", "tune/parts/trial.json",
             "models/oracle/config.json", "methods/npo/result.json", "relearn_control/x.json", "metrics.jsonl",
             "notes.txt"]
    for name in outputs + state + ["previous/results.json"]:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(name)
    assert all(os.path.basename(p) in RUN_OUTPUTS or p.split("/")[0] in RUN_OUTPUTS or p.endswith(".png")
               or p.startswith("tune/") for p in outputs)
    prepare_out_dir(out)
    assert snapshot(out / "previous") == {name: name.encode() for name in outputs}  # the older previous/ replaced
    assert {k for k in snapshot(out) if not k.startswith("previous/")} == set(state) | {".obliviate.lock"}
    (out / "predictions.json").write_text("an interrupted run's")  # no results.json: an unfinished run
    prepare_out_dir(out)
    assert snapshot(out / "previous") == {name: name.encode() for name in outputs}
    assert (out / "predictions.json").read_text() == "an interrupted run's"
