"""``world``: the embedded default, the seeded synthetic world (:mod:`obliviate.world`).

forget = the forget-domain (medicine) facts as QA pairs; retain = the retain-domain
(biology) and general facts; evaluation: canonical and paraphrased forget QA, the
forget MCQs scored as whole answer sentences (cloze), retain and general QA;
holdout = the medicine facts that were never in the corpus (membership inference);
relearning corpus = the paragraphs about the forget entities' auxiliary attributes
(never the QA facts). The oracle is pretrained on the corpus without the forget
split (:func:`obliviate.pretrain.cached_pretrain`).

This module and :mod:`obliviate.world` are the only places that know the world's
record layout; the rest of the package sees a :class:`~obliviate.tasks.Task`.
"""

from __future__ import annotations

from obliviate.benchmarks.schema import MCQExample, QAExample
from obliviate.config import from_dict
from obliviate.data import qa_answer, qa_prompt
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task
from obliviate.world import WorldConfig, generate_world


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


def _qa(facts: list[dict], split: str, paraphrase: bool = False) -> list[QAExample]:
    key = "question_paraphrase" if paraphrase else "question"
    return [QAExample(question=f[key], answer=f["answer"], split=split, meta={"fact_id": f["id"]}) for f in facts]


def task_from_world(world, limit: int | None = None) -> Task:
    """The :class:`Task` of an already generated world."""
    facts = {s: cut(world.facts_by_split(s), limit) for s in ("forget", "retain", "general", "holdout")}
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
            from obliviate.errors import ConfigError

            raise ConfigError(f"task 'world:{arg}': the argument is the world seed, an integer") from None
    return task_from_world(generate_world(cfg), limit=limit)
