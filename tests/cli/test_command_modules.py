"""Issue #43: ``obliviate attack`` and ``obliviate compare`` parse arguments, call their pipeline
(:mod:`obliviate.pipelines.attack`, :mod:`obliviate.pipelines.compare`) and print: the command modules import none of
the run's parts (loading the controls, attacking, evaluating, training, writing results), and nothing of their
pipeline but its entry points."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import obliviate

CLI = Path(obliviate.__file__).resolve().parent / "cli"

RUN_PARTS = {"run_task_attacks", "evaluate_task", "retain_finetune_control", "build_positive_control",
             "positive_controls", "robustness_summary", "control_readout", "untaught_model", "fine_tune_config",
             "training_data", "write_results", "prepare_out_dir", "same_run", "seed_everything", "plot_relearn_curves",
             "run_compare", "task_digest", "previous_digest", "check_method_runs", "preset_name", "verdict_line",
             "no_verdict_line"}
"""Names that are the run's to call, not the command line's."""

ENTRY_POINTS = {
    "attack.py": {"obliviate.pipelines.attack": {"CONTROLS", "UNTAUGHT", "attack_settings", "check_inputs",
                                                 "negative_control_input", "run_attack"}},
    "compare.py": {"obliviate.pipelines.compare.oracle": {"retain_control_input", "verdict_lines"},
                   "obliviate.pipelines.compare.run": {"check_inputs", "compare_settings", "plan_line",
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


def test_the_entry_points_are_the_apis_too():
    """``obliviate.attack`` and ``obliviate.compare`` run the pipelines the commands run."""
    api = {(n.module, a.name) for n in ast.walk(ast.parse((CLI.parent / "api.py").read_text()))
           if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("obliviate.pipelines.attack", "run_attack") in api
    assert ("obliviate.pipelines.compare.run", "run_compare_dir") in api
    assert not {name for _, name in api} & {"run_task_attacks", "run_compare"}
