"""When a trainer sleeps or wakes: the driver decides here, and only here.

Under --offload-train (miles) each trainer is on its GPUs only while it trains or saves: it
sleeps right after its init (before the next role allocates), wakes for its train phase and
its save, and sleeps again after each. Every move is an `offload` event. The workers never
decide on their own (engine/train/worker.py refuses to train or save asleep). One exception
is left: an actor exported while asleep (the initial push, a push during the critic-only
warmup) is woken inside the worker for the gather and put back to sleep, with no event.
"""

from __future__ import annotations

from typing import Any

from engine.driver.telemetry import Telemetry


def wake(group: Any, tm: Telemetry, offload: bool) -> None:  # noqa: ANN401 - a TrainGroup
    if offload:
        tm.offload(group.role, "onload", group.wake_up())


def sleep(group: Any, tm: Telemetry, offload: bool) -> None:  # noqa: ANN401 - a TrainGroup
    if offload:
        tm.offload(group.role, "offload", group.sleep())
