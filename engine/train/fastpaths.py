"""Fast paths for Megatron-core on a machine without transformer-engine or apex.

Megatron falls back to slow local code when neither TE nor apex is installed (our GPU machine:
TE cannot be built there), and those fallbacks took a large share of a train step
(docs/performance.md). Each fast path below keeps Megatron's maths and is installed only where
Megatron is still using its own fallback; `describe()` gives a line per path in effect for the
run log, so the user sees what replaced what.

- grad-norm / grad-scale: `local_multi_tensor_l2_norm` syncs the host once per gradient tensor
  (`torch.tensor(list of cuda scalars)`), ~230 syncs per step; `local_multi_tensor_scale` does
  two kernels per tensor. Ours use torch's foreach kernels and never sync.
- fused AdamW: Megatron builds `torch.optim.AdamW` without `fused`; on CUDA the fused kernel
  does the update in one pass over the fp32 master state.
- RoPE, RMSNorm and SwiGLU on CUDA: compiled (engine/train/fused.py, wired by model.py).
- fused log-probs (TP=1, CUDA): engine/train/logprobs.py.
- direct linears (TP=1): Megatron's Column/RowParallelLinear wrap every GEMM in Python autograd
  Functions (the linear itself, plus the identity copy/reduce regions of tensor parallelism),
  so each of the 4 linears of each layer runs Python in the backward too. With one TP rank
  those Functions compute exactly `F.linear`; ours call it directly, and autograd stays in C++.
- batch-first output layer: GPTModel ends with `logits.transpose(0, 1).contiguous()`, a copy of
  the full [s, b, vocab] logits (2.5 GB at 8 x 1024 tokens of Qwen3) forward and backward. Ours
  computes the logits directly in [b, s, vocab] memory order, so that copy is a no-op.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

from ..model.offload import inner_optimizers
from .platform import fused_enabled


def foreach_l2_norm(chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list,  # noqa: ARG001
                    per_tensor: bool, *args: object) -> tuple[torch.Tensor, None]:
    """Drop-in for amp_C.multi_tensor_l2norm: the L2 norm of all tensors, as a [1] fp32 tensor
    on their device, without a host sync."""
    tensors = [t for group in tensor_lists for t in group]
    if not tensors:
        return torch.zeros(1, dtype=torch.float32, device=_default_device()), None
    norms = torch._foreach_norm(tensors)
    total = torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))
    return total.reshape(1), None


def foreach_scale(chunk_size: int, noop_flag: torch.Tensor, tensor_lists: list,  # noqa: ARG001
                  scale: float) -> None:
    """Drop-in for amp_C.multi_tensor_scale: dst[i] = src[i] * scale (dtype cast on copy)."""
    sources, targets = list(tensor_lists[0]), list(tensor_lists[1])
    if not sources:
        return
    in_place = all(s is t for s, t in zip(sources, targets, strict=True))
    if in_place:
        torch._foreach_mul_(targets, scale)
    elif scale == 1.0:
        torch._foreach_copy_(targets, sources)
    else:
        torch._foreach_copy_(targets, torch._foreach_mul(sources, scale))


def _default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def install_grad_kernels() -> list[str]:
    """Point Megatron's clip_grads / optimizer modules at the foreach kernels where they hold
    Megatron's local fallbacks (and back again when fast paths are turned off)."""
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads, optimizer

    fast = fused_enabled()
    norm_from, norm_to = ((utils.local_multi_tensor_l2_norm, foreach_l2_norm) if fast
                          else (foreach_l2_norm, utils.local_multi_tensor_l2_norm))
    scale_from, scale_to = ((utils.local_multi_tensor_scale, foreach_scale) if fast
                            else (foreach_scale, utils.local_multi_tensor_scale))
    changed = False
    if clip_grads.l2_norm_impl is norm_from:
        clip_grads.l2_norm_impl, changed = norm_to, True
    for module in (clip_grads, optimizer):
        if getattr(module, "multi_tensor_scale_impl", None) is scale_from:
            module.multi_tensor_scale_impl, changed = scale_to, True
    if not changed or not fast:
        return []
    return ["grad norm/scale: foreach kernels (was megatron's per-tensor fallback)"]


def fuse_adam(optimizer) -> list[str]:  # noqa: ANN001
    """Switch torch AdamW param groups to the fused CUDA kernel when every param is a CUDA
    floating tensor (the fp32 master weights). Returns a log line when it did."""
    if not fused_enabled():
        return []
    switched = 0
    for opt in inner_optimizers(optimizer):
        if not isinstance(opt, torch.optim.AdamW):
            continue
        params = [p for group in opt.param_groups for p in group["params"]]
        if not params or not all(p.is_cuda and p.is_floating_point() for p in params):
            continue
        for group in opt.param_groups:
            group["fused"], group["foreach"] = True, False
        opt.defaults["fused"], opt.defaults["foreach"] = True, False
        switched += 1
    return [f"optimizer: torch fused AdamW on {switched} param set(s)"] if switched else []


