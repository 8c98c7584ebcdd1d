"""Page-locked host buffers of exactly the bytes asked for.

torch's pinned allocator (`pin_memory=True`, CachingHostAllocator) rounds every allocation up
to the next power of two. The offload pins one buffer per storage, so the fp32 master weights
and Adam moments would take about a third more host RAM than their size (the figures at
Qwen3-1.7B: docs/performance.md). Here one plain
host allocation holds every buffer of a batch, back to back, and is page-locked with
cudaHostRegister: pinned bytes = tensor bytes (+ at most 3 pages per batch).

When registering fails (no driver support, a locked-memory limit), the buffers fall back to
torch's allocator, rounded; `PinnedBatch.rounded` says so, and so do the offload reports.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Sequence
from dataclasses import dataclass

import torch

PAGE = mmap.PAGESIZE
ALIGN = 64  # each buffer's start: any dtype's view is aligned, and so are vector copies
_SUCCESS = 0  # cudaError_t cudaSuccess


@dataclass
class PinnedBatch:
    """The buffers of one allocation, and what they really hold in page-locked memory."""

    buffers: list[torch.Tensor]  # uint8, one per requested size, exactly that long
    pinned_bytes: int  # page-locked bytes behind them (rounded ones when `rounded`)
    rounded: bool  # torch's power-of-two allocator was used: cudaHostRegister failed


class _Registration:
    """Keeps the slab alive and page-locked while any buffer of it is referenced (each
    buffer holds this object), and unregisters it before the memory can go back to libc."""

    def __init__(self, raw: torch.Tensor, address: int, nbytes: int) -> None:
        self.raw, self.address, self.nbytes = raw, address, nbytes

    def __del__(self) -> None:
        try:
            torch.cuda.cudart().cudaHostUnregister(self.address)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the process's memory goes anyway
            pass


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def power_of_two_ceil(nbytes: int) -> int:
    """What torch's pinned allocator takes for `nbytes` (its allocate(): PowerOf2Ceil)."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 0 else 0


def layout(sizes: Sequence[int]) -> tuple[list[int], int]:
    """(offset of each buffer, total bytes): back to back, each start ALIGN-aligned."""
    offsets, end = [], 0
    for size in sizes:
        offsets.append(end)
        end = round_up(end + size, ALIGN)
    return offsets, end


def pinned_buffers(sizes: Sequence[int]) -> PinnedBatch:
    """uint8 host buffers of exactly `sizes` bytes, page-locked as one registered slab."""
    offsets, total = layout(sizes)
    if total == 0:
        return PinnedBatch([torch.empty(s, dtype=torch.uint8) for s in sizes], 0, False)
    # two spare pages: the locked range starts on a page of its own and ends inside `raw`,
    # so no page is shared with (and registered twice by) a neighbouring allocation
    raw = torch.empty(total + 2 * PAGE, dtype=torch.uint8)
    start = (-raw.data_ptr()) % PAGE
    locked = round_up(total, PAGE)
    address = raw.data_ptr() + start
    if int(torch.cuda.cudart().cudaHostRegister(address, locked, 0)) != _SUCCESS:
        _clear_last_cuda_error()
        del raw
        buffers = [_torch_pinned(size) for size in sizes]
        return PinnedBatch(buffers, sum(power_of_two_ceil(s) for s in sizes), True)
    registration = _Registration(raw, address, locked)
    buffers = []
    for offset, size in zip(offsets, sizes, strict=True):
        buffer = raw[start + offset:start + offset + size]
        buffer._pinned_registration = registration  # the slab lives as long as its buffers
        buffers.append(buffer)
    return PinnedBatch(buffers, locked, False)


def _clear_last_cuda_error() -> None:
    """A failed runtime call leaves its error as the thread's last one, and torch's next
    kernel-launch check would raise it as its own: reset it (torch binds no
    cudaGetLastError, so the loaded libcudart's is called)."""
    import ctypes

    libraries = [line.split()[-1] for line in _maps() if "libcudart" in line]
    for path in dict.fromkeys(libraries):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(path).cudaGetLastError()


def _maps() -> list[str]:
    try:
        with open("/proc/self/maps") as maps:
            return maps.read().splitlines()
    except OSError:
        return []


def _torch_pinned(size: int) -> torch.Tensor:
    return torch.empty(size, dtype=torch.uint8, pin_memory=True)


def pinned_like(tensors: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], PinnedBatch]:
    """Host tensors shaped and typed as `tensors` (contents undefined), in one pinned slab."""
    batch = pinned_buffers([t.numel() * t.element_size() for t in tensors])
    shaped = []
    for buffer, tensor in zip(batch.buffers, tensors, strict=True):
        view = buffer.view(tensor.dtype).view(tensor.shape)
        view._pinned_registration = getattr(buffer, "_pinned_registration", None)
        shaped.append(view)
    return shaped, batch
