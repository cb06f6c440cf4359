"""Scoring functions: generation, answer probabilities, MCQ log-likelihood, ROUGE, token losses, S-unlearning,
the harmonic mean of scores.

All model evaluations run under ``torch.no_grad`` in eval mode, in batches, and
accept any Hugging Face causal LM with its tokenizer (in memory). ``progress=True`` shows a
tqdm bar. Inputs longer than the model's context (:func:`model_max_length`) are cut from the
left, keeping the bos token, and one warning says how many were cut.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
import weakref
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from obliviate.data import answer_ids, clip_chars, collate, encode_prompt_answer, qa_answer, qa_prompt
from obliviate.errors import InvalidResult, ModelError
from obliviate.losses import at_least_float32, labelled_logits, token_nll
from obliviate.models.layers import evaluating, logits_at, unwrap
from obliviate.models.tokenizer import adds_bos, bos_prefix, pad_id

LETTERS = "ABCDEFGHIJ"


# ------------------------------------------------------------------ text metrics

def normalise_text(s: str) -> str:
    """Lower-case, drop punctuation, collapse whitespace (for exact match)."""
    s = s.lower()
    s = re.sub(r"[^\w\s]", " ", s)
    return " ".join(s.split())


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of the longest common subsequence of two token lists (ROUGE-L's numerator)."""
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


@functools.lru_cache(maxsize=1)
def _porter():
    from nltk.stem import porter

    return porter.PorterStemmer()


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return _porter().stem(word) if len(word) > 3 else word


