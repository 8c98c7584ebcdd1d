"""PartClock: seconds per part of a start-up step, in order (light: stdlib only).

The trainers' init and the rollout engine's start report their parts with it; the driver puts
them on the init step's end event, where the monitor, `tail` and bench/init_breakdown.py show
where the start goes.
"""

from __future__ import annotations

import time


class PartClock:
    """`done(part)` records the seconds since the previous mark under `part`."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self._last = time.perf_counter()

    def done(self, part: str) -> None:
        now = time.perf_counter()
        self.parts[part] = round(self.parts.get(part, 0.0) + now - self._last, 3)
        self._last = now
