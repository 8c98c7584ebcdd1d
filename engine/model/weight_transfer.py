"""The actor -> rollout weight push through Ray's object store, as one flat byte buffer.

A dict of ~300 torch tensors goes through Ray's pickling tensor by tensor, which made the push
the slowest part of a weight sync (docs/performance.md). One
numpy byte array travels out of band instead (pickle protocol 5): one copy into the object
store, and the receiver maps it without copying. `unpack` gives torch views over that buffer;
the backend's load copies them onto its device.

Colocated SGLang engines take the other path miles takes: the actor flattens its HF-named
tensors into one buffer on its own GPU and sends only CUDA IPC handles of it (SGLang's
"flattened_bucket" payload of update_weights_from_tensor); the engine's scheduler maps that
memory and copies device to device. Nothing crosses the host.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

_ALIGN = 64  # bytes: every tensor starts aligned, so dtype views are valid


@dataclass(frozen=True)
class Entry:
    name: str
    dtype: str  # torch dtype name without the "torch." prefix
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class PackedWeights:
    buffer: np.ndarray  # uint8
    entries: tuple[Entry, ...]

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)


def layout(state: Mapping[str, torch.Tensor]) -> tuple[tuple[Entry, ...], int]:
    """Where each tensor sits in one aligned byte buffer, and the buffer's size (the packed
    host path and the CUDA IPC path of engine/model/ipc_sync.py share it)."""
    entries, offset = [], 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        entries.append(Entry(name, str(tensor.dtype).removeprefix("torch."),
                             tuple(tensor.shape), offset, nbytes))
        offset += -(-nbytes // _ALIGN) * _ALIGN
    return tuple(entries), offset


def copy_in(flat: torch.Tensor, entries: tuple[Entry, ...],
            state: Mapping[str, torch.Tensor], non_blocking: bool = False) -> None:
    """Every tensor's bytes into its place in the uint8 buffer `flat` (any device)."""
    for entry, tensor in zip(entries, state.values(), strict=True):
        if entry.nbytes:
            raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
            flat[entry.offset:entry.offset + entry.nbytes].copy_(raw, non_blocking=non_blocking)


def views(flat: torch.Tensor, entries: tuple[Entry, ...] | list[Entry]) -> dict[str, torch.Tensor]:
    """Typed, shaped views over the uint8 buffer `flat`, by name (no copy)."""
    return {e.name: flat[e.offset:e.offset + e.nbytes].view(getattr(torch, e.dtype))
            .reshape(e.shape) for e in entries}


def pack(state: Mapping[str, torch.Tensor]) -> PackedWeights:
    """Copy host or device tensors into one aligned uint8 buffer (device tensors come over in
    one device-to-host copy each)."""
    entries, size = layout(state)
    buffer = np.empty(size, dtype=np.uint8)
    copy_in(torch.from_numpy(buffer), entries, state)
    return PackedWeights(buffer, entries)


def unpack(packed: PackedWeights) -> dict[str, torch.Tensor]:
    """Torch views over the packed buffer, by name (no copy: the buffer may be read-only
    shared memory, so the views must only be read)."""
    with warnings.catch_warnings():
        # Ray hands the buffer over read-only; nothing here writes to it
        warnings.filterwarnings("ignore", message=".*not writable.*")
        host = torch.from_numpy(packed.buffer)
    return views(host, packed.entries)


def as_state_dict(weights: Mapping[str, torch.Tensor] | PackedWeights) -> dict[str, torch.Tensor]:
    return unpack(weights) if isinstance(weights, PackedWeights) else dict(weights)


@dataclass(frozen=True)
class IpcWeights:
    """CUDA IPC handles of one device buffer holding every HF-named tensor: SGLang's
    MultiprocessingSerializer payload of {"flattened_tensor", "metadata"} (base64 text), a
    few kB whatever the model size. Valid while the exporting process keeps the buffer."""

    payload: str
    nbytes: int
    count: int
    flatten_seconds: float


def pack_cuda_ipc(state: Mapping[str, torch.Tensor]) -> tuple[IpcWeights, torch.Tensor]:
    """(handles to send, the device buffer the caller must keep alive until they are used).

    The tensors are copied once into one flat uint8 buffer on the current CUDA device (host
    tensors come over in that copy); sglang's own serializer writes the handles with the
    device's UUID, so the engine maps the right GPU whatever its CUDA_VISIBLE_DEVICES.
    That patch stays for the process: sglang's patched reduce_tensor then fails on CPU tensors
    (IndexError), so a process that called this sends only CUDA tensors.
    """
    from sglang.srt.utils import MultiprocessingSerializer
    from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions
    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket

    start = time.perf_counter()
    monkey_patch_torch_reductions()
    device = torch.device("cuda", torch.cuda.current_device())
    named = [(name, t.detach().to(device, non_blocking=True)) for name, t in state.items()]
    bucket = FlattenedTensorBucket(named_tensors=named)
    flat = bucket.get_flattened_tensor()
    del named
    torch.cuda.synchronize(device)  # the engine reads the buffer from another process
    payload = MultiprocessingSerializer.serialize(
        {"flattened_tensor": flat, "metadata": bucket.get_metadata()}, output_str=True)
    weights = IpcWeights(payload, int(flat.numel()), len(state), time.perf_counter() - start)
    return weights, flat


def as_loadable(weights: Any) -> Any:  # noqa: ANN401
    """What a backend's load_weights takes: IPC handles as they are, else a state dict."""
    return weights if isinstance(weights, IpcWeights) else as_state_dict(weights)
