"""When a trainer sleeps or wakes: the driver decides here, and only here.

Under --offload-train (miles) each trainer is on its GPUs only while it trains or saves: it
sleeps right after its init (before the next role allocates), wakes for its train phase and
its save, and sleeps again after each; the actor also wakes for an export when it did not
train first (the initial push, a push during the critic-only warmup). Every move is an
`offload` event. The workers never decide on their own in a run (engine/train/base_worker.py
refuses to train or save asleep; its export still wakes itself for direct callers such as
the worker tests, which the driver never relies on).

A move need not be waited on where it starts. Each trainer is a Ray actor that runs its calls
in the order they were sent, so a wake sent early is done before that trainer's train call
runs, and a sleep sent after training is done before anything later on that trainer. What
waiting early protects is the GPU memory of the OTHER roles, so the MovePlan overlaps moves
only where check()'s estimate (engine/config/memory.py) of every role awake at once fits:
  trainers: the actor onloads while the critic trains, and the critic offloads while the
            actor trains (both trainers awake, the rollout released);
  rollout:  also the first trainer (the critic, else the actor) onloads during generate, and
            the actor offloads behind the weight sync and the next generate (every role awake
            at once).
The overlap is the default on a GPU, where it shortens a colocated step by a third
(docs/performance.md; bench/step_bench.py --overlap); PPODECK_OVERLAP_MOVES=0 keeps every
move waited on where it starts (miles' order). The log line says which plan a run took and why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .telemetry import Telemetry

OVERLAP_ENV = "PPODECK_OVERLAP_MOVES"
MEMORY_MARGIN = 0.9  # of the smallest GPU, as plan_init: CUDA contexts, NCCL, fragments
GIB = float(1 << 30)


class Pending(Protocol):
    def result(self) -> dict[str, Any]: ...

    def done(self) -> bool: ...


def wake(group: Any, tm: Telemetry, offload: bool) -> None:  # noqa: ANN401 - a TrainGroup
    if offload:
        tm.offload(group.role, "onload", waited(group.wake_up))


def sleep(group: Any, tm: Telemetry, offload: bool) -> None:  # noqa: ANN401 - a TrainGroup
    if offload:
        tm.offload(group.role, "offload", waited(group.sleep))


def waited(move: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The move's report with `waited_seconds`: how long the driver waited for it here."""
    start = time.perf_counter()
    report = move()
    return {**report, "waited_seconds": time.perf_counter() - start}


# --- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MovePlan:
    trainers_together: bool = False  # actor onload || critic train, critic offload || actor
    with_rollout: bool = False       # + onloads || generate, actor offload || sync, generate
    message: str = "moves: each one waited on where it starts"

    @property
    def level(self) -> str:
        """The `move_plan` field of the plan's log event: waited, trainers or rollout."""
        if self.with_rollout:
            return "rollout"
        return "trainers" if self.trainers_together else "waited"


def plan_moves(args: Mapping[str, Any], use_gpu: bool, gpu_bytes: int | None,
               env: Mapping[str, str] | None = None) -> MovePlan:
    """The overlap this run's memory allows, with the message the driver logs."""
    env = os.environ if env is None else env
    setting = env.get(OVERLAP_ENV, "").strip()
    if not args["offload_train"]:
        return MovePlan(message="moves: none (no --offload-train: the trainers stay on the GPU)")
    if not use_gpu:
        return MovePlan(message="moves: each one waited on where it starts (CPU: nothing "
                                "moves, the offload is a reported no-op)")
    if setting == "0":
        return MovePlan(message=f"moves: each one waited on where it starts ({OVERLAP_ENV}=0; "
                                "unset, they overlap where the GPU holds the roles awake at once)")
    plan = plan_for_memory(args, gpu_bytes, env)
    if setting in ("", "1"):
        return plan
    # every plan's message ends in its parenthesis: the note goes inside it
    return replace(plan, message=f"{plan.message[:-1]}; {OVERLAP_ENV}={setting!r} is not 0 or "
                                 "1: read as 1)")


