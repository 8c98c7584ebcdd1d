"""When a trainer sleeps or wakes: the driver decides here, and only here.

Under --offload-train (miles) each trainer is on its GPUs only while it trains or saves: it
sleeps right after its init (before the next role allocates), wakes for its train phase and
its save, and sleeps again after each; the actor also wakes for an export when it did not
train first (the initial push, a push during the critic-only warmup). Every move is an
`offload` event. The workers never decide on their own in a run (engine/train/worker.py
refuses to train or save asleep; its export still wakes itself for direct callers such as
the worker tests, which the driver never relies on).
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
