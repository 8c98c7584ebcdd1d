"""HF <-> Megatron-core weight conversion for the Llama, Qwen2 and Qwen3 families (TP=1 state
dicts).

Megatron fuses what HF keeps apart, so the mapping is more than renaming:
- attention: HF q_proj/k_proj/v_proj -> one `linear_qkv` whose rows are grouped per KV (query)
  group as [q heads of the group, k head, v head];
- SwiGLU: HF gate_proj/up_proj -> `linear_fc1` = [gate; up];
- tied embeddings: Megatron has no output_layer.weight; HF may or may not list lm_head.weight;
- Qwen3's per-head RMSNorms: q_norm/k_norm <-> q_layernorm/k_layernorm;
- Qwen2's q/k/v biases (`--add-qkv-bias`) <-> `linear_qkv.bias`, fused like the weight rows;
- Llama 3 rope scaling (`--use-rope-scaling`) <-> rope_parameters {rope_type: llama3, ...}: a
  config matter only (no tensor), Megatron's fixed factors (shape.LLAMA3_ROPE) on both sides;
- the critic's value head (output_layer, [1, hidden] + bias) has no HF counterpart.

Both of Megatron's layer specs are understood: the local spec (separate norm modules) and the
transformer-engine spec (norms fused into linear_qkv / linear_fc1 as `layer_norm_weight`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from .shape import LLAMA3_ROPE, ModelShape

Arch = Literal["llama", "qwen2", "qwen3"]
ARCHITECTURES: dict[str, str] = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                                 "qwen3": "Qwen3ForCausalLM"}
CRITIC_HEAD_NOTE = "critic value head freshly initialized (no HF counterpart)"

_HF_EMBED = "model.embed_tokens.weight"
_HF_NORM = "model.norm.weight"
_HF_HEAD = "lm_head.weight"
_MC_EMBED = "embedding.word_embeddings.weight"
_MC_NORM = "decoder.final_layernorm.weight"
_MC_HEAD = "output_layer.weight"


class ConversionError(ValueError):
    """A state dict or config that this converter cannot map; the message says what is off."""


# --------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------
def arch_for(shape: ModelShape) -> Arch:
    """Qwen3 is Llama plus per-head q/k RMSNorm, Qwen2 is Llama plus q/k/v biases: those flags
    are what tell them apart."""
    if shape.qk_layernorm:
        return "qwen3"
    return "qwen2" if shape.add_qkv_bias else "llama"


def rope_parameters(shape: ModelShape) -> dict[str, Any]:
    """transformers' rope_parameters for the RoPE Megatron builds from `shape`."""
    if not shape.rope_scaling:
        return {"rope_type": "default", "rope_theta": float(shape.rotary_base)}
    return {"rope_type": "llama3", "rope_theta": float(shape.rotary_base),
            "factor": float(shape.rope_scaling_factor), **LLAMA3_ROPE}


def hf_config(shape: ModelShape, arch: Arch, **extra: Any):  # noqa: ANN201
    """A transformers LlamaConfig / Qwen2Config / Qwen3Config describing the same network as
    `shape` (what the hf rollout builds and what SGLang reads).

    `extra` is passed through (e.g. bos/eos/pad token ids, which a ModelShape does not know).
    """
    _check_supported(shape, arch)
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    common: dict[str, Any] = dict(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.ffn_hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_query_groups,
        head_dim=shape.kv_channels,
        max_position_embeddings=shape.max_sequence_length,
        rms_norm_eps=shape.norm_epsilon,
        rope_parameters=rope_parameters(shape),
        tie_word_embeddings=not shape.untie_embeddings,
        hidden_act="silu",
        architectures=[ARCHITECTURES[arch]],
    )
    if arch == "llama":
        return LlamaConfig(**{**common, "attention_bias": False, "mlp_bias": False, **extra})
    if arch == "qwen2":  # q/k/v biases are built in (no attention_bias field), o_proj has none
        return Qwen2Config(**{**common, "use_sliding_window": False, **extra})
    return Qwen3Config(**{**common, "attention_bias": False, **extra})


def save_hf_config(shape: ModelShape, arch: Arch, directory: str | Path) -> Path:
    """Write config.json for `shape` into `directory` (SGLang's model directory): transformers
    5 writes the RoPE as rope_parameters only; readers on transformers 4 (an SGLang pinned to
    it) look for rope_theta and rope_scaling, so both are written too, with the same values."""
    root = Path(directory)
    hf_config(shape, arch).save_pretrained(str(root))
    path = root / "config.json"
    config = json.loads(path.read_text())
    rope = rope_parameters(shape)
    config.setdefault("rope_theta", rope["rope_theta"])
    if shape.rope_scaling:
        config.setdefault("rope_scaling", {k: v for k, v in rope.items() if k != "rope_theta"})
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path


