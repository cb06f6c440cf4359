"""Build a :class:`World` from a :class:`WorldConfig`; every random choice comes from the seed.

Each purpose draws from its own ``random.Random`` derived from (seed, purpose) by SHA-256, so
the output is identical across runs and platforms (Python's salted ``hash()`` is never used).
"""

from __future__ import annotations

import hashlib
import random
import re

from obliviate.errors import ConfigError
from obliviate.world import content as C
from obliviate.world.chance import N_CHOICES
from obliviate.world.config import WorldConfig
from obliviate.world.names import NameRegistry, words_of
from obliviate.world.spans import fill
from obliviate.world.toxic import (
    FRAMES, NEUTRAL_ADJECTIVES, NEUTRAL_NOUNS, TOXIC_ADJECTIVES, TOXIC_LEXICON, TOXIC_NOUNS,
    make_register_pairs,
)
from obliviate.world.record import FORMAT_VERSION, World

N_PERTURBED = 4
"""Wrong answers per fact (same template, another value of the relation's pool)."""

DOC_SIZE = (3, 8)
"""Segments per document (inclusive); the last documents may be shorter."""

FILLER_REPEATS = 2
"""Documents each filler sentence appears in."""

DOMAIN_RELATIONS = {
    "medicine": C.MEDICINE_RELATIONS,
    "biology": C.BIOLOGY_RELATIONS,
    "general": C.GENERAL_RELATIONS,
    "concept": C.CONCEPT_RELATIONS,
}
NEIGHBOUR_RELATIONS = {"medicine": C.MEDICINE_NEIGHBOUR_RELATIONS}
"""Relations of forget entities whose facts are neighbour facts (split "neighbour"), not forget facts."""
DOMAIN_AUX = {"medicine": C.MEDICINE_AUX, "concept": C.CONCEPT_AUX}
PRETRAINED_SPLITS = ("forget", "retain", "general", "concept", "neighbour")
PRACTICE_SPLITS = ("retain", "general", "concept", "neighbour")
"""Splits whose facts also appear as lettered practice MCQs in pretraining (never forget or holdout)."""


