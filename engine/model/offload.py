"""--offload-train: move a worker's params, grads and optimizer state off the GPU and back.

miles pauses torch_memory_saver regions. Here the same effect comes from the tensors'
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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from .pinned import PinnedBatch, pinned_buffers


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
    # host buffers pinned ahead, by size, for storages not tracked yet (reserve_host)
    _reserving: Future[_Reserved] | None = None
    prepinned_bytes: int = 0  # of the last offload's new host buffers, reserved ahead
    pinned_bytes: int = 0  # page-locked host bytes behind the copies (engine/model/pinned.py)
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
        if self.prepinned_bytes:
            report["prepinned_bytes"] = self.prepinned_bytes
        return {**with_copy_rate(report, copy_seconds, pin_seconds),
                "pinned_bytes": self.pinned_bytes, "pinned_rounded": self.pinned_rounded,
                **_device_left()}

    def _allocate_host_buffers(self, pin: bool) -> float:
        """Pinned host buffers for storages that have none yet; returns the seconds it took.
        Pinning gigabytes costs seconds but happens once per storage, so it is reported apart
        from the copy rate (the first offload of a run would otherwise read as ~1.5 GB/s).
        Buffers reserved ahead (reserve_host) are used first, by size."""
        start = time.perf_counter()
        new = [held for held in self.keep if held.host is None]
        reserved = self._take_reserved() if new else {}
        self.prepinned_bytes = 0
        for held in new:
            ready = reserved.get(held.nbytes)
            if ready:
                held.host = ready.pop()
                self.prepinned_bytes += held.nbytes
        self._attach_new_buffers([held for held in new if held.host is None], pin)
        return time.perf_counter() - start

    def _attach_new_buffers(self, new: list[_Held], pin: bool) -> None:
        if not pin:
            for held in new:
                held.host = torch.empty(held.nbytes, dtype=torch.uint8)
            return
        if new:  # one exactly sized page-locked slab for the storages new since last time
            batch = self._count(pinned_buffers([held.nbytes for held in new]))
            for held, buffer in zip(new, batch.buffers, strict=True):
                held.host = buffer

    def _count(self, batch: PinnedBatch) -> PinnedBatch:
        self.pinned_bytes += batch.pinned_bytes
        self.pinned_rounded |= batch.rounded
        return batch

    def reserve_host(self, sizes: Iterable[int]) -> None:
        """Pin host buffers of these byte sizes in a background thread, for storages that do
        not exist yet (Adam's moments appear at the first optimizer step): pinning costs
        about half a second per GB (docs/performance.md), paid here while the
        trainer waits for its first phase instead of inside it. The next offload that tracks
        new storages takes them by size (waiting for the thread if it is still pinning);
        what it does not use is released then."""
        sizes = [int(n) for n in sizes if int(n) > 0]
        if not sizes or self._reserving is not None:
            return
        pin = torch.cuda.is_available()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pin-ahead")
        self._reserving = pool.submit(_pinned_buffers, sizes, pin)
        pool.shutdown(wait=False)

    def _take_reserved(self) -> dict[int, list[torch.Tensor]]:
        """The buffers reserve_host pinned, once; none if it failed (then they are pinned
        now, as without a reservation, and the report's pin_seconds shows it). A reserved
        slab counts whole in pinned_bytes: a buffer left unused stays pinned with the rest."""
        reserving, self._reserving = self._reserving, None
        if reserving is None:
            return {}
        try:
            reserved = reserving.result()
        except (RuntimeError, MemoryError):
            return {}
        if reserved.batch is not None:
            self._count(reserved.batch)
        return reserved.by_size

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


@dataclass
class _Reserved:
    by_size: dict[int, list[torch.Tensor]]
    batch: PinnedBatch | None  # None: plain host buffers (no CUDA)


def _pinned_buffers(sizes: list[int], pin: bool) -> _Reserved:
    if pin:
        batch = pinned_buffers(sizes)
        buffers = batch.buffers
    else:
        batch, buffers = None, [torch.empty(n, dtype=torch.uint8) for n in sizes]
    by_size: dict[int, list[torch.Tensor]] = {}
    for nbytes, buffer in zip(sizes, buffers, strict=True):
        by_size.setdefault(nbytes, []).append(buffer)
    return _Reserved(by_size, batch)


def adam_state_bytes(optimizer) -> list[int]:  # noqa: ANN001
    """The byte sizes of the Adam moments (exp_avg, exp_avg_sq: zeros_like each parameter
    the inner optimizer steps) that the first step will create; none once they exist. A size
    that turns out wrong costs nothing but the unused buffer: offload pins by exact size."""
    sizes: list[int] = []
    for inner in inner_optimizers(optimizer):
        if "adam" not in type(inner).__name__.lower():  # torch's, TE's or apex's Adam(W)
            continue
        for group in inner.param_groups:
            for param in group["params"]:
                if not inner.state.get(param):
                    sizes += [param.numel() * param.element_size()] * 2
    return sizes


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
