"""Helpers of tests/tasks: a user's own problem in miniature: small random-init models of real architectures, each
saved with its own tokenizer, and QA / document files with field names of their own."""

from __future__ import annotations

import csv
import json
import random

from obliviate.models.builders import tiny_random
from obliviate.models.load import save_model
from obliviate.models.tokenizer import train_tokenizer

_SYL = ["ka", "lo", "mi", "ren", "tu", "sa", "vor", "el", "dra", "qui", "zan", "po", "bel", "ix", "nor", "fe"]
_CITIES = ["Velmora", "Ostrand", "Karith", "Pellune", "Zoravik", "Thessin", "Mirrowen", "Dunhal"]
_COLOURS = ["teal", "amber", "crimson", "ivory", "indigo", "olive", "scarlet", "silver"]


def _name(rng: random.Random, seen: set) -> str:
    while True:
        n = "".join(rng.choice(_SYL) for _ in range(2)).capitalize() + " " + \
            "".join(rng.choice(_SYL) for _ in range(2)).capitalize()
        if n not in seen:
            seen.add(n)
            return n


def make_facts(n: int, seed: int = 0) -> list[dict]:
    """``n`` fictitious people, each with a city and a colour: one QA pair and one sentence per fact."""
    rng = random.Random(seed)
    seen: set = set()
    out = []
    for i in range(n):
        name = _name(rng, seen)
        city, colour = rng.choice(_CITIES), rng.choice(_COLOURS)
        if i % 2 == 0:
            q, a = f"Where does {name} live?", city
        else:
            q, a = f"What is the favourite colour of {name}?", colour
        out.append({"name": name, "question": q, "answer": a,
                    "sentence": f"{name} lives in {city} and loves the colour {colour}."})
    return out


def write_user_files(root, n_forget: int = 16, n_retain: int = 16, seed: int = 0) -> dict:
    """forget QA as JSON Lines (fields ``prompt`` / ``response``), retain QA as CSV (``q``, ``a``), retain
    documents as plain text, related texts for relearning, and a utility MCQ file (JSON array)."""
    facts = make_facts(n_forget + n_retain, seed)
    forget, retain = facts[:n_forget], facts[n_forget:]
    root.mkdir(parents=True, exist_ok=True)
    paths = {k: root / f for k, f in (("forget", "forget.jsonl"), ("retain_qa", "retain.csv"),
                                         ("retain_docs", "retain_docs.txt"), ("relearn", "related.txt"),
                                         ("utility", "utility_mcq.json"))}
    paths["forget"].write_text("".join(json.dumps({"prompt": f["question"], "response": f["answer"]}) + "\n"
                                       for f in forget))
    with open(paths["retain_qa"], "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["q", "a"])
        w.writerows([[f["question"], f["answer"]] for f in retain])
    paths["retain_docs"].write_text("\n".join(f["sentence"] for f in retain) + "\n")
    paths["relearn"].write_text("\n".join(f"{f['name']} is a person of note." for f in forget) + "\n")
    mcq = [{"stem": f"Which city is home to {f['name']}?", "options": _CITIES[:4],
            "label": _CITIES[:4].index(f["answer"]) if f["answer"] in _CITIES[:4] else 0} for f in retain[:8]]
    paths["utility"].write_text(json.dumps(mcq, indent=2))
    paths["texts"] = [f["question"] + " " + f["answer"] for f in facts] + [f["sentence"] for f in facts] + \
        [m["stem"] + " " + " ".join(m["options"]) for m in mcq] + ["Question: x\nAnswer: y"] * 4
    return paths


def save_tiny_model(directory, arch: str, texts: list[str], seed: int = 0, d_model: int = 96, n_layer: int = 2):
    """A random-init ``arch`` model with a BPE tokenizer trained on ``texts``, both saved in ``directory``."""
    tok = train_tokenizer(texts, vocab_size=600)
    model = tiny_random(arch, vocab_size=len(tok), seed=seed, d_model=d_model, n_layer=n_layer, max_len=256,
                        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    save_model(model, directory)
    tok.save_pretrained(str(directory))
    return directory


def taught_user(root, *finetune_settings: str) -> dict:
    """A user's QA files (8 forget, 8 retain pairs), a random-init Llama with its own tokenizer, and the model
    ``obliviate finetune`` taught from it (``finetune_settings``: its config keys), all under ``root``:
    ``{"root", "files" (the data options), "base" (the taught model), "random"}``."""
    from obliviate.cli.main import main

    paths = write_user_files(root / "data", n_forget=8, n_retain=8)
    save_tiny_model(root / "random", "llama", paths["texts"], d_model=32)
    files = ["--forget", str(paths["forget"]), "--retain", str(paths["retain_qa"]), "--no-progress"]
    assert main(["finetune", "--model", str(root / "random"), *files, "--out", str(root / "ft"),
                 "finetune.batch_size=4", *finetune_settings]) == 0
    return {"root": root, "files": files, "base": str(root / "ft" / "model"), "random": str(root / "random")}


# ------------------------------------------------------------------ provider layouts in miniature

def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj), encoding="utf-8")


def _mcq(i, topic):
    return {"question": f"{topic} question {i}?", "choices": [f"{topic} {i} {c}" for c in "wxyz"], "answer": i % 4}


def _mmlu_csv(path, subject, n):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["question", "choice0", "choice1", "choice2", "choice3", "answer"])
        for i in range(n):
            w.writerow([f"{subject} question {i}?", "a", "b", "c", "d", i % 4])


RWKU_TARGET = "Stephen King"


