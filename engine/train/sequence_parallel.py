"""Sequence parallelism (--sequence-parallel, TP > 1) on Megatron's local layer spec.

Megatron-core's sequence-parallel regions (the embedding's reduce-scatter, the column/row
parallel linears' all-gather and reduce-scatter, the output layer's gather) are used as they
are; the CPU shim's gloo path supports their collectives. What the local spec lacks is a norm:
its `WrappedTorchNorm` refuses sequence parallelism, because under it each TP rank normalizes
only its slice of the sequence and the norm weights' gradients must be summed over TP. Megatron
does that sum (finalize_model_grads) for every parameter marked `sequence_parallel`; the norm
below is torch's, marked so. The q/k norms (per head, TP-split heads) are marked as well, as
transformer-engine's norms are under sequence parallelism.
"""

from __future__ import annotations

from typing import Any

import torch


class SequenceParallelNorm:
    """Factory like Megatron's WrappedTorchNorm, for sequence parallelism: torch's RMSNorm or
    LayerNorm whose parameters carry `sequence_parallel` (their grads are summed over TP)."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5,  # noqa: ANN401
                persist_layer_norm: bool = False, zero_centered_gamma: bool = False,
                normalization: str = "LayerNorm") -> torch.nn.Module:
        if config.layernorm_zero_centered_gamma or config.memory_efficient_layer_norm:
            raise ValueError("zero-centered gamma / memory-efficient layer norm are not supported "
                             "by the local spec's norms")
        kinds = {"LayerNorm": torch.nn.LayerNorm, "RMSNorm": torch.nn.RMSNorm}
        if config.normalization not in kinds:
            raise ValueError(f"--normalization {config.normalization} is not supported with "
                             "--sequence-parallel (LayerNorm or RMSNorm)")
        norm = kinds[config.normalization](normalized_shape=hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = bool(config.sequence_parallel)
        return norm


def sequence_parallel_block_spec(layer_spec: Any, config: Any) -> Any:  # noqa: ANN401
    """This pipeline stage's block spec with every local norm (the layers' and the final one;
    torch's or our compiled RMSNorm, which refuse sequence parallelism too) replaced by
    SequenceParallelNorm: a TransformerBlockSubmodules, which GPTModel takes as its spec."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_block import (
        TransformerBlockSubmodules,
        get_num_layers_to_build,
    )

    from .fused import FusedRMSNorm, swap_norms

    spec = swap_norms(layer_spec, (WrappedTorchNorm, FusedRMSNorm), SequenceParallelNorm)
    return TransformerBlockSubmodules(layer_specs=[spec] * get_num_layers_to_build(config),
                                      layer_norm=SequenceParallelNorm)


def gather_for_value_head(hidden: torch.Tensor) -> torch.Tensor:
    """The critic's value head is replicated on every TP rank: it needs the whole sequence.
    Backward: each rank keeps its slice of the (identical) gradient."""
    from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region

    return gather_from_sequence_parallel_region(hidden, tensor_parallel_output_grad=False)
