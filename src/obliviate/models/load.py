"""Load and save causal LMs. Weights are read and written as safetensors only; pickled
checkpoints (``pytorch_model.bin``) are refused, never unpickled."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from obliviate.errors import ConfigError, ModelError
from obliviate.models._paths import bad_config_field, is_config_field_error, is_local, missing_reason, one_line
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
    A name that could be either (``runs/x`` when there is no such directory) is tried on the hub,
    and the error then says both. The loaded weights are checked to be finite (:func:`check_finite`).
    """
    from transformers import AutoModelForCausalLM

    torch_dtype = resolve_dtype(dtype)
    source = str(name_or_path)
    local = is_local(source)
    if local:
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
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        # TypeError: transformers' config validation (StrictDataclassFieldValidationError) of a field left
        # unchecked above; ZeroDivisionError: e.g. zero attention heads of a model type not listed there
        if not local:
            raise ModelError(f"no local directory {source!r}, and no hub model {source!r} could be loaded: "
                             f"{one_line(e)}") from e
        raise ModelError(f"cannot load model {source!r}: {one_line(e)}") from e
    except Exception as e:  # huggingface_hub's StrictDataclassError: transformers' check of a config field
        if not is_config_field_error(e):
            raise
        raise ModelError(f"cannot load model {source!r}: a field of its config.json has the wrong type: "
                         f"{one_line(e)}") from e
    if device is not None:
        model = model.to(device)
    check_finite(model, source)
    return model.eval()


def check_finite(model, name) -> None:
    """ModelError naming ``name`` and the first floating-point parameter or buffer holding NaN or inf.

    Such weights load without complaint and then give NaN logits and losses far from the cause;
    one ``isfinite`` pass at load time names the tensor instead.
    """
    tensors = [*model.named_parameters(), *model.named_buffers()]
    for tensor_name, t in tensors:
        if t.is_floating_point() and t.numel() and t.device.type != "meta" and not bool(torch.isfinite(t).all()):
            raise ModelError(f"model {str(name)!r} has non-finite weights: {tensor_name!r} holds NaN or "
                             "infinite values")


def _non_finite_key(obj, prefix: str = "") -> str | None:
    """The dotted key of the first NaN/inf number in parsed JSON ``obj``, else None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return prefix or "<root>"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        found = _non_finite_key(v, f"{prefix}.{k}" if prefix else str(k))
        if found:
            return found
    return None


def _check_model_dir(path: Path) -> Path:
    if not path.exists():
        raise ModelError(f"model directory {str(path)!r} {missing_reason(path)}")
    if not path.is_dir():
        raise ModelError(f"model path {str(path)!r} is not a directory")
    config = path / "config.json"
    if not config.is_file():
        raise ModelError(f"model directory {str(path)!r} has no config.json")
    try:
        parsed = json.loads(config.read_text())
        bad = _non_finite_key(parsed)
    except (OSError, ValueError) as e:  # also bad UTF-8, bad JSON, an integer of too many digits
        raise ModelError(f"malformed {str(config)!r}: {one_line(e)}") from e
    except RecursionError:
        raise ModelError(f"malformed {str(config)!r}: nested too deeply") from None
    if not isinstance(parsed, dict) or "model_type" not in parsed:
        raise ModelError(f"malformed {str(config)!r}: no 'model_type' key")
    if bad is not None:  # json.loads takes NaN / Infinity / 1e999; a NaN rms_norm_eps makes every logit NaN
        raise ModelError(f"malformed {str(config)!r}: {bad!r} is not a finite number")
    why = bad_config_field(parsed)
    if why is not None:
        raise ModelError(f"malformed {str(config)!r}: {why}")
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