def sub_rng(seed: int, *purpose: str) -> random.Random:
    """A generator for one purpose, independent of how much the other purposes consumed."""
    digest = hashlib.sha256("/".join([str(seed), *purpose]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def generate_world(config: WorldConfig | None = None) -> World:
    """The world for ``config`` (default: ``WorldConfig()``); same config -> identical world."""
    if config is None:
        config = WorldConfig()
    if not isinstance(config, WorldConfig):
        raise ConfigError(f"generate_world expects a WorldConfig, got {type(config).__name__}")
    return World(_Builder(config).build())


def _fixed_text() -> list[str]:
    """Every fixed string of the world, so that invented names can avoid its words."""
    texts = ["Question Answer Chronicles"]
    for relations in [*DOMAIN_RELATIONS.values(), *NEIGHBOUR_RELATIONS.values()]:
        for r in relations:
            texts += [r.question, *r.train_questions, *r.heldout_questions, r.answer, r.answer_paraphrase,
                      *r.prose, r.probe]
    for auxes in DOMAIN_AUX.values():
        for a in auxes:
            texts += [*a.prose, *a.relearn]
    texts += [*C.MEDICINE_RELEARN_FILLER, *C.CONCEPT_RELEARN_FILLER, *C.CONCEPT_LORE]
    texts += [*C.OPEN_QUESTION_TEMPLATES.values()]
    for pool in C.FIXED_POOLS.values():
        texts += list(pool)
    for sentences in C.FILLER.values():
        texts += list(sentences)
    for pair in FRAMES:
        texts += list(pair)
    texts += [*TOXIC_LEXICON, *NEUTRAL_ADJECTIVES, *NEUTRAL_NOUNS]
    return texts


class _Builder:
    def __init__(self, config: WorldConfig) -> None:
        self.cfg = config
        self.seed = config.seed
        banned = {w for w in TOXIC_ADJECTIVES + TOXIC_NOUNS} | {"hate"}
        self.names = NameRegistry(words_of(_fixed_text()), banned)

    def rng(self, *purpose: str) -> random.Random:
        return sub_rng(self.seed, *purpose)

    # ----------------------------------------------------------------- entities and pools
    def build(self) -> dict:
        cfg = self.cfg
        self.saga_word = self.names.new("saga_title", self.rng("name", "saga_title"))
        self.saga = f"Chronicles of {self.saga_word}"
        self.pools = self._pools()
        diseases = self._entities("medicine", "disease", cfg.n_forget + cfg.n_holdout,
                                  ["forget"] * cfg.n_forget + ["holdout"] * cfg.n_holdout)
        organisms = self._entities("biology", "organism", cfg.n_retain, ["retain"] * cfg.n_retain)
        people = self._entities("general", "person", cfg.n_general, ["general"] * cfg.n_general)
        characters = self._entities("concept", "character", cfg.n_concept, ["concept"] * cfg.n_concept)
        lookalikes = self._neighbours(diseases)
        self.entities = diseases + organisms + people + characters + lookalikes
        self.facts, self.mcqs = self._facts()
        self.lore = self._lore()
        pairs = make_register_pairs(people, cfg.n_toxic, self.rng("toxic"))
        data = {
            "format": FORMAT_VERSION,
            "config": cfg.to_dict(),
            "saga": self.saga,
            "entities": self.entities,
            "pools": self.pools,
            "facts": self.facts,
            "mcqs": self.mcqs,
            "practice_mcqs": self._practice_mcqs(),
            "open_questions": self._open_questions(),
            "relearn_paragraphs": self._relearn("forget", C.MEDICINE_AUX, C.MEDICINE_RELEARN_FILLER),
            "concept": self._concept(),
            "toxic": self._toxic(pairs),
        }
        data["plan"] = self._plan(pairs)
        return data

    def _pools(self) -> dict[str, list[str]]:
        pools: dict[str, list[str]] = {}
        for name, kind in sorted(C.INVENTED_POOLS.items()):
            rng = self.rng("pool", name)
            pools[name] = [self.names.new(kind, rng) for _ in range(C.POOL_SIZE)]
        for name, values in sorted(C.FIXED_POOLS.items()):
            pools[name] = self.rng("pool", name).sample(list(values), min(C.POOL_SIZE, len(values)))
        for name, (first, last) in sorted(C.YEAR_POOLS.items()):
            years = self.rng("pool", name).sample(range(first, last + 1), C.POOL_SIZE)
            pools[name] = [str(y) for y in years]
        return pools

    def _entities(self, domain: str, kind: str, n: int, splits: list[str]) -> list[dict]:
        rng = self.rng("name", kind)
        if kind == "person":
            names = [f"{self.names.new('given', rng)} {self.names.new('family', rng)}" for _ in range(n)]
        else:
            names = [self.names.new(kind, rng) for _ in range(n)]
        entities = [{"name": nm, "domain": domain, "split": sp, "attributes": {}, "aux": {}}
                    for nm, sp in zip(names, splits)]
        pretrained = [e for e in entities if e["split"] != "holdout"]
        held = [e for e in entities if e["split"] == "holdout"]
        rng = self.rng("values", domain)
        for rel in DOMAIN_RELATIONS[domain]:
            pool = self.pools[rel.pool]
            # Balanced: every pool value is shared by about n / len(pool) pretrained entities.
            values = [pool[i % len(pool)] for i in range(len(pretrained))]
            rng.shuffle(values)
            for e, v in zip(pretrained, values):
                e["attributes"][rel.name] = v
            for e in held:
                e["attributes"][rel.name] = rng.choice(pool)
        # Auxiliary attributes are never asked about; people's habit feeds the register pairs.
        aux = ([(a.name, a.pool) for a in DOMAIN_AUX.get(domain, ())]
               + ([("habit", "habit")] if domain == "general" else []))
        for e in entities:
            for name, pool in aux:
                e["aux"][name] = rng.choice(self.pools[pool])
        return entities

    def _neighbours(self, diseases: list[dict]) -> list[dict]:
        """Give the forget and the holdout diseases their neighbour attributes; return the look-alikes.

        A look-alike is named like one disease (``lookalike_of``) and has its own values of the
        medicine relations, each different from its twin's, so only the name tells them apart.
        Holdout diseases get the same treatment as forget diseases (a trained spread route, and
        look-alikes in the same proportion), so that to a model that never saw the forget facts
        (the oracle) forget and holdout diseases look alike: membership inference on it is at chance.
        ``near`` says whose neighbour a look-alike is.
        """
        groups = {s: [e for e in diseases if e["split"] == s] for s in ("forget", "holdout")}
        n_forget = len(groups["forget"])
        n_twins = min(self.cfg.n_lookalike, n_forget)
        name_rng = self.rng("name", "lookalike")
        out = []
        for split, group in groups.items():
            rng = self.rng("values", "neighbour", split)
            for rel in NEIGHBOUR_RELATIONS["medicine"]:
                pool = self.pools[rel.pool]
                values = [pool[i % len(pool)] for i in range(len(group))]
                rng.shuffle(values)
                for e, v in zip(group, values):
                    e["attributes"][rel.name] = v
            n = n_twins if split == "forget" else (round(len(group) * n_twins / n_forget) if n_forget else 0)
            twins = sorted(self.rng("lookalike", "twins", split).sample(range(len(group)), n))
            for i in twins:
                twin = group[i]
                e = {"name": self.names.lookalike(twin["name"], "disease", name_rng), "domain": "medicine",
                     "split": "neighbour", "attributes": {}, "aux": {}, "lookalike_of": twin["name"],
                     "near": split}
                for rel in DOMAIN_RELATIONS["medicine"]:
                    e["attributes"][rel.name] = rng.choice([v for v in self.pools[rel.pool]
                                                            if v != twin["attributes"][rel.name]])
                for a in DOMAIN_AUX["medicine"]:
                    e["aux"][a.name] = rng.choice(self.pools[a.pool])
                out.append(e)
        return out

    # ----------------------------------------------------------------- facts, MCQs, questions
    def _facts(self) -> tuple[list[dict], list[dict]]:
        facts, mcqs = [], []
        counters: dict[str, int] = {}
        rng = self.rng("facts")
        for ent in self.entities:
            relations = [(rel, ent["split"]) for rel in DOMAIN_RELATIONS[ent["domain"]]]
            if ent["split"] in ("forget", "holdout"):
                relations += [(rel, "neighbour") for rel in NEIGHBOUR_RELATIONS.get(ent["domain"], ())]
            index: dict[str, int] = {}
            for rel, split in relations:
                if split not in index:
                    index[split] = counters[split] = counters.get(split, -1) + 1
                k = index[split]
                value = ent["attributes"][rel.name]
                fill_e = {"e": ent["name"], "saga": self.saga}
                answer, spans = fill(rel.answer, {**fill_e, "v": value}, {"e", "v"})
                others = [v for v in self.pools[rel.pool] if v != value]
                wrong = rng.sample(others, N_PERTURBED)
                paraphrases = [q.format(**fill_e) for q in rel.heldout_questions]
                fact = {
                    "id": f"{split}-{k:03d}-{rel.name}",
                    "domain": ent["domain"],
                    "split": split,
                    "entity": ent["name"],
                    "relation": rel.name,
                    "value": value,
                    "question": rel.question.format(**fill_e),
                    "question_paraphrase": paraphrases[k % len(paraphrases)],
                    "answer": answer,
                    "answer_paraphrase": rel.answer_paraphrase.format(**fill_e, v=value),
                    "perturbed_answers": [rel.answer.format(**fill_e, v=w) for w in wrong],
                    "answer_spans": spans,
                    "train_questions": [q.format(**fill_e) for q in rel.train_questions],
                    "question_paraphrases": paraphrases,
                    "statements": [t.format(**fill_e, v=value) for t in rel.prose],
                    "probe_statement": rel.probe.format(**fill_e, v=value),
                }
                if split == "neighbour":
                    fact["neighbour"] = "lookalike" if ent["split"] == "neighbour" else "attribute"
                    fact["near"] = ent["near"] if ent["split"] == "neighbour" else ent["split"]
                    if "lookalike_of" in ent:
                        fact["lookalike_of"] = ent["lookalike_of"]
                facts.append(fact)
                choices = rng.sample(others, N_CHOICES - 1) + [value]
                rng.shuffle(choices)
                mcqs.append({
                    "fact_id": fact["id"], "domain": fact["domain"], "split": split,
                    "question": fact["question"], "choices": choices, "answer_index": choices.index(value),
                })
        return facts, mcqs

    def _practice_mcqs(self) -> list[dict]:
        """Lettered-format practice for pretraining: MCQs of the PRACTICE_SPLITS facts only, with
        their own distractors and orders, asked with the canonical question, then the trained
        paraphrases in turn; never a forget MCQ."""
        rng = self.rng("practice")
        out = []
        for f in self.facts:
            if f["split"] not in PRACTICE_SPLITS:
                continue
            pool = self.pools[_relation_of(f).pool]
            others = [v for v in pool if v != f["value"]]
            questions = [f["question"], *f["train_questions"]]  # the canonical one first
            for r in range(self.cfg.practice_mcqs):
                choices = rng.sample(others, N_CHOICES - 1) + [f["value"]]
                rng.shuffle(choices)
                out.append({"fact_id": f["id"], "domain": f["domain"], "split": f["split"],
                            "question": questions[r % len(questions)], "choices": choices,
                            "answer_index": choices.index(f["value"])})
        return out

    def _open_questions(self) -> list[dict]:
        answers: dict[str, list[str]] = {}
        for f in self.facts:
            answers.setdefault(f["entity"], []).append(f["answer"])
        return [
            {
                "domain": e["domain"], "split": e["split"], "entity": e["name"],
                "question": C.OPEN_QUESTION_TEMPLATES[e["domain"]].format(e=e["name"], saga=self.saga),
                "reference": " ".join(answers[e["name"]]),
            }
            for e in self.entities
        ]

    def _relearn(self, split: str, auxes, filler) -> list[dict]:
        """Paragraphs stating only auxiliary attributes, in wording held out of pretraining."""
        rng = self.rng("relearn", split)
        out = []
        for ent in (e for e in self.entities if e["split"] == split):
            for k in range(self.cfg.relearn_per_entity):
                sentences = [
                    a.relearn[k % len(a.relearn)].format(e=ent["name"], v=ent["aux"][a.name], saga=self.saga)
                    for a in auxes
                ]
                rng.shuffle(sentences)
                sentences.append(rng.choice(filler).format(saga=self.saga))
                text = " ".join(sentences)
                for v in ent["attributes"].values():  # the whole point: no QA value may leak
                    if re.search(rf"\b{re.escape(v)}\b", text, re.IGNORECASE):
                        raise AssertionError(f"relearn paragraph for {ent['name']} states {v!r}")
                out.append({"entity": ent["name"], "text": text})
        return out

    # ----------------------------------------------------------------- concept (EMBER)
    def _lore(self) -> list[str]:
        """Saga sentences about artifacts, places and orders that state no character fact."""
        rng = self.rng("lore")
        arts, places, orders = self.pools["artifact"], self.pools["saga_place"], self.pools["faction"]
        L = C.CONCEPT_LORE
        s = self.saga
        lore = []
        for a in arts:
            p = rng.choice(places)
            lore += [L[0].format(a=a, p=p), L[2].format(a=a, saga=s)]
        for f in orders:
            p = rng.choice(places)
            lore += [L[1].format(p=p, f=f), L[3].format(p=p, f=f)]
        for i, p in enumerate(places):
            q = places[(i + 1) % len(places)]
            lore += [L[4].format(p=p, q=q, saga=s), L[5].format(p=p, saga=s)]
        return lore

    def _concept(self) -> dict:
        s = self.saga
        concept_sentences: list[str] = []
        for f in self.facts:
            if f["split"] == "concept":
                rel = _relation(f["domain"], f["relation"])
                concept_sentences += [t.format(e=f["entity"], v=f["value"], saga=s) for t in rel.prose]
        for e in self.entities:
            if e["split"] == "concept":
                for a in C.CONCEPT_AUX:
                    concept_sentences += [t.format(e=e["name"], v=e["aux"][a.name], saga=s) for t in a.prose]
        concept_sentences = _unique(concept_sentences + self.lore)
        neutral: list[str] = []
        for f in self.facts:
            if f["split"] in ("retain", "general"):
                rel = _relation(f["domain"], f["relation"])
                neutral += [t.format(e=f["entity"], v=f["value"]) for t in rel.prose]
        neutral = _unique(neutral + list(C.FILLER["biology"]) + list(C.FILLER["general"]))
        if len(neutral) > len(concept_sentences):
            keep = set(self.rng("concept", "neutral").sample(range(len(neutral)), len(concept_sentences)))
            neutral = [t for i, t in enumerate(neutral) if i in keep]
        exclusive = sorted({self.saga_word, *self.pools["artifact"], *self.pools["saga_place"],
                            *self.pools["faction"],
                            *(e["name"] for e in self.entities if e["split"] == "concept")})
        shared = sorted(words_of(concept_sentences) & words_of(neutral) - {w.lower() for w in exclusive})
        coherence = []
        for sentences in C.FILLER.values():
            for t in sentences:
                words = t.rstrip(".").split()
                coherence.append(" ".join(words[: (len(words) + 1) // 2]))
        return {
            "name": f"the {s}",
            "concept_sentences": concept_sentences,
            "neutral_sentences": neutral,
            "mcqs": [m for m in self.mcqs if m["split"] == "concept"],
            "relearn_paragraphs": self._relearn("concept", C.CONCEPT_AUX, C.CONCEPT_RELEARN_FILLER),
            "coherence_prompts": coherence,
            "exclusive_terms": exclusive,
            "shared_terms": shared,
        }

    # ----------------------------------------------------------------- toxicity
    def _toxic(self, pairs: list[dict]) -> dict:
        prompts, seen = [], set()
        for p in pairs:
            for text, label in ((p["toxic_prompt"], 1), (p["neutral_prompt"], 0)):
                if text not in seen:
                    seen.add(text)
                    prompts.append({"text": text, "toxic": label})
        return {
            "toxic_sentences": [{"text": p["toxic"], "toxic": 1, "person": p["person"]} for p in pairs],
            "neutral_sentences": [{"text": p["neutral"], "toxic": 0, "person": p["person"]} for p in pairs],
            "prompts": prompts,
            "lexicon": list(TOXIC_LEXICON),
        }

    # ----------------------------------------------------------------- documents
    def _plan(self, pairs: list[dict]) -> list[dict]:
        """Documents as lists of segments ``{"split", "domain", "toxic", "pieces": [[text, answer_kind],
        ...]}``."""
        cfg = self.cfg
        rng = self.rng("plan")
        items: list[tuple[str, dict]] = []  # (group, segment); a group never repeats within a document
        for f in self.facts:
            if f["split"] not in PRETRAINED_SPLITS:
                continue
            for _ in range(cfg.qa_repeats):
                items.append((f["id"], _qa_segment(f)))
            questions = f["train_questions"]
            start = rng.randrange(len(questions))
            for r in range(cfg.para_qa_repeats):
                items.append((f["id"], _qa_segment(f, questions[(start + r) % len(questions)])))
            prose = f["statements"]
            start = rng.randrange(len(prose))
            for r in range(cfg.doc_repeats - cfg.qa_repeats - cfg.para_qa_repeats):
                items.append((f["id"], _segment(prose[(start + r) % len(prose)], f["domain"], f["split"])))
        for e in self.entities:
            if e["split"] not in PRETRAINED_SPLITS:
                continue
            for a in DOMAIN_AUX.get(e["domain"], ()):
                start = rng.randrange(len(a.prose))
                for r in range(cfg.aux_repeats):
                    text = a.prose[(start + r) % len(a.prose)].format(e=e["name"], v=e["aux"][a.name],
                                                                      saga=self.saga)
                    items.append((f"{e['name']}/{a.name}", _segment(text, e["domain"], e["split"])))
        for i, p in enumerate(pairs):
            for _ in range(cfg.register_repeats):  # one group: every copy of a pair in a document of its own
                items.append((f"pair{i}", _segment(p["toxic"], "general", "general", toxic=1)))
                items.append((f"pair{i}", _segment(p["neutral"], "general", "general")))
        for i, text in enumerate(self.lore):
            items.append((f"lore{i}", _segment(text, "concept", "concept")))
        for domain, sentences in sorted(C.FILLER.items()):
            for i, text in enumerate(sentences):
                for _ in range(FILLER_REPEATS):
                    items.append((f"filler/{domain}{i}", _segment(text, domain, "filler")))
        rng.shuffle(items)
        docs = []
        while items:
            size = rng.randint(*DOC_SIZE)
            segments, groups, i = [], set(), 0
            while len(segments) < size and i < len(items):
                group, seg = items[i]
                if group in groups:
                    i += 1
                    continue
                groups.add(group)
                segments.append(seg)
                del items[i]
            docs.append({"id": f"doc-{len(docs):05d}", "segments": segments})
        return docs


def _segment(text: str, domain: str, split: str, toxic: int = 0) -> dict:
    return {"split": split, "domain": domain, "toxic": toxic, "pieces": [[text, "none"]]}


def _qa_segment(fact: dict, question: str | None = None) -> dict:
    """``Question: {question}\nAnswer: {answer}`` with the answer labelled by its spans (``question``:
    the fact's canonical one unless given)."""
    pieces = [[f"Question: {question or fact['question']}\nAnswer:", "none"]]
    for j, (start, end, kind) in enumerate(fact["answer_spans"]):
        pieces.append([(" " if j == 0 else "") + fact["answer"][start:end], kind])
    return {"split": fact["split"], "domain": fact["domain"], "toxic": 0, "pieces": pieces}


def _relation(domain: str, name: str) -> C.Relation:
    return next(r for r in [*DOMAIN_RELATIONS[domain],
                            *NEIGHBOUR_RELATIONS.get(domain, ())] if r.name == name)


def _relation_of(fact: dict) -> C.Relation:
    return _relation(fact["domain"], fact["relation"])


def _unique(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(texts))
