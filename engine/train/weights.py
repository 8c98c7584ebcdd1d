"""Weights independent of the parallel layout: global names, TP shards, init, gather, backup.

A "full" state dict is the TP=1, PP=1 layout with Megatron names and global layer numbers (what
engine.model.convert reads and writes). Each TP-partitioned parameter carries megatron's
`partition_dim` and `partition_stride`: the full tensor is split into tp*stride chunks along
that dim and TP rank r holds chunks r, r+tp, ... concatenated. That one rule covers the fused
QKV (stride 1, whole query groups per rank) and SwiGLU's [gate; up] fc1 (stride 2: each rank
holds [gate_r; up_r]).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_EMBED = "embedding.word_embeddings.weight"
_HEAD = "output_layer.weight"


@dataclass(frozen=True)
class TPLayout:
    dim: int | None  # None: replicated across TP ranks
    stride: int = 1


def tp_layout(param: torch.Tensor) -> TPLayout:
    if not getattr(param, "tensor_model_parallel", False):
        return TPLayout(dim=None)
    return TPLayout(dim=int(param.partition_dim), stride=int(getattr(param, "partition_stride", 1)))


def shard_tensor(full: torch.Tensor, layout: TPLayout, rank: int, size: int) -> torch.Tensor:
    """This TP rank's piece of a full tensor."""
    if layout.dim is None or size == 1:
        return full
    chunks = torch.chunk(full, size * layout.stride, dim=layout.dim)
    return torch.cat(chunks[rank::size], dim=layout.dim)


def unshard_tensors(shards: list[torch.Tensor], layout: TPLayout) -> torch.Tensor:
    """Inverse of shard_tensor over all TP ranks' pieces (in TP rank order)."""
    if layout.dim is None or len(shards) == 1:
        return shards[0]
    pieces = [torch.chunk(s, layout.stride, dim=layout.dim) for s in shards]
    ordered = [pieces[r][k] for k in range(layout.stride) for r in range(len(shards))]
    return torch.cat(ordered, dim=layout.dim)


def global_names(model: torch.nn.Module) -> Iterator[tuple[str, str, torch.nn.Parameter]]:
    """(local name, global name, param) for a GPTModel (not DDP-wrapped) on this PP stage."""
    layers = getattr(getattr(model, "decoder", None), "layers", None)
    for name, param in model.named_parameters():
        match = _LAYER.match(name)
        if match and layers is not None:
            number = layers[int(match.group(1))].layer_number - 1  # layer_number is 1-based
            yield name, f"decoder.layers.{number}.{name[match.end():]}", param
        else:
            yield name, name, param


def is_tied_head_copy(model: torch.nn.Module, name: str) -> bool:
    """The last PP stage's copy of tied embeddings: not part of the full state dict."""
    return (name == _HEAD and getattr(model, "share_embeddings_and_output_weights", False)
            and not getattr(model, "pre_process", True))


def _source_name(model: torch.nn.Module, name: str) -> str:
    return _EMBED if is_tied_head_copy(model, name) else name


# --------------------------------------------------------------------------------------------
# init and load
# --------------------------------------------------------------------------------------------
def init_method_for(global_name: str, config) -> Callable[[torch.Tensor], None] | None:  # noqa: ANN001
    """Megatron's init for a weight matrix; None for what keeps its built value (norms, biases,
    the critic's value head)."""
    if global_name.startswith("embedding."):
        return config.embedding_init_method
    if global_name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return config.output_layer_init_method
    if global_name.endswith(("linear_qkv.weight", "linear_fc1.weight")):
        return config.init_method
    return None


def init_weights(model: torch.nn.Module, config, seed: int, role: str,  # noqa: ANN001
                 tp_rank: int, tp_size: int) -> None:
    """Random init that depends on the seed and the parameter's global name only.

    Megatron's own init draws from one RNG stream in construction order, so different PP
    layouts (and GPU init under TP) would give different networks; here every full tensor is
    drawn from its own seeded generator and then sharded, so TP/PP/DP layouts of one seed
    start from identical weights. The draw happens on the parameter's device (on a GPU it
    takes milliseconds, on one host core seconds); a CUDA run and a CPU run of one seed
    therefore start from different weights.
    """
    for _, global_name, param in global_names(model):
        source = _source_name(model, global_name)
        method = init_method_for(source, config)
        is_value_head = role == "critic" and source.startswith("output_layer.")
        if method is None or is_value_head:
            continue
        full_shape = _full_shape(param, tp_layout(param), tp_size)
        on = param.device if param.device.type == "cuda" else torch.device("cpu")
        full = torch.empty(full_shape, dtype=torch.float32, device=on)
        with torch.random.fork_rng(devices=_cuda_devices(on)):
            torch.manual_seed((seed * 1_000_003 + zlib.crc32(source.encode())) % 2**63)
            method(full)
        _copy_into(param, shard_tensor(full, tp_layout(param), tp_rank, tp_size))


