"""Compare methods on any task: ``obliviate compare --task T [--model M] [--oracle DIR]``.

The base model is ``--model``, or (without one) a tiny Llama with a tokenizer trained on the task's
text, fine-tuned on the task's forget and retain data (:mod:`obliviate.train.finetune`); then the
oracle is the same tiny model fine-tuned on the retain data only. With ``--model``, ``--oracle DIR``
names an oracle. Every method unlearns a fresh copy of the base model with its own defaults
(:func:`obliviate.methods.method_defaults`, by model size), is evaluated on the task
(:func:`obliviate.eval.suite.evaluate_task`) and attacked (:func:`obliviate.attacks.suite.run_task_attacks`).
Each method's finished result is kept in ``out/methods/<name>/result.json``, so an interrupted
comparison resumes; ``report.md`` / ``report.html`` show the table, a forget-vs-keep plot and the
recovery curves.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.attacks.controls import robustness_markdown, robustness_summary, suppression_control
from obliviate.attacks.suite import TaskAttackConfig, run_task_attacks
from obliviate.errors import DataError
from obliviate.eval.suite import evaluate_task, keep_score, score_against
from obliviate.methods import METHODS, method_names, preset_name
from obliviate.models.builders import tiny_llama
from obliviate.models.load import load_model, save_model
from obliviate.models.tokenizer import load_tokenizer, train_tokenizer
from obliviate.runs.report import markdown_table, plot_recovery_curves, plot_tradeoff, write_html
from obliviate.runs.results import atomic_write_json, atomic_write_text
from obliviate.tasks import Task
from obliviate.train.finetune import FinetuneConfig, finetune, training_data
from obliviate.methods.engine import UnlearnConfig, method_run_config, unlearn
from obliviate.utils import seed_everything


@dataclass
class TinyBase:
    """The tiny model trained from scratch when no ``--model`` is given."""

    n_layer: int = 2
    d_model: int = 96
    n_head: int = 4
    vocab_size: int = 2048
    max_len: int = 256


@dataclass
class TaskCompareConfig:
    seed: int = 0
    methods: list[str] | None = None
    """Methods to compare (default: every registered method that can run on the task)."""
    runs: dict = field(default_factory=dict)
    """Per-method overrides: ``runs.npo.lr=5e-4``, ``runs.rmu.params.coef=10``."""
    attacks: TaskAttackConfig = field(default_factory=TaskAttackConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    tiny: TinyBase = field(default_factory=TinyBase)
    oracle: bool = True
    """Train (tiny base) an oracle on the retain data only, and attack it as the negative control."""
    positive_control: bool = True
    """Build and attack a model known to only suppress (:func:`obliviate.attacks.controls.suppression_control`)."""
    positive_control_args: dict = field(default_factory=dict)
    """Keyword arguments of :func:`~obliviate.attacks.controls.suppression_control` (``steps``, ``lr``)."""
    eval_batch_size: int = 32


def runnable_methods(task: Task) -> list[str]:
    """Every registered method that can run on ``task`` (IdK methods need forget QA pairs)."""
    return [n for n in method_names() if not (getattr(METHODS[n], "needs_idk", False) and task.forget.docs)]


def method_config(cfg: TaskCompareConfig, name: str, preset: str) -> tuple[UnlearnConfig, dict]:
    return method_run_config(name, cfg.runs.get(name), preset, cfg.seed)


def task_texts(task: Task) -> list[str]:
    """Every text of a task, for training a tokenizer that covers it."""
    texts = [f"{task.prompt.prompt(q)}{task.prompt.answer(a)}" for d in (task.forget, task.retain) for q, a in d.qa]
    texts += list(task.forget.docs) + list(task.retain.docs) + list(task.relearn or [])
    for es in task.evals:
        for x in es.items:
            texts += [x[k] for k in ("question", "answer", "text") if k in x and isinstance(x[k], str)]
            texts += list(x["choices"]) if "choices" in x else []
    return texts


def tiny_bases(task: Task, cfg: TaskCompareConfig, out: Path, progress: bool) -> dict[str, Path]:
    """Train the tiny base (forget + retain) and, with ``cfg.oracle``, the oracle (retain only); cached in ``out``."""
    dirs = {"base": out / "base_model"}
    if cfg.oracle:
        dirs["oracle"] = out / "oracle_model"
    tok = None
    for name, d in dirs.items():
        if (d / "DONE").exists():
            continue
        if tok is None:
            tok = train_tokenizer(task_texts(task), vocab_size=cfg.tiny.vocab_size)
        m = cfg.tiny
        seed_everything(cfg.seed)
        model = tiny_llama(len(tok), n_layer=m.n_layer, d_model=m.d_model, n_head=m.n_head, max_len=m.max_len,
                           seed=cfg.seed, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                           eos_token_id=tok.eos_token_id)
        data = training_data(task, "both" if name == "base" else "retain")
        model, summary = finetune(model, tok, data, cfg.finetune, out / "train" / name, prompt=task.prompt,
                                  preset="tiny", progress=progress, resume=True)
        save_model(model, d)
        tok.save_pretrained(str(d))
        (d / "DONE").write_text("ok\n")
    return dirs


def run_task_compare(task: Task, cfg: TaskCompareConfig, out: Path, *, model_dir: str | None = None,
                     oracle_dir: str | None = None, load=None, progress: bool = True) -> dict:
    """The comparison (module docstring); returns ``{"metrics", "curves", "configs", "timings", "models"}``.

    ``load(path) -> (model, tokenizer)`` loads a model directory (the command passes its device/dtype).
    """
    methods = cfg.methods if cfg.methods is not None else runnable_methods(task)
    for name in methods:
        method_config(cfg, name, "tiny")  # unknown names and bad overrides fail before any training
    load = load or (lambda p: (load_model(p), load_tokenizer(p)))
    t0 = time.time()
    if model_dir is None:
        dirs = {k: str(v) for k, v in tiny_bases(task, cfg, out, progress).items()}
    else:
        dirs = {"base": model_dir, **({"oracle": oracle_dir} if oracle_dir else {})}
    base_model, tok = load(dirs["base"])
    preset = preset_name(base_model)
    ev = dict(batch_size=cfg.eval_batch_size, progress=progress)
    metrics: dict = {"base": evaluate_task(base_model, tok, task, **ev)}
    curves: dict = {}
    timings: dict = {}
    base_score = metrics["base"].get("forget_score")

    def attack(name, model):
        t = time.time()
        att = run_task_attacks(model, tok, task, cfg.attacks, base_model=base_model)
        timings[f"{name}_attack_seconds"] = time.time() - t
        curves[name] = att.get("relearn_disjoint_curve") or att.get("relearn_curve")
        return att

    if "oracle" in dirs:
        oracle, _ = load(dirs["oracle"])
        metrics["oracle"] = evaluate_task(oracle, tok, task, **ev)
        metrics["oracle"].update(score_against(metrics["base"], metrics["oracle"]))
        metrics["oracle"].update(attack("oracle", oracle))
        del oracle
    metrics["base"].update(attack("base", base_model))
    if cfg.positive_control:
        try:
            control, control_info = suppression_control(base_model, tok, task, seed=cfg.seed,
                                                        **cfg.positive_control_args)
        except DataError as e:  # e.g. a task with MCQs only: nothing to refuse
            control_info = {"skipped": str(e)}
        else:
            metrics["positive_control"] = evaluate_task(control, tok, task, **ev)
            metrics["positive_control"].update(score_against(metrics["base"], metrics["positive_control"]))
            metrics["positive_control"].update(attack("positive_control", control))
            save_model(control, out / "positive_control_model")
            tok.save_pretrained(str(out / "positive_control_model"))
            dirs["positive_control"] = str(out / "positive_control_model")
            del control
        timings["positive_control"] = control_info
    configs = {}
    for name in methods:
        mdir = out / "methods" / name
        done = mdir / "result.json"
        ucfg, used = method_config(cfg, name, preset)
        configs[name] = used
        if done.exists():
            saved = json.loads(done.read_text())
            if saved.get("config") == json.loads(json.dumps(used)):
                metrics[name], curves[name] = saved["metrics"], saved.get("curve")
                timings.update(saved.get("timings", {}))
                continue
        seed_everything(cfg.seed)
        model = copy.deepcopy(base_model)
        t = time.time()
        model, summary = unlearn(model, tok, task.forget, task.retain, ucfg, mdir / "train", prompt=task.prompt,
                                 idk=task.idk, progress=progress, resume=False)
        timings[f"{name}_unlearn_seconds"] = time.time() - t
        m = evaluate_task(model, tok, task, **ev)
        m.update(score_against(metrics["base"], m))
        m.update(attack(name, model))
        metrics[name] = m
        atomic_write_json(done, {"config": used, "metrics": m, "curve": curves[name],
                                 "timings": {k: v for k, v in timings.items() if k.startswith(f"{name}_")}})
        del model
    robustness = robustness_summary(metrics)
    timings["total_seconds"] = time.time() - t0
    write_task_report(out, task, metrics, curves, configs, timings["total_seconds"], base_score, robustness)
    return {"metrics": metrics, "curves": curves, "configs": configs, "timings": timings, "models": dirs,
            "robustness": robustness}


COLUMNS = ["model", "forget_score", "retain_score", "neighbour_score", "utility_score", "s_unlearning",
           "relearn_disjoint_acc", "relearn_acc", "probe_acc"]


def plot_forget_keep(metrics: dict, png: Path) -> None:
    points = {name: (m["forget_score"], keep_score(m)) for name, m in metrics.items()
              if m.get("forget_score") is not None and keep_score(m) is not None}
    plot_tradeoff(points, png, "forget score (lower is better)", "kept: retain (or neighbour / utility) score")


def plot_curves(curves: dict, png: Path) -> None:
    plot_recovery_curves(curves, png, "relearning steps", "forget score under attack",
                         empty="no relearning attack: the task has no relearning data")


def write_task_report(out: Path, task: Task, metrics: dict, curves: dict, configs: dict, seconds: float,
                      base_score: float | None, robustness: dict | None = None) -> None:
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    plot_forget_keep(metrics, plots / "forget_keep.png")
    plot_curves(curves, plots / "recovery.png")
    rows = [{"model": n, **{k: m.get(k) for k in COLUMNS[1:]}} for n, m in metrics.items()]
    md = [f"# obliviate: method comparison on task `{task.name}`", "",
          f"Forget: {task.forget.describe()}; retain: {task.retain.describe()}. Scores are the mean accuracy of each "
          "role's QA (exact match) and MCQ sets (docs/evaluation.md); S-unlearning = U x R against the base model. "
          "`relearn_disjoint_acc`: forget accuracy on one half of the forget facts after fine-tuning on the other "
          "half (both swaps averaged); the oracle's value is what a model that never saw the facts reaches.", "",
          markdown_table(rows, COLUMNS), "",
          *(robustness_markdown(metrics, robustness) if robustness else []),
          "![forget vs kept](plots/forget_keep.png)", "", "![recovery](plots/recovery.png)", "",
          "## Method settings", "", "```json", json.dumps(configs, indent=1), "```", "",
          f"Total time {seconds:.0f} s."]
    atomic_write_text(out / "report.md", "\n".join(md) + "\n")
    write_html(out / "report.md", out / "report.html")
