"""`ppodeck run`'s live view shows each eval set's latest reward; `tail` prints eval lines."""

from __future__ import annotations

from ppodeck.app.cli.progress import RunProgress, eval_rewards
from ppodeck.app.cli.tail import format_event


def eval_event(step: int, reward: float) -> dict:
    return {"v": 1, "ts": 0.0, "kind": "metrics", "step_key": "eval/step", "step": step,
            "rollout_id": step, "metrics": {"eval/held-out": reward,
                                            "eval/held-out-truncated_ratio": 0.25,
                                            "eval/held-out/response_len/mean": 4.0}}


def test_the_live_view_keeps_each_eval_sets_latest_reward() -> None:
    progress = RunProgress("run", 4)
    progress.apply(eval_event(0, 0.1))
    progress.apply(eval_event(2, 0.75))
    assert progress.evals == {"eval/held-out": 0.75}
    assert "eval/held-out 0.75" in progress.line()
    assert eval_rewards({"eval/a": 1.0, "eval/a-truncated_ratio": 0.0, "eval/a/x": 2.0}) == {
        "eval/a": 1.0}


def test_tail_prints_an_eval_line_on_the_eval_axis() -> None:
    line = format_event(eval_event(2, 0.75))
    assert "eval/step=2" in line and "eval/held-out=0.75" in line