def rouge_tokens(text: str) -> list[str]:
    """The words ROUGE compares, as the rouge-score package (which TOFU and OpenUnlearning use) makes them:
    lower-cased, every run of characters other than a-z and 0-9 a separator, and words longer than 3
    characters reduced by the Porter stemmer (NLTK's)."""
    return [_stem(w) for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


def rouge_l_recall(prediction: str, reference: str) -> float:
    """ROUGE-L recall: LCS(pred, ref) / len(ref) on :func:`rouge_tokens`, equal to rouge-score's
    ``RougeScorer(["rougeL"], use_stemmer=True)`` recall (TOFU's setting)."""
    ref = rouge_tokens(reference)
    if not ref:
        return 0.0
    return lcs_length(rouge_tokens(prediction), ref) / len(ref)


def chance_corrected(acc: float, base: float, chance: float) -> float:
    """clip((acc - chance) / (base - chance), 0, 1): 1 = as good as base, 0 = chance."""
    denom = base - chance
    if denom <= 0:
        return 0.0
    return float(min(1.0, max(0.0, (acc - chance) / denom)))


def harmonic_mean(values: Iterable[float]) -> float:
    """``n / sum(1 / v)`` of scores that are each "how much is kept" (TOFU's model utility, UQ, EMBER's delta
    score, a metric's robustness): 0 when any is 0 or below (one side lost sinks the mean). A ValueError
    naming the values for none at all or a value that is not a finite number."""
    v = [float(x) for x in values]
    if not v or not all(math.isfinite(x) for x in v):
        raise ValueError(f"a harmonic mean needs one or more finite numbers, got {v}")
    if min(v) <= 0:
        return 0.0
    return len(v) / sum(1.0 / x for x in v)


def s_unlearning(forget_base: float, forget_after: float, retain_base: float, retain_after: float,
                 chance: float = 0.0, retain_chance: float | None = None) -> dict:
    """S-unlearning (docs/evaluation.md): S = U * R.

    U = clip((A0 - Au) / (A0 - chance), 0, 1) on the forget evaluation;
    R = clip((Mu - chance) / (M0 - chance), 0, 1) on the retain evaluation.
    """
    rc = chance if retain_chance is None else retain_chance
    denom_u = forget_base - chance
    u = 0.0 if denom_u <= 0 else float(min(1.0, max(0.0, (forget_base - forget_after) / denom_u)))
    r = chance_corrected(retain_after, retain_base, rc)
    return {"u": u, "r": r, "s": u * r}


# ------------------------------------------------------------------ model helpers

def _device(model) -> torch.device:
    return next(model.parameters()).device


def _generation_kwargs(model) -> tuple[str, dict]:
    """What a generation step passes that transformers' versions name or take differently: the name of the
    KV-cache argument and output (``cache`` in transformers >= 5.2x, else ``past_key_values``), and
    ``{"logits_to_keep": 1}`` where the forward takes it (the unembedding then runs at the last position only,
    the one a step reads)."""
    import inspect

    params = inspect.signature(unwrap(model).forward).parameters
    return ("cache" if "cache" in params else "past_key_values",
            {"logits_to_keep": 1} if "logits_to_keep" in params else {})


def model_max_length(model) -> int | None:
    """The most positions ``model`` takes: ``config.max_position_embeddings`` (or ``n_positions``), else
    None."""
    config = getattr(unwrap(model), "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_logits(logits: torch.Tensor, mask: torch.Tensor | None = None, where: str = "evaluation") -> None:
    """:class:`InvalidResult` when ``logits`` (at the positions where ``mask`` is set) hold NaN or inf.

    Accuracies computed from NaN logits are arbitrary (an argmax over NaN) and used to read as
    successful forgetting; no score is computed from them."""
    sel = logits if mask is None else logits[mask.bool()]
    if not bool(torch.isfinite(sel).all()):
        raise InvalidResult(f"the model's logits hold NaN or infinite values ({where}); no score can be "
                            "computed from them (check the model's weights "
                            "and config, and its dtype for overflow)")


def fit_context(prefix: list[int], suffix: list[int], limit: int | None,
                bos: int | None) -> tuple[list[int], list[int], bool]:
    """Cut ``prefix`` from the left (keeping a leading bos) so that prefix + suffix has at most ``limit``
    tokens.

    Returns (prefix, suffix, cut?). When even the suffix alone is too long, one prefix token stays
    (the bos, else the last) and the suffix keeps its first tokens.
    """
    if limit is None or len(prefix) + len(suffix) <= limit:
        return prefix, suffix, False
    head = prefix[:1] if bos is not None and prefix[:1] == [bos] else []
    body = prefix[len(head):]
    room = limit - len(head) - len(suffix)
    if room >= 1 or (room == 0 and head):
        return head + body[len(body) - room:], suffix, True
    keep = head or prefix[-1:]
    return keep, suffix[:limit - len(keep)], True


def _bar(progress: bool, total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not progress, leave=False)


_STOP_TABLES = weakref.WeakKeyDictionary()  # tokenizer -> {(stop, n, vocabulary, special ids): table}
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def stop_token_table(tokenizer, stop: str, n: int) -> torch.Tensor:
    """``[n]`` booleans: which token ids decode, alone, to text that holds ``stop``. Once a row has generated
    one, its text up to ``stop`` is fixed and generation can end there (a stop split over two tokens is not
    seen, and the row runs on to its budget as before). Byte-fallback pieces (``<0x0A>``, SentencePiece's
    newline in Llama 2 or Mistral) never stop: their decoder turns a whole run of bytes into "�" when one of
    them is not valid UTF-8, so what follows can still take the stop away. Ids past the tokenizer's vocabulary
    (a padded embedding) never stop. Built once per tokenizer and stop."""
    try:
        tables = _STOP_TABLES.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable: no cache
        tables = {}
    key = (stop, n, len(tokenizer), tuple(tokenizer.all_special_ids))
    if key not in tables:
        m = min(n, len(tokenizer))
        texts = tokenizer.batch_decode([[i] for i in range(m)], skip_special_tokens=True)
        pieces = tokenizer.convert_ids_to_tokens(list(range(m)))
        table = torch.zeros(n, dtype=torch.bool)
        table[:m] = torch.tensor([stop in t and not (isinstance(p, str) and _BYTE_PIECE.fullmatch(p))
                                  for t, p in zip(texts, pieces)], dtype=torch.bool)
        tables[key] = table
    return tables[key]


@torch.no_grad()
@evaluating
def greedy_generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 24, batch_size: int = 64,
                    stop: str | None = "\n", progress: bool = False,
                    drafts: Sequence[str] | None = None) -> list[str]:
    """Greedy continuations of ``prompts`` (bos prepended), cut at ``stop``.

    A prompt longer than the model's context less ``max_new_tokens`` keeps its last tokens (and bos). A batch
    ends when each of its rows has generated eos or a token holding ``stop`` (:func:`stop_token_table`): the
    texts are those of running every row to ``max_new_tokens``. ``drafts`` (one text per prompt, such as the
    reference answer, tokenised as training sees it, eos after it) are checked first in one forward pass: a row
    keeps the draft's tokens while they are its own greedy ones (and ends where they end it), and generates on
    from its first other token, so the texts are the greedy ones, reached in fewer steps where the model
    answers as the draft does.
    """
    draft_ids = None if drafts is None else [answer_ids(tokenizer, d, tokenizer.eos_token_id) for d in drafts]
    return _generate(model, tokenizer, prompts, max_new_tokens, batch_size, stop, progress,
                     lambda logits: logits.argmax(-1), "greedy_generate", draft_ids)


def top_p_sample(logits: torch.Tensor, temperature: float, top_p: float,
                 gen: torch.Generator) -> torch.Tensor:
    """(B,) one token per row of ``logits`` (B, V): softmax at ``temperature``, kept to the smallest set of
    tokens whose probability reaches ``top_p`` (nucleus sampling, Holtzman et al. 2020; the most likely token
    always stays), drawn with ``gen``."""
    probs = torch.softmax(at_least_float32(logits) / temperature, -1)
    if top_p < 1.0:
        p, idx = probs.sort(-1, descending=True)
        drop = p.cumsum(-1) - p >= top_p  # the tokens after the set has reached top_p
        p = p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, idx, p)
    return torch.multinomial(probs, 1, generator=gen)[:, 0]


