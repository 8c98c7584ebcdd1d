"""The colocated hf rollout's weight sync through CUDA IPC, without SGLang.

The packed path (engine/model/weight_transfer.py: pack/unpack) copies the actor's HF tensors to the
host, through Ray's object store and back to the same GPU: seconds per sync even for a small model
(docs/performance.md). When the hf generator shares the actor's one GPU, the actor instead copies
its HF tensors into one flat device buffer and sends only the CUDA IPC handle of that buffer
(torch.multiprocessing.reductions.reduce_tensor: a few hundred bytes through Ray). The rollout
process maps the buffer and copies each tensor in place into its model's parameter storages, device
to device. The handle carries the GPU's UUID so the receiver opens the right device whatever its
CUDA_VISIBLE_DEVICES numbering.

`weight_sync_path` is the one decision between "cuda_ipc" and "packed_host" (SGLang's own
IPC payload, weight_transfer.pack_cuda_ipc, is the cuda_ipc path of the sglang backend).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .weight_transfer import Entry, IpcWeights, copy_in, layout, views

CUDA_IPC = "cuda_ipc"
PACKED_HOST = "packed_host"
FORCE_ENV = "PPODECK_WEIGHT_SYNC"  # "packed": keep host bytes through Ray (bench comparisons)
_DEVICE_ARG = 6  # rebuild_cuda_tensor's storage_device argument (torch.multiprocessing)


@dataclass(frozen=True)
class SyncPath:
    name: str  # CUDA_IPC or PACKED_HOST
    reason: str  # shown in the run's log: why this path


def weight_sync_path(args: Mapping[str, Any], cuda: bool, sglang_importable: bool,
                     env: Mapping[str, str] | None = None) -> SyncPath:
    """CUDA IPC when the rollout side shares the actor's single GPU (colocated, one actor GPU,
    a concrete hf backend or an importable SGLang); host bytes through Ray otherwise."""
    env = os.environ if env is None else env
    forced = env.get(FORCE_ENV, "").strip().lower()
    if forced == "packed":
        return SyncPath(PACKED_HOST, f"{FORCE_ENV}=packed forces host bytes through Ray")
    if not cuda:
        return SyncPath(PACKED_HOST, "no CUDA device in the actor")
    if not args["colocate"]:
        return SyncPath(PACKED_HOST, "the rollout has its own GPUs (no --colocate)")
    gpus = args["actor_num_nodes"] * args["actor_num_gpus_per_node"]
    if gpus != 1:
        return SyncPath(PACKED_HOST, f"the actor spans {gpus} GPUs: the IPC path is only "
                                     "wired for one shared GPU")
    backend = args["rollout_backend"]
    if backend == "hf":
        return SyncPath(CUDA_IPC, "hf rollout on the actor's GPU: device buffer by IPC handle")
    if backend == "sglang" and sglang_importable:
        return SyncPath(CUDA_IPC, "colocated SGLang: flattened bucket by IPC handle")
    return SyncPath(PACKED_HOST, f"rollout backend {backend!r} takes host bytes")


# ---- the flat buffer: weight_transfer's layout, on the device ------------------------------
def flatten(state: Mapping[str, torch.Tensor], device: torch.device
            ) -> tuple[torch.Tensor, tuple[Entry, ...]]:
    """One uint8 buffer on `device` holding every tensor (host tensors come over in the copy)."""
    entries, size = layout(state)
    flat = torch.empty(size, dtype=torch.uint8, device=device)
    copy_in(flat, entries, state, non_blocking=True)
    return flat, entries


# ---- the handle ------------------------------------------------------------------------------
@dataclass(frozen=True)
class TorchIpcWeights:
    """The CUDA IPC handle of the actor's flat buffer and where each tensor sits in it. Valid
    while the actor keeps the buffer (until its next export)."""

    rebuild: Callable[..., torch.Tensor]
    rebuild_args: tuple[Any, ...]
    device_uuid: str
    slots: tuple[Entry, ...]
    nbytes: int
    flatten_seconds: float


def share_cuda(flat: torch.Tensor) -> tuple[Callable[..., torch.Tensor], tuple[Any, ...]]:
    """torch's own CUDA IPC reduction (the refcount keeps the block alive in the actor until
    the receiver frees its mapping)."""
    from torch.multiprocessing.reductions import reduce_tensor

    return reduce_tensor(flat)


def device_uuid(device: torch.device) -> str:
    return str(torch.cuda.get_device_properties(device).uuid)


def pack_torch_ipc(state: Mapping[str, torch.Tensor], device: torch.device, *,
                   share: Callable[[torch.Tensor], tuple[Callable[..., torch.Tensor],
                                                         tuple[Any, ...]]] = share_cuda,
                   uuid: Callable[[torch.device], str] = device_uuid,
                   synchronize: Callable[[torch.device], None] = torch.cuda.synchronize,
                   ) -> tuple[TorchIpcWeights, torch.Tensor]:
    """(the handle to send, the device buffer the caller keeps alive until its next export)."""
    start = time.perf_counter()
    flat, slots = flatten(state, device)
    synchronize(device)  # the rollout process reads the buffer on its own stream
    rebuild, args = share(flat)
    weights = TorchIpcWeights(rebuild, tuple(args), uuid(device), slots, int(flat.numel()),
                              time.perf_counter() - start)
    return weights, flat


def local_device_index(uuid: str, local_uuids: Sequence[str]) -> int:
    """This process's index of the GPU named by `uuid` (Ray renumbers devices per actor)."""
    try:
        return list(local_uuids).index(uuid)
    except ValueError:
        raise RuntimeError(f"the actor's GPU {uuid} is not visible to the rollout process "
                           f"(it sees {list(local_uuids)}): set {FORCE_ENV}=packed") from None


def visible_uuids() -> list[str]:
    return [device_uuid(torch.device("cuda", i)) for i in range(torch.cuda.device_count())]


def open_state(weights: TorchIpcWeights,
               local_uuids: Callable[[], Sequence[str]] | None = None
               ) -> dict[str, torch.Tensor]:
    """Map the actor's buffer in this process: views by name over the actor's device memory.
    Drop them once copied, so the actor may free the buffer."""
    args = list(weights.rebuild_args)
    uuids = (local_uuids or visible_uuids)()
    args[_DEVICE_ARG] = local_device_index(weights.device_uuid, uuids)
    flat = weights.rebuild(*args)
    return views(flat, weights.slots)


def sync_path_of(weights: Any) -> str:  # noqa: ANN401
    """The path a pushed payload took, for the weight-sync event: IPC handles (ours or
    SGLang's) or host bytes (the packed buffer, or a plain state dict in tests)."""
    return CUDA_IPC if isinstance(weights, TorchIpcWeights | IpcWeights) else PACKED_HOST
