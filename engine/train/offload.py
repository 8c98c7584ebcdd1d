"""--offload-train: move a worker's params, grads and optimizer state off the GPU and back.

miles pauses torch_memory_saver regions (spec 9). Here the same effect comes from the tensors'
storages: every storage that holds a parameter, the fp32 master copy or an Adam moment is copied
to pinned host memory and then resized to 0 bytes; gradient buffers are only freed (they are
zeroed before every step anyway, as miles skips their backup too). Resizing the storage, not
replacing tensors, keeps every view valid: Megatron's params and main_grads are views into
contiguous DDP buffers, and the optimizer holds references to them. wake_up resizes the storages
back, copies the bytes in (non_blocking) and synchronizes once.

Without CUDA there is nothing to free, so both directions are a reported no-op that still says
how many bytes would move.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from engine.train.pinned import pinned_buffers


@dataclass
class _Held:
    storage: torch.UntypedStorage
    nbytes: int
    host: torch.Tensor | None = None  # uint8 copy; None for freed-only storages


@dataclass
class StorageOffloader:
    """Offloads the storages behind `keep` (copied) and `drop` (freed) tensors."""

    keep: list[_Held] = field(default_factory=list)
    drop: list[_Held] = field(default_factory=list)
    asleep: bool = False
    pinned_bytes: int = 0  # page-locked host bytes behind the copies (engine/train/pinned.py)
    pinned_rounded: bool = False  # torch's power-of-two allocator had to be used

    @classmethod
    def for_tensors(cls, keep: Iterable[torch.Tensor], drop: Iterable[torch.Tensor],
                    device_type: str) -> StorageOffloader:
        return cls().track(keep, drop, device_type)

    def track(self, keep: Iterable[torch.Tensor], drop: Iterable[torch.Tensor],
              device_type: str) -> StorageOffloader:
        """Add storages not tracked yet (Adam moments appear at the first step). Tracked ones
        keep their pinned host buffers: pinning gigabytes costs seconds, so it happens once."""
        if self.asleep:
            raise RuntimeError("cannot track new tensors while offloaded")
        seen = {_storage_key(h.storage) for h in self.keep + self.drop}
        self.keep += _unique_storages(keep, device_type, seen)
        self.drop += _unique_storages(drop, device_type, seen)
        return self

    @property
    def bytes_to_copy(self) -> int:
        return sum(h.nbytes for h in self.keep)

    @property
    def bytes_to_free(self) -> int:
        return self.bytes_to_copy + sum(h.nbytes for h in self.drop)

    def offload(self) -> dict:
        """Device -> pinned host; frees the device storages. Idempotent."""
        start = time.perf_counter()
        if self.asleep:
            return _report(0, 0, start, where="cpu")
        _synchronize()
        pin = torch.cuda.is_available()
        pin_seconds = self._allocate_host_buffers(pin)
        copy_start = time.perf_counter()
        for held in self.keep:
            held.host.copy_(_byte_view(held.storage, held.nbytes), non_blocking=pin)
        _synchronize()  # the copies must land before the storages go
        copy_seconds = time.perf_counter() - copy_start
        for held in self.keep + self.drop:
            held.storage.resize_(0)
        _empty_cache()
        self.asleep = True
        report = _report(self.bytes_to_copy, self.bytes_to_free, start, where="cpu")
        return {**with_copy_rate(report, copy_seconds, pin_seconds),
                "pinned_bytes": self.pinned_bytes, "pinned_rounded": self.pinned_rounded,
                **_device_left()}

    def _allocate_host_buffers(self, pin: bool) -> float:
        """Pinned host buffers for storages that have none yet; returns the seconds it took.
        Pinning gigabytes costs seconds but happens once per storage, so it is reported apart
        from the copy rate (the first offload of a run would otherwise read as ~1.5 GB/s)."""
        start = time.perf_counter()
        new = [held for held in self.keep if held.host is None]
        if not pin:
            for held in new:
                held.host = torch.empty(held.nbytes, dtype=torch.uint8)
        elif new:  # one exactly sized page-locked slab for the storages new since last time
            batch = pinned_buffers([held.nbytes for held in new])
            self.pinned_bytes += batch.pinned_bytes
            self.pinned_rounded |= batch.rounded
            for held, buffer in zip(new, batch.buffers, strict=True):
                held.host = buffer
        return time.perf_counter() - start

    def onload(self) -> dict:
        """Pinned host -> device; gradient storages come back zeroed. Idempotent.

        Re-allocating the device storages (the caching allocator calling cudaMalloc after the
        offload emptied its cache) is timed apart from the copy, as `alloc_seconds`."""
        start = time.perf_counter()
        if not self.asleep:
            return _report(0, 0, start, where="gpu")
        pin = torch.cuda.is_available()
        for held in self.keep + self.drop:
            held.storage.resize_(held.nbytes)
        _synchronize()
        copy_start = time.perf_counter()
        for held in self.keep:
            _byte_view(held.storage, held.nbytes).copy_(held.host, non_blocking=pin)
        for held in self.drop:
            _byte_view(held.storage, held.nbytes).zero_()
        _synchronize()
        copy_seconds = time.perf_counter() - copy_start
        self.asleep = False
        report = _report(self.bytes_to_copy, self.bytes_to_free, start, where="gpu")
        return {**with_copy_rate(report, copy_seconds, 0.0),
                "alloc_seconds": copy_start - start}


def noop_report(bytes_to_copy: int, bytes_to_free: int, where: str) -> dict:
    return {"noop": True, "bytes": bytes_to_copy, "freed_bytes": bytes_to_free, "seconds": 0.0,
            "gbps": None, "where": where}


def with_copy_rate(report: dict, copy_seconds: float, pin_seconds: float) -> dict:
    """GB/s of the copy itself; one-time pinning (`pin_seconds`) and device allocation
    (`alloc_seconds`) are inside `seconds` but not in the rate."""
    copied = report["bytes"]
    gbps = copied / copy_seconds / 1e9 if copy_seconds > 0 and copied else None
    return {**report, "gbps": gbps, "copy_seconds": copy_seconds, "pin_seconds": pin_seconds}


def _report(copied: int, freed: int, start: float, where: str) -> dict:
    seconds = time.perf_counter() - start
    gbps = copied / seconds / 1e9 if seconds > 0 and copied else None
    return {"noop": False, "bytes": copied, "freed_bytes": freed, "seconds": seconds,
            "gbps": gbps, "where": where}


def _unique_storages(tensors: Iterable[torch.Tensor], device_type: str,
                     seen: set[int]) -> list[_Held]:
    out = []
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != device_type:
            continue
        storage = tensor.untyped_storage()
        key = _storage_key(storage)
        if key in seen or storage.nbytes() == 0:
            continue
        seen.add(key)
        out.append(_Held(storage=storage, nbytes=storage.nbytes()))
    return out


def _storage_key(storage: torch.UntypedStorage) -> int:
    # the StorageImpl's address: stable across resize_, unlike data_ptr()
    return storage._cdata


def _byte_view(storage: torch.UntypedStorage, nbytes: int) -> torch.Tensor:
    view = torch.empty(0, dtype=torch.uint8, device=storage.device)
    return view.set_(storage, 0, (nbytes,), (1,))


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _device_left() -> dict[str, int]:
    """What this process still holds on its GPU once asleep: live tensors (allocated) and
    torch's reserve (allocated + cached blocks it could not hand back)."""
    if not torch.cuda.is_available():
        return {}
    return {"device_allocated_after": torch.cuda.memory_allocated(),
            "device_reserved_after": torch.cuda.memory_reserved()}


