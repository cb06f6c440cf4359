"""Byte-level BPE tokenizers: train, save, and the pad-token policy (loading one:
:func:`obliviate.models.load.load_tokenizer`).

Its special tokens and their ids, and the offsets convention (untrimmed offsets that tile the text; find a
character span's tokens by overlap, :func:`tokens_in_char_span`): docs/world.md, "The tokenizer".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from obliviate.errors import ConfigError, ModelError
from obliviate.utils import run_write_path

SPECIAL_TOKENS: dict[str, str] = {
    "pad": "<|pad|>",
    "bos": "<|bos|>",
    "eos": "<|eos|>",
    "unk": "<|unk|>",
    "hidden": "<|hidden|>",
    "refusal": "<|refusal|>",
}
"""Role -> token string. Ids follow this order (pad=0 ... refusal=5) in trained tokenizers."""

_N_BYTES = 256


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 2048,
    min_frequency: int = 2,
    model_max_length: int | None = None,
):
    """Train a byte-level BPE tokenizer on ``texts``; returns a ``PreTrainedTokenizerFast``.

    Deterministic: the same texts in the same order give a byte-identical
    ``tokenizer.json`` (BPE training has no randomness; ties between equally frequent
    pairs are broken by the pair itself). Any string can be encoded (every byte is in
    the vocabulary), so ``<|unk|>`` is never produced. ``vocab_size`` is an upper bound:
    a small corpus may stop early. ``padding_side`` is "right".
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    minimum = len(SPECIAL_TOKENS) + _N_BYTES
    if not isinstance(vocab_size, int) or vocab_size < minimum:
        raise ConfigError(f"vocab_size={vocab_size!r} is too small for a "
                          f"byte-level BPE tokenizer (minimum {minimum})")
    texts = list(texts)
    if not texts:
        raise ConfigError("train_tokenizer got no texts")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise ConfigError(f"train_tokenizer: texts[{bad}] is {type(texts[bad]).__name__}, not str")

    specials = list(SPECIAL_TOKENS.values())
    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    # trim_offsets=False: a token's offsets include its leading space (see module docstring).
    # This post-processor adds no tokens.
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)

    kwargs = {}
    if model_max_length is not None:
        kwargs["model_max_length"] = model_max_length
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=SPECIAL_TOKENS["pad"],
        bos_token=SPECIAL_TOKENS["bos"],
        eos_token=SPECIAL_TOKENS["eos"],
        unk_token=SPECIAL_TOKENS["unk"],
        additional_special_tokens=[SPECIAL_TOKENS["hidden"], SPECIAL_TOKENS["refusal"]],
        padding_side="right",
        **kwargs,
    )
    ids = fast.convert_tokens_to_ids(specials)
    if ids != list(range(len(specials))):  # guards the documented id layout
        raise RuntimeError(f"special tokens got ids {ids}, expected 0..{len(specials) - 1}")
    return fast


def special_token_id(tok, role: str) -> int:
    """The id of the special token for ``role`` (a key of :data:`SPECIAL_TOKENS`) in ``tok``."""
    if role not in SPECIAL_TOKENS:
        raise ConfigError(f"unknown special-token role {role!r} (valid: {', '.join(SPECIAL_TOKENS)})")
    token = SPECIAL_TOKENS[role]
    tid = tok.convert_tokens_to_ids(token)
    if tid is None or (tid == tok.unk_token_id and role != "unk"):
        raise ModelError(f"tokenizer at {_where(tok)} has no {token} token")
    return tid


def tokens_in_char_span(offsets: Sequence[Sequence[int]], start: int, end: int) -> list[int]:
    """Indices of the tokens whose ``[s, e)`` offsets overlap the character span ``[start, end)``.

    Zero-width offsets (e.g. ``(0, 0)`` that some tokenizers give special tokens) never match.
    """
    return [i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start]


def save_tokenizer(tok, directory: str | os.PathLike) -> Path:
    """Save ``tok`` (``tokenizer.json`` + ``tokenizer_config.json``) into ``directory``; returns it."""
    directory = run_write_path(directory)  # under a run directory: no link followed
    directory.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(directory))
    return directory


def pad_id(tok) -> int:
    """The id to pad batches with: the pad token, else eos (padding is masked by the attention mask)."""
    pid = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if pid is None:
        raise ConfigError("the tokenizer has neither a pad nor an eos token to pad batches with "
                          "(add one, or use --pad-policy eos with a tokenizer that has eos)")
    return pid


def adds_bos(tok) -> bool:
    """Whether sequences for ``tok``'s models start with its bos token: True when the tokenizer adds bos
    itself when encoding (Llama, Gemma, Mistral: ``tok(x)`` starts with bos where ``tok(x,
    add_special_tokens=False)`` does not) and for obliviate's own tokenizers (:func:`train_tokenizer`, which
    add nothing but whose models are always trained with bos first); False for tokenizers that add none
    (GPT-2, Pythia, Qwen), as lm-evaluation-harness and the models' own training do (docs/evaluation.md,
    "Tokenisation")."""
    bos = tok.bos_token_id
    if bos is None:
        return False
    if tok.bos_token == SPECIAL_TOKENS["bos"]:
        return True
    with_special = tok("a")["input_ids"]
    return (bool(with_special) and with_special[0] == bos
            and tok("a", add_special_tokens=False)["input_ids"][:1] != [bos])


def bos_prefix(tok, text: str | None = None, *, adds: bool | None = None) -> list[int]:
    """The ids to put before ``text``'s tokens: ``[bos]`` where :func:`adds_bos` (or ``adds``, computed once
    by a caller encoding many texts), else ``[]``; ``[]`` also when ``text`` already starts with the bos
    token's string (a chat template that writes it), so bos is never doubled."""
    if text is not None and tok.bos_token and text.startswith(tok.bos_token):
        return []
    return [tok.bos_token_id] if (adds_bos(tok) if adds is None else adds) else []


def ensure_pad_token(tok, policy: str = "error"):
    """Make sure ``tok`` has a pad token; returns ``tok``.

    ``policy="error"``: raise :class:`ModelError` if there is none.
    ``policy="eos"``: use the eos token as the pad token (padding must then be masked by
    the attention mask / labels, never inferred from ``input_ids == pad_token_id``).
    """
    if policy not in ("error", "eos"):
        raise ConfigError(f"pad policy {policy!r} is not one of 'error', 'eos'")
    if tok.pad_token is not None:
        return tok
    if policy == "error":
        raise ModelError(
            f"tokenizer at {_where(tok)} has no pad token; use --pad-policy eos to pad with the eos token"
        )
    if tok.eos_token is None:
        raise ModelError(f"tokenizer at {_where(tok)} has no pad token and no eos token to pad with")
    tok.pad_token = tok.eos_token
    return tok


def _where(tok) -> str:
    return repr(getattr(tok, "name_or_path", "") or "<in memory>")
