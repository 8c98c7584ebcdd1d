"""An HF checkpoint's config.json as the Megatron model flags it implies (light: json only).

check() compares them with the run's flags (rules_engine): a RoPE base, q/k/v biases or rope
scaling that differ from the checkpoint's change no tensor shape, so nothing downstream would
notice, and the trainer (built from the flags) and an SGLang rollout (built from this file)
would run different networks. engine/model/convert.py's shape_from_hf_config reads the same
fields through transformers at run time; this reader serves the keystroke-fast check.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

# the model types engine/model/convert.py converts
MODEL_TYPES = ("llama", "qwen2", "qwen3")


def hf_checkpoint_flags(checkpoint: str | None) -> dict[str, Any] | None:
    """flag dest -> value implied by `checkpoint`/config.json; None when there is no readable
    config.json of a model type the engine converts (other rules and the run report those)."""
    if not checkpoint:
        return None
    path = os.path.join(os.path.expanduser(checkpoint), "config.json")
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return _read(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int, size: int) -> dict[str, Any] | None:  # noqa: ARG001 - key
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("model_type") not in MODEL_TYPES:
        return None
    try:
        return _flags(config)
    except (TypeError, ValueError, ZeroDivisionError):
        return None  # a malformed config: the run's own reader names what is wrong


# miles' hf_validate_args (miles/utils/arguments.py:3656-3707 at 31f1ca961): HF field -> dest
# compared by equality; tie_word_embeddings is compared with its negation
MILES_VALIDATED = (("hidden_size", "hidden_size"), ("num_attention_heads", "num_attention_heads"),
                   ("num_hidden_layers", "num_layers"), ("intermediate_size", "ffn_hidden_size"),
                   ("tie_word_embeddings", "untie_embeddings_and_output_weights"),
                   ("rms_norm_eps", "norm_epsilon"), ("rope_theta", "rotary_base"))


def miles_validated_values(checkpoint: str | None) -> dict[str, Any] | None:
    """dest -> the value miles' hf_validate_args holds that flag to, for the fields the
    checkpoint's config.json writes (any model type: miles compares them all); None when
    there is no readable config.json. Fields the file leaves out are not compared here (miles
    would compare transformers' class defaults, which this layer does not know)."""
    if not checkpoint:
        return None
    path = os.path.join(os.path.expanduser(checkpoint), "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    config = config.get("text_config") or config  # multimodal: miles reads the text config
    rope = _rope(config)
    if "rope_theta" in config or "rope_theta" in rope:
        config = {**config, "rope_theta": rope["rope_theta"]}
    out = {dest: config[name] for name, dest in MILES_VALIDATED if name in config}
    if "untie_embeddings_and_output_weights" in out:
        out["untie_embeddings_and_output_weights"] = not out["untie_embeddings_and_output_weights"]
    return out


def _flags(config: dict[str, Any]) -> dict[str, Any]:
    heads = int(config["num_attention_heads"])
    rope = _rope(config)
    scaled = rope.get("rope_type", rope.get("type", "default")) == "llama3"
    flags = {
        "num_layers": int(config["num_hidden_layers"]),
        "hidden_size": int(config["hidden_size"]),
        "ffn_hidden_size": int(config["intermediate_size"]),
        "num_attention_heads": heads,
        "num_query_groups": int(config.get("num_key_value_heads") or heads),
        "kv_channels": int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        "vocab_size": int(config["vocab_size"]),
        "rotary_base": float(rope.get("rope_theta", 10000.0)),
        "qk_layernorm": config["model_type"] == "qwen3",
        "add_qkv_bias": config["model_type"] == "qwen2",
        "use_rope_scaling": scaled,
    }
    if scaled:
        flags["rotary_scaling_factor"] = float(rope["factor"])
    # the norm epsilon and the tying change no tensor shape either, so a mismatch would leave
    # the trainer and the rollout computing different models unnoticed; compared only when the
    # file writes them (miles compares them too: miles/utils/arguments.py:3686-3690)
    if "rms_norm_eps" in config:
        flags["norm_epsilon"] = float(config["rms_norm_eps"])
    if "tie_word_embeddings" in config:
        flags["untie_embeddings_and_output_weights"] = not config["tie_word_embeddings"]
    return flags


def _rope(config: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 writes rope_parameters; older files rope_theta and rope_scaling."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and params:
        return params
    scaling = config.get("rope_scaling")
    return {**(scaling if isinstance(scaling, dict) else {}),
            "rope_theta": config.get("rope_theta", 10000.0)}
