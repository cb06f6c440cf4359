"""Models and tokenizers: building, loading/saving, and model-agnostic access to their parts.

- :mod:`.tokenizer`: byte-level BPE tokenizers (train/save, pad policy, offsets convention).
- :mod:`.builders`: tiny Llama models we pretrain (``SIZES``), tiny random models of other architectures for
  tests.
- :mod:`.load`: load/save causal LMs (safetensors only) and load their tokenizers; local paths vs hub ids.
- :mod:`.layers`: decoder layers, MLP projections, embeddings, hidden-state capture, truncated forward.
"""

from obliviate.models.builders import ARCHS, SIZES, build_model, param_count, tiny_llama, tiny_random
from obliviate.models.layers import (
    attention,
    capture_hidden,
    capture_mlp_activations,
    check_layer,
    d_ff,
    d_model,
    decoder_layers,
    down_proj_weight_out_in,
    embeddings_tied,
    final_norm,
    hidden_states_at,
    input_embeddings,
    layer,
    mlp,
    mlp_down_proj,
    mlp_gate_proj,
    mlp_up_proj,
    num_layers,
    output_embeddings,
    param_names_for,
    param_names_matching,
    unwrap,
    up_proj_weight_out_in,
)
from obliviate.models.load import load_model, load_model_and_tokenizer, load_tokenizer, save_model
from obliviate.models.tokenizer import (SPECIAL_TOKENS, ensure_pad_token, save_tokenizer, tokens_in_char_span,
                                        train_tokenizer)

__all__ = [
    "ARCHS", "SIZES", "SPECIAL_TOKENS",
    "build_model", "param_count", "tiny_llama", "tiny_random",
    "attention", "capture_hidden", "capture_mlp_activations", "check_layer", "d_ff", "d_model",
    "decoder_layers", "down_proj_weight_out_in", "embeddings_tied", "final_norm", "hidden_states_at",
    "input_embeddings", "layer", "mlp", "mlp_down_proj", "mlp_gate_proj", "mlp_up_proj", "num_layers",
    "output_embeddings", "param_names_for", "param_names_matching", "unwrap", "up_proj_weight_out_in",
    "load_model", "load_model_and_tokenizer", "save_model",
    "ensure_pad_token", "load_tokenizer", "save_tokenizer", "tokens_in_char_span", "train_tokenizer",
]
