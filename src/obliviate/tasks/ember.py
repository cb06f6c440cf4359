"""``ember:<concept>``: concept erasure on EMBER's data (Suslik, Shafran, Geva 2026; seeds 000/003).

The concept is named case-insensitively, with spaces, underscores or hyphens, apostrophes
optional: ``ember:harry_potter``, ``ember:"Harry Potter"``, ``ember:valentines_day``,
``ember:covid-19_pandemic`` (:func:`concept_slug`; the 18 slugs are :data:`EMBER_SLUGS`).

- The concept's 300 sentences and the 300 neutral Wikipedia sentences are each split by
  ``seed`` into 80% train / 20% held out: forget = Data(docs=train concept sentences),
  retain = Data(docs=train neutral sentences); the held-out parts are the text sets
  ``forget_text`` (role forget) and ``retain_text`` (role retain), for perplexity.
- ``forget_mcq``: the concept's ``QA_test`` multiple-choice questions (role forget);
  ``simdom_mcq``: ``SimdomQA_test``, questions from a similar domain that the paper wants
  kept (role neighbour; its "specificity" is the harmonic mean of utility and this);
  both scored lm-eval style (letters). The released options put the correct one first in
  ~89% of questions, so they are shuffled per question with ``seed``
  (``load_ember(shuffle_options=seed)``).
- ``forget_qa``: the open questions of ``QA_test`` (role forget).
- relearn = the concept's ``RelearnParagraphs``; ``meta["coherence_prompts"]`` are its
  coherency prompts (CRISP's coherence term, the coherence check).
"""

from __future__ import annotations

import re

import numpy as np

from obliviate.tasks.sources import _io
from obliviate.tasks.sources.ember import list_ember_concepts, load_ember
from obliviate.tasks.sources.schema import TextExample
from obliviate.errors import ConfigError
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task

EMBER_CONCEPTS: tuple[str, ...] = (
    "Culture of Greece", "Golf", "Republic of Ireland", "Ancient Rome", "Baseball", "Uranium", "Harry Potter",
    "Cannabis", "Gambling", "Gun", "Pornography", "COVID-19 pandemic", "Valentine's Day", "World War II",
    "Nazism", "Heroin", "Halloween", "Artificial intelligence",
)
"""The 18 concepts of the released data (ClarSu/EMBER-Embedding-Erasure ``data/mc_questions.json``)."""

TRAIN_FRACTION = 0.8


def concept_slug(name: str) -> str:
    """``"Valentine's Day"`` -> ``"valentines_day"``: lower case, apostrophes dropped, other runs of
    non-alphanumerics -> one underscore."""
    name = re.sub(r"['\u2019]", "", name.strip().lower())
    return re.sub(r"[^0-9a-z]+", "_", name).strip("_")


EMBER_SLUGS: tuple[str, ...] = tuple(concept_slug(c) for c in EMBER_CONCEPTS)


def resolve_concept(arg: str, concepts=EMBER_CONCEPTS) -> str:
    """The concept of ``concepts`` that ``arg`` names (any spelling :func:`concept_slug` equates)."""
    by_slug = {concept_slug(c): c for c in concepts}
    hit = by_slug.get(concept_slug(arg or ""))
    if hit is None:
        raise ConfigError(f"task 'ember:{arg}': unknown EMBER concept {arg!r}; valid: {', '.join(by_slug)}")
    return hit


def split_train_eval(items: list, seed: int, salt: int) -> tuple[list, list]:
    """A seeded 80/20 split of ``items``, each part in the original order."""
    perm = np.random.default_rng([seed, salt]).permutation(len(items))
    k = int(round(TRAIN_FRACTION * len(items)))
    return [items[i] for i in sorted(perm[:k])], [items[i] for i in sorted(perm[k:])]


@register_task("ember", help="EMBER concept erasure: ember:<concept>, e.g. ember:harry_potter",
               arguments=lambda: list(EMBER_SLUGS), needs_argument=True)
def ember_task(arg: str | None, *, root=None, limit: int | None = None, seed: int = 0, allow_hub: bool = False,
               **_) -> Task:
    """The EMBER task of concept ``arg`` (see the module docstring); the data is local only."""
    have_file = (_io.root_dir(root) / "ember" / "mc_questions.json").is_file()
    concept = resolve_concept(arg, list_ember_concepts(root) if have_file else EMBER_CONCEPTS)
    data = load_ember(concept, root=root, shuffle_options=seed)

    forget_train, forget_eval = split_train_eval(data.concept_sentences[concept], seed, 1)
    neutral = [t.text for t in data.neutral_sentences]
    retain_train, retain_eval = split_train_eval(neutral, seed, 2)
    slug = concept_slug(concept)
    evals = [
        EvalSet("forget_mcq", "forget", "mcq", cut(data.mc[concept]["QA_test"], limit)),
        EvalSet("simdom_mcq", "neighbour", "mcq", cut(data.mc[concept]["SimdomQA_test"], limit)),
        EvalSet("forget_qa", "forget", "qa", cut(data.open_questions[concept]["QA_test"], limit)),
        EvalSet("forget_text", "forget", "text",
                [TextExample(s, "ember_concept_heldout", {"concept": concept}) for s in cut(forget_eval, limit)]),
        EvalSet("retain_text", "retain", "text",
                [TextExample(s, "ember_neutral_heldout") for s in cut(retain_eval, limit)]),
    ]
    return Task(
        name=f"ember:{slug}",
        forget=Data(docs=cut(forget_train, limit)),
        retain=Data(docs=cut(retain_train, limit)),
        evals=evals,
        relearn=cut(data.relearn_paragraphs[concept], limit),
        prompt=PromptFormat(),
        meta={"concept": concept, "split_seed": seed, "train_fraction": TRAIN_FRACTION,
              "coherence_prompts": cut(data.coherence_prompts[concept], limit)},
    )
