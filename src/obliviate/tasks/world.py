"""``world``: the embedded default, the seeded synthetic world (:mod:`obliviate.world`), as a task.

Forget: the forget-domain (medicine) facts; retain: the retain-domain (biology) and general facts. The
evaluation sets, the relearning corpus, the value probe's data and the holdout are built here
(:func:`task_from_world`, sets listed in docs/world.md); the base model and the oracle are pretrained on the
world's corpus (``Task.pretrain``, :mod:`obliviate.train.pretrain`). This module is the world's one door:
outside :mod:`obliviate.world`, the package sees the world through the task built here.
"""

from __future__ import annotations

import numpy as np

from obliviate.config import from_dict
from obliviate.errors import ConfigError, DataError
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task
from obliviate.tasks.base import UNSCORED_NEIGHBOURS, qa_answer, qa_prompt
from obliviate.tasks.sources.schema import MCQExample, QAExample, TextExample
from obliviate.world import SPLITS, TOXIC_LEXICON, World, WorldConfig, generate_world
from obliviate.world.record import DOCUMENTS_FILE, WORLD_FILE

QA_SPLITS = ("forget", "retain", "general", "concept", "holdout", "neighbour")
RELEARN_MODES = ("paragraphs", "facts")
"""Modes of :func:`world_relearn_sets`."""
TEXT_PER_DOMAIN = 64
"""Corpus segments per domain scored by the ``<domain>_text`` sets (token loss)."""


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


def unscored_neighbours(world) -> list[dict]:
    """The neighbour facts no evaluation set scores: the holdout diseases' spread routes and look-alikes
    (``near: holdout``). Pretrained like the scored neighbours (:func:`split_facts`), never retain data: what
    a control may train on to keep the forget facts' neighbourhood without touching the ``neighbour_qa`` items
    it is judged on."""
    return [f for f in world.facts_by_split("neighbour") if f.get("near", "forget") != "forget"]


def _qa(facts: list[dict], split: str) -> list[QAExample]:
    """QA examples of ``facts``, with the paraphrased and perturbed answers of the TOFU truth ratio."""
    return [QAExample(question=f["question"], answer=f["answer"], split=split,
                      paraphrased_answer=f["answer_paraphrase"],
                      perturbed_answers=list(f["perturbed_answers"]),
                      meta={"fact_id": f["id"], "entity": f["entity"]}) for f in facts]


def _para_qa(facts: list[dict], split: str = "forget") -> list[QAExample]:
    """One QA example per held-out wording of each question; the paraphrased answer counts as right too."""
    return [QAExample(question=q, answer=f["answer"], split=split,
                      meta={"fact_id": f["id"], "alternatives": [f["answer_paraphrase"]]})
            for f in facts for q in f["question_paraphrases"]]


def cloze_parts(fact: dict) -> tuple[str, str]:
    """``(answer prefix, value)``: the answer text before its first ``specific`` span, and the value."""
    spans = fact.get("answer_spans") or []
    first = next((s for s in spans if s[2] == "specific"), None)
    if first is None:
        raise DataError(f"fact {fact.get('id', fact.get('question'))!r} has no 'specific' answer span")
    return fact["answer"][:first[0]].rstrip(), fact["value"]


def _cloze(facts: list[dict]) -> list[QAExample]:
    """The answer sentence up to the value after the question: the greedy continuation must start with it."""
    out = []
    for f in facts:
        start, value = cloze_parts(f)
        out.append(QAExample(question=f["question"], answer=value, split="forget",
                             meta={"fact_id": f["id"], "answer_start": start}))
    return out


def _mcqs(world, split: str, ids: set) -> list[MCQExample]:
    return [MCQExample(question=m["question"], choices=m["choices"], answer_index=m["answer_index"],
                       split=split,
                       meta={"fact_id": m["fact_id"]})
            for m in full_answer_mcqs(world, world.mcqs(split=split)) if m["fact_id"] in ids]


def _domain_texts(world, per_domain: int = TEXT_PER_DOMAIN) -> dict[str, list[TextExample]]:
    """The first ``per_domain`` corpus segments of each domain, each one text (bos/eos-only spans skipped)."""
    out: dict[str, list[TextExample]] = {}
    for doc in world.documents():
        for a, b, labels in doc["spans"]:
            domain, text = labels.get("domain"), doc["text"][a:b].strip()
            if domain and text and len(out.setdefault(domain, [])) < per_domain:
                out[domain].append(TextExample(text=text, split=domain))
    return out