def shape_from_hf_config(config: Any) -> ModelShape:  # noqa: ANN401
    """The ModelShape (Megatron flags) of a transformers Llama/Qwen2/Qwen3 config."""
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        raise ConversionError(f"unsupported model_type {model_type!r}: PPO Deck converts "
                              f"{', '.join(ARCHITECTURES)} checkpoints")
    if model_type != "qwen2" and getattr(config, "attention_bias", False):
        raise ConversionError(f"{model_type} checkpoints with attention biases (o_proj too) are "
                              "not supported; Megatron's --add-qkv-bias biases q/k/v only "
                              "(as Qwen2 does)")
    if getattr(config, "mlp_bias", False):
        raise ConversionError("checkpoints with MLP biases are not supported")
    if getattr(config, "use_sliding_window", False):
        raise ConversionError("sliding-window attention (use_sliding_window) is not supported")
    rope = _rope_parameters(config)
    scaling, factor = _rope_scaling(rope)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return ModelShape(
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        ffn_hidden_size=config.intermediate_size,
        num_attention_heads=heads,
        num_query_groups=getattr(config, "num_key_value_heads", None) or heads,
        kv_channels=head_dim,
        vocab_size=config.vocab_size,
        max_sequence_length=config.max_position_embeddings,
        rotary_base=float(rope.get("rope_theta", 10000.0)),
        norm_epsilon=float(config.rms_norm_eps),
        normalization="RMSNorm",
        swiglu=True,
        qk_layernorm=model_type == "qwen3",
        add_bias_linear=False,
        add_qkv_bias=model_type == "qwen2",
        untie_embeddings=not getattr(config, "tie_word_embeddings", False),
        position_embedding_type="rope",
        rope_scaling=scaling,
        rope_scaling_factor=factor,
    )


# the ModelShape fields a checkpoint fixes, with the flag that sets each (max positions and the
# embedding tying are left out: runs shorten the context, and tied weights load into untied)
MATCHED_FLAGS = {"num_layers": "--num-layers", "hidden_size": "--hidden-size",
                 "ffn_hidden_size": "--ffn-hidden-size",
                 "num_attention_heads": "--num-attention-heads",
                 "num_query_groups": "--num-query-groups", "kv_channels": "--kv-channels",
                 "vocab_size": "--vocab-size", "rotary_base": "--rotary-base",
                 "qk_layernorm": "--qk-layernorm", "add_qkv_bias": "--add-qkv-bias",
                 "rope_scaling": "--use-rope-scaling",
                 "rope_scaling_factor": "--rotary-scaling-factor"}


def check_shape_matches(config: Any, shape: ModelShape, source: str) -> None:  # noqa: ANN401
    """Raise ConversionError naming every model flag that differs from the HF config at
    `source`: loading the tensors alone would not notice a RoPE base or rope scaling that
    differs, and the run would train another network than the checkpoint's."""
    theirs = shape_from_hf_config(config)
    problems = []
    for field, flag in MATCHED_FLAGS.items():
        if field == "rope_scaling_factor" and not (shape.rope_scaling and theirs.rope_scaling):
            continue
        ours, want = getattr(shape, field), getattr(theirs, field)
        if ours != want:
            problems.append(f"{flag} is {_flag_text(ours)}, the checkpoint's is "
                            f"{_flag_text(want)}")
    if problems:
        raise ConversionError(f"the model flags do not match the HF checkpoint {source}: "
                              + "; ".join(problems) + ". Fix: set the flags to the checkpoint's "
                              "values (or point --hf-checkpoint at the model the flags describe)")