@torch.no_grad()
@evaluating
def sample_generate(model, tokenizer, prompts: list[str], n: int, max_new_tokens: int = 24, *,
                    temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, batch_size: int = 64,
                    stop: str | None = "\n", progress: bool = False) -> list[list[str]]:
    """``n`` sampled continuations of each prompt (:func:`top_p_sample`), cut at ``stop``: as
    :func:`greedy_generate` (the same batched, left-padded loop with the KV cache), each prompt repeated ``n``
    times in the batch. Seeded: the same ``seed``, prompts and batch size give the same texts."""
    if n < 1 or temperature <= 0 or not 0 < top_p <= 1:
        raise ValueError(f"sample_generate: needs n >= 1, temperature > 0 and 0 < top_p <= 1 "
                         f"(got {n}, {temperature}, {top_p})")
    gen = torch.Generator(device=_device(model)).manual_seed(seed)
    flat = _generate(model, tokenizer, [p for p in prompts for _ in range(n)], max_new_tokens, batch_size,
                     stop,
                     progress, lambda logits: top_p_sample(logits, temperature, top_p, gen),
                     "sample_generate")
    return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]


def _generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int, stop: str | None,
              progress: bool, pick, name: str, drafts: list[list[int]] | None = None) -> list[str]:
    """The generation loop of :func:`greedy_generate` and :func:`sample_generate`: ``pick(logits (B, V))``
    gives each row's next token; ``drafts`` (token ids, one list per prompt) are checked first
    (:meth:`_Stepper.take_drafts`)."""
    eos = tokenizer.eos_token_id
    adds = adds_bos(tokenizer)
    bos = tokenizer.bos_token_id if adds else None
    max_len = model_max_length(model)
    limit = None if max_len is None else max_len - max_new_tokens
    if limit is not None and limit < 1:
        raise ModelError(f"max_new_tokens={max_new_tokens} leaves no room "
                         f"for a prompt in the model's {max_len} positions")
    n_cut = 0
    outs: list[str] = []
    step = _Stepper(model, tokenizer, pick, stop)
    bar = _bar(progress, len(prompts), "generating")
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        enc = []
        clipped = [clip_chars(p, limit) for p in chunk]
        for p, c, p_ids in zip(chunk, clipped, tokenizer(clipped, add_special_tokens=False)["input_ids"]):
            ids, _, cut = fit_context(bos_prefix(tokenizer, p, adds=adds) + p_ids, [], limit, bos)
            enc.append(ids)
            n_cut += cut or len(p) > len(c)
        if drafts is None or max_new_tokens < 1:
            rows = step.run(enc, [max_new_tokens] * len(enc))
        else:
            rows, done = step.take_drafts(enc, drafts[i:i + batch_size], max_new_tokens)
            todo = [j for j, d in enumerate(done) if not d]
            if todo:  # on from each row's first token that is not its draft's
                more = step.run([enc[j] + rows[j] for j in todo], [max_new_tokens - len(rows[j]) for j in todo])
                for j, extra in zip(todo, more):
                    rows[j] = rows[j] + extra
        for row in rows:
            if eos is not None and eos in row:
                row = row[:row.index(eos)]
            text = tokenizer.decode(row, skip_special_tokens=True)
            if stop:
                text = text.split(stop)[0]
            outs.append(text)
        bar.update(len(chunk))
    bar.close()
    if n_cut:
        warnings.warn(f"{name}: {n_cut} of {len(prompts)} prompts were cut from the left to {limit} tokens "
                      f"so that prompt + max_new_tokens={max_new_tokens} "
                      f"fits the model's {max_len} positions",
                      stacklevel=4)
    return outs