def _empty_cache() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def train_state_tensors(ddp, optimizer) -> tuple[list[torch.Tensor], list[torch.Tensor]]:  # noqa: ANN001
    """(tensors to copy, tensors only to free) of a Megatron DDP model and its optimizer.

    Copied: parameters (or the DDP param buffer), fp32 master params and optimizer state.
    Freed: DDP grad buffers / main_grads and the grads of the master params.
    """
    keep: list[torch.Tensor] = []
    drop: list[torch.Tensor] = []
    for buffer in list(getattr(ddp, "buffers", [])) + list(
            getattr(ddp, "expert_parallel_buffers", [])):
        if getattr(buffer, "param_data", None) is not None:
            keep.append(buffer.param_data)
        if getattr(buffer, "grad_data", None) is not None:
            drop.append(buffer.grad_data)
    for param in ddp.module.parameters():
        keep.append(param)
        main_grad = getattr(param, "main_grad", None)
        if main_grad is not None:
            drop.append(main_grad)
    for inner in inner_optimizers(optimizer):
        for group in inner.param_groups:
            for param in group["params"]:
                keep.append(param)
                if param.grad is not None:
                    drop.append(param.grad)
        for state in inner.state.values():
            keep.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    return keep, drop


def inner_optimizers(optimizer) -> list[torch.optim.Optimizer]:  # noqa: ANN001
    """The torch optimizers inside a Megatron (chained) optimizer."""
    chained = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    return [opt.optimizer for opt in chained if getattr(opt, "optimizer", None) is not None]