def batch_first_output_layer(model: torch.nn.Module) -> list[str]:
    """Make the actor's output layer write logits in [b, s, vocab] memory order (see above)."""
    layer = getattr(model, "output_layer", None)
    if (not fused_enabled() or type(layer) is not ColumnParallelLinear
            or getattr(layer, "sequence_parallel", False)):
        return []
    layer.__class__ = BatchFirstOutputLayer
    return ["output layer: logits computed batch-first (no [s, b, vocab] transpose copy)"]


class BatchFirstOutputLayer(ColumnParallelLinear):
    """ColumnParallelLinear whose [s, b, V] output is a view of [b, s, V]-contiguous memory.

    Same parameters, same state dict, same maths: only the memory order of the result differs,
    so GPTModel's final `transpose(0, 1).contiguous()` returns it without copying. Only valid
    without sequence parallelism (the input's dim 0 is then not gathered)."""

    def forward(self, input_: torch.Tensor, weight: torch.Tensor | None = None,
                runtime_gather_output: bool | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch_first = input_.transpose(0, 1).contiguous()  # [b, s, h]: hidden-sized, cheap
        output, bias = super().forward(batch_first, weight=weight,
                                       runtime_gather_output=runtime_gather_output)
        return output.transpose(0, 1), bias


def _direct_ok(layer: ColumnParallelLinear | RowParallelLinear) -> bool:
    """True where Megatron's linear reduces to F.linear: one TP rank, no sequence parallelism,
    no expert communication, no fused wgrad accumulation (apex) nor deferred embedding wgrad."""
    from megatron.core.utils import get_pg_size

    config = layer.config
    return (get_pg_size(layer.tp_group) == 1 and not layer.sequence_parallel
            and not layer.explicit_expert_comm and not layer.gradient_accumulation_fusion
            and not config.defer_embedding_wgrad_compute and layer.weight is not None)


class DirectColumnLinear(ColumnParallelLinear):
    """ColumnParallelLinear that calls F.linear directly when it runs on one TP rank."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.direct = _direct_ok(self)

    def forward(self, input_: torch.Tensor, weight: torch.Tensor | None = None,
                runtime_gather_output: bool | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.direct or self.config._cpu_offloading_context is not None:
            return super().forward(input_, weight=weight,
                                   runtime_gather_output=runtime_gather_output)
        bias = None if self.skip_bias_add else self.bias
        output = F.linear(input_, self.weight if weight is None else weight, bias)
        return output, (self.bias if self.skip_bias_add else None)


class DirectRowLinear(RowParallelLinear):
    """RowParallelLinear that calls F.linear directly when it runs on one TP rank."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.direct = _direct_ok(self)

    def forward(self, input_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.direct or self.config._cpu_offloading_context is not None:
            return super().forward(input_)
        bias = None if self.skip_bias_add else self.bias
        output = F.linear(input_, self.weight, bias)
        return output, (self.bias if self.skip_bias_add else None)


def direct_linears(spec):  # noqa: ANN001, ANN201
    """A copy of a local GPT layer spec whose attention and MLP linears are the direct ones
    (each still falls back to Megatron's own path when TP > 1). Unchanged when fast paths are
    off or the spec holds other linear classes (TE)."""
    if not fused_enabled():
        return spec
    spec = copy.deepcopy(spec)
    swap = {ColumnParallelLinear: DirectColumnLinear, RowParallelLinear: DirectRowLinear}
    for block in ("self_attention", "mlp"):
        submodules = getattr(getattr(spec.submodules, block, None), "submodules", None)
        for name in ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"):
            current = getattr(submodules, name, None)
            if current in swap:
                setattr(submodules, name, swap[current])
    return spec


def describe(model: torch.nn.Module, optimizer) -> list[str]:  # noqa: ANN001
    """One line per fast path in effect for this model and optimizer (for the run log)."""
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads

    lines = []
    config = getattr(model, "config", None)
    if getattr(config, "apply_rope_fusion", False):
        lines.append("RoPE: fused")
    if getattr(config, "bias_activation_fusion", False):
        lines.append("SwiGLU: megatron's fused (compiled) kernel")
    norms = {type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.RMSNorm)}
    if "FusedRMSNorm" in norms:
        lines.append("RMSNorm: fused (compiled) forward and backward")
    from .layer_compile import compiled_line

    if line := compiled_line(model):
        lines.append(line)
    direct = [m for m in model.modules() if isinstance(m, DirectColumnLinear | DirectRowLinear)]
    if direct and all(m.direct for m in direct):
        lines.append(f"linears: {len(direct)} direct F.linear calls (TP=1, autograd in C++)")
    if isinstance(getattr(model, "output_layer", None), BatchFirstOutputLayer):
        lines.append("output layer: logits computed batch-first (no transpose copy)")
    if clip_grads.l2_norm_impl is foreach_l2_norm:
        lines.append("grad norm/scale: foreach kernels, no per-tensor host sync "
                     "(replacing megatron's local fallback)")
    elif clip_grads.l2_norm_impl is utils.local_multi_tensor_l2_norm:
        lines.append("megatron's grad-norm fallback: one host sync per tensor")
    if any(isinstance(o, torch.optim.AdamW) and o.defaults.get("fused")
           for o in inner_optimizers(optimizer)):
        lines.append("optimizer: torch fused AdamW")
    return lines
