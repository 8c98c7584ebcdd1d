"""Build the actor (a megatron-core GPTModel) and the critic (same trunk, value head)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
import torch.nn.functional as F

from ..model.shape import ModelShape
from .platform import (
    Parallelism,
    give_up_transformer_engine,
    has_transformer_engine,
    transformer_engine_status,
)

Role = Literal["actor", "critic", "ref"]


def transformer_config(shape: ModelShape, parallel: Parallelism, *, bf16: bool,
                       recompute: Mapping[str, Any] | None = None,
                       sequence_parallel: bool = False,
                       cp_comm_type: str | None = None):  # noqa: ANN201
    """`sequence_parallel` (TP > 1 only) and `cp_comm_type` (transformer-engine's CP attention:
    "all_gather" or "p2p"; ours always all-gathers, engine/train/context_parallel.py)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    recompute = recompute or {}
    params_dtype = torch.bfloat16 if bf16 else torch.float32
    fused, fused_rope = fusion_mode() == "ops", False
    if fused:
        from .fused import install_fused_rope

        fused_rope = install_fused_rope()  # before the config: its validation checks the slot
    return TransformerConfig(
        num_layers=shape.num_layers,
        hidden_size=shape.hidden_size,
        ffn_hidden_size=shape.ffn_hidden_size,
        num_attention_heads=shape.num_attention_heads,
        num_query_groups=shape.num_query_groups,
        kv_channels=shape.kv_channels,
        gated_linear_unit=shape.swiglu,
        activation_func=F.silu if shape.swiglu else F.gelu,
        normalization=shape.normalization,
        layernorm_epsilon=shape.norm_epsilon,
        qk_layernorm=shape.qk_layernorm,
        add_bias_linear=shape.add_bias_linear,
        add_qkv_bias=shape.qkv_bias,
        hidden_dropout=shape.hidden_dropout,
        attention_dropout=shape.attention_dropout,
        tensor_model_parallel_size=parallel.tp,
        pipeline_model_parallel_size=parallel.pp,
        context_parallel_size=parallel.cp,
        sequence_parallel=sequence_parallel and parallel.tp > 1,
        cp_comm_type=cp_comm_type if parallel.cp > 1 else None,
        params_dtype=params_dtype,
        pipeline_dtype=params_dtype,
        bf16=bf16,
        use_cpu_initialization=not torch.cuda.is_available(),
        recompute_granularity=recompute.get("recompute_granularity"),
        recompute_method=recompute.get("recompute_method"),
        recompute_num_layers=recompute.get("recompute_num_layers"),
        apply_rope_fusion=fused and fused_rope and shape.position_embedding_type == "rope",
        bias_activation_fusion=fused and shape.swiglu and not shape.add_bias_linear,
    )


def fused_layer_ops() -> bool:
    """Our compiled RoPE/RMSNorm and Megatron's compiled SwiGLU (engine/train/fused.py): on
    CUDA without transformer-engine only. On CPU the compile time outweighs the gain at the
    sizes that run there; with TE its own fused kernels are used."""
    from .fused import fused_ops_available
    from .platform import has_cuda

    return has_cuda() and not has_transformer_engine() and fused_ops_available()


def fusion_mode() -> str:
    """'layers' (each TransformerLayer compiled whole, engine/train/layer_compile.py), 'ops'
    (compiled RoPE/RMSNorm/SwiGLU, engine/train/fused.py) or 'none' (CPU, TE, or turned off)."""
    from .attention import attention_choice
    from .platform import layer_compile_enabled

    if not fused_layer_ops():
        return "none"
    # only our SDPA layers: Megatron's stock attention forks its CUDA RNG tracker, whose
    # lazy-call callback dynamo would compile under CUDA's init lock (seen: a deadlock)
    whole = layer_compile_enabled() and attention_choice() != "unfused"
    return "layers" if whole else "ops"


def layer_spec(shape: ModelShape):  # noqa: ANN201
    """TE spec only where transformer-engine really works; otherwise megatron's local spec with
    our SDPA core attention (engine/train/attention.py), or megatron's stock unfused attention
    when PPODECK_ATTENTION=unfused."""
    from megatron.core.models.gpt import gpt_layer_specs as specs

    from .attention import attention_choice, local_spec_with_sdpa

    if has_transformer_engine():
        try:
            return specs.get_gpt_layer_with_transformer_engine_spec(
                qk_layernorm=shape.qk_layernorm)
        except Exception as err:  # noqa: BLE001 - any TE/megatron mismatch: run local instead
            give_up_transformer_engine(f"its layer spec failed ({type(err).__name__}: {err})")
    if attention_choice() == "unfused":
        return specs.get_gpt_layer_local_spec(qk_layernorm=shape.qk_layernorm,
                                              normalization=shape.normalization)
    from .fastpaths import direct_linears

    spec = direct_linears(local_spec_with_sdpa(shape))
    if fusion_mode() == "ops":
        from .fused import local_spec_norms

        spec = local_spec_norms(spec, shape.normalization)
    return spec