class _Stepper:
    """One batch of :func:`_generate`: left-padded rows, the KV cache, and when a row is done (eos, or a token
    holding ``stop``: :func:`stop_token_table`)."""

    def __init__(self, model, tokenizer, pick, stop: str | None):
        self.model, self.tokenizer, self.pick, self.stop = model, tokenizer, pick, stop
        self.dev = _device(model)
        self.eos, self.pad = tokenizer.eos_token_id, pad_id(tokenizer)
        self.cache_kw, self.last_kw = _generation_kwargs(model)
        self.stops = None

    def _ends(self, tokens: torch.Tensor, n: int) -> torch.Tensor:
        """Booleans: which of ``tokens`` end a row (``n``: the logits' vocabulary)."""
        done = tokens == self.eos if self.eos is not None else torch.zeros_like(tokens, dtype=torch.bool)
        if self.stop:
            if self.stops is None:
                self.stops = stop_token_table(self.tokenizer, self.stop, n).to(tokens.device)
            done = done | self.stops[tokens]
        return done

    def _padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``rows`` left-padded: ids, attention mask and position ids."""
        T = max(len(r) for r in rows)
        ids = torch.full((len(rows), T), self.pad, dtype=torch.long)
        att = torch.zeros((len(rows), T), dtype=torch.long)
        for j, r in enumerate(rows):
            ids[j, T - len(r):] = torch.as_tensor(r)
            att[j, T - len(r):] = 1
        ids, att = ids.to(self.dev), att.to(self.dev)
        return ids, att, (att.cumsum(-1) - 1).clamp(min=0)

    def run(self, enc: list[list[int]], budgets: list[int]) -> list[list[int]]:
        """Each row of ``enc`` generated on, at most its budget's tokens; the batch stops when every row is
        done."""
        cur_ids, att, cur_pos = self._padded(enc)
        done = torch.zeros(len(enc), dtype=torch.bool, device=self.dev)
        gen = []
        past = None
        for _ in range(max(budgets)):
            out = self.model(input_ids=cur_ids, attention_mask=att, position_ids=cur_pos, use_cache=True,
                             **{self.cache_kw: past}, **self.last_kw)
            past = getattr(out, self.cache_kw, None)
            check_logits(out.logits[:, -1], where="generation")
            nxt = self.pick(out.logits[:, -1])
            if self.eos is not None:
                nxt = torch.where(done, torch.full_like(nxt, self.eos), nxt)
            done |= self._ends(nxt, out.logits.shape[-1])
            gen.append(nxt)
            att = torch.cat([att, torch.ones_like(att[:, :1])], dim=1)
            cur_pos = cur_pos[:, -1:] + 1
            cur_ids = nxt[:, None]
            if bool(done.all()):
                break
        rows = torch.stack(gen, 1).tolist() if gen else [[] for _ in enc]
        return [r[:b] for r, b in zip(rows, budgets)]

    def take_drafts(self, enc: list[list[int]], drafts: list[list[int]],
                    budget: int) -> tuple[list[list[int]], list[bool]]:
        """One forward pass over each prompt followed by its draft: each row's greedy tokens as long as they
        are the draft's (the token that differs from it, or follows it, included), and whether the row is done
        (one of them ends it, or the budget is spent)."""
        drafts = [d[:budget] for d in drafts]
        k = max(len(d) for d in drafts) + 1  # the positions read: the last prompt token's and each draft token's
        ids, att, pos = self._padded([e + d for e, d in zip(enc, drafts)])
        keep = {name: k for name in self.last_kw}  # the unembedding at the read positions only
        logits = self.model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False,
                            **keep).logits[:, -k:]
        lengths = torch.tensor([len(d) + 1 for d in drafts], device=logits.device)
        read = torch.arange(k, device=logits.device)[None, :] >= k - lengths[:, None]  # a short row's pads: not read
        check_logits(logits, read, where="generation")
        greedy = self.pick(logits.reshape(-1, logits.shape[-1])).view(len(enc), k)
        ends = self._ends(greedy, logits.shape[-1]).tolist()
        greedy = greedy.tolist()
        rows, done = [], []
        for d, g, e in zip(drafts, greedy, ends):
            g, e = g[k - len(d) - 1:], e[k - len(d) - 1:]
            n = 0
            while n < len(d) and g[n] == d[n] and not e[n]:
                n += 1
            rows.append(g[:min(n + 1, budget)])
            done.append(bool(e[n]) or n + 1 >= budget)
        return rows, done


def qa_accuracy(model, tokenizer, questions: list[str], answers: list[str], prompt_fn=None,
                max_new_tokens: int = 24, batch_size: int = 64, progress: bool = False,
                answer_fn=None) -> dict:
    """Greedy exact match (normalised), mean ROUGE-L recall, and the mean answer probability.

    ``answer_prob`` is the mean over questions of :func:`answer_probs` of ``answer_fn(answer)``
    (default :func:`obliviate.data.qa_answer`, the answer as trained) after ``prompt_fn(question)``
    (default :func:`obliviate.data.qa_prompt`); ``answer_probs`` holds the per-question values.
    """
    prompt_fn = prompt_fn or qa_prompt
    answer_fn = answer_fn or qa_answer
    if not questions:
        return {"exact_match": float("nan"), "rouge_l": float("nan"), "answer_prob": float("nan"), "n": 0,
                "predictions": []}
    prompts = [prompt_fn(q) for q in questions]
    trained = [answer_fn(a) for a in answers]
    preds = greedy_generate(model, tokenizer, prompts, max_new_tokens, batch_size, progress=progress,
                            drafts=trained)
    em = [float(normalise_text(p) == normalise_text(a)) for p, a in zip(preds, answers)]
    rl = [rouge_l_recall(p, a) for p, a in zip(preds, answers)]
    probs = answer_probs(model, tokenizer, prompts, trained, batch_size, progress)
    return {"exact_match": float(np.mean(em)), "rouge_l": float(np.mean(rl)),
            "answer_prob": float(np.mean(probs)),
            "n": len(questions), "predictions": preds, "correct": em, "answer_probs": probs}


def answer_nll_sums(model, batch: dict, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's summed NLL over its labelled (answer) tokens and their count, both (B,) float64. The logits
    are computed at the labelled positions only (:func:`~obliviate.models.layers.logits_at`). ``what`` names
    the computation in the error if those logits are not finite."""
    logits, targets, positions = labelled_logits(model, batch)  # (N, V), (N,), (B, T)
    check_logits(logits, None, what)
    nll = F.cross_entropy(at_least_float32(logits), targets, reduction="none").double()
    rows = positions.nonzero()[:, 0]
    sums = torch.zeros(len(positions), dtype=torch.float64, device=nll.device).index_add_(0, rows, nll)
    return sums, positions.sum(-1).double()


