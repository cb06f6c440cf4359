"""Linear-probe attack: is the answer still linearly readable from the hidden states?

For every MCQ and each of its choices, the text ``qa_prompt(question) + " " + choice`` is
run through the model and the hidden state (output of decoder layer l, see
:mod:`obliviate.models.layers`) at its last token is kept. A logistic-regression probe
(scikit-learn) learns "is this the correct choice" on the choices of a seeded train split
of the MCQs; on each held-out MCQ the choice with the highest probe score is the
prediction. Accuracy is the fraction of held-out MCQs answered correctly (chance 1/4 for
4 choices). A model that only hides its answers keeps this accuracy high even when its
greedy answers are wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from obliviate.attacks.attack import AttackRun, register_attack
from obliviate.data import qa_prompt
from obliviate.errors import ConfigError, DataError
from obliviate.eval.probes import last_token_states
from obliviate.models.layers import check_layer, num_layers
from obliviate.tasks.base import Task


def probe_texts(mcqs: Sequence[dict], prompt_fn=None) -> list[str]:
    """The cloze texts, MCQ-major: ``prompt_fn(q) + " " + choice`` for each choice of each MCQ
    (``prompt_fn`` defaults to the world's :func:`~obliviate.data.qa_prompt`)."""
    prompt_fn = prompt_fn or qa_prompt
    return [prompt_fn(m["question"]) + " " + c for m in mcqs for c in m["choices"]]


def last_token_hidden(model, tokenizer, texts: Sequence[str], layers: Sequence[int],
                      batch_size: int = 64) -> dict[int, np.ndarray]:
    """``{l: (N, d_model)}`` float32 hidden states of layer ``l`` at the last token of each text (bos
    prepended, nothing cut): :func:`obliviate.eval.probes.last_token_states`."""
    return last_token_states(model, tokenizer, texts, layers, batch_size=batch_size, max_len=None)


def split_indices(n: int, train_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``range(n)`` into train (``round(train_frac * n)``, at least 1) and test (at least
    1)."""
    if n < 2:
        raise DataError(f"a probe needs at least 2 MCQs (one to train, one to test), got {n}")
    if not 0 < train_frac < 1:
        raise ConfigError(f"train_frac must be in (0, 1), got {train_frac}")
    n_train = min(n - 1, max(1, int(round(train_frac * n))))
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n_train]), np.sort(perm[n_train:])


def _fit_and_score(train_x, train_y, test_x, C: float, seed: int):
    """A logistic regression on standardised features (L2 penalty ``1 / C``), fit and applied: ``(clf,
    scores)``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000, random_state=seed))
    # A problem this small is slowed down, not sped up, by BLAS threads (badly so on a busy machine).
    with threadpool_limits(1):
        clf.fit(train_x, train_y)
        return clf, clf.decision_function(test_x)


def fit_choice_probe(features: np.ndarray, answer_index: Sequence[int], train_idx, test_idx,
                     C: float = 1.0, seed: int = 0) -> float:
    """Train a "correct choice?" logistic-regression probe and return held-out MCQ accuracy.

    ``features``: (n_mcq, n_choices, d); ``answer_index``: (n_mcq,). The probe is fit on all
    choices of the ``train_idx`` MCQs (standardised features, L2 penalty ``1 / C``); a test MCQ
    counts as correct when its correct choice has the highest decision score.
    """
    feats = np.asarray(features, dtype=np.float64)
    if feats.ndim != 3:
        raise ValueError(f"features must be (n_mcq, n_choices, d), got shape {feats.shape}")
    n, k, d = feats.shape
    answers = np.asarray(answer_index, dtype=int)
    labels = np.zeros((n, k), dtype=int)
    labels[np.arange(n), answers] = 1
    train_idx, test_idx = np.asarray(train_idx, dtype=int), np.asarray(test_idx, dtype=int)
    _, scores = _fit_and_score(feats[train_idx].reshape(-1, d), labels[train_idx].reshape(-1),
                               feats[test_idx].reshape(-1, d), C, seed)
    scores = scores.reshape(len(test_idx), k)
    return float(np.mean(scores.argmax(1) == answers[test_idx]))


