"""Load and save causal LMs. Weights are read and written as safetensors only; pickled
checkpoints (``pytorch_model.bin``) are refused, never unpickled."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from obliviate.errors import ConfigError, ModelError
from obliviate.models._paths import looks_like_path, one_line
from obliviate.models.tokenizer import ensure_pad_token, load_tokenizer

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str | None:
    """``None``/``"auto"`` pass through; names like ``"bf16"`` / ``"bfloat16"`` become ``torch.dtype``."""
    if dtype is None or isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ConfigError(f"unknown dtype {dtype!r} (valid: auto, {', '.join(_DTYPES)})")


def load_model(
    name_or_path: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
):
    """Load a causal LM (``AutoModelForCausalLM``) from a local directory or a hub id, in eval mode.

    A local directory must contain a valid ``config.json`` and safetensors weights
    (``model.safetensors`` or a sharded ``model.safetensors.index.json``). Strings that
    are not an existing path and do not look like one (``"org/name"``) are hub ids.
    ``dtype=None`` keeps the checkpoint's dtype; ``device=None`` leaves it on the CPU;
    ``attn_implementation=None`` lets transformers choose (``"sdpa"`` where available).
    """
    from transformers import AutoModelForCausalLM

    torch_dtype = resolve_dtype(dtype)
    source = str(name_or_path)
    if Path(source).exists() or looks_like_path(source):
        source = str(_check_model_dir(Path(source)))
    kwargs = dict(use_safetensors=True, trust_remote_code=trust_remote_code)
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    from safetensors import SafetensorError

    try:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except SafetensorError as e:  # a corrupt or truncated weights file
        raise ModelError(f"cannot load model {source!r}: corrupt safetensors weights ({one_line(e)})") from e
    except RuntimeError as e:  # e.g. weights whose shapes do not match config.json
        if "mismatch" not in str(e).lower():
            raise
        raise ModelError(f"cannot load model {source!r}: its weights do not match its config.json "
                         f"(different shapes); {one_line(e)}") from e
    except (OSError, ValueError, KeyError) as e:
        raise ModelError(f"cannot load model {source!r}: {one_line(e)}") from e
    if device is not None:
        model = model.to(device)
    return model.eval()


def _check_model_dir(path: Path) -> Path:
    if not path.exists():
        raise ModelError(f"model directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise ModelError(f"model path {str(path)!r} is not a directory")
    config = path / "config.json"
    if not config.is_file():
        raise ModelError(f"model directory {str(path)!r} has no config.json")
    try:
        parsed = json.loads(config.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"malformed {str(config)!r}: {one_line(e)}") from e
    if not isinstance(parsed, dict) or "model_type" not in parsed:
        raise ModelError(f"malformed {str(config)!r}: no 'model_type' key")
    if not any(path.glob("*.safetensors")):
        pickled = sorted(p.name for p in path.glob("*.bin"))
        hint = f" (found pickled {', '.join(pickled)}; refusing to unpickle)" if pickled else ""
        raise ModelError(f"model directory {str(path)!r} has no .safetensors weights{hint}")
    return path


def save_model(model, directory: str | os.PathLike) -> Path:
    """Save ``model`` (config + safetensors weights) into ``directory``, creating it; returns it.

    A peft model saves only its adapter; merge it first (``merge_and_unload()``) to save full weights.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # transformers >= 5 always writes safetensors and dropped the flag; older versions need it.
    try:
        model.save_pretrained(str(directory), safe_serialization=True)
    except TypeError:
        model.save_pretrained(str(directory))
    if not any(directory.glob("*.safetensors")):
        raise ModelError(f"saving to {str(directory)!r} wrote no .safetensors file")
    return directory


def load_model_and_tokenizer(
    path: str | os.PathLike,
    pad_policy: str = "error",
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    tokenizer_path: str | os.PathLike | None = None,
):
    """``(model, tokenizer)`` from one directory (or hub id); the tokenizer may live elsewhere.

    Applies :func:`ensure_pad_token` with ``pad_policy`` and copies the pad id into
    ``model.config.pad_token_id`` when the config has none. Raises ModelError if the
    tokenizer has ids the model's embedding cannot hold.
    """
    model = load_model(path, dtype=dtype, device=device)
    tok = ensure_pad_token(load_tokenizer(path if tokenizer_path is None else tokenizer_path), pad_policy)
    check_vocab(model, tok, path, tokenizer_path)
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tok.pad_token_id
    return model, tok


def check_vocab(model, tokenizer, model_path=None, tokenizer_path=None) -> None:
    """ModelError unless every id of ``tokenizer`` has a row in the model's input embedding.

    A tokenizer larger than the embedding (the wrong tokenizer for this model) would fail later,
    deep inside a forward pass, with ``IndexError: index out of range in self``; this names both
    sides at load time instead. A model with *more* rows than tokens (padded vocabularies) is fine.
    """
    n_emb = model.get_input_embeddings().weight.shape[0]
    n_tok = len(tokenizer)
    if n_tok > n_emb:
        where = f" for {str(model_path)!r}" if model_path is not None else ""
        tok_where = f" {str(tokenizer_path)!r}" if tokenizer_path is not None else ""
        raise ModelError(f"tokenizer{tok_where}{where} has {n_tok} tokens but the model embeds only {n_emb}: "
                         "the tokenizer does not belong to this model")