def answer_mean_nll(model, batch: dict, what: str) -> torch.Tensor:
    """Each row's mean NLL over its labelled (answer) tokens, (B,) float64: nan for a row without any.
    ``what`` names the computation in the error if the logits are not finite."""
    sums, counts = answer_nll_sums(model, batch, what)
    return sums / counts  # 0/0 = nan for an answer with no tokens


@torch.no_grad()
@evaluating
def answer_probs(model, tokenizer, prompts: list[str], answers: list[str], batch_size: int = 64,
                 progress: bool = False) -> list[float]:
    """exp(-mean NLL) of each answer's tokens given its prompt (TOFU's normalised probability).

    Teacher forcing with the training tokenisation (:func:`obliviate.data.encode_prompt_answer`):
    ``[bos] + prompt`` then ``answer + [eos]``, the answer and eos tokens scored. ``answers`` are
    scored as given (pass ``qa_answer(a)`` for the trained form). A prompt that does not fit the
    model's context with its answer keeps its last tokens (and bos). An answer with no tokens gets NaN.
    """
    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts but {len(answers)} answers")
    dev = _device(model)
    bos = tokenizer.bos_token_id if adds_bos(tokenizer) else None
    pad = pad_id(tokenizer)
    max_len = model_max_length(model)
    clipped = [clip_chars(p, max_len) for p in prompts]
    seqs, masks = encode_prompt_answer(tokenizer, clipped, [clip_chars(a, max_len, "start") for a in answers],
                                       max_len=10**9)
    n_cut = 0
    pairs = []
    for seq, mask, p, c in zip(seqs, masks, prompts, clipped):
        p_ids, a_ids = seq[mask == 0].tolist(), seq[mask == 1].tolist()  # prompt tokens, then answer tokens
        p_ids, a_ids, cut = fit_context(p_ids, a_ids, max_len, bos)
        n_cut += cut or len(c) < len(p)
        pairs.append((np.asarray(p_ids + a_ids), np.asarray([0] * len(p_ids) + [1] * len(a_ids))))
    out: list[float] = []
    bar = _bar(progress, len(pairs), "answer probabilities")
    for s in range(0, len(pairs), batch_size):
        chunk = pairs[s:s + batch_size]
        batch = collate([x for x, _ in chunk], pad, label_mask=[m for _, m in chunk])
        batch = {k: v.to(dev) for k, v in batch.items()}
        out.extend(torch.exp(-answer_mean_nll(model, batch, "answer probabilities")).cpu().tolist())
        bar.update(len(chunk))
    bar.close()
    if n_cut:
        warnings.warn(f"answer_probs: {n_cut} of {len(prompts)} prompts were cut from the left so that "
                      f"prompt + answer fits the model's {max_len} positions", stacklevel=3)
    return out


