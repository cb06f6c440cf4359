"""Small helpers shared by the loaders: telling local paths from hub ids, one-line errors.

A name is looked up on the hub only when it could be a hub id (``"gpt2"``, ``"org/name"``: one slash
at most, letters, digits, ``-``, ``_``, ``.``) and nothing of that name is on disk. Anything else
(``./runs/x``, ``/abs``, ``~/m``, ``runs/a/b``, ``my model``) is a local path, and a missing one fails at
once as a missing local directory instead of as a failed download.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from obliviate.config import show

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def could_be_hub_id(s: str) -> bool:
    """True for ``"name"`` / ``"org/name"`` made of hub characters (the rules of huggingface_hub's
    ``validate_repo_id``: at most 96 characters, no ``--`` or ``..``, not ending in ``.`` or ``-``)."""
    return (bool(_HUB_ID.fullmatch(s)) and len(s) <= 96 and "--" not in s and ".." not in s
            and not s.endswith((".", "-")))


def looks_like_path(s: str) -> bool:
    """True for strings that are plainly meant as a filesystem path (``./x``, ``/x``, ``~/x``, ``a/b/c``, ``x/``).

    Narrower than ``not could_be_hub_id(s)``: ``"not a hub id!"`` is neither (see obliviate.pipelines.tofu).
    """
    return (
        s.startswith((".", "/", "~"))
        or s.count("/") > 1
        or s.endswith("/")
        or (os.sep != "/" and os.sep in s)
    )


def _stat_errno(path: str) -> int | None:
    try:
        os.stat(path)
    except OSError as e:
        return e.errno
    return None


def is_local(s: str) -> bool:
    """Whether ``s`` names something on disk or can only be a path (see the module doc); False means: a hub id."""
    return os.path.lexists(s) or not could_be_hub_id(s) or _stat_errno(s) not in (None, errno.ENOENT)


def missing_reason(path: str | os.PathLike) -> str:
    """Why the local ``path`` cannot be read, for ``f"... {path!r} {reason}"``: ``"does not exist"``,
    ``"is a symbolic link loop ..."`` or ``"is a symbolic link to 'T', which does not exist"``."""
    err = _stat_errno(str(path))
    if err == errno.ELOOP:
        return "is a symbolic link loop (too many levels of symbolic links)"
    p = Path(path)
    if p.is_symlink():
        return f"is a symbolic link to {os.readlink(p)!r}, which does not exist"
    if err not in (None, errno.ENOENT, errno.ENOTDIR):
        return f"cannot be read ({os.strerror(err)})"
    return "does not exist"


def one_line(e: BaseException) -> str:
    """An exception's message squeezed onto one line (and cut to 300 characters)."""
    return " ".join(str(e).split())[:300]


def is_config_field_error(e: BaseException) -> bool:
    """Whether ``e`` is transformers' check of a config.json field (huggingface_hub's ``StrictDataclassError``,
    e.g. a string ``hidden_size``), which loading a model *or its tokenizer* may raise."""
    return any(c.__name__ == "StrictDataclassError" for c in type(e).__mro__)


_SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "n_embd", "n_layer", "n_head",
                "n_positions", "n_inner", "n_ctx", "d_model", "n_layers", "n_heads", "ffn_dim")
"""config.json fields that size the network: when given (not null), each must be a positive integer."""
_POSITIVE_FLOATS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta", "norm_eps")


_TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id",
                    "decoder_start_token_id")
"""config.json fields naming a special token: when given, an id (``eos_token_id`` may be a list of them) in
``[0, vocab_size)``; an id past the vocabulary indexes no embedding row (generation never stops on it, or the
first forward pass fails inside torch)."""


def _bad_token_id(cfg: dict, prefix: str) -> str | None:
    vocab = cfg.get("vocab_size")
    vocab = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None
    for key in _TOKEN_ID_FIELDS:
        v = cfg.get(key)
        if v is None:
            continue
        ids = v if isinstance(v, list) and v else [v]
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                return f"{prefix}{key!r} must be a token id (an integer) or a list of them, got {show(v)}"
            if i < 0:
                return f"{prefix}{key!r} must be a token id >= 0, got {show(v)}"
            if vocab is not None and i >= vocab:
                return (f"{prefix}{key!r} = {show(v)} contradicts {prefix}'vocab_size' = {vocab}: a token id must be "
                        f"in [0, {vocab})")
    return None


def bad_config_field(config: dict) -> str | None:
    """Why a field of a parsed config.json (or of its ``text_config``) cannot build a model, else None.

    transformers would raise a validation traceback for a string ``hidden_size``, build a model with no
    layers for ``num_hidden_layers: -1`` (then crash in the first forward pass), or fail deep inside
    torch for a negative ``vocab_size``.
    """
    for cfg, prefix in ((config, ""), (config.get("text_config"), "text_config.")):
        if not isinstance(cfg, dict):
            continue
        for key in _SIZE_FIELDS:
            v = cfg.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                return f"{prefix}{key!r} must be a positive integer, got {show(v)}"
        for key in _POSITIVE_FLOATS:
            v = cfg.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
                return f"{prefix}{key!r} must be a positive number, got {show(v)}"
        if "vocab_size" in cfg and cfg["vocab_size"] is None and not isinstance(cfg.get("text_config"), dict):
            return f"{prefix}'vocab_size' must be a positive integer, got None"
        bad_id = _bad_token_id(cfg, prefix)
        if bad_id is not None:
            return bad_id
    return None
