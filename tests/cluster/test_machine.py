"""engine/host/machine.py: the GPUs this machine offers, as CUDA would count them."""

from __future__ import annotations

import pytest

from ppodeck.engine.host import machine


@pytest.mark.parametrize(("cvd", "visible"), [
    (None, 4), ("", 0), ("-1", 0), ("0,1", 2), ("3", 1), ("1,7,2", 1),  # stops at invalid 7
    ("0,0", 1), ("GPU-8a1b,GPU-77ff", 2), (" 2 , 3 ", 2),
])
def test_cuda_visible_devices_narrows_like_cuda(cvd, visible):
    assert machine.count_visible(4, cvd) == visible


def test_no_gpu_machine_counts_zero_even_with_cuda_visible_devices():
    assert machine.count_visible(0, "0,1") == 0


def test_proc_driver_entries_are_counted_without_nvml(tmp_path, monkeypatch):
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (tmp_path / bus).mkdir()
    monkeypatch.setattr(machine, "PROC_GPUS", tmp_path)
    monkeypatch.setattr(machine, "_nvml_count", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    machine.visible_gpus.cache_clear()
    try:
        assert machine.physical_gpus() == 2
        assert machine.visible_gpus() == 1
    finally:
        machine.visible_gpus.cache_clear()
    assert machine._proc_count(tmp_path / "missing") == 0