def _flag_text(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _rope_scaling(rope: Mapping[str, Any]) -> tuple[bool, float]:
    """(--use-rope-scaling, --rotary-scaling-factor) of HF rope parameters; only what
    Megatron's RoPE reproduces is accepted (ModelShape's default factor when unscaled)."""
    kind = rope.get("rope_type", "default")
    if kind == "default":
        return False, ModelShape.rope_scaling_factor
    if kind != "llama3":
        raise ConversionError(f"rope_type {kind!r} is not supported; Megatron's RoPE maps the "
                              "default one and Llama 3's (rope_type 'llama3')")
    fixed = {name: rope.get(name) for name in LLAMA3_ROPE}
    if any(value is None or float(value) != LLAMA3_ROPE[name] for name, value in fixed.items()):
        raise ConversionError(f"llama3 rope scaling with {fixed} cannot be reproduced: "
                              f"Megatron's --use-rope-scaling fixes {LLAMA3_ROPE}")
    return True, float(rope["factor"])


def _rope_parameters(config: Any) -> dict[str, Any]:  # noqa: ANN401
    # transformers 5 keeps theta in rope_parameters; older configs had rope_theta/rope_scaling
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, Mapping) and params:
        return dict(params)
    scaling = dict(getattr(config, "rope_scaling", None) or {})
    kind = scaling.pop("rope_type", scaling.pop("type", "default"))
    return {**scaling, "rope_type": kind, "rope_theta": getattr(config, "rope_theta", 10000.0)}


def _check_supported(shape: ModelShape, arch: Arch) -> None:
    if arch not in ARCHITECTURES:
        raise ConversionError(f"unknown arch {arch!r}; expected one of {sorted(ARCHITECTURES)}")
    problems = []
    if not shape.swiglu:
        problems.append("--swiglu is required")
    if shape.normalization != "RMSNorm":
        problems.append("--normalization RMSNorm is required")
    if shape.add_bias_linear:
        problems.append("--disable-bias-linear is required")
    if shape.position_embedding_type != "rope":
        problems.append("rotary position embeddings are required")
    if shape.qk_layernorm != (arch == "qwen3"):
        problems.append(f"--qk-layernorm must be {'on' if arch == 'qwen3' else 'off'} for {arch}")
    if shape.add_qkv_bias != (arch == "qwen2"):
        problems.append(f"--add-qkv-bias must be {'on' if arch == 'qwen2' else 'off'} for {arch}")
    if problems:
        raise ConversionError(f"this model shape has no {arch} HF counterpart: "
                              + "; ".join(problems))


# --------------------------------------------------------------------------------------------
# Megatron -> HF
# --------------------------------------------------------------------------------------------
def mcore_to_hf(sd: Mapping[str, Any], shape: ModelShape, arch: Arch) -> dict[str, torch.Tensor]:
    """A full TP=1 actor state dict (Megatron names) -> HF names. `_extra_state` is ignored.

    Tied models get no lm_head.weight (as in HF's safetensors files); loaders tie it.
    """
    _check_supported(shape, arch)
    sd = {k: v for k, v in sd.items() if not k.endswith("_extra_state")}
    head = sd.get(_MC_HEAD)
    if head is not None and head.shape[0] == 1 and "output_layer.bias" in sd:
        raise ConversionError("this is a critic state dict: its value head has no HF "
                              "counterpart (only actor weights convert to HF)")
    out = {_HF_EMBED: sd[_MC_EMBED], _HF_NORM: sd[_MC_NORM]}
    if shape.untie_embeddings:
        if head is None:
            raise ConversionError(f"untied model but {_MC_HEAD} is missing")
        out[_HF_HEAD] = head
    for i in range(shape.num_layers):
        out.update(_layer_mcore_to_hf(sd, shape, i))
    return out


def _layer_mcore_to_hf(sd: Mapping[str, torch.Tensor], shape: ModelShape,
                       i: int) -> dict[str, torch.Tensor]:
    m, h = f"decoder.layers.{i}.", f"model.layers.{i}."
    q, k, v = split_qkv(sd[m + "self_attention.linear_qkv.weight"], shape)
    gate, up = sd[m + "mlp.linear_fc1.weight"].chunk(2, dim=0)
    out = {
        h + "self_attn.q_proj.weight": q,
        h + "self_attn.k_proj.weight": k,
        h + "self_attn.v_proj.weight": v,
        h + "self_attn.o_proj.weight": sd[m + "self_attention.linear_proj.weight"],
        h + "mlp.gate_proj.weight": gate,
        h + "mlp.up_proj.weight": up,
        h + "mlp.down_proj.weight": sd[m + "mlp.linear_fc2.weight"],
        h + "input_layernorm.weight": _first(sd, m + "input_layernorm.weight",
                                             m + "self_attention.linear_qkv.layer_norm_weight"),
        h + "post_attention_layernorm.weight": _first(sd, m + "pre_mlp_layernorm.weight",
                                                      m + "mlp.linear_fc1.layer_norm_weight"),
    }
    if shape.qk_layernorm:
        out[h + "self_attn.q_norm.weight"] = sd[m + "self_attention.q_layernorm.weight"]
        out[h + "self_attn.k_norm.weight"] = sd[m + "self_attention.k_layernorm.weight"]
    if shape.add_qkv_bias:
        biases = split_qkv(sd[m + "self_attention.linear_qkv.bias"], shape)
        out.update({h + f"self_attn.{p}_proj.bias": b for p, b in zip("qkv", biases, strict=True)})
    return {k: t.contiguous() for k, t in out.items()}


