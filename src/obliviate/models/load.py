"""Load and save causal LMs. Weights are read and written as safetensors only; pickled
checkpoints (``pytorch_model.bin``) are refused, never unpickled."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from obliviate.errors import ConfigError, ModelError
from obliviate.models._paths import bad_config_field, is_config_field_error, is_local, missing_reason, one_line
from obliviate.models.tokenizer import ensure_pad_token, load_tokenizer
from obliviate.utils import replace_dir, staging_dir

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
    adapter: str | os.PathLike | None = None,
):
    """Load a causal LM (``AutoModelForCausalLM``) from a local directory or a hub id, in eval mode.

    A local directory must contain a valid ``config.json`` and safetensors weights
    (``model.safetensors`` or a sharded ``model.safetensors.index.json``). Strings that
    are not an existing path and do not look like one (``"org/name"``) are hub ids.
    ``dtype=None`` keeps the checkpoint's dtype; ``device=None`` leaves it on the CPU;
    ``attn_implementation=None`` lets transformers choose (``"sdpa"`` where available).
    A name that could be either (``runs/x`` when there is no such directory) is tried on the hub,
    and the error then says both. The loaded weights are checked to be finite (:func:`check_finite`).

    The model is exactly the weights on disk: a tensor the model needs that the checkpoint lacks (which
    transformers would fill with random values) or one the checkpoint holds that the model has no place
    for is a ModelError naming a few of them and their count. Weights the checkpoint legitimately omits
    because the model ties them (``lm_head`` to the input embedding) are not missing.

    ``adapter``: a peft adapter directory (LoRA), attached and merged into the weights
    (:func:`attach_adapter`); it may be the model's own directory. Without it, a model directory that
    also holds an adapter (``adapter_config.json``) is refused: transformers would attach it unasked.
    """
    from transformers import AutoModelForCausalLM

    torch_dtype = resolve_dtype(dtype)
    source = str(name_or_path)
    local = is_local(source)
    if local:
        source = str(_check_model_dir(Path(source)))
        if adapter is None and (Path(source) / ADAPTER_CONFIG).exists():
            raise ModelError(f"model directory {source!r} also holds an adapter ({ADAPTER_CONFIG}): give "
                             f"--adapter {source} (adapter= in Python) to attach it, merged into the weights, or "
                             "move the adapter files away to use the weights alone")
    kwargs = dict(use_safetensors=True, trust_remote_code=trust_remote_code)
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    from safetensors import SafetensorError

    try:
        with _weights_only(source) as weights:
            model, info = AutoModelForCausalLM.from_pretrained(weights, output_loading_info=True, **kwargs)
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
    _check_loaded_keys(info, source)
    model.name_or_path = model.config._name_or_path = source
    if adapter is not None:
        model = attach_adapter(model, adapter)
    if device is not None:
        model = model.to(device)
    check_finite(model, source)
    return model.eval()


ADAPTER_CONFIG = "adapter_config.json"
_ADAPTER_FILES = (ADAPTER_CONFIG, "adapter_model.safetensors", "adapter_model.bin")


@contextmanager
def _weights_only(source: str):
    """``source``, or where it holds adapter files, a temporary view of it without them (links to its
    other files), so transformers loads the model's own weights and attaches nothing."""
    path = Path(source)
    if not (path.is_dir() and any((path / f).exists() for f in _ADAPTER_FILES)):
        yield source
        return
    view = Path(tempfile.mkdtemp(prefix="obliviate-model-"))
    try:
        for entry in path.iterdir():
            if entry.name not in _ADAPTER_FILES:
                (view / entry.name).symlink_to(entry.resolve())
        yield str(view)
    finally:
        shutil.rmtree(view, ignore_errors=True)


def _named(keys, n: int = 3) -> str:
    keys = sorted(keys)
    shown = ", ".join(repr(k) for k in keys[:n])
    return f"{len(keys)} tensor{'s' if len(keys) != 1 else ''} ({shown}{', ...' if len(keys) > n else ''})"


def _check_loaded_keys(info: dict, source: str) -> None:
    """ModelError when the checkpoint lacks tensors the model needs or holds tensors it has no place for
    (transformers' loading report: ``missing_keys``, ``unexpected_keys``; tied weights are in neither)."""
    missing, unexpected = info.get("missing_keys") or (), info.get("unexpected_keys") or ()
    if missing or unexpected:
        parts = ([f"lacks {_named(missing)} the model needs (they would be random)"] if missing else []) + \
                ([f"holds {_named(unexpected)} the model has no place for"] if unexpected else [])
        raise ModelError(f"cannot load model {source!r}: its weights do not match its config.json: the "
                         f"checkpoint {' and '.join(parts)}")


