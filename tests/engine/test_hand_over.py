"""The hand-over starts both moves before waiting on either and emits both offload events."""

from __future__ import annotations

from typing import Any

import pytest

from engine.driver.offload import hand_over


class FakeMove:
    def __init__(self, log: list[str], name: str, error: Exception | None = None) -> None:
        self.log, self.name, self.error = log, name, error

    def result(self) -> dict[str, Any]:
        self.log.append(f"finish {self.name}")
        if self.error:
            raise self.error
        return {"bytes": 1, "seconds": 0.1, "noop": False, "where": "cpu"}


class FakeGroup:
    def __init__(self, role: str, log: list[str], error: Exception | None = None) -> None:
        self.role, self.log, self.error = role, log, error

    def start_sleep(self) -> FakeMove:
        self.log.append(f"start sleep {self.role}")
        return FakeMove(self.log, f"sleep {self.role}", self.error)

    def start_wake_up(self) -> FakeMove:
        self.log.append(f"start wake {self.role}")
        return FakeMove(self.log, f"wake {self.role}", self.error)


class FakeTelemetry:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def offload(self, role: str, direction: str, report: dict[str, Any]) -> None:
        self.events.append((role, direction))


def test_both_moves_start_before_either_finishes() -> None:
    log: list[str] = []
    tm = FakeTelemetry()
    hand_over(FakeGroup("critic", log), FakeGroup("actor", log), tm)  # type: ignore[arg-type]
    assert log == ["start sleep critic", "start wake actor", "finish sleep critic",
                   "finish wake actor"]
    assert tm.events == [("critic", "offload"), ("actor", "onload")]


@pytest.mark.parametrize("failing", ["leaving", "arriving"])
def test_an_error_from_either_side_surfaces(failing: str) -> None:
    log: list[str] = []
    boom = RuntimeError("rank 0 died")
    leaving = FakeGroup("critic", log, boom if failing == "leaving" else None)
    arriving = FakeGroup("actor", log, boom if failing == "arriving" else None)
    with pytest.raises(RuntimeError, match="rank 0 died"):
        hand_over(leaving, arriving, FakeTelemetry())  # type: ignore[arg-type]
