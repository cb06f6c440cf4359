"""Issue #42, item 5: every method of ``methods=`` either runs or is listed as skipped with its reason, and every
method's outcome is in the report (a method that did nothing measurable says so: "forgot little: try tune")."""

from __future__ import annotations

import json
import logging

import pytest

import obliviate.pipelines.compare.run as compare_run
from obliviate.errors import ConfigError, ModelError
from obliviate.evidence.harness import TaskAttackConfig
from obliviate.methods import method_names
from obliviate.models.builders import tiny_random
from obliviate.pipelines.compare.run import (BASELINES, CompareConfig, compare_plan, methods_option, plan_lines,
                                             run_compare, skip_reason)
from obliviate.tasks import load_task
from obliviate.tasks.base import Data, EvalSet, PreferredAnswers, Task

FORGET = [("What is Morvexia treated with?", "zalpradine"), ("Where does the glimmerfin live?", "in cold caves")]
RETAIN = [("What does the glimmerfin eat?", "moss"), ("Who was born in Dremmin?", "Ilsa Varnholt")]


def _task(docs: bool = False, **kw) -> Task:
    qa = [{"question": q, "answer": a} for q, a in FORGET]
    return Task(name="t", forget=Data(docs=[q + " " + a for q, a in FORGET]) if docs else Data(qa=FORGET),
                retain=Data(qa=RETAIN), evals=[EvalSet("forget_qa", "forget", "qa", qa),
                                               EvalSet("retain_qa", "retain", "qa",
                                                       [{"question": q, "answer": a} for q, a in RETAIN])], **kw)


def test_skip_reasons():
    assert "preference data" in skip_reason(_task(), "dpo")
    assert skip_reason(_task(idk=PreferredAnswers(["I don't know.", "No idea."])), "dpo") is None
    assert "forget QA pairs" in skip_reason(_task(docs=True), "idkdpo")
    assert "runs.probe_unlearn.params.toxic_texts" in skip_reason(_task(), "probe_unlearn")
    assert skip_reason(_task(), "probe_unlearn", {"toxic_texts": ["x"], "neutral_texts": ["y"]}) is None
    assert skip_reason(_task(), "npo") is None


def test_compare_lists_every_skipped_method_and_every_outcome(tmp_path, tiny_tokenizer, monkeypatch):
    model = tiny_random("llama", vocab_size=len(tiny_tokenizer), n_layer=2, d_model=32)
    cfg = CompareConfig(methods=["graddiff", "dpo", "probe_unlearn", "npo"],
                        runs={"graddiff": {"train": {"steps": 2}}, "npo": {"train": {"steps": 2}},
                              "probe_unlearn": {"train": {"steps": 2}}},
                        attacks=TaskAttackConfig(select=["in_context"]),
                        positive_control=False, parallel=False, save_models=False, muse_folds=False)
    task = _task()
    plan = compare_plan(cfg, task, model="given", model_size=sum(p.numel() for p in model.parameters()))

    def built_again(*a, **k):
        raise AssertionError("a method's run was built again after the plan")

    monkeypatch.setattr(compare_run, "method_run_config", built_again)  # the plan built each run once
    res = run_compare(task, plan, tmp_path, load=lambda p: (model, tiny_tokenizer))
    assert set(res["skipped"]) == {"dpo", "probe_unlearn"}
    assert set(res["metrics"]) == {"base", "graddiff", "npo"}
    report = (tmp_path / "report.md").read_text()
    section = report.split("## What each method did")[1].split("\n## ")[0]
    for name in ("graddiff", "npo"):
        line = next(x for x in section.splitlines() if x.startswith(f"- **{name}**"))
        assert res["metrics"][name]["unlearn_outcome"]["line"] in line.replace("\\", "")
        # a random model knows no forget answer: nothing measurable was removed, and the line says what to run
        assert "forgot little" in line and f"obliviate tune --method {name}" in line
    for name, why in res["skipped"].items():
        assert f"- **{name}**: skipped: " in section and why.split(";")[0].replace("`", "") in section.replace(
            "\\", "").replace("`", "")
    json.dumps(res["skipped"])  # written to results.json as it is