def plan_for_memory(args: Mapping[str, Any], gpu_bytes: int | None,
                    env: Mapping[str, str]) -> MovePlan:
    """The widest overlap whose roles awake at once fit in MEMORY_MARGIN of the GPU."""
    need = awake_at_once_gib(args, gpu_bytes, env)
    if need is None or gpu_bytes is None:
        what = "the model size" if need is None else "the GPU memory (NVML)"
        return MovePlan(message=f"moves: each one waited on where it starts ({what} unknown)")
    have = MEMORY_MARGIN * gpu_bytes / GIB
    trainers, everything = need
    of = f"of {MEMORY_MARGIN:.0%} x {gpu_bytes / GIB:.0f} GiB"
    if everything <= have:
        return MovePlan(True, True, f"moves: overlapped with generate, training and the weight "
                                    f"sync (every role awake at once: {everything:.1f} GiB {of}; "
                                    f"{OVERLAP_ENV}=0 waits on each)")
    if trainers <= have:
        return MovePlan(True, False, f"moves: the trainers hand over to each other (both awake: "
                                     f"{trainers:.1f} GiB {of}; with the rollout "
                                     f"{everything:.1f} GiB would not fit; {OVERLAP_ENV}=0 "
                                     "waits on each)")
    return MovePlan(message=f"moves: each one waited on where it starts (both trainers awake: "
                            f"{trainers:.1f} GiB {of} does not fit)")


def awake_at_once_gib(args: Mapping[str, Any], gpu_bytes: int | None,
                      env: Mapping[str, str]) -> tuple[float, float] | None:
    """GiB per GPU with both trainers awake and the rollout released, and with every role
    awake (check()'s per-phase estimate, engine/config/memory.py, with SGLang's share of this
    GPU); None for an unknown model shape."""
    from ..config.memory import DRIVER_RESERVED_GIB, count_params, memory_estimate
    from ..vocabulary import Phase

    gpu_gib = None if gpu_bytes is None else gpu_bytes / GIB
    table = memory_estimate(args, count_params(args), env, gpu_total_gib=gpu_gib)
    actor = table[Phase.ACTOR_TRAIN]["actor"]
    critic = table[Phase.CRITIC_TRAIN]["critic"]
    released = table[Phase.CRITIC_TRAIN]["rollout"]
    rollout = table[Phase.GENERATE]["rollout"]
    if actor is None or critic is None or released is None or rollout is None:
        return None
    colocated = 1.0 if args["colocate"] else 0.0
    trainers = actor + critic + colocated * released + DRIVER_RESERVED_GIB
    return trainers, actor + critic + colocated * rollout + DRIVER_RESERVED_GIB


# --- the moves of a run -----------------------------------------------------------------------


class Moves:
    """Every train-state move of a run, sent as the plan allows and reported as an `offload`
    event once it is done. A group's pending calls are waited on, in order, before a blocking
    call of ours on that group, and all of them before a save and at the end of the loop."""

    def __init__(self, tm: Telemetry, offload: bool, plan: MovePlan) -> None:
        self.tm, self.offload, self.plan = tm, offload, plan
        self.pending: list[tuple[Any, str | None, Pending]] = []  # (group, direction, call)
        self.awake: set[str] = set()  # roles whose wake was sent and not yet followed by sleep

    def prefetch(self, group: Any) -> None:  # noqa: ANN401 - a TrainGroup
        """Send this trainer's wake now; its phase then waits only for what is left."""
        if self.offload and group is not None and group.role not in self.awake:
            self.pending.append((group, "onload", group.start_wake_up()))
            self.awake.add(group.role)

    def wake(self, group: Any) -> None:  # noqa: ANN401
        """The trainer is on its GPUs when this returns (its prefetched wake, or one sent now)."""
        self.prefetch(group)
        self.settle(group)

    def sleep(self, group: Any, later: bool = False) -> None:  # noqa: ANN401
        """Send the offload; `later`: do not wait for it here."""
        if not self.offload:
            return
        self.pending.append((group, "offload", group.start_sleep()))
        self.awake.discard(group.role)
        if not later:
            self.settle(group)

    def after(self, group: Any, start: Callable[[], Pending]) -> None:  # noqa: ANN401
        """Another call queued behind this trainer's pending moves (no event)."""
        self.pending.append((group, None, start()))

    def poll(self) -> None:
        """Report the moves that are done, without waiting for the others."""
        for group in {id(g): g for g, _, _ in self.pending}.values():
            while self._first_of(group) is not None and self._first_of(group)[2].done():
                self._finish(self._first_of(group))

    def settle(self, group: Any = None) -> None:  # noqa: ANN401
        """Wait for the pending calls of `group` (all groups when None), in the order sent."""
        for entry in [e for e in self.pending if group is None or e[0] is group]:
            self._finish(entry)

    def _first_of(self, group: Any) -> tuple[Any, str | None, Pending] | None:  # noqa: ANN401
        return next((e for e in self.pending if e[0] is group), None)

    def _finish(self, entry: tuple[Any, str | None, Pending]) -> None:
        self.pending.remove(entry)
        group, direction, call = entry
        report = waited(call.result)  # what the driver still waited of the move
        if direction is not None:
            self.tm.offload(group.role, direction, report)