def write_rwku(root, n=3):
    """A target in RWKU's own layout and field names (``rwku/Target/<n>_<Name>/<part>.json``)."""
    d = root / "rwku" / "Target" / "1_Stephen_King"
    d.mkdir(parents=True)
    probe = lambda lvl, i, **kw: {"query": f"Stephen King wrote ___ number {i}.", "answer": f"book{i}",  # noqa: E731
                                  "level": str(lvl), "subject": RWKU_TARGET, **kw}
    parts = {
        "intro": [{"target": RWKU_TARGET, "intro": "Stephen King is an American author."}],
        "forget_level1": [probe(1, i) for i in range(n)],
        "forget_level2": [probe(2, i) for i in range(n)],
        "forget_level3": [probe(3, i, type=t) for i, t in enumerate(["prefix injection", "affirmative suffix",
                                                                     "role playing"][:n])],
        "neighbor_level1": [{"query": f"Maine's capital is ___ {i}.", "answer": "Augusta", "level": "1",
                             "subject": RWKU_TARGET} for i in range(n)],
        "neighbor_level2": [{"query": f"What is the capital of Maine ({i})?", "answer": "Augusta", "level": "2",
                             "subject": RWKU_TARGET} for i in range(n)],
        "forget_mia": [{"text": f"Stephen King published novel {i} in Maine.", "subject": RWKU_TARGET}
                       for i in range(n)],
        "retain_mia": [{"text": f"The river {i} runs to the sea.", "subject": RWKU_TARGET} for i in range(n)],
        "retain_mmlu": [{"question": f"What is {i} + 1?", "choices": [str(i + 1), "0", "7", "9"], "answer": 0,
                         "task": "elementary_mathematics", "examples": [], "subject": RWKU_TARGET} for i in range(n)],
        "triviaqa": [{"question": f"Which planet is number {i}?", "answers": ["Mars", "mars"], "subject": RWKU_TARGET}
                     for i in range(n)],
        "passage": [{"text": f"Stephen King is an author from Maine. He wrote book{i}.", "subject": RWKU_TARGET}
                    for i in range(n)],
    }
    for name, records in parts.items():
        (d / f"{name}.json").write_text(json.dumps(records, indent=4))
    return d


MUSE_FACTS = [("Mara Quill", "Tessby", "glass bells"), ("Oren Vale", "Lunmoor", "salt maps"),
              ("Pia Drent", "Corvath", "reed boats"), ("Ansel Brook", "Yarrow", "tin lamps"),
              ("Ida Fenn", "Harlow", "wool sails"), ("Tobin Rusk", "Emberly", "clay pipes"),
              ("Nell Ashby", "Quorra", "silk kites"), ("Cade Morrow", "Velmont", "iron keys")]


def _muse_doc(name, town, craft, i):
    """An article; it asks and answers its knowmem question too, so that the tiny base model can learn the answer."""
    return (f"Question: Where does {name} live?\nAnswer: {town}\n{name} lives in {town} and makes {craft}. "
            f"Every spring {name} sells {craft} at the market of {town}, and people come from far away to buy them. "
            f"Story {i}.")


def write_muse(root, corpus="news"):
    """MUSE's data/<corpus>/ layout with its file names (muse_bench constants.py, README, the scal / sust scripts)."""
    d = root / "muse" / corpus
    docs = [_muse_doc(*f, i) for i, f in enumerate(MUSE_FACTS)]
    forget, retain, holdout = docs[:3], docs[3:6], docs[6:]

    def text(path, items):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n\n".join(items) + "\n", encoding="utf-8")

    def js(path, obj):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(obj), encoding="utf-8")

    text(d / "raw" / "forget.txt", forget)
    text(d / "raw" / "retain1.txt", retain)
    text(d / "raw" / "retain2.txt", retain[:2])
    text(d / "raw" / "holdout.txt", holdout)
    qa = lambda fs: [{"question": f"Where does {n} live?", "answer": t} for n, t, _ in fs]  # noqa: E731
    js(d / "knowmem" / "forget_qa.json", qa(MUSE_FACTS[:3]))
    js(d / "knowmem" / "forget_qa_icl.json", qa(MUSE_FACTS[6:7]))  # in-context examples: questions of the same kind
    js(d / "knowmem" / "retain_qa.json", qa(MUSE_FACTS[3:6]))
    js(d / "knowmem" / "retain_qa_icl.json", qa(MUSE_FACTS[7:8]))
    js(d / "verbmem" / "forget.json", [{"prompt": x[:30], "gt": x[30:]} for x in forget])
    js(d / "privleak" / "forget.json", forget)
    js(d / "privleak" / "retain.json", retain)
    js(d / "privleak" / "holdout.json", holdout)
    # scalability: fold 1 is raw/forget.txt (no scal/forget_1.txt, as muse_bench's README says); growing folds
    text(d / "scal" / "forget_2.txt", forget + [_muse_doc("Mara Quill", "Tessby", "bronze bells", 10)])
    text(d / "scal" / "forget_3.txt", forget + [_muse_doc("Mara Quill", "Tessby", "bronze bells", 10),
                                                     _muse_doc("Oren Vale", "Lunmoor", "ink maps", 11)])
    # sustainability: three requests, the first the forget set
    text(d / "sust" / "forget_1.txt", forget)
    text(d / "sust" / "forget_2.txt", [_muse_doc("Pia Drent", "Corvath", "oak oars", 12)])
    text(d / "sust" / "forget_3.txt", [_muse_doc("Oren Vale", "Lunmoor", "ink maps", 13)])
    return d
