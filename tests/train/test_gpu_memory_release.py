"""What a sleeping trainer gives back to the GPU (issue 20, the 1.7B memory table): the actor's
CUDA IPC export buffer, once the rollout has copied it, goes back to the driver, not only to
torch's cache. CUDA is faked: the calls are recorded, the worker is not built."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ppodeck.engine.train import actor_worker as worker_module
from ppodeck.engine.train.actor_worker import ActorWorker


def _bare_actor(backend: str) -> ActorWorker:
    actor = ActorWorker.__new__(ActorWorker)  # no process group, no model: only the buffer
    actor.args = {"rollout_backend": backend}
    actor._ipc_buffer = torch.empty(16, dtype=torch.uint8)
    return actor


@pytest.fixture
def cuda_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(worker_module, "has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "ipc_collect", lambda: calls.append("ipc_collect"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    return calls


def test_hf_export_buffer_goes_back_to_the_driver(cuda_calls: list[str]) -> None:
    actor = _bare_actor("hf")
    actor.release_export()
    assert actor._ipc_buffer is None
    # the limbo first (blocks the rollout just unmapped), then the cache with them in it
    assert cuda_calls == ["ipc_collect", "empty_cache"]


def test_sglang_bucket_is_kept_until_the_next_export(cuda_calls: list[str]) -> None:
    actor = _bare_actor("sglang")
    actor.release_export()
    assert actor._ipc_buffer is not None and cuda_calls == []


def test_cpu_has_nothing_to_hand_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> None:
        raise AssertionError("no CUDA call without CUDA")

    monkeypatch.setattr(worker_module, "has_cuda", lambda: False)
    monkeypatch.setattr(torch.cuda, "empty_cache", refuse)
    actor = _bare_actor("hf")
    actor.release_export()
    assert actor._ipc_buffer is None


class _Writer:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, kind: str, **fields: Any) -> None:  # noqa: ANN401
        self.events.append((kind, fields))


def test_offload_events_carry_host_and_device_leftovers() -> None:
    """Ranks' pinned bytes add up, the device leftovers are the largest rank's; a fallback to
    torch's rounded pinned blocks is warned once per model."""
    from ppodeck.engine.driver.roles import merge_offload_reports
    from ppodeck.engine.driver.telemetry import Telemetry

    rank = {"bytes": 10, "seconds": 1.0, "copy_seconds": 0.5, "pinned_bytes": 4096,
            "pinned_rounded": True, "device_allocated_after": 7, "device_reserved_after": 9}
    merged = merge_offload_reports([rank, {**rank, "pinned_rounded": False,
                                           "device_reserved_after": 20}])
    assert merged["pinned_bytes"] == 8192 and merged["pinned_rounded"]
    assert (merged["device_allocated_after"], merged["device_reserved_after"]) == (7, 20)
    writer = _Writer()
    telemetry = Telemetry(writer, 0)  # type: ignore[arg-type]
    for _ in range(2):
        telemetry.offload("actor", "offload", merged)
    telemetry.close()
    offloads = [f for kind, f in writer.events if kind == "offload"]
    assert offloads[0]["pinned_bytes"] == 8192 and offloads[0]["device_reserved_after"] == 20
    warnings = [f for kind, f in writer.events if kind == "log" and f["level"] == "warning"]
    assert len(warnings) == 1 and "power of two" in warnings[0]["msg"]