@torch.no_grad()
@evaluating
def choice_logprobs(model, tokenizer, contexts: list[str], continuations: list[list[str]],
                    batch_size: int = 64,
                    normalise: bool = False, progress: bool = False) -> list[list[float]]:
    """Sum (or mean, if ``normalise``) log p(continuation | context) for each option.

    Context and continuation are tokenised separately and concatenated, the
    way lm-evaluation-harness scores ``loglikelihood`` requests. A context that does not fit
    the model's context with its continuation keeps its last tokens (and bos).
    """
    dev = _device(model)
    adds = adds_bos(tokenizer)
    bos = tokenizer.bos_token_id if adds else None
    pad = pad_id(tokenizer)
    max_len = model_max_length(model)
    flat_seqs, flat_masks, owner = [], [], []
    shared: list[tuple[int, np.ndarray, list[int]]] = []  # (question, context ids, one token per option)
    n_cut = 0
    for i, (ctx, conts) in enumerate(zip(contexts, continuations)):
        clipped = clip_chars(ctx, max_len)
        c_ids = bos_prefix(tokenizer, clipped, adds=adds) + tokenizer(clipped,
                                                                      add_special_tokens=False)["input_ids"]
        x_all = [tokenizer(clip_chars(cont, max_len, "start"),
                           add_special_tokens=False)["input_ids"] for cont in conts]
        if conts and all(len(x) == 1 for x in x_all) and len(c_ids) + 1 <= max_len and len(c_ids) > 0:
            # every option is one token after the same context (lettered MCQs): one forward for all of them,
            # the options read off the last position, as lm-evaluation-harness groups such requests
            shared.append((i, np.asarray(c_ids), [x[0] for x in x_all]))
            n_cut += len(conts) * (len(clipped) < len(ctx))
            continue
        for x_ids in x_all:
            c_fit, x_ids, cut = fit_context(c_ids, x_ids, max_len, bos)
            n_cut += cut or len(clipped) < len(ctx)
            flat_seqs.append(np.asarray(c_fit + x_ids))
            flat_masks.append(np.asarray([0] * len(c_fit) + [1] * len(x_ids)))
            owner.append(i)
    out: list[list[float]] = [[] for _ in contexts]
    bar = _bar(progress, len(flat_seqs) + sum(len(t) for _, _, t in shared), "choice log-probs")
    for s in range(0, len(shared), batch_size):
        chunk = shared[s:s + batch_size]
        batch = collate([c for _, c, _ in chunk], pad)
        ids, att = batch["input_ids"].to(dev), batch["attention_mask"].to(dev)
        last = torch.as_tensor([len(c) - 1 for _, c, _ in chunk], device=dev)
        logits = logits_at(model, ids, att, torch.zeros_like(ids, dtype=torch.bool).index_put_(
            (torch.arange(len(chunk), device=dev), last), torch.tensor(True, device=dev)))
        check_logits(logits, None, "choice log-probabilities")
        logp = torch.log_softmax(at_least_float32(logits), -1)  # (len(chunk), V)
        for row, (i, _, toks) in enumerate(chunk):
            out[i] = logp[row, toks].cpu().tolist()
        bar.update(sum(len(t) for _, _, t in chunk))
    scores: list[float] = []
    for s in range(0, len(flat_seqs), batch_size):
        batch = collate(flat_seqs[s:s + batch_size], pad, label_mask=flat_masks[s:s + batch_size])
        batch = {k: v.to(dev) for k, v in batch.items()}
        nll, counts = answer_nll_sums(model, batch, "choice log-probabilities")
        tot = -nll / counts.clamp(min=1) if normalise else -nll
        scores.extend(tot.cpu().tolist())  # float64 sums (answer_nll_sums)
        bar.update(len(batch["input_ids"]))
    bar.close()
    if n_cut:
        n_pairs = len(flat_seqs) + sum(len(t) for _, _, t in shared)
        warnings.warn(f"choice_logprobs: {n_cut} of {n_pairs} context + continuation pairs were longer than "
                      f"the model's {max_len} positions; their contexts "
                      "were cut from the left to fit", stacklevel=3)
    for i, sc in zip(owner, scores):
        out[i].append(sc)
    return out


