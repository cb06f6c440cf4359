"""Evaluation of a model on the synthetic world: QA, MCQ and per-domain loss."""

from __future__ import annotations

from obliviate.data import qa_prompt
from obliviate.eval.core import mcq_accuracy, qa_accuracy, token_loss_by_label

QA_SPLITS = ("forget", "retain", "general", "concept", "holdout")


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


def evaluate_world(model, tokenizer, world, dataset=None, splits=QA_SPLITS, details: bool = False) -> dict:
    """Metrics of ``model`` on the world.

    ``<split>_qa_acc``: greedy exact match on the canonical questions;
    ``<split>_qa_rouge``: ROUGE-L recall; ``forget_para_qa_acc``: exact match on
    paraphrased questions (value must match the paraphrased or canonical
    answer); ``<split>_mcq_acc``: zero-shot 4-way MCQ by answer log-likelihood
    (chance 0.25; each option scored as the full answer sentence); ``loss_<domain>``: per-domain token loss on ``dataset``.
    """
    out: dict = {}
    per_item: dict = {}
    for split in splits:
        facts = world.facts_by_split(split)
        if not facts:
            continue
        r = qa_accuracy(model, tokenizer, [f["question"] for f in facts], [f["answer"] for f in facts])
        out[f"{split}_qa_acc"] = r["exact_match"]
        out[f"{split}_qa_rouge"] = r["rouge_l"]
        per_item[f"{split}_qa"] = r["correct"]
        mcqs = world.mcqs(split=split)
        if mcqs:
            m = mcq_accuracy(model, tokenizer, full_answer_mcqs(world, mcqs), style="cloze",
                             context_fn=lambda q: qa_prompt(q["question"]))
            out[f"{split}_mcq_acc"] = m["accuracy"]
    forget = world.facts_by_split("forget")
    if forget:
        r = qa_accuracy(model, tokenizer, [f["question_paraphrase"] for f in forget], [f["answer"] for f in forget])
        out["forget_para_qa_acc"] = r["exact_match"]
    if dataset is not None:
        for name, v in token_loss_by_label(model, dataset, "domain").items():
            if name != "None":  # bos/eos carry no domain
                out[f"loss_{name}"] = v["loss"]
    if details:
        out["_per_item"] = per_item
    return out
