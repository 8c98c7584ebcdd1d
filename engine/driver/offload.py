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


def hand_over(leaving: Any, arriving: Any, tm: Telemetry) -> None:  # noqa: ANN401
    """One model's offload and the next one's onload run together (separate copy engines).

    Both moves start before either is waited on; the leaving model's result is taken first so
    its error (a WorkerFailure from TrainGroup.wait) surfaces as it does today. Each move is
    its own `offload` event with today's fields. Not wired into train() yet: the planned opt-in
    (PPODECK_OVERLAP_MOVES) still needs the rollout's async moves and a memory plan.
    """
    leaving_move = leaving.start_sleep()
    arriving_move = arriving.start_wake_up()
    tm.offload(leaving.role, "offload", leaving_move.result())
    tm.offload(arriving.role, "onload", arriving_move.result())
