"""``world``: the embedded default, the seeded synthetic world (:mod:`obliviate.world`).

forget = the forget-domain (medicine) facts as QA pairs; retain = the retain-domain
(biology) and general facts; evaluation: canonical and paraphrased forget QA, the
forget MCQs scored as whole answer sentences (cloze), retain and general QA;
holdout = the medicine facts that were never in the corpus (membership inference);
relearning corpus = the paragraphs about the forget entities' auxiliary attributes
(never the QA facts). The oracle is pretrained on the corpus without the forget
split (:func:`obliviate.train.pretrain.cached_pretrain`).

This module and :mod:`obliviate.world` are the only places that know the world's
record layout; the rest of the package sees a :class:`~obliviate.tasks.Task`. It is
also the world's one door: outside :mod:`obliviate.world`, only this module (and the
demo, :mod:`obliviate.recipes.compare.run`) imports the world. What other modules need of it is
here: the world itself (:class:`WorldConfig`, :func:`generate_world`, :class:`World`,
:data:`TOXIC_LEXICON`), its evaluation (:func:`evaluate_world`), its relearning sets
(:func:`world_relearn_sets`) and its attack suite (:func:`run_attacks`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from obliviate.attacks.format_shift import format_shift_attack
from obliviate.attacks.probe import linear_probe_attack, value_probe_attack
from obliviate.attacks.relearn import RelearnConfig, relearn_attack
from obliviate.tasks.sources.schema import MCQExample, QAExample
from obliviate.config import from_dict
from obliviate.data import qa_answer, qa_prompt
from obliviate.errors import ConfigError, DataError
from obliviate.eval.answers import forget_qa_eval
from obliviate.eval.core import mcq_accuracy, normalise_text, qa_accuracy, token_loss_by_label
from obliviate.models.layers import check_layer
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task
from obliviate.world import SPLITS, TOXIC_LEXICON, World, WorldConfig, generate_world

QA_SPLITS = ("forget", "retain", "general", "concept", "holdout", "neighbour")
RELEARN_MODES = ("paragraphs", "facts")
"""Modes of :func:`world_relearn_sets`."""


def forget_pairs(world) -> list[tuple[str, str]]:
    """The forget facts as formatted ``(prompt, answer)`` pairs (the world's own QA format)."""
    return [(qa_prompt(f["question"]), qa_answer(f["answer"])) for f in world.facts_by_split("forget")]


def retain_pairs(world) -> list[tuple[str, str]]:
    """The retain and general facts as formatted ``(prompt, answer)`` pairs."""
    return [(qa_prompt(f["question"]), qa_answer(f["answer"])) for s in ("retain", "general")
            for f in world.facts_by_split(s)]


def full_answer_mcqs(world, mcqs: list[dict]) -> list[dict]:
    """MCQs whose choices are whole answer sentences ("It is treated with X.") instead of bare values.

    The world's models answer in sentences, so each option is scored as the
    full answer it would give (TOFU scores perturbed answers the same way).
    """
    facts = {f["id"]: f for f in world.facts}
    out = []
    for m in mcqs:
        f = facts[m["fact_id"]]
        start = f["answer"].index(f["value"])
        pre, post = f["answer"][:start], f["answer"][start + len(f["value"]):]
        out.append({**m, "choices": [pre + c + post for c in m["choices"]]})
    return out


def split_facts(world, split: str) -> list[dict]:
    """The facts of ``split`` that its evaluation asks: for "neighbour", those near the forget diseases only
    (the holdout diseases' neighbours are trained so that forget and holdout look alike, see world.md)."""
    facts = world.facts_by_split(split)
    return [f for f in facts if f.get("near", "forget") == "forget"] if split == "neighbour" else facts


def _qa(facts: list[dict], split: str, paraphrase: bool = False) -> list[QAExample]:
    """QA examples of ``facts``; with ``paraphrase``, one per held-out wording of each question."""
    if paraphrase:
        return [QAExample(question=q, answer=f["answer"], split=split, meta={"fact_id": f["id"]})
                for f in facts for q in f["question_paraphrases"]]
    return [QAExample(question=f["question"], answer=f["answer"], split=split, meta={"fact_id": f["id"]})
            for f in facts]


def task_from_world(world, limit: int | None = None) -> Task:
    """The :class:`Task` of an already generated world.

    Evaluation sets: ``forget_qa``, ``forget_para_qa`` (the held-out wordings), ``forget_mcq``
    (cloze) (role forget); ``retain_qa`` (role retain); ``general_qa`` (role utility);
    ``neighbour_qa`` (role neighbour: the forget diseases' other attributes and the look-alike
    diseases, never in the retain training data, so over-forgetting shows there first).
    """
    facts = {s: cut(split_facts(world, s), limit) for s in ("forget", "retain", "general", "holdout", "neighbour")}
    forget_ids = {f["id"] for f in facts["forget"]}
    mcqs = [MCQExample(question=m["question"], choices=m["choices"], answer_index=m["answer_index"],
                       split="forget", meta={"fact_id": m["fact_id"]})
            for m in full_answer_mcqs(world, world.mcqs(split="forget")) if m["fact_id"] in forget_ids]
    evals = [EvalSet("forget_qa", "forget", "qa", _qa(facts["forget"], "forget")),
             EvalSet("forget_para_qa", "forget", "qa", _qa(facts["forget"], "forget", paraphrase=True))]
    if mcqs:
        evals.append(EvalSet("forget_mcq", "forget", "mcq", mcqs, mcq_style="cloze"))
    evals += [EvalSet("retain_qa", "retain", "qa", _qa(facts["retain"], "retain")),
              EvalSet("general_qa", "utility", "qa", _qa(facts["general"], "general"))]
    if facts["neighbour"]:
        evals.append(EvalSet("neighbour_qa", "neighbour", "qa", _qa(facts["neighbour"], "neighbour")))
    entities = {f["entity"] for f in facts["forget"]}
    relearn = [p["text"] for p in world.relearn_paragraphs if p["entity"] in entities] or None
    return Task(
        name="world",
        forget=Data(qa=[(f["question"], f["answer"]) for f in facts["forget"]]),
        retain=Data(qa=[(f["question"], f["answer"]) for s in ("retain", "general") for f in facts[s]]),
        evals=evals,
        relearn=relearn,
        holdout=Data(qa=[(f["question"], f["answer"]) for f in facts["holdout"]]) or None,
        prompt=PromptFormat(template=qa_prompt("{question}"), answer_prefix=" "),
        meta={"world_seed": world.config.seed, "fingerprint": world.fingerprint()},
    )


@register_task("world", help="the embedded synthetic world (seeded; `world` or `world:SEED`)")
def world_task(arg: str | None = None, *, seed: int = 0, world: dict | WorldConfig | None = None,
               limit: int | None = None, **_) -> Task:
    """The world of ``seed`` (or of the ``world`` config); ``world:N`` picks world seed N."""
    if isinstance(world, WorldConfig):
        cfg = world
    else:
        cfg = from_dict(WorldConfig, {"seed": seed, **(world or {})}, prefix="world")
    if arg is not None:
        try:
            cfg.seed = int(arg)
        except ValueError:
            raise ConfigError(f"task 'world:{arg}': the argument is the world seed, an integer") from None
    return task_from_world(generate_world(cfg), limit=limit)


# ------------------------------------------------------------------ evaluation

def evaluate_world(model, tokenizer, world, dataset=None, splits=QA_SPLITS, details: bool = False) -> dict:
    """Metrics of ``model`` on the world.

    ``<split>_qa_acc``: greedy exact match on the canonical questions; ``<split>_qa_rouge``:
    ROUGE-L recall; ``<split>_mcq_acc``: zero-shot 4-way MCQ by answer log-likelihood (chance
    0.25; each option scored as the full answer sentence, :func:`full_answer_mcqs`). For the
    forget split also ``forget_para_qa_acc``: exact match on the *held-out* phrasings of the
    questions (every ``question_paraphrases`` wording of every fact, never used in pretraining;
    correct when the answer is the canonical or the paraphrased answer), and
    ``forget_mcq_letters_acc``: the lm-eval lettered format (" A".." D" after the lettered
    prompt, :func:`~obliviate.eval.core.mcq_accuracy` ``style="letters"``; chance 0.25), never
    trained for a forget fact. For the neighbour split (what unlearning should keep although it
    is close to the forget facts) also ``neighbour_attribute_qa_acc`` (other attributes of the
    forget diseases) and ``neighbour_lookalike_qa_acc`` (diseases named like them).
    ``loss_<domain>``: per-domain token loss on ``dataset``.
    """
    out: dict = {}
    per_item: dict = {}
    for split in splits:
        facts = split_facts(world, split)
        if not facts:
            continue
        r = qa_accuracy(model, tokenizer, [f["question"] for f in facts], [f["answer"] for f in facts])
        out[f"{split}_qa_acc"] = r["exact_match"]
        out[f"{split}_qa_rouge"] = r["rouge_l"]
        per_item[f"{split}_qa"] = r["correct"]
        if split == "neighbour":
            for kind in ("attribute", "lookalike"):
                ok = [c for c, f in zip(r["correct"], facts) if f.get("neighbour") == kind]
                if ok:
                    out[f"neighbour_{kind}_qa_acc"] = float(np.mean(ok))
        ids = {f["id"] for f in facts}
        mcqs = [m for m in world.mcqs(split=split) if m["fact_id"] in ids]
        if mcqs:
            m = mcq_accuracy(model, tokenizer, full_answer_mcqs(world, mcqs), style="cloze",
                             context_fn=lambda q: qa_prompt(q["question"]))
            out[f"{split}_mcq_acc"] = m["accuracy"]
    forget = world.facts_by_split("forget")
    if forget:
        para = [(q, f) for f in forget for q in f["question_paraphrases"]]
        r = qa_accuracy(model, tokenizer, [q for q, _ in para], [f["answer"] for _, f in para])
        ok = [float(normalise_text(p) in (normalise_text(f["answer"]), normalise_text(f["answer_paraphrase"])))
              for p, (_, f) in zip(r["predictions"], para)]
        out["forget_para_qa_acc"] = float(np.mean(ok))
        per_item["forget_para_qa"] = ok
        m = mcq_accuracy(model, tokenizer, full_answer_mcqs(world, world.mcqs(split="forget")), style="letters")
        out["forget_mcq_letters_acc"] = m["accuracy"]
        per_item["forget_mcq_letters"] = m["correct"]
    if dataset is not None:
        for name, v in token_loss_by_label(model, dataset, "domain").items():
            if name != "None":  # bos/eos carry no domain
                out[f"loss_{name}"] = v["loss"]
    if details:
        out["_per_item"] = per_item
    return out


# ------------------------------------------------------------------ attacks

def world_relearn_sets(world, mode: str = "paragraphs", seed: int = 0) -> tuple[list, list[dict]]:
    """``(train data, eval facts)`` of a relearning attack on ``world``'s forget split.

    ``"paragraphs"``: the texts of ``world.relearn_paragraphs`` about forget entities
    (auxiliary attributes only, never the QA facts) and all forget facts, so any recovery is
    knowledge that was still in the weights. ``"facts"``: ``(qa_prompt(question), " " + answer)``
    pairs of a seeded half (``n // 2``) of the forget facts, and the other facts.
    """
    facts = world.facts_by_split("forget")
    if not facts:
        raise DataError("the world has no forget facts to relearn")
    if mode == "paragraphs":
        entities = {f["entity"] for f in facts}
        texts = [p["text"] for p in world.relearn_paragraphs if p["entity"] in entities]
        if not texts:
            raise DataError("the world has no relearning paragraphs about its forget entities")
        return texts, list(facts)
    if mode == "facts":
        if len(facts) < 2:
            raise DataError(f"mode 'facts' needs at least 2 forget facts, the world has {len(facts)}")
        perm = np.random.default_rng(seed).permutation(len(facts))
        n_train = len(facts) // 2
        train_facts = [facts[i] for i in sorted(perm[:n_train])]
        eval_facts = [facts[i] for i in sorted(perm[n_train:])]
        return [(qa_prompt(f["question"]), qa_answer(f["answer"])) for f in train_facts], eval_facts
    raise ConfigError(f"unknown relearning mode {mode!r} (valid: {', '.join(RELEARN_MODES)})")


PROBES = ("value", "choice")
"""Linear probes of the world attack suite (``AttackSuiteConfig.probe``)."""


def value_prefix(fact: dict, question: str | None = None) -> str:
    """The QA prompt of ``fact`` (its canonical question unless given) and its canonical answer up to the value
    ("...Answer: It is treated with")."""
    answer = fact["answer"]
    return qa_prompt(question or fact["question"]) + " " + answer[:answer.rfind(fact["value"])].rstrip()


def value_probe_sets(world) -> tuple[list[dict], list[dict]]:
    """``(items, extra_train)`` of :func:`~obliviate.attacks.probe.value_probe_attack` on ``world``.

    ``items``: the forget MCQs (bare values), each with the :func:`value_prefix` of its fact (and, for
    training only, the same prefix after each trained wording of the question);
    ``extra_train``: every trained fact outside the forget and holdout splits whose value is one of
    the forget MCQs' options (the look-alike diseases share the forget facts' value pools), so the
    probe also learns each value from facts that unlearning should leave alone.
    """
    facts = {f["id"]: f for f in world.facts}
    items = [{**m, "prefix": value_prefix(f), "value": f["value"],
              "train_prefixes": [value_prefix(f, q) for q in f["train_questions"]]}
             for m in world.mcqs(split="forget") for f in [facts[m["fact_id"]]]]
    options = {c for m in items for c in m["choices"]}
    extra = [{"prefix": value_prefix(f), "value": f["value"]} for f in world.facts
             if f["split"] not in ("forget", "holdout") and f["value"] in options]
    return items, extra


@dataclass
class AttackSuiteConfig:
    relearn: RelearnConfig = field(default_factory=RelearnConfig)
    relearn_facts: bool = False
    """Also run the relearning attack in mode "facts" (train on half the forget QA pairs, test on the rest)."""
    probe_layers: list[int] | None = None
    """Decoder layers to probe (default: all)."""
    probe_train_frac: float = 0.5
    probe_C: float = 1.0
    probe: str = "value"
    """"value": :func:`~obliviate.attacks.probe.value_probe_attack` on :func:`value_probe_sets` (reads the
    value where the model is about to say it; the default); "choice": the "correct choice?" probe of
    :func:`~obliviate.attacks.probe.linear_probe_attack` on the forget MCQs (whole answer sentences as
    options; trained on half of the forget MCQs only, so it is near chance even on the base model)."""
    seed: int = 0
    """Seeds the probe split and the "facts" relearning split (the fine-tuning itself uses ``relearn.seed``)."""

    def __post_init__(self):
        if not 0 < self.probe_train_frac < 1:
            raise ConfigError(f"config key 'probe_train_frac': must be in (0, 1), got {self.probe_train_frac}")
        if self.probe_C <= 0:
            raise ConfigError(f"config key 'probe_C': must be > 0, got {self.probe_C}")
        if self.probe not in PROBES:
            raise ConfigError(f"config key 'probe': must be one of {', '.join(PROBES)}, got {self.probe!r}")


def _relearn_metrics(prefix: str, res: dict) -> dict:
    return {f"{prefix}_forget_qa_acc": res["final_acc"], f"{prefix}_initial_acc": res["initial_acc"],
            f"{prefix}_auc": res["auc"], f"{prefix}_steps_to_base": res["steps_to_base"],
            f"{prefix}_tokens_to_base": res["tokens_to_base"], f"{prefix}_base_acc": res["base_acc"],
            f"{prefix}_curve": res["curve"]}


def run_attacks(model, tokenizer, world, base_acc: float | None = None, cfg: AttackSuiteConfig | None = None,
                *, base_model=None, out_dir=None, resume: bool = True) -> dict:
    """All attacks (:mod:`obliviate.attacks`) on ``world``'s forget split; a flat dict of metrics.

    None of them modifies ``model``. ``base_acc``: the forget QA accuracy before unlearning (the
    target of ``steps_to_base``; ideally measured with :func:`~obliviate.attacks.forget_qa_eval`,
    whose default prefix match is >= exact match); ``base_model``, if given, is evaluated instead,
    on each relearning mode's own eval facts. Without either, the ``*_steps_to_base`` /
    ``*_tokens_to_base`` metrics are None. In mode "facts" a scalar ``base_acc`` (measured on all
    forget facts) stands in for the base accuracy on the evaluated half.

    Keys: ``relearn_forget_qa_acc`` (after relearning), ``relearn_initial_acc``, ``relearn_auc``,
    ``relearn_steps_to_base``, ``relearn_tokens_to_base``, ``relearn_base_acc``, ``relearn_curve``
    (``[[step, acc], ...]``), the same with prefix ``relearn_facts`` if ``cfg.relearn_facts``,
    ``probe_acc``, ``probe_best_layer``, ``probe_per_layer``, ``format_<f>`` for f in
    :data:`~obliviate.attacks.FORMATS`, and ``attack_seconds``.

    With ``out_dir``, each relearning attack keeps its log and (``cfg.relearn.checkpoint_every``)
    checkpoints in ``out_dir/<mode>``, and a rerun resumes it (see :func:`~obliviate.attacks.relearn_attack`).
    """
    cfg = cfg or AttackSuiteConfig()
    for layer in cfg.probe_layers or []:  # a bad layer fails now, not after the relearning attacks
        check_layer(model, layer)
    t0 = time.time()
    forget = world.facts_by_split("forget")
    mcqs = full_answer_mcqs(world, world.mcqs(split="forget"))  # options as whole answer sentences
    out: dict = {}
    modes = ["paragraphs"] + (["facts"] if cfg.relearn_facts else [])
    for mode in modes:
        train_data, eval_facts = world_relearn_sets(world, mode, seed=cfg.seed)
        eval_fn = forget_qa_eval(tokenizer, eval_facts)
        target = eval_fn(base_model) if base_model is not None else base_acc
        res = relearn_attack(model, tokenizer, train_data, eval_fn, cfg.relearn, base_acc=target,
                             out_dir=None if out_dir is None else Path(out_dir) / mode, resume=resume)
        out.update(_relearn_metrics("relearn" if mode == "paragraphs" else "relearn_facts", res))
    if cfg.probe == "value":
        items, extra = value_probe_sets(world)
        probe = value_probe_attack(model, tokenizer, items, extra, layers=cfg.probe_layers, seed=cfg.seed,
                                   C=cfg.probe_C)
    else:
        probe = linear_probe_attack(model, tokenizer, mcqs, layers=cfg.probe_layers, train_frac=cfg.probe_train_frac,
                                    seed=cfg.seed, C=cfg.probe_C)
    out["probe_acc"] = probe["best_acc"]
    out["probe_best_layer"] = probe["best_layer"]
    out["probe_per_layer"] = {str(l): a for l, a in probe["per_layer"].items()}
    for name, acc in format_shift_attack(model, tokenizer, forget, mcqs).items():
        out[f"format_{name}"] = acc
    out["attack_seconds"] = time.time() - t0
    return out


__all__ = [
    "PROBES", "QA_SPLITS", "RELEARN_MODES", "SPLITS", "TOXIC_LEXICON", "AttackSuiteConfig", "World", "WorldConfig", "evaluate_world",
    "forget_pairs", "full_answer_mcqs", "generate_world", "retain_pairs", "run_attacks", "split_facts", "task_from_world", "value_prefix", "value_probe_sets",
    "world_relearn_sets", "world_task",
]