def world_evals(world, facts: dict[str, list[dict]]) -> list[EvalSet]:
    """The world's evaluation sets (docs/world.md).

    Scored: ``forget_qa`` (forget), ``retain_qa`` and ``general_qa`` (retain: both are trained as retain data;
    ``retain_para_qa``, their held-out wordings, which no retain term trains on, is the retain role's variant
    and enters the held-out keep score, :func:`obliviate.eval.suite.evaluate_task`), ``neighbour_qa``
    (neighbour: the forget diseases' other attributes and their look-alikes, never retain data, so
    over-forgetting shows there first). Variants of the forget set (held-out wordings and other formats; read
    by the format-shift attack): ``forget_para_qa``, ``forget_mcq`` (whole answer sentences as options),
    ``forget_mcq_letters`` (lm-eval's lettered prompt), ``forget_cloze`` (the answer sentence up to the
    value). Extra (reported only): the neighbour kinds, concept and holdout QA, the other splits' MCQs, and
    ``<domain>_text``, the token loss on corpus segments of each domain.
    """
    ids = {s: {f["id"] for f in fs} for s, fs in facts.items()}
    evals = [EvalSet("forget_qa", "forget", "qa", _qa(facts["forget"], "forget")),
             EvalSet("forget_para_qa", "forget", "qa", _para_qa(facts["forget"]), variant=True)]
    mcqs = _mcqs(world, "forget", ids["forget"])
    if mcqs:
        evals += [EvalSet("forget_mcq", "forget", "mcq", mcqs, mcq_style="cloze", variant=True),
                  EvalSet("forget_mcq_letters", "forget", "mcq", mcqs, mcq_style="letters", variant=True)]
    evals.append(EvalSet("forget_cloze", "forget", "qa", _cloze(facts["forget"]), variant=True,
                         match="prefix"))
    evals += [EvalSet("retain_qa", "retain", "qa", _qa(facts["retain"], "retain")),
              EvalSet("general_qa", "retain", "qa", _qa(facts["general"], "general")),
              EvalSet("retain_para_qa", "retain", "qa",
                      _para_qa(facts["retain"] + facts["general"], "retain"),
                      variant=True)]
    if facts["neighbour"]:
        evals.append(EvalSet("neighbour_qa", "neighbour", "qa", _qa(facts["neighbour"], "neighbour")))
        for kind in ("attribute", "lookalike"):
            these = [f for f in facts["neighbour"] if f.get("neighbour") == kind]
            if these:
                evals.append(EvalSet(f"neighbour_{kind}_qa", "extra", "qa", _qa(these, "neighbour")))
    for split in ("concept", "holdout"):
        if facts[split]:
            evals.append(EvalSet(f"{split}_qa", "extra", "qa", _qa(facts[split], split)))
    for split in ("retain", "general", "concept", "holdout", "neighbour"):
        m = _mcqs(world, split, ids[split])
        if m:
            evals.append(EvalSet(f"{split}_mcq", "extra", "mcq", m, mcq_style="cloze"))
    for domain, texts in sorted(_domain_texts(world).items()):
        evals.append(EvalSet(f"{domain}_text", "extra", "text", texts))
    return evals


def task_from_world(world, limit: int | None = None) -> Task:
    """The :class:`Task` of an already generated world (evaluation sets: :func:`world_evals`)."""
    facts = {s: cut(split_facts(world, s), limit) for s in QA_SPLITS}
    entities = {f["entity"] for f in facts["forget"]}
    relearn = [p["text"] for p in world.relearn_paragraphs if p["entity"] in entities] or None
    items, extra = value_probe_sets(world, {f["id"] for f in facts["forget"]})
    return Task(
        name="world",
        forget=Data(qa=[(f["question"], f["answer"]) for f in facts["forget"]]),
        retain=Data(qa=[(f["question"], f["answer"]) for s in ("retain", "general") for f in facts[s]]),
        groups=[str(f["entity"]) for f in facts["forget"]],
        evals=world_evals(world, facts),
        relearn=relearn,
        holdout=Data(qa=[(f["question"], f["answer"]) for f in facts["holdout"]]) or None,
        prompt=PromptFormat(template=qa_prompt("{question}"), answer_prefix=" "),
        probe={"items": items, "extra": extra} if items else None,
        pretrain=world.config,
        meta={"world_seed": world.config.seed, "fingerprint": world.fingerprint(),
              UNSCORED_NEIGHBOURS: [(f["question"],
                                     f["answer"]) for f in cut(unscored_neighbours(world), limit)]},
    )


