"""Exactly sized page-locked host buffers (engine/model/pinned.py). CUDA's cudaHostRegister is
faked on the CPU: what is checked is the slab's layout, the one registration of a page-aligned
range inside our own allocation, its release, and the fallback's accounting.
tests/gpu/test_pinned_gpu.py runs the real thing."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch

from ppodeck.engine.model import pinned
from ppodeck.engine.model.pinned import (
    ALIGN,
    PAGE,
    layout,
    pinned_buffers,
    pinned_like,
    power_of_two_ceil,
)


class FakeCudart:
    def __init__(self, result: int = 0) -> None:
        self.result = result
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []

    def cudaHostRegister(self, address: int, nbytes: int, flags: int) -> int:  # noqa: N802
        assert flags == 0
        self.registered.append((address, nbytes))
        return self.result

    def cudaHostUnregister(self, address: int) -> int:  # noqa: N802
        self.unregistered.append(address)
        return 0


@pytest.fixture
def cudart(monkeypatch: pytest.MonkeyPatch) -> FakeCudart:
    fake = FakeCudart()
    monkeypatch.setattr(torch.cuda, "cudart", lambda: fake)
    return fake


def test_torch_rounding_that_is_avoided() -> None:
    """The Qwen3-1.7B fp32 tensors torch's pinned allocator would round up."""
    assert power_of_two_ceil(6144 * 2048 * 2 * 4) == 134_217_728  # fc1: 1.33x
    assert power_of_two_ceil(151_936 * 2048 * 4) == 2_147_483_648  # embedding: 1.73x
    assert power_of_two_ceil(4096) == 4096 and power_of_two_ceil(0) == 0


def test_layout_is_back_to_back_and_aligned() -> None:
    offsets, total = layout([10, 0, 64, 3])
    assert offsets == [0, ALIGN, ALIGN, 2 * ALIGN]
    assert total == 3 * ALIGN


def test_one_registered_slab_of_exact_buffers(cudart: FakeCudart) -> None:
    sizes = [5000, 123, 70_000]
    batch = pinned_buffers(sizes)
    assert [b.numel() for b in batch.buffers] == sizes
    assert not batch.rounded
    assert len({b.untyped_storage().data_ptr() for b in batch.buffers}) == 1
    [(address, locked)] = cudart.registered
    raw_start = batch.buffers[0].untyped_storage().data_ptr()
    raw_end = raw_start + batch.buffers[0].untyped_storage().nbytes()
    assert address % PAGE == 0 and locked % PAGE == 0
    assert raw_start <= address and address + locked <= raw_end  # no neighbour's page
    assert batch.buffers[0].data_ptr() == address
    assert batch.pinned_bytes == locked < sum(sizes) + PAGE
    for buffer in batch.buffers:  # writable, distinct regions
        buffer.fill_(7)
    assert all(int(b.sum()) == 7 * b.numel() for b in batch.buffers)


def test_unregistered_once_every_buffer_is_gone(cudart: FakeCudart) -> None:
    batch = pinned_buffers([4096, 4096])
    keep = batch.buffers[1]
    address = cudart.registered[0][0]
    del batch
    gc.collect()
    assert cudart.unregistered == []  # one buffer still holds the slab
    del keep
    gc.collect()
    assert cudart.unregistered == [address]


def test_shaped_views_for_a_backup(cudart: FakeCudart) -> None:
    params = [torch.zeros(3, 5, dtype=torch.bfloat16), torch.zeros(7, dtype=torch.float32)]
    hosts, batch = pinned_like(params)
    assert [(h.shape, h.dtype) for h in hosts] == [(p.shape, p.dtype) for p in params]
    assert batch.pinned_bytes >= 3 * 5 * 2 + 7 * 4
    hosts[1].copy_(torch.arange(7.0))
    assert hosts[1].tolist() == list(range(7))


def test_failed_registration_falls_back_to_torch_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "cudart", lambda: FakeCudart(result=1))
    made: list[Any] = []

    def torch_pinned(size: int) -> torch.Tensor:
        made.append(size)
        return torch.empty(size, dtype=torch.uint8)

    monkeypatch.setattr(pinned, "_torch_pinned", torch_pinned)
    batch = pinned_buffers([3000, 5000])
    assert batch.rounded and made == [3000, 5000]
    assert batch.pinned_bytes == 4096 + 8192