def attach_adapter(model, adapter: str | os.PathLike):
    """``model`` with the peft adapter in directory ``adapter`` (``adapter_config.json`` and
    ``adapter_model.safetensors``) attached and merged into its weights: a plain model again, which trains
    and saves as any other. Each adapter tensor must find its place and each adapter weight must be in
    the file (ModelError naming them otherwise); pickled adapter weights are refused, never unpickled."""
    from peft import PeftConfig, PeftModel

    path = Path(adapter)
    if not path.is_dir():
        why = "is not a directory" if path.exists() else missing_reason(path)
        raise ModelError(f"adapter directory {str(path)!r} {why}")
    if not (path / ADAPTER_CONFIG).is_file():
        raise ModelError(f"adapter directory {str(path)!r} has no {ADAPTER_CONFIG}")
    if not (path / "adapter_model.safetensors").is_file():
        pickled = (" (found pickled adapter_model.bin; refusing to unpickle)"
                   if (path / "adapter_model.bin").exists() else "")
        raise ModelError(f"adapter directory {str(path)!r} has no adapter_model.safetensors{pickled}")
    try:
        config = PeftConfig.from_pretrained(str(path))
        config.inference_mode = True
        peft_model = PeftModel(model, config)
        result = peft_model.load_adapter(str(path), adapter_name="default", use_safetensors=True)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        raise ModelError(f"cannot attach adapter {str(path)!r}: {one_line(e)}") from e
    if result.missing_keys or result.unexpected_keys:
        parts = ([f"lacks {_named(result.missing_keys)}"] if result.missing_keys else []) + \
                ([f"holds {_named(result.unexpected_keys)} the model has no place for"]
                 if result.unexpected_keys else [])
        raise ModelError(f"cannot attach adapter {str(path)!r}: it does not fit the model: its weights file "
                         f"{' and '.join(parts)}")
    return peft_model.merge_and_unload()


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


def check_model_path(name_or_path: str | os.PathLike) -> None:
    """The checks :func:`load_model` makes of a local model directory (it exists, holds a valid config.json and
    safetensors weights), without loading it: run before the model's own tokenizer is read from it, so that a
    mistyped model path is named as the model's, not as a missing tokenizer directory. A hub id passes."""
    if is_local(str(name_or_path)):
        check_model_dir(name_or_path)


def check_model_dir(path: str | os.PathLike) -> Path:
    """A local model directory checked without reading its weights: it exists and is a directory, its
    ``config.json`` parses and holds finite numbers, positive sizes and special-token ids inside its vocabulary
    (:func:`obliviate.models._paths.bad_config_field`), and it holds safetensors weights; else one ModelError line."""
    return _check_model_dir(Path(path))


def _check_model_dir(path: Path) -> Path:
    if not path.exists():
        raise ModelError(f"model directory {str(path)!r} {missing_reason(path)}")
    if not path.is_dir():
        raise ModelError(f"model path {str(path)!r} is not a directory")
    config = path / "config.json"
    if not config.is_file():
        hint = (" (it holds an adapter: give its base model as --model and this directory as --adapter)"
                if (path / ADAPTER_CONFIG).is_file() else "")
        raise ModelError(f"model directory {str(path)!r} has no config.json{hint}")
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


def save_model(model, directory: str | os.PathLike, tokenizer=None) -> Path:
    """Save ``model`` (config + safetensors weights), and ``tokenizer`` if given, as ``directory``; returns it.

    The files are written into a new folder beside ``directory`` that then replaces it as a whole
    (:func:`obliviate.utils.staging_dir`, :func:`~obliviate.utils.replace_dir`): an interrupted save leaves the
    earlier ``directory`` as it was, no old file survives among the new ones, and nothing is written
    through a link (a ``directory`` that is a symbolic link under a run directory, e.g. to the input model,
    is refused before anything is written).

    A peft model saves only its adapter; merge it first (``merge_and_unload()``) to save full weights.
    """
    staged = staging_dir(directory)
    try:
        # transformers >= 5 always writes safetensors and dropped the flag; older versions need it.
        try:
            model.save_pretrained(str(staged), safe_serialization=True)
        except TypeError:
            model.save_pretrained(str(staged))
        if not any(staged.glob("*.safetensors")):
            raise ModelError(f"saving to {str(directory)!r} wrote no .safetensors file")
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staged))
        return replace_dir(staged, directory)
    finally:
        shutil.rmtree(staged, ignore_errors=True)  # (gone already once it replaced directory)


def load_model_and_tokenizer(
    path: str | os.PathLike,
    pad_policy: str = "error",
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    tokenizer_path: str | os.PathLike | None = None,
    adapter: str | os.PathLike | None = None,
):
    """``(model, tokenizer)`` from one directory (or hub id); the tokenizer may live elsewhere; ``adapter`` as
    :func:`load_model` takes it. The model's path is checked before its tokenizer is read, so a mistyped path is
    named as the model's.

    Applies :func:`ensure_pad_token` with ``pad_policy`` and copies the pad id into
    ``model.config.pad_token_id`` when the config has none. Raises ModelError if the
    tokenizer has ids the model's embedding cannot hold.
    """
    check_model_path(path)
    tok = load_tokenizer(tokenizer_path) if tokenizer_path is not None else load_tokenizer(path, of_model=True)
    tok = ensure_pad_token(tok, pad_policy)
    model = load_model(path, dtype=dtype, device=device, adapter=adapter)
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
