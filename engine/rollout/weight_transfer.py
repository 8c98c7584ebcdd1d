"""The actor -> rollout weight push through Ray's object store, as one flat byte buffer.

A dict of ~300 torch tensors goes through Ray's pickling tensor by tensor: on the H200 the
1.19 GB Qwen3-0.6B push took ~4.5 s between the actor's export and the rollout's load. One
numpy byte array travels out of band instead (pickle protocol 5): one copy into the object
store, and the receiver maps it without copying. `unpack` gives torch views over that buffer;
the backend's load copies them onto its device.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

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


def pack(state: Mapping[str, torch.Tensor]) -> PackedWeights:
    """Copy host or device tensors into one aligned uint8 buffer (device tensors come over in
    one device-to-host copy each)."""
    entries, offset = [], 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        entries.append(Entry(name, str(tensor.dtype).removeprefix("torch."),
                             tuple(tensor.shape), offset, nbytes))
        offset += -(-nbytes // _ALIGN) * _ALIGN
    buffer = np.empty(offset, dtype=np.uint8)
    host = torch.from_numpy(buffer)
    for entry, tensor in zip(entries, state.values(), strict=True):
        if entry.nbytes:
            flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
            host[entry.offset:entry.offset + entry.nbytes].copy_(flat)
    return PackedWeights(buffer, tuple(entries))


def unpack(packed: PackedWeights) -> dict[str, torch.Tensor]:
    """Torch views over the packed buffer, by name (no copy: the buffer may be read-only
    shared memory, so the views must only be read)."""
    with warnings.catch_warnings():
        # Ray hands the buffer over read-only; nothing here writes to it
        warnings.filterwarnings("ignore", message=".*not writable.*")
        host = torch.from_numpy(packed.buffer)
    out = {}
    for e in packed.entries:
        raw = host[e.offset:e.offset + e.nbytes]
        out[e.name] = raw.view(getattr(torch, e.dtype)).reshape(e.shape)
    return out


def as_state_dict(weights: Mapping[str, torch.Tensor] | PackedWeights) -> dict[str, torch.Tensor]:
    return unpack(weights) if isinstance(weights, PackedWeights) else dict(weights)
