"""Issue #43: ``obliviate attack`` and ``obliviate compare`` parse arguments, call their pipeline
(:mod:`obliviate.pipelines.attack`, :mod:`obliviate.pipelines.compare`) and print: the command modules import none of
the run's parts (loading the controls, attacking, evaluating, training, writing results), and nothing of their
pipeline but its entry points. No other command module imports a run's parts either."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import obliviate

CLI = Path(obliviate.__file__).resolve().parent / "cli"

RUN_PARTS = {"run_task_attacks", "evaluate_task", "retain_finetune_control", "build_positive_control",
             "positive_controls", "robustness_summary", "control_readout", "untaught_model", "fine_tune_config",
             "training_data", "write_results", "prepare_out_dir", "same_run", "seed_everything", "plot_relearn_curves",
             "run_compare", "task_digest", "previous_digest", "check_unused_runs", "preset_name", "verdict_line",
             "no_verdict_line"}
"""Names that are the run's to call, not the command line's."""

ENTRY_POINTS = {
    "attack.py": {"obliviate.pipelines.attack": {"CONTROLS", "UNTAUGHT", "attack_settings", "check_attack_inputs",
                                                 "negative_control_input", "run_attack"}},
    "compare.py": {"obliviate.pipelines.compare.oracle": {"retain_control_input", "verdict_lines"},
                   "obliviate.pipelines.compare.run": {"compare_plan", "compare_settings",
                                                       "run_compare_dir"}},
}


def _imports(command: str) -> set[tuple[str, str]]:
    tree = ast.parse((CLI / command).read_text())
    return {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


@pytest.mark.parametrize("command", sorted(ENTRY_POINTS))
def test_the_command_module_holds_no_pipeline_code(command):
    imported = _imports(command)
    assert not {name for _, name in imported} & RUN_PARTS
    assert not {m for m, _ in imported if m and m.startswith(("obliviate.train", "obliviate.unlearning",
                                                                "obliviate.eval", "obliviate.runs.report"))}
    from_pipelines = {(m, n) for m, n in imported if m and m.startswith("obliviate.pipelines")}
    allowed = {(m, n) for m, names in ENTRY_POINTS[command].items() for n in names}
    assert from_pipelines <= allowed, from_pipelines - allowed
    assert from_pipelines  # it does call its pipeline


EVERY_RUN_PART = RUN_PARTS | {"unlearn", "finetune", "pretrain", "tune", "save_trained", "write_model_card",
                              "plot_loss_curve", "atomic_write_json", "atomic_write_text", "run_lmeval_tasks",
                              "probe_directions", "generate_world", "score_against", "unlearn_outcome"}
"""What no module of the command line imports: every command calls a pipeline (``obliviate.pipelines``) or a
reproduction (``obliviate.papers``) for its run."""


@pytest.mark.parametrize("module", sorted(p.name for p in CLI.glob("*.py")))
def test_no_command_module_holds_a_run(module):
    """The DESIGN's rule for every command: parse the arguments, call one pipeline, print (``main.py`` imports the
    command modules themselves, whose names are the commands'; ``inputs.py`` reads what the user gave)."""
    imported = {(m, n) for m, n in _imports(module) if m != "obliviate.cli"}
    assert not {name for _, name in imported} & EVERY_RUN_PART


def test_the_entry_points_are_the_apis_too():
    """``obliviate.attack`` and ``obliviate.compare`` run the pipelines the commands run."""
    api = {(n.module, a.name) for n in ast.walk(ast.parse((CLI.parent / "api.py").read_text()))
           if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("obliviate.pipelines.attack", "run_attack") in api
    assert ("obliviate.pipelines.compare.run", "run_compare_dir") in api
    assert not {name for _, name in api} & {"run_task_attacks", "run_compare"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random model, its tokenizer and a task of QA files."""
    import json

    from obliviate.models.builders import tiny_llama
    from obliviate.models.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("tiny")
    tok = train_tokenizer([f"Question: What is thing {i}?\nAnswer: value{i}." for i in range(20)] * 5, vocab_size=300)
    for name in ("forget", "retain"):
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"question": f"What is {name} {i}?", "answer": f"a{i}"})
                                                    + "\n" for i in range(6)))
    task = obliviate.load_task(forget=str(root / "forget.jsonl"), retain=str(root / "retain.jsonl"))
    return tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=0), tok, task, root


def test_the_api_attack_is_the_pipelines_run(tiny, caplog):
    model, tok, task, _ = tiny
    with caplog.at_level("INFO", logger="obliviate"):
        a = obliviate.attack(model, tok, task, attacks="quantize")
    assert a["attacks_run"] == ["quantize"] and "quantize_int4_forget_score" in a
    assert set(a["cost"]) >= {"stages", "total", "wall_seconds"} and a["cost"]["total"]["forwards"] > 0  # its cost
    assert any(name.startswith("attack:model:quantize") for name in a["cost"]["stages"])
    said = [r.getMessage() for r in caplog.records if r.name == "obliviate.pipelines.attack"]
    assert any(line.startswith("no negative control") for line in said), said  # the pipeline's own line


def test_the_api_compare_checks_its_control_as_the_command_does(tiny, tmp_path):
    from obliviate.errors import ConfigError

    model, tok, task, _ = tiny
    with pytest.raises(ConfigError, match=r"^--control retain-finetune fine-tunes the model before it was taught"):
        obliviate.compare(model, tok, task, tmp_path / "c", control="retain-finetune")
    with pytest.raises(ConfigError, match=r"^--base-untrained is what the oracle is built from"):
        obliviate.compare(model, tok, task, tmp_path / "c", control="none", base_untrained=tmp_path)
    assert not (tmp_path / "c").exists()  # checked before the run directory is made
