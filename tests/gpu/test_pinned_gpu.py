"""Exactly sized page-locked buffers on a real GPU (device only:
`python -m pytest tests/gpu/test_pinned_gpu.py -m gpu`): registered memory is page-locked for
the CUDA runtime, copies through it are exact, and the host pays the bytes asked for, not
torch's power of two."""

from __future__ import annotations

import psutil
import pytest
import torch

from ppodeck.engine.model.offload import StorageOffloader
from ppodeck.engine.model.pinned import PAGE, pinned_buffers

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

GIB = 1 << 30
MEMORY_TYPE_HOST = 1  # cudaMemoryType: page-locked host memory the device can reach


def page_locked(tensor: torch.Tensor) -> bool:
    """What the CUDA runtime says of the tensor's memory (cudaPointerGetAttributes).
    torch's is_pinned() only knows its own pinned allocator's blocks on the H200's torch 2.11:
    registered memory reads False there, though copies from it run at the pinned rate."""
    import ctypes

    from ppodeck.engine.model.pinned import _maps

    paths = dict.fromkeys(line.split()[-1] for line in _maps() if "libcudart" in line)
    assert paths, "no libcudart loaded in this process"
    attributes = ctypes.create_string_buffer(256)  # room for any CUDA version's struct
    runtime = ctypes.CDLL(next(iter(paths)))
    error = runtime.cudaPointerGetAttributes(attributes, ctypes.c_void_p(tensor.data_ptr()))
    assert error == 0, f"cudaPointerGetAttributes: error {error}"
    return ctypes.c_int.from_buffer(attributes).value == MEMORY_TYPE_HOST


def test_registered_buffers_are_pinned_and_copy_exactly() -> None:
    batch = pinned_buffers([3 * 1000 * 1000, 12_345])
    assert not batch.rounded and all(page_locked(b) for b in batch.buffers)
    source = torch.randint(0, 255, (12_345,), dtype=torch.uint8, device="cuda")
    batch.buffers[1].copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    back = batch.buffers[1].to("cuda", non_blocking=True)
    assert torch.equal(back, source)


def test_host_pays_the_bytes_not_the_next_power_of_two() -> None:
    """1.1 GiB: torch's pinned allocator would lock 2 GiB of RAM for it."""
    process = psutil.Process()
    before = process.memory_info().rss
    batch = pinned_buffers([int(1.1 * GIB)])
    grown = process.memory_info().rss - before
    assert not batch.rounded
    assert batch.pinned_bytes < 1.1 * GIB + PAGE
    assert 1.0 * GIB < grown < 1.3 * GIB, grown / GIB


def test_offloader_round_trip_through_one_exact_slab() -> None:
    tensors = [torch.randn(1000, 517, device="cuda"), torch.randn(77, device="cuda",
                                                                  dtype=torch.bfloat16)]
    copies = [t.clone() for t in tensors]
    offloader = StorageOffloader.for_tensors(tensors, [], "cuda")
    report = offloader.offload()
    assert all(t.untyped_storage().nbytes() == 0 for t in tensors)
    assert not report["pinned_rounded"]
    assert offloader.bytes_to_copy <= report["pinned_bytes"] < offloader.bytes_to_copy + 3 * PAGE
    offloader.onload()
    assert all(torch.equal(t, c) for t, c in zip(tensors, copies, strict=True))


def test_backup_is_pinned_and_exact() -> None:
    from ppodeck.engine.train.weights import backup, restore

    model = torch.nn.Linear(300, 200, device="cuda", dtype=torch.bfloat16)
    saved = backup(model)
    assert all(page_locked(t) for t in saved.values())
    expected = {k: v.detach().clone() for k, v in model.named_parameters()}
    with torch.no_grad():
        model.weight.zero_()
    restore(model, saved)
    assert all(torch.equal(p, expected[k]) for k, p in model.named_parameters())