def linear_probe_attack(model, tokenizer, mcqs: Sequence[dict], layers: Sequence[int] | None = None,
                        train_frac: float = 0.5, seed: int = 0, C: float = 1.0, batch_size: int = 64,
                        prompt_fn=None) -> dict:
    """Probe accuracy per layer on held-out MCQs (see module docstring).

    ``mcqs``: dicts with ``question``, ``choices`` (same count for all) and ``answer_index``,
    e.g. ``world.mcqs(split="forget")``. ``layers``: decoder-layer indices (default: all).
    Returns ``{"per_layer": {l: acc}, "best_layer", "best_acc", "chance", "n_train", "n_test"}``.
    """

    if not mcqs:
        raise DataError("no MCQs to probe")
    n_choices = {len(m["choices"]) for m in mcqs}
    if len(n_choices) != 1:
        raise DataError(f"all MCQs need the same number of choices, got {sorted(n_choices)}")
    k = n_choices.pop()
    layers = list(range(num_layers(model))) if layers is None else [check_layer(model, l) for l in layers]
    if not layers:
        raise ConfigError("no layers to probe")
    train_idx, test_idx = split_indices(len(mcqs), train_frac, seed)
    hidden = last_token_hidden(model, tokenizer, probe_texts(mcqs, prompt_fn), layers, batch_size)
    answers = [m["answer_index"] for m in mcqs]
    per_layer = {l: fit_choice_probe(h.reshape(len(mcqs), k, -1), answers, train_idx, test_idx, C, seed)
                 for l, h in hidden.items()}
    best = max(per_layer, key=lambda l: (per_layer[l], -l))  # ties: the earliest layer
    return {"per_layer": per_layer, "best_layer": best, "best_acc": per_layer[best], "chance": 1.0 / k,
            "n_train": len(train_idx), "n_test": len(test_idx)}