def mcq_prompt(question: str, choices: list[str]) -> str:
    """lm-evaluation-harness MMLU-style prompt (docs/evaluation.md, "MCQ accuracy")."""
    lines = [question.strip()] + [f"{LETTERS[i]}. {c}" for i, c in enumerate(choices)]
    return "\n".join(lines) + "\nAnswer:"


def mcq_accuracy(model, tokenizer, mcqs: list[dict], style: str = "letters", batch_size: int = 64,
                 context_fn=None, progress: bool = False) -> dict:
    """Zero-shot MCQ accuracy by log-likelihood.

    ``style="letters"``: the lm-eval format, scoring " A".." D" after the MCQ's ``description`` (lm-eval's
    task description, default none) and :func:`mcq_prompt`. ``style="cloze"``: score each choice text as the
    continuation of ``context_fn(question)`` (default: the question itself); the sum of log-probabilities
    favours short choices, so ``accuracy_norm`` (``predictions_norm``) is also given, lm-eval's ``acc_norm``:
    the argmax of each choice's log-likelihood divided by its length in characters (``len(choice)``, as
    lm-eval's ``process_results`` does). Each MCQ is a dict with ``question``, ``choices`` and
    ``answer_index`` (and optionally ``description``).
    """
    if not mcqs:
        return {"accuracy": float("nan"), "n": 0, "predictions": []}
    if style == "letters":
        ctxs = [(m.get("description") or "") + mcq_prompt(m["question"], m["choices"]) for m in mcqs]
        conts = [[f" {LETTERS[i]}" for i in range(len(m["choices"]))] for m in mcqs]
    elif style == "cloze":
        fn = context_fn or (lambda m: m["question"])
        ctxs = [fn(m) for m in mcqs]
        conts = [[" " + c for c in m["choices"]] for m in mcqs]
    else:
        raise ValueError(f"unknown MCQ style {style!r}")
    scores = choice_logprobs(model, tokenizer, ctxs, conts, batch_size, progress=progress)
    preds = [int(np.argmax(s)) for s in scores]
    correct = [float(p == m["answer_index"]) for p, m in zip(preds, mcqs)]
    out = {"accuracy": float(np.mean(correct)), "n": len(mcqs), "predictions": preds, "correct": correct,
           "scores": scores}
    if style == "cloze":
        norm = [int(np.argmax(np.asarray(s) / np.maximum([len(c) for c in m["choices"]], 1)))
                for s, m in zip(scores, mcqs)]
        out["predictions_norm"] = norm
        out["accuracy_norm"] = float(np.mean([p == m["answer_index"] for p, m in zip(norm, mcqs)]))
    return out