def _cuda_devices(device: torch.device) -> list[int]:
    """The CUDA devices whose RNG state fork_rng must restore: torch.manual_seed reseeds all."""
    return list(range(torch.cuda.device_count())) if device.type == "cuda" else []


def load_full_state_dict(model: torch.nn.Module, full: Mapping[str, torch.Tensor],
                         tp_rank: int, tp_size: int, allow_missing: tuple[str, ...] = ()) -> None:
    """Copy this rank's shards out of a full state dict. Names listed nowhere fail loudly,
    except those starting with a prefix in `allow_missing` (e.g. the critic's value head)."""
    missing = []
    for _, global_name, param in global_names(model):
        source = _source_name(model, global_name)
        if source not in full:
            if not source.startswith(allow_missing):
                missing.append(source)
            continue
        _copy_into(param, shard_tensor(full[source], tp_layout(param), tp_rank, tp_size))
    if missing:
        raise KeyError(f"the state dict lacks {len(missing)} parameters, e.g. {missing[:3]}")


def _full_shape(param: torch.Tensor, layout: TPLayout, tp_size: int) -> list[int]:
    shape = list(param.shape)
    if layout.dim is not None:
        shape[layout.dim] *= tp_size
    return shape


def _copy_into(param: torch.Tensor, value: torch.Tensor) -> None:
    if tuple(value.shape) != tuple(param.shape):
        raise ValueError(f"shape {tuple(value.shape)} does not fit parameter {tuple(param.shape)}")
    with torch.no_grad():
        param.data.copy_(value.to(dtype=param.dtype))


# --------------------------------------------------------------------------------------------
# gather
# --------------------------------------------------------------------------------------------
def gather_tp(model: torch.nn.Module, tp_group, tp_size: int,  # noqa: ANN001
              device: str = "cpu") -> dict[str, torch.Tensor]:
    """This PP stage's parameters in the full TP layout, global names, copied to `device`
    (the CPU; "cuda" for the colocated CUDA IPC weight push).

    Every TP rank must call it (all-gathers); every rank gets the same result.
    """
    out: dict[str, torch.Tensor] = {}
    for local, global_name, param in global_names(model):
        if is_tied_head_copy(model, local):
            continue
        layout = tp_layout(param)
        tensor = param.detach()
        if layout.dim is not None and tp_size > 1:
            shards = [torch.empty_like(tensor) for _ in range(tp_size)]
            dist.all_gather(shards, tensor.contiguous(), group=tp_group)
            tensor = unshard_tensors(shards, layout)
        out[global_name] = tensor.to(device, copy=True)
    return out


def gather_pp_to_first(stage_state: dict[str, torch.Tensor], pp_group, pp_size: int,  # noqa: ANN001
                       is_first_stage: bool) -> dict[str, torch.Tensor] | None:
    """Merge every PP stage's dict on the first stage (call on one TP/DP coordinate only)."""
    if pp_size == 1:
        return stage_state
    first = dist.get_global_rank(pp_group, 0)
    gathered: list[dict[str, torch.Tensor]] | None = [{}] * pp_size if is_first_stage else None
    dist.gather_object(stage_state, gathered, dst=first, group=pp_group)
    if not is_first_stage:
        return None
    merged: dict[str, torch.Tensor] = {}
    for part in gathered or []:
        merged.update(part)
    return merged


# --------------------------------------------------------------------------------------------
# backup (miles' TensorBackuper: the ref weights, and the actor's own around a ref forward)
# --------------------------------------------------------------------------------------------
def backup(model: torch.nn.Module,
           into: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """A host copy of every parameter (pinned when CUDA is there, so copies can overlap).

    `into`: an earlier backup of the same model whose buffers are refilled (pinning host
    memory is slow, so a backup taken every rollout reuses its buffers)."""
    out = {} if into is None else into
    pin = torch.cuda.is_available()
    params = dict(model.named_parameters())
    missing = [name for name in params if name not in out]
    if not pin:
        for name in missing:
            out[name] = torch.empty(params[name].shape, dtype=params[name].dtype, device="cpu")
    elif missing:  # exactly sized, in one page-locked slab (engine/model/pinned.py)
        from ..model.pinned import pinned_like

        hosts, _ = pinned_like([params[name] for name in missing])
        out.update(zip(missing, hosts, strict=True))
    for name, param in params.items():
        out[name].copy_(param.detach(), non_blocking=pin)
    if pin:
        torch.cuda.synchronize()
    return out


def restore(model: torch.nn.Module, saved: Mapping[str, torch.Tensor]) -> None:
    pin = torch.cuda.is_available()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.data.copy_(saved[name], non_blocking=pin)
    if pin:
        torch.cuda.synchronize()