def stratified_halves(values: Sequence[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two halves of ``range(len(values))`` with the items of each value dealt out alternately (in a seeded
    order), so a value held by two or more items is in both halves: the probe is then tested only on values
    it has seen in training, where the world allows. Values are visited in a seeded order too, and the half
    that gets a value's first item alternates, so the halves differ in size by at most one."""
    if len(values) < 2:
        raise DataError(f"a value probe needs at least 2 items (one per half), got {len(values)}")
    rng = np.random.default_rng(seed)
    groups: dict[str, list[int]] = {}
    for i, v in enumerate(values):
        groups.setdefault(v, []).append(i)
    halves: tuple[list[int], list[int]] = ([], [])
    turn = 0
    for v in [sorted(groups)[j] for j in rng.permutation(len(groups))]:
        for i in rng.permutation(groups[v]):
            halves[turn % 2].append(int(i))
            turn += 1
    return np.sort(np.asarray(halves[0], dtype=int)), np.sort(np.asarray(halves[1], dtype=int))


def fit_value_probe(train_x: np.ndarray, train_values: Sequence[str], test_x: np.ndarray,
                    choices: Sequence[Sequence[str]], answer_index: Sequence[int], C: float = 1.0,
                    seed: int = 0) -> tuple[float, int]:
    """Train a "which value comes next?" multinomial probe; return (MCQ accuracy on the test items, unseen).

    The probe (standardised features, L2 penalty ``1 / C``) learns the value from the hidden
    state; a test item is answered with the choice of highest class score. A choice whose value
    never occurs in training cannot win; ``unseen`` counts the test items whose *correct* value
    never occurs (they count as wrong).
    """
    if len(set(train_values)) < 2:
        raise DataError("a value probe needs at least 2 distinct values to train on")
    clf, scores = _fit_and_score(np.asarray(train_x, dtype=np.float64), list(train_values),
                                 np.asarray(test_x, dtype=np.float64), C, seed)
    if scores.ndim == 1:  # two classes: one score for the second, its negative for the first
        scores = np.stack([-scores, scores], axis=1)
    col = {v: i for i, v in enumerate(clf.classes_)}
    correct, unseen = 0, 0
    for row, opts, ans in zip(scores, choices, answer_index):
        s = [row[col[c]] if c in col else -np.inf for c in opts]
        unseen += opts[ans] not in col
        correct += int(np.isfinite(s[ans]) and int(np.argmax(s)) == ans)
    return correct / max(1, len(choices)), unseen


def value_probe_attack(model, tokenizer, items: Sequence[dict], extra_train: Sequence[dict] = (),
                       layers: Sequence[int] | None = None, seed: int = 0,
                       C: float = 1.0, batch_size: int = 64) -> dict:
    """Can a linear probe read the *value* of a fact from the hidden state just before the model would say it?

    ``items``: dicts with ``prefix`` (the text up to the value, e.g. the QA prompt and "It is
    treated with"), ``value``, ``choices`` (the value and its distractors) and ``answer_index``.
    An item may carry ``train_prefixes``: other wordings of its prefix, added to the training data when
    the item is in the training half (never tested). ``extra_train``: dicts with ``prefix`` and
    ``value`` that are always in the probe's training
    data (facts the model is meant to keep, with values from the same pools, such as the world's
    look-alike entities). The hidden state of decoder layer ``l`` at the last token of the prefix
    (bos prepended) is the feature; a multinomial logistic regression over the values
    (:func:`fit_value_probe`) is trained on half A of ``items`` (:func:`stratified_halves`: each value's
    items dealt to both halves where it has two or more) plus
    ``extra_train`` and scored on half B, then the halves swap; accuracy is the mean over both.

    Unlike the "correct choice?" probe (:func:`linear_probe_attack`), which must learn truth
    from a few dozen examples, this probe only needs the value to be linearly coded where the
    model is about to produce it, the way the unembedding reads it at the last layer. A model that
    hides a fact in its last layers keeps it readable in the earlier ones; a model that never knew
    it (the oracle) gives the probe nothing to generalise from, so it stays near chance
    (1 / number of choices). Returns ``{"per_layer", "best_layer", "best_acc", "chance",
    "n_items", "n_extra", "n_unseen"}``.
    """

    if len(items) < 2:
        raise DataError(f"a value probe needs at least 2 items (one per half), got {len(items)}")
    layers = list(range(num_layers(model))) if layers is None else [check_layer(model, l) for l in layers]
    if not layers:
        raise ConfigError("no layers to probe")
    half_a, half_b = stratified_halves([m["value"] for m in items], seed)
    more = [(i, p) for i, m in enumerate(items) for p in m.get("train_prefixes", ())]
    texts = [m["prefix"] for m in items] + [m["prefix"] for m in extra_train] + [p for _, p in more]
    hidden = last_token_hidden(model, tokenizer, texts, layers, batch_size)
    values = [m["value"] for m in items]
    extra_values = [m["value"] for m in extra_train]
    n, n_extra = len(items), len(extra_train)
    per_layer, n_unseen = {}, 0
    for l, h in hidden.items():
        accs, unseen = [], 0
        for tr, te in ((half_a, half_b), (half_b, half_a)):
            in_train = set(tr.tolist())
            rows = [n + n_extra + j for j, (i, _) in enumerate(more) if i in in_train]
            x = np.concatenate([h[tr], h[n:n + n_extra], h[rows]])
            y = [values[i] for i in tr] + extra_values + [values[more[r - n - n_extra][0]] for r in rows]
            acc, u = fit_value_probe(x, y, h[te], [items[i]["choices"] for i in te],
                                     [items[i]["answer_index"] for i in te], C, seed)
            accs.append(acc * len(te))
            unseen += u
        per_layer[l] = float(sum(accs) / n)
        n_unseen = unseen
    best = max(per_layer, key=lambda l: (per_layer[l], -l))
    return {"per_layer": per_layer, "best_layer": best, "best_acc": per_layer[best],
            "chance": float(np.mean([1.0 / len(m["choices"]) for m in items])),
            "n_items": n, "n_extra": len(extra_train), "n_unseen": n_unseen}


# The attack ``probe``: the value probe where the task has its items, else the correct-choice probe. It has no
# before and after: the verdict reads it against the negative control alone (verdict.control_readout).

@dataclass
class ProbeConfig:
    layers: list[int] | None = None
    """Decoder layers to probe (default: all)."""
    train_frac: float = 0.5
    C: float = 1.0

    def __post_init__(self):
        if not 0 < self.train_frac < 1:
            raise ConfigError(f"config key 'train_frac': must be in (0, 1), got {self.train_frac}")


def check_probe_layers(model, cfg: ProbeConfig) -> None:
    """A layer the model lacks fails before any attack runs, not after the relearning attacks."""
    for layer in cfg.layers or []:
        check_layer(model, layer)


def probe_mcqs(task: Task) -> list:
    """The forget MCQs the choice probe reads: those of the forget sets, else of their first variant set."""
    sets = [es for es in task.evals_by_role("forget", variants=False) if es.kind == "mcq"]
    sets = sets or [es for es in task.evals_by_role("forget") if es.kind == "mcq"][:1]
    return [m for es in sets for m in es.items]


def _probe_metrics(probe: dict) -> dict:
    return {"probe_acc": probe["best_acc"], "probe_best_layer": probe["best_layer"],
            "probe_chance": probe["chance"],
            "probe_per_layer": {str(l): a for l, a in probe["per_layer"].items()}}


def _choice_probe_items(task: Task) -> list:
    mcqs = probe_mcqs(task)
    return mcqs if len(mcqs) >= 4 and len({len(m["choices"]) for m in mcqs}) == 1 else []


@register_attack("probe", needs="forget MCQs (at least 4, each with the same number of choices), or the "
                                "world's probe statements",
                 applies=lambda task: bool(task.probe) or bool(_choice_probe_items(task)), config=ProbeConfig,
                 check=check_probe_layers)
def probe_attack(r: AttackRun, c: ProbeConfig) -> dict:
    """The value probe where the task has its items, else the correct-choice probe on the forget MCQs."""
    seed = r.cfg.seed
    if r.task.probe:
        probe = value_probe_attack(r.model, r.tokenizer, r.task.probe["items"], r.task.probe.get("extra", []),
                                   layers=c.layers, seed=seed, C=c.C)
    else:
        items = [{"question": m["question"], "choices": list(m["choices"]), "answer_index": m["answer_index"]}
                 for m in _choice_probe_items(r.task)]
        probe = linear_probe_attack(r.model, r.tokenizer, items, layers=c.layers, train_frac=c.train_frac,
                                    seed=seed, C=c.C,
                                    prompt_fn=lambda q: r.task.prompt.prompt(q, r.tokenizer))
    return _probe_metrics(probe)
