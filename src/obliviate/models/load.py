"""Load and save causal LMs and their tokenizers, and the checks of a model directory before any weight is
read. Weights are read and written as safetensors only; pickled checkpoints (``pytorch_model.bin``) are
refused, never unpickled.

A name is looked up on the hub only when it could be a hub id (``"gpt2"``, ``"org/name"``: one slash at most,
letters, digits, ``-``, ``_``, ``.``) and nothing of that name is on disk. Anything else (``./runs/x``,
``/abs``, ``~/m``, ``runs/a/b``, ``my model``) is a local path, and a missing one fails at once as a missing
local directory instead of as a failed download (:func:`is_local`)."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from obliviate.errors import ConfigError, ModelError, setting
from obliviate.config import show
from obliviate.models.tokenizer import ensure_pad_token
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
            how = setting(f"adapter={source!r}", f"--adapter {source}")  # the option of the interface used
            raise ModelError(f"model directory {source!r} also holds an adapter ({ADAPTER_CONFIG}): give "
                             f"{how} to attach it, merged into the weights, or move the adapter files away "
                             "to use the weights alone")
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
            raise ModelError(f"no local directory {source!r}, and no hub model "
                             f"{source!r} could be loaded: {one_line(e)}") from e
        raise ModelError(f"cannot load model {source!r}: {one_line(e)}") from e
    except Exception as e:  # huggingface_hub's StrictDataclassError: transformers' check of a config field
        if not is_config_field_error(e):
            raise
        raise ModelError(f"cannot load model {source!r}: a field of its "
                         f"config.json has the wrong type: {one_line(e)}") from e
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
        raise ModelError(f"cannot attach adapter {str(path)!r}: it does not fit "
                         f"the model: its weights file {' and '.join(parts)}")
    return peft_model.merge_and_unload()


def check_finite(model, name) -> None:
    """ModelError naming ``name`` and the first floating-point parameter or buffer holding NaN or inf.

    Such weights load without complaint and then give NaN logits and losses far from the cause;
    one ``isfinite`` pass at load time names the tensor instead.
    """
    tensors = [*model.named_parameters(), *model.named_buffers()]
    for tensor_name, t in tensors:
        if (t.is_floating_point() and t.numel() and t.device.type != "meta"
                and not bool(torch.isfinite(t).all())):
            raise ModelError(f"model {str(name)!r} has non-finite weights: "
                             f"{tensor_name!r} holds NaN or infinite values")


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
    """The checks :func:`load_model` makes of a local model directory (it exists, holds a valid config.json
    and safetensors weights), without loading it: run before the model's own tokenizer is read from it, so
    that a mistyped model path is named as the model's, not as a missing tokenizer directory. A hub id
    passes."""
    if is_local(str(name_or_path)):
        check_model_dir(name_or_path)


def parameter_count(path: str | os.PathLike) -> int | None:
    """The parameters of the model in the local directory ``path``, counted from its ``config.json`` without
    reading its weights (the model built on the meta device), as
    :func:`~obliviate.unlearning.contract.preset_name` counts a loaded model's; None for a hub id, or a config
    that transformers cannot build alone (then the loaded model's size decides)."""
    if not is_local(str(path)) or not (Path(path) / "config.json").is_file():
        return None
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)))
    except Exception:  # an architecture that needs its own code or its weights: counted once loaded
        return None
    return sum(p.numel() for p in model.parameters())


def check_model_dir(path: str | os.PathLike) -> Path:
    """A local model directory checked without reading its weights: it exists and is a directory, its
    ``config.json`` parses and holds finite numbers, positive sizes and special-token ids inside its
    vocabulary (:func:`bad_config_field`), and it holds safetensors weights; else one ModelError line."""
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
    """Save ``model`` (config + safetensors weights), and ``tokenizer`` if given, as ``directory``; returns
    it.

    The files are written into a new folder beside ``directory`` that then replaces it as a whole
    (:func:`obliviate.utils.staging_dir`, :func:`~obliviate.utils.replace_dir`): an interrupted save leaves
    the earlier ``directory`` as it was, no old file survives among the new ones, and nothing is written
    through a link (a ``directory`` that is a symbolic link under a run directory, e.g. to the input model, is
    refused before anything is written).

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
    :func:`load_model` takes it. The model's path is checked before its tokenizer is read, so a mistyped path
    is named as the model's.

    Applies :func:`ensure_pad_token` with ``pad_policy`` and copies the pad id into
    ``model.config.pad_token_id`` when the config has none. Raises ModelError if the
    tokenizer has ids the model's embedding cannot hold.
    """
    check_model_path(path)
    tok = (load_tokenizer(tokenizer_path) if tokenizer_path is not None
           else load_tokenizer(path, of_model=True))
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