class ValueHead(torch.nn.Linear):
    """The critic's output layer: Linear(hidden, 1) with bias, N(0, 0.02) init, fp32 out.

    It stands in for GPTModel.output_layer, so it takes the same call signature and returns
    (output, bias). Its weights are seeded independently of the TP rank, so every TP rank
    holds the same head without a broadcast.
    """

    def __init__(self, hidden_size: int, seed: int, sequence_parallel: bool = False) -> None:
        super().__init__(hidden_size, 1, bias=True)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.weight.copy_(torch.randn(1, hidden_size, generator=generator) * 0.02)
            self.bias.zero_()
        for param in self.parameters():
            param.tensor_model_parallel = False  # replicated, like a layernorm weight
        # under sequence parallelism the hidden states are a TP slice of the sequence: gathered
        self.sequence_parallel = sequence_parallel

    def forward(self, hidden_states: torch.Tensor, weight: torch.Tensor | None = None,
                runtime_gather_output: bool | None = None) -> tuple[torch.Tensor, None]:
        if self.sequence_parallel:
            from .sequence_parallel import gather_for_value_head

            hidden_states = gather_for_value_head(hidden_states)
        values = F.linear(hidden_states, self.weight, self.bias)
        return values.float(), None


def describe_layer_spec() -> str:
    """The run log's line on the layer spec this process builds, and why not TE."""
    from .attention import attention_choice

    used, why = transformer_engine_status()
    if used:
        return f"layer spec: transformer-engine's ({why})"
    local = ("megatron's stock local spec (unfused attention)" if attention_choice() == "unfused"
             else "megatron's local spec with SDPA attention")
    return f"layer spec: {local}; transformer-engine not used: {why}"


def _gpt_model(shape: ModelShape, config, spec, *, pre_process: bool,  # noqa: ANN001, ANN202
               post_process: bool, is_critic: bool):
    from megatron.core.models.gpt import GPTModel

    if config.sequence_parallel and not has_transformer_engine():
        from .sequence_parallel import sequence_parallel_block_spec

        spec = sequence_parallel_block_spec(spec, config)
    return GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=shape.vocab_size,
        max_sequence_length=shape.max_sequence_length,
        pre_process=pre_process,
        post_process=post_process,
        parallel_output=True,
        share_embeddings_and_output_weights=not shape.untie_embeddings and not is_critic,
        position_embedding_type=shape.position_embedding_type,
        rotary_base=int(shape.rotary_base),
        # Llama 3 scaling of the inverse frequencies (Megatron's RotaryEmbedding._apply_scaling:
        # low/high frequency factors 1 and 4, original context 8192: shape.LLAMA3_ROPE)
        rope_scaling=shape.rope_scaling,
        rope_scaling_factor=shape.rope_scaling_factor,
    )


def build_gpt(shape: ModelShape, role: Role, config, *, pre_process: bool = True,  # noqa: ANN001
              post_process: bool = True, seed: int = 1234,
              fixed_micro_batches: bool = False) -> torch.nn.Module:
    """An actor/ref GPTModel, or a critic whose output layer is a value head.
    `fixed_micro_batches`: it trains on micro-batches of a fixed size (not token-budget ones),
    so compiled layers keep their batch dim static (engine/train/layer_compile.py).

    A TE model that fails to build (a TE/megatron/cuDNN mismatch shows only here) is built
    again with the local spec, TE given up for the process; describe_layer_spec() says why."""
    is_critic = role == "critic"
    te = has_transformer_engine()
    parts = {"pre_process": pre_process, "post_process": post_process, "is_critic": is_critic}
    try:
        model = _gpt_model(shape, config, layer_spec(shape), **parts)
    except Exception as err:
        if not te:
            raise
        give_up_transformer_engine(f"its model failed to build ({type(err).__name__}: {err})")
        model = _gpt_model(shape, config, layer_spec(shape), **parts)
    if is_critic and post_process:
        model.output_layer = ValueHead(shape.hidden_size, seed=seed,
                                       sequence_parallel=config.sequence_parallel)
    elif post_process and not config.sequence_parallel:
        from .fastpaths import batch_first_output_layer

        batch_first_output_layer(model)
    if fusion_mode() == "layers":
        split = config.context_parallel_size > 1 or config.sequence_parallel
        if split:  # collectives inside a layer: not traced by dynamo so far; run eager
            import sys

            print("[ppodeck] whole-layer compile is off under context/sequence parallelism: "
                  "the layers run eager", file=sys.stderr, flush=True)
        else:
            from .layer_compile import compile_layers

            compile_layers(model, static_batch=fixed_micro_batches)
    if config.params_dtype != torch.float32:
        # like Megatron-LM's Float16Module: the local spec leaves norm weights (and our value
        # head) in fp32, which forces unfused norms and breaks optimizer checkpoint sharding
        model.to(config.params_dtype)
    return model
