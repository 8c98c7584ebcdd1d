"""The reward phase's progress, while it runs: requests sent, answered, pending, the slowest.

A rollout's rewards are scored all at once (engine/rollout/user_rewards.py); a reward server
that hangs would hold the rollout with no sign, since the driver's next event comes only when
scoring ends. So the scorer rewrites `<run_dir>/reward_progress.json` about once a second while
it scores (atomically: a reader never sees half a file), and the readers (`health`, `tail`,
`runs ls`, the monitor, through engine.run.health) judge it: requests pending with none
answered for `reward_stall_seconds` is the `health.reward_stall` warning. LIGHT: stdlib only.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROGRESS_FILE = "reward_progress.json"


@dataclass(frozen=True)
class RewardProgress:
    rollout_id: int | None
    what: str  # "remote reward model http://...", "custom reward function m.fn", "--rm-type x"
    sent: int
    answered: int
    pending: int
    slowest_s: float  # age of the oldest request still pending (0 when none)
    last_answer_ts: float  # when a request was last answered (the phase's start before any)
    ts: float  # when this was written

    def line(self) -> str:
        slowest = f", slowest {self.slowest_s:.0f} s" if self.pending else ""
        return (f"reward {self.what}: {self.sent} sent, {self.answered} answered, "
                f"{self.pending} pending{slowest}")

    def stalled_for(self, now: float) -> float:
        """Seconds with requests pending and none answered (0 when nothing is pending)."""
        return max(0.0, now - self.last_answer_ts) if self.pending else 0.0


def write_progress(run_dir: str | Path, progress: RewardProgress) -> None:
    path = Path(run_dir) / PROGRESS_FILE
    tmp = path.with_name(f".{PROGRESS_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(progress)), encoding="utf-8")
    tmp.replace(path)


def read_progress(run_dir: str | Path) -> RewardProgress | None:
    """The last progress written; None when there is none or it cannot be read."""
    try:
        data: Any = json.loads((Path(run_dir) / PROGRESS_FILE).read_text(encoding="utf-8"))
        return RewardProgress(**data)
    except (OSError, ValueError, TypeError):
        return None


def now() -> float:
    return time.time()