def _first(sd: Mapping[str, torch.Tensor], *keys: str) -> torch.Tensor:
    # local spec vs TE spec name the same norm differently
    for key in keys:
        if key in sd:
            return sd[key]
    raise ConversionError(f"none of {list(keys)} is in the Megatron state dict")


def split_qkv(qkv: torch.Tensor, shape: ModelShape) -> tuple[torch.Tensor, ...]:
    """Megatron's fused [groups x (q heads, k, v)] rows -> HF q, k, v projections: weights
    [rows, hidden] or biases [rows]."""
    groups, dim = shape.num_query_groups, shape.kv_channels
    q_per_group = shape.num_attention_heads // groups
    rest = tuple(qkv.shape[1:])
    fused = qkv.view(groups, (q_per_group + 2) * dim, *rest)
    q, k, v = fused.split([q_per_group * dim, dim, dim], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             shape: ModelShape) -> torch.Tensor:
    """HF q, k, v projections (weights or biases) -> Megatron's fused rows, interleaved per
    query group."""
    groups, dim = shape.num_query_groups, shape.kv_channels
    q_per_group = shape.num_attention_heads // groups
    rest = tuple(q.shape[1:])
    fused = torch.cat([q.reshape(groups, q_per_group * dim, *rest),
                       k.reshape(groups, dim, *rest),
                       v.reshape(groups, dim, *rest)], dim=1)
    return fused.reshape(-1, *rest)


# --------------------------------------------------------------------------------------------
# HF -> Megatron
# --------------------------------------------------------------------------------------------
def hf_to_mcore(hf_sd: Mapping[str, torch.Tensor], shape: ModelShape, arch: Arch,
                role: str = "actor", *, te_layout: bool = False,
                notes: Callable[[str], None] | None = None) -> dict[str, torch.Tensor]:
    """HF names -> a Megatron state dict for `role` ("actor", "ref" or "critic").

    The critic's value head has no HF counterpart: output_layer.* is left out so the model's
    fresh init stays, and `notes(CRITIC_HEAD_NOTE)` is called so the engine can say so.
    `te_layout` targets the transformer-engine spec (norms fused into the linears).
    """
    _check_supported(shape, arch)
    _check_hf_keys(hf_sd, shape)
    out = {_MC_EMBED: hf_sd[_HF_EMBED], _MC_NORM: hf_sd[_HF_NORM]}
    if role == "critic":
        if notes is not None:
            notes(CRITIC_HEAD_NOTE)
    elif shape.untie_embeddings:
        # an untied target loaded from a tied checkpoint starts with lm_head = embeddings
        out[_MC_HEAD] = hf_sd.get(_HF_HEAD, hf_sd[_HF_EMBED])
    for i in range(shape.num_layers):
        out.update(_layer_hf_to_mcore(hf_sd, shape, i, te_layout))
    return out


def _layer_hf_to_mcore(sd: Mapping[str, torch.Tensor], shape: ModelShape, i: int,
                       te_layout: bool) -> dict[str, torch.Tensor]:
    h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
    attn = h + "self_attn."
    qkv = fuse_qkv(sd[attn + "q_proj.weight"], sd[attn + "k_proj.weight"],
                   sd[attn + "v_proj.weight"], shape)
    input_norm = ("self_attention.linear_qkv.layer_norm_weight" if te_layout
                  else "input_layernorm.weight")
    mlp_norm = "mlp.linear_fc1.layer_norm_weight" if te_layout else "pre_mlp_layernorm.weight"
    out = {
        m + "self_attention.linear_qkv.weight": qkv,
        m + "self_attention.linear_proj.weight": sd[attn + "o_proj.weight"],
        m + "mlp.linear_fc1.weight": torch.cat([sd[h + "mlp.gate_proj.weight"],
                                                sd[h + "mlp.up_proj.weight"]], dim=0),
        m + "mlp.linear_fc2.weight": sd[h + "mlp.down_proj.weight"],
        m + input_norm: sd[h + "input_layernorm.weight"],
        m + mlp_norm: sd[h + "post_attention_layernorm.weight"],
    }
    if shape.qk_layernorm:
        out[m + "self_attention.q_layernorm.weight"] = sd[attn + "q_norm.weight"]
        out[m + "self_attention.k_layernorm.weight"] = sd[attn + "k_norm.weight"]
    if shape.add_qkv_bias:
        out[m + "self_attention.linear_qkv.bias"] = fuse_qkv(
            sd[attn + "q_proj.bias"], sd[attn + "k_proj.bias"], sd[attn + "v_proj.bias"], shape)
    return {k: t.contiguous() for k, t in out.items()}