def test_the_plan_builds_each_run_at_the_presets_the_base_model_may_pick():
    cfg = CompareConfig(methods=["npo", "dpo"], runs={"npo": {"train": {"steps": 3}}})
    task = _task()
    assert set(compare_plan(cfg, task, model="given").runs) == {"tiny", "paper"}  # size unknown: the model picks
    assert set(compare_plan(cfg, task, model="given", model_size=7_000_000_000).runs) == {"paper"}
    small = compare_plan(cfg, task, model="given", model_size=1000)
    assert set(small.runs) == {"tiny"} and set(small.runs["tiny"]) == {"npo"}  # dpo skipped: no preference data
    assert small.runs["tiny"]["npo"].config.train.steps == 3
    assert small.runs["tiny"]["npo"].config.params == compare_run.method_config(cfg, "npo", "tiny")[0].params
    # the world's base model: its size read off the pretraining config, before anything is trained; the tiny
    # base model compare trains on another task: off its config
    assert set(compare_plan(CompareConfig(methods=["npo"]), load_task("world")).runs) == {"tiny"}
    assert set(compare_plan(cfg, task).runs) == {"tiny"}


def test_a_base_model_whose_size_the_plan_misread_fails_before_any_model_is_scored(tmp_path, tiny_tokenizer):
    model = tiny_random("llama", vocab_size=len(tiny_tokenizer), n_layer=2, d_model=32)
    cfg = CompareConfig(methods=["npo"], attacks=TaskAttackConfig(select=["in_context"]), positive_control=False,
                        parallel=False, save_models=False, muse_folds=False)
    task = _task()
    plan = compare_plan(cfg, task, model="given", model_size=7_000_000_000)  # read as a 7B model: "paper"
    with pytest.raises(ModelError, match=r"picks the 'tiny' preset by its size, but its size read before loading "
                                         r"picked paper"):
        run_compare(task, plan, tmp_path, load=lambda p: (model, tiny_tokenizer))
    assert not (tmp_path / "methods").exists() and not (tmp_path / "report.md").exists()


def test_methods_flag_default_baselines_on_a_model_and_the_plan_line():
    assert methods_option("NPO, rmu", on_a_model=True) == ["npo", "rmu"]
    assert methods_option(None, on_a_model=True) == ["graddiff", "npo", "simnpo", "rmu"] == BASELINES
    assert methods_option(None, on_a_model=False) is None  # the config decides: every method
    assert methods_option("all", on_a_model=True) == method_names()
    with pytest.raises(ConfigError, match=r"unknown method 'nop' \(did you mean 'npo'\?\)"):
        methods_option("npo,nop", on_a_model=True)
    cfg = CompareConfig(methods=["npo", "rmu"])
    line, *rest = plan_lines(cfg, load_task("world"))
    assert line.startswith("compare: 2 methods (npo, rmu) and ") and " attacks (" in line and rest == []


def test_the_plan_names_every_method_and_attack_that_will_not_run_before_any_model(caplog):
    """Issue #56, item 5: a comparison asked for methods and attacks the task has no data for says, before any model
    is loaded or trained, which will not run and why: one line each, through the checks the CLI and the API call."""


    cfg = CompareConfig(methods=["npo", "dpo", "probe_unlearn"],
                        attacks=TaskAttackConfig(select=["relearn", "relearn_disjoint", "mia", "probe"]))
    task = _task()
    task.forget = Data(qa=FORGET + RETAIN[:1])  # 3 forget facts: the disjoint attack's folds
    with caplog.at_level(logging.INFO, logger="obliviate"):
        compare_plan(cfg, task, model="given")  # no model is loaded: "given" names none
    lines = [r.getMessage() for r in caplog.records]
    plan = next(x for x in lines if x.startswith("compare: "))
    assert plan.startswith("compare: 1 method of 3 asked for (npo) and 1 attack (relearn_disjoint)")
    for kind, name, why in (("method", "dpo", "needs preference data"), ("method", "probe_unlearn", "toxic_texts"),
                            ("attack", "relearn", "needs a related corpus"), ("attack", "mia", "needs a holdout set"),
                            ("attack", "probe", "needs forget MCQs")):
        line = next(x for x in lines if x.startswith(f"{kind} {name!r} not run: "))
        assert why in line and "\n" not in line