def load_tokenizer(path_or_id: str | os.PathLike, of_model: bool = False):
    """Load a tokenizer from a local directory (via ``AutoTokenizer``) or a hub id.

    A local directory must hold ``tokenizer.json`` or ``tokenizer_config.json``. ``of_model``: the path is the
    model's (no tokenizer was named apart), so a hub id that cannot be loaded is named as the model.
    """
    from transformers import AutoTokenizer

    path = Path(path_or_id)
    if is_local(str(path_or_id)):
        if not path.exists():
            raise ModelError(f"tokenizer directory {str(path)!r} {missing_reason(path)}")
        if not path.is_dir():
            raise ModelError(f"tokenizer path {str(path)!r} is not a directory")
        if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            raise ModelError(f"tokenizer directory {str(path)!r} has no "
                             "tokenizer.json or tokenizer_config.json")
        _check_tokenizer_json(path / "tokenizer.json")
        _check_config_json(path / "config.json")  # AutoTokenizer reads it too
        try:
            return AutoTokenizer.from_pretrained(str(path))
        # malformed files, deep inside
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelError(f"cannot load tokenizer from {str(path)!r}: "
                             f"{type(e).__name__}: {one_line(e)}") from e
        except Exception as e:
            if not is_config_field_error(e):
                raise
            raise ModelError(f"cannot load tokenizer from {str(path)!r}: a field of its config.json has the "
                             f"wrong type: {one_line(e)}") from e
    try:
        return AutoTokenizer.from_pretrained(str(path_or_id))
    except (OSError, ValueError) as e:
        what = "model" if of_model else "tokenizer"
        raise ModelError(f"no local directory {str(path_or_id)!r}, and no hub {what} {str(path_or_id)!r} "
                         f"could be loaded: {one_line(e)}") from e


def _check_tokenizer_json(file: Path) -> None:
    """A ``tokenizer.json`` that is there must be a JSON object with a ``model`` object (``{}``, ``[]`` or
    ``null`` used to end in a KeyError / TypeError / AttributeError traceback inside transformers)."""
    if not file.is_file():
        return
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # also bad UTF-8
        raise ModelError(f"cannot load tokenizer from {str(file.parent)!r}: malformed tokenizer.json: "
                         f"{one_line(e) or type(e).__name__}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        got = (f"an object without a 'model' object (keys: {', '.join(map(repr, list(doc)[:6])) or 'none'})"
               if isinstance(doc, dict) else "null" if doc is None else f"a JSON {type(doc).__name__}")
        raise ModelError(f"cannot load tokenizer from {str(file.parent)!r}: tokenizer.json must be a JSON "
                         f"object with a 'model' object, got {got}")


def _check_config_json(file: Path) -> None:
    """The fields of a model's config.json beside the tokenizer that would make transformers raise a
    validation traceback while loading the tokenizer (:func:`bad_config_field`);
    a config.json that does not parse is left to the model's own check."""
    try:
        parsed = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None
    except (OSError, ValueError, RecursionError):
        return
    why = bad_config_field(parsed) if isinstance(parsed, dict) else None
    if why is not None:
        raise ModelError(f"malformed {str(file)!r}: {why}")


# ------------------------------------------------------------ local paths and hub ids, one-line errors

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def could_be_hub_id(s: str) -> bool:
    """True for ``"name"`` / ``"org/name"`` made of hub characters (the rules of huggingface_hub's
    ``validate_repo_id``: at most 96 characters, no ``--`` or ``..``, not ending in ``.`` or ``-``)."""
    return (bool(_HUB_ID.fullmatch(s)) and len(s) <= 96 and "--" not in s and ".." not in s
            and not s.endswith((".", "-")))


def _stat_errno(path: str) -> int | None:
    try:
        os.stat(path)
    except OSError as e:
        return e.errno
    return None


def is_local(s: str) -> bool:
    """Whether ``s`` names something on disk or can only be a path (see the module doc); False means: a hub
    id."""
    return os.path.lexists(s) or not could_be_hub_id(s) or _stat_errno(s) not in (None, errno.ENOENT)


def hub_model_missing(name: str, allow_hub: bool = False) -> str | None:
    """Why the hub model ``name`` cannot be had, for ``f"... {name!r} is ... and {reason}"``, else None: it is
    in the local hub cache (its ``config.json``; no network), or with ``allow_hub`` the hub holds it (one
    request; ``HF_HUB_OFFLINE=1`` asks nothing)."""
    import huggingface_hub

    try:
        cached = huggingface_hub.try_to_load_from_cache(name, "config.json")
    except Exception:  # a name the cache cannot hold
        cached = None
    if isinstance(cached, str):
        return None
    if not allow_hub:
        return "not in the local hub cache"
    try:
        return None if huggingface_hub.file_exists(name, "config.json") else "not a model on the hub"
    except Exception as e:  # offline, unreachable, or refused
        return f"the hub could not be asked ({one_line(e) or type(e).__name__})"


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
    """Whether ``e`` is transformers' check of a config.json field (huggingface_hub's
    ``StrictDataclassError``, e.g. a string ``hidden_size``), which loading a model *or its tokenizer* may
    raise."""
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
                return (f"{prefix}{key!r} = {show(v)} contradicts {prefix}'vocab_size' = {vocab}: a token id "
                        f"must be in [0, {vocab})")
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