def _check_hf_keys(hf_sd: Mapping[str, torch.Tensor], shape: ModelShape) -> None:
    """Fail with the missing names and the shape mismatch, not a bare KeyError later."""
    expected = [_HF_EMBED, _HF_NORM]
    for i in range(shape.num_layers):
        h = f"model.layers.{i}."
        expected += [h + f"self_attn.{p}_proj.weight" for p in "qkvo"]
        expected += [h + f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
        if shape.qk_layernorm:
            expected += [h + "self_attn.q_norm.weight", h + "self_attn.k_norm.weight"]
        if shape.add_qkv_bias:
            expected += [h + f"self_attn.{p}_proj.bias" for p in "qkv"]
    missing = [k for k in expected if k not in hf_sd]
    if missing:
        hint = (" (--add-qkv-bias is on: a Qwen2 checkpoint has q/k/v biases)"
                if any(k.endswith("_proj.bias") for k in missing) else "")
        raise ConversionError(f"HF state dict lacks {len(missing)} tensors, e.g. "
                              f"{missing[:3]}{hint}")
    # biases the model flags leave out would be dropped without a word
    dropped = sorted(set(k for k in hf_sd if k.endswith(".bias")) - set(expected))
    if dropped:
        fix = ("set --add-qkv-bias" if all(k.endswith(("q_proj.bias", "k_proj.bias",
                                                         "v_proj.bias")) for k in dropped)
               else "this converter maps q/k/v biases only")
        raise ConversionError(f"the HF checkpoint has {len(dropped)} bias tensors the model "
                              f"flags do not build, e.g. {dropped[:3]}: {fix}")
    embed = tuple(hf_sd[_HF_EMBED].shape)
    if embed != (shape.vocab_size, shape.hidden_size):
        raise ConversionError(f"{_HF_EMBED} is {embed} but the model shape wants "
                              f"({shape.vocab_size}, {shape.hidden_size}) "
                              "(--vocab-size / --hidden-size)")


# --------------------------------------------------------------------------------------------
# loading HF checkpoints from disk
# --------------------------------------------------------------------------------------------
def load_hf_checkpoint(path: str | Path) -> tuple[Any, dict[str, torch.Tensor]]:
    """(transformers config, HF state dict) from a local checkpoint.

    Accepted: a directory with config.json and model*.safetensors (sharded with an index
    too), a `.gguf` file, or a directory holding exactly one `.gguf` file (its weights are
    dequantized by transformers, e.g. SmolLM2's Q4_1 file).
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"HF checkpoint {path} does not exist (--hf-checkpoint)")
    gguf = gguf_file_of(path)
    if gguf is not None:
        return _load_gguf(gguf)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"HF checkpoint {path} has no config.json (and no .gguf file)")
    return _load_config(path), _load_safetensors(path)


def gguf_file_of(path: Path) -> Path | None:
    """The GGUF file `path` names or holds, None when it is a plain HF directory."""
    if path.is_file():
        if path.suffix == ".gguf":
            return path
        raise FileNotFoundError(f"HF checkpoint {path} is a file but not a .gguf file")
    ggufs = sorted(path.glob("*.gguf"))
    if not ggufs or (path / "config.json").is_file():
        return None
    if len(ggufs) > 1:
        raise FileNotFoundError(f"HF checkpoint {path} holds several .gguf files "
                                f"({', '.join(g.name for g in ggufs)}); name one of them")
    return ggufs[0]


def _load_config(path: Path) -> Any:  # noqa: ANN401
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(path), local_files_only=True)


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
        absent = [s for s in shards if not (path / s).is_file()]
        if absent:
            raise FileNotFoundError(f"HF checkpoint {path}: shards listed in {index.name} are "
                                    f"missing: {absent[:3]}")
    else:
        shards = sorted(p.name for p in path.glob("*.safetensors"))
        if not shards:
            raise FileNotFoundError(f"HF checkpoint {path} has config.json but no *.safetensors "
                                    "weights (nor model.safetensors.index.json)")
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(load_file(str(path / shard)))
    return state


def _load_gguf(file: Path) -> tuple[Any, dict[str, torch.Tensor]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name,
                                                 local_files_only=True, dtype=torch.float32)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return model.config, state