def facts_task(world, sets: dict[str, tuple[str, list[dict]]], kinds: tuple[str, ...] = ("qa", "mcq"),
               name: str = "world") -> Task:
    """A task of the world over given fact lists (a recipe's own splits): for each ``set: (role, facts)``, the
    QA set ``<set>_qa`` and the MCQ set ``<set>_mcq`` (whole answer sentences as options, cloze) of those
    facts, as :func:`world_evals` builds them; forget = the facts of role forget, retain = those of role
    retain."""
    evals = []
    for set_name, (role, facts) in sets.items():
        if "mcq" in kinds:
            ids = {f["id"] for f in facts}
            mcqs = [MCQExample(question=m["question"], choices=m["choices"], answer_index=m["answer_index"],
                               split=m["split"], meta={"fact_id": m["fact_id"]})
                    for m in full_answer_mcqs(world, [m for m in world.mcqs() if m["fact_id"] in ids])]
            if not mcqs:
                raise DataError(f"no MCQs for the {len(facts)} facts of the evaluation set {set_name!r}")
            evals.append(EvalSet(f"{set_name}_mcq", role, "mcq", mcqs, mcq_style="cloze"))
        if "qa" in kinds:
            evals.append(EvalSet(f"{set_name}_qa", role, "qa",
                                 _qa(facts, facts[0]["split"] if facts else role)))
    pairs = {role: [(f["question"], f["answer"]) for r, facts in sets.values() if r == role for f in facts]
             for role in ("forget", "retain")}
    return Task(name=name, forget=Data(qa=pairs["forget"]), retain=Data(qa=pairs["retain"]), evals=evals,
                prompt=PromptFormat(template=qa_prompt("{question}"), answer_prefix=" "))


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


# ------------------------------------------------------------------ attack data

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


def value_prefix(fact: dict, question: str | None = None) -> str:
    """The QA prompt of ``fact`` (its canonical question unless given) and its canonical answer up to the
    value ("...Answer: It is treated with")."""
    answer = fact["answer"]
    return qa_prompt(question or fact["question"]) + " " + answer[:answer.rfind(fact["value"])].rstrip()


def value_probe_sets(world, fact_ids: set | None = None) -> tuple[list[dict], list[dict]]:
    """``(items, extra_train)`` of :func:`~obliviate.attacks.probe.value_probe_attack` on ``world``.

    ``items``: the forget MCQs (bare values), each with the :func:`value_prefix` of its fact (and, for
    training only, the same prefix after each trained wording of the question);
    ``extra_train``: every trained fact outside the forget and holdout splits whose value is one of
    the forget MCQs' options (the look-alike diseases share the forget facts' value pools), so the
    probe also learns each value from facts that unlearning should leave alone. ``fact_ids``: only the MCQs
    of these forget facts.
    """
    facts = {f["id"]: f for f in world.facts}
    items = [{**m, "prefix": value_prefix(f), "value": f["value"],
              "train_prefixes": [value_prefix(f, q) for q in f["train_questions"]]}
             for m in world.mcqs(split="forget") for f in [facts[m["fact_id"]]]
             if fact_ids is None or m["fact_id"] in fact_ids]
    options = {c for m in items for c in m["choices"]}
    extra = [{"prefix": value_prefix(f), "value": f["value"]} for f in world.facts
             if f["split"] not in ("forget", "holdout") and f["value"] in options]
    return items, extra


__all__ = [
    "DOCUMENTS_FILE", "QA_SPLITS", "WORLD_FILE", "RELEARN_MODES", "SPLITS", "TOXIC_LEXICON", "World",
    "WorldConfig",
    "cloze_parts", "facts_task", "forget_pairs",
    "full_answer_mcqs", "generate_world", "retain_pairs", "split_facts", "task_from_world",
    "unscored_neighbours",
    "value_prefix", "value_probe_sets", "world_evals", "world_relearn_sets", "world_task",
]
