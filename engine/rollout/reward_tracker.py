"""Counts the reward phase's requests as they go, and writes them to the run directory about
once a second (engine/run/reward_progress.py says why and who reads it)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

from ..run.reward_progress import RewardProgress, write_progress

T = TypeVar("T")
WRITE_EVERY_S = 1.0


class RewardTracker:
    def __init__(self, run_dir: str | Path | None, rollout_id: int | None, what: str) -> None:
        self.run_dir = run_dir
        self.rollout_id = rollout_id
        self.what = what
        self.sent = 0
        self.answered = 0
        self.started: dict[int, float] = {}  # request number -> when it was sent
        self.last_answer = time.time()
        self._numbers = itertools.count()

    async def track(self, call: Awaitable[T]) -> T:
        number = next(self._numbers)
        self.sent += 1
        self.started[number] = time.time()
        try:
            return await call
        finally:
            self.started.pop(number, None)
            self.answered += 1
            self.last_answer = time.time()

    def snapshot(self) -> RewardProgress:
        now = time.time()
        oldest = min(self.started.values(), default=now)
        return RewardProgress(self.rollout_id, self.what, self.sent, self.answered,
                              len(self.started), now - oldest, self.last_answer, now)

    def write(self) -> None:
        if self.run_dir is None:
            return
        try:
            write_progress(self.run_dir, self.snapshot())
        except OSError:
            pass  # progress is for readers; a full disk must not fail the rollout here

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[RewardTracker]:
        """Writes the progress every WRITE_EVERY_S while the block runs, and once at its end."""
        async def loop() -> None:
            while True:
                self.write()
                await asyncio.sleep(WRITE_EVERY_S)

        task = asyncio.create_task(loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.write()


def describe_reward(args: Any) -> str:  # noqa: ANN401 - the run's args mapping
    """What scores the samples, as the progress line names it."""
    from .rewards import flag_rm_type

    if args.get("custom_rm_path"):
        return f"custom reward function {args['custom_rm_path']}"
    from ..config.reward_types import is_remote

    rm_type = flag_rm_type(args)
    if is_remote(rm_type) and args.get("rm_url"):
        return f"remote reward model {args['rm_url']}"
    return f"--rm-type {rm_type}" if rm_type else "the rule reward"