@torch.no_grad()
@evaluating
def token_loss_by_label(model, dataset, field: str = "domain", batch_size: int = 32,
                        progress: bool = False) -> dict:
    """Mean next-token loss and perplexity per label value of ``field``.

    Each target token is attributed to its own label (the token being predicted).
    """
    dev = _device(model)
    names = dataset.vocab[field]
    sums = np.zeros(len(names))
    counts = np.zeros(len(names))
    pad = 0
    bar = _bar(progress, len(dataset), f"token loss by {field}")
    for s in range(0, len(dataset), batch_size):
        seqs = dataset.input_ids[s:s + batch_size]
        labs = dataset.labels[field][s:s + batch_size]
        batch = collate(seqs, pad, extra={"lab": labs})
        ids, att = batch["input_ids"].to(dev), batch["attention_mask"].to(dev)
        logits = model(input_ids=ids, attention_mask=att).logits
        check_logits(logits, att, "token loss")
        nll, mask = token_nll(logits, batch["labels"].to(dev))
        lab = batch["lab"][:, 1:].to(dev)
        for k in range(len(names)):
            sel = mask & (lab == k)
            sums[k] += float(nll[sel].sum())
            counts[k] += float(sel.sum())
        bar.update(len(seqs))
    bar.close()
    out = {}
    for k, name in enumerate(names):
        if counts[k] > 0:
            loss = sums[k] / counts[k]
            out[name] = {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "tokens": int(counts[k])}
    return out
