"""The model's architecture as the Megatron flags describe it (`--num-layers` ...): what the
trainer builds (engine/train/model.py), the converter maps (engine/model/convert.py) and the
rollout runs, described once. No torch: the driver's preflight reads it too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What Megatron-core's Llama 3 rope scaling fixes besides the factor (RotaryEmbedding.
# _apply_scaling's defaults, which GPTModel never overrides): the HF config we write carries
# them, and an HF checkpoint with other values cannot be reproduced by Megatron.
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


@dataclass(frozen=True)
class ModelShape:
    """The architecture, read from the Megatron model flags (`--num-layers` ...)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    vocab_size: int
    max_sequence_length: int
    rotary_base: float = 10000.0
    norm_epsilon: float = 1e-5
    normalization: str = "RMSNorm"
    swiglu: bool = True
    qk_layernorm: bool = False
    add_bias_linear: bool = False
    # --add-qkv-bias: a bias on the fused QKV projection only (Qwen2 / Qwen2.5)
    add_qkv_bias: bool = False
    untie_embeddings: bool = False
    position_embedding_type: str = "rope"
    # --use-rope-scaling / --rotary-scaling-factor: Llama 3's frequency scaling, with
    # Megatron's fixed low/high frequency factors and original context (LLAMA3_ROPE)
    rope_scaling: bool = False
    rope_scaling_factor: float = 8.0
    # train-time only (the rollout runs the model in eval mode); Megatron's default is 0.1
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> ModelShape:
        """From resolve()d args: GQA groups, head dim, MLP width, sequence length and the
        position embedding are already filled in there (miles' fallbacks)."""
        return cls(
            num_layers=int(args["num_layers"]),
            hidden_size=int(args["hidden_size"]),
            ffn_hidden_size=int(args["ffn_hidden_size"]),
            num_attention_heads=int(args["num_attention_heads"]),
            num_query_groups=int(args["num_query_groups"]),
            kv_channels=int(args["kv_channels"]),
            vocab_size=int(args["vocab_size"]),
            max_sequence_length=int(args["max_position_embeddings"] or args["seq_length"]),
            rotary_base=float(args["rotary_base"]),
            norm_epsilon=float(args["norm_epsilon"]),
            normalization=str(args["normalization"]),
            swiglu=bool(args["swiglu"]),
            qk_layernorm=bool(args["qk_layernorm"]),
            add_bias_linear=not args["disable_bias_linear"],
            add_qkv_bias=bool(args["add_qkv_bias"]),
            untie_embeddings=bool(args["untie_embeddings_and_output_weights"]),
            position_embedding_type=str(args["position_embedding_type"]),
            rope_scaling=bool(args["use_rope_scaling"]),
            rope_scaling_factor=float(args["rotary_scaling_factor"]),
            attention_dropout=float(args["attention_dropout"]),
            hidden_dropout=float(args["hidden_dropout"]),
        )

    @property
    def qkv_bias(self) -> bool:
        """Whether linear_qkv has a bias: Megatron adds one with either flag."""
        return self.add_bias_linear or self.add_qkv_bias

    def num_params(self) -> int:
        """Parameter count of the actor (embeddings counted once when tied)."""
        attn = self.hidden_size * self.kv_channels * (
            self.num_attention_heads * 2 + self.num_query_groups * 2)
        if self.qkv_bias:
            attn += self.kv_channels * (self.num_attention_heads + 2 * self.num_query_groups)
        mlp = self.hidden_size * self.ffn_hidden_size * (3 if self.swiglu else 2)
        if self.add_bias_linear:  # linear_proj, linear_fc1 ([gate; up] with SwiGLU), fc2
            attn += self.hidden_size
            mlp += self.ffn_hidden_size * (2 if self.swiglu else 1) + self.hidden_size
        norms = 2 * self.hidden_size + (2 * self.kv_channels if self.qk_layernorm else 0)
        embed = self.vocab_size * self.hidden_size * (2 if self.untie_embeddings else 1)
        return self.num_layers * (attn + mlp + norms) + embed + self.hidden_size
