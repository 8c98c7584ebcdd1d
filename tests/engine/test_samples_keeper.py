"""The driver's samples keeper: the batch, the rollout's details and the trainers' per-token rows
joined into one record per sample, written off the loop's thread (no Ray: stand-in outputs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ppodeck.engine.driver.samples_keeper import SamplesKeeper
from ppodeck.engine.rollout.types import RolloutBatch
from ppodeck.engine.run.samples import list_rollouts, read_samples
from tests.engine.test_driver_estimators import _run


def batch() -> RolloutBatch:
    return RolloutBatch(
        tokens=[[1, 2, 3, 4], [1, 2, 5]], prompt_lengths=[2, 2], response_lengths=[2, 1],
        loss_masks=[[1, 1], [1]], rewards=[0.5, -0.5], truncated=[True, False],
        rollout_log_probs=[[-0.1, -0.2], [-0.3]], sample_indices=[0, 1],
        details=[{"prompt": "p0", "response": "r0", "label": 7, "raw_reward": 1.0,
                  "group_index": 0, "status": "truncated"},
                 {"prompt": "p1", "response": "r1", "label": 7, "raw_reward": 0.0,
                  "group_index": 0, "status": "completed"}])


def part(index: list[int], lengths: list[int], **series: list[float]) -> dict:
    return {"index": index, "lengths": lengths,
            **{name: np.asarray(v, dtype=np.float32) for name, v in series.items()}}


def keep(tmp_path: Path, critic: bool = True, limit: int | None = None) -> list:
    logs: list[tuple[str, str]] = []
    keeper = SamplesKeeper({"samples_per_rollout": limit}, str(tmp_path),
                           lambda level, msg, **kw: logs.append((level, msg)), None)
    b = batch()
    details = keeper.take_details(b)
    assert b.details is None and details is not None  # the trainers get no texts
    critic_out = None
    if critic:  # one part per DP rank, each its samples' rows end to end
        critic_out = {"values": {0: [0.25, 0.75], 1: [0.0]},
                      "samples": [part([0], [2], returns=[0.5, 0.5]),
                                  part([1], [1], returns=[-0.5])]}
    actor_out = {"samples": [part([0, 1], [2, 1], log_probs=[-0.11, -0.21, -0.31],
                                  advantages=[0.25, -0.25, -0.5], entropy=[1, 2, 3])]}
    keeper.keep(4, b, details, critic_out, actor_out)
    keeper.close()
    assert any("samples: 1 rollouts kept" in msg for _, msg in logs), logs
    return read_samples(tmp_path, 4)


def test_a_ppo_sample_joins_every_source(tmp_path: Path) -> None:
    first, second = keep(tmp_path)
    assert (first.prompt, first.response, first.label, first.status) == ("p0", "r0", 7,
                                                                         "truncated")
    assert (first.reward, first.raw_reward, first.group_index) == (0.5, 1.0, 0)
    assert first.token_ids == [3, 4] and first.tokens is None  # no tokenizer: no texts
    assert first.values == [0.25, 0.75] and first.returns == [0.5, 0.5]
    assert first.advantages == [0.25, -0.25] and first.entropy == [1.0, 2.0]
    assert first.log_probs == pytest.approx([-0.11, -0.21])
    assert first.rollout_log_probs == pytest.approx([-0.1, -0.2])
    assert second.response_length == 1 and second.status == "completed"


def test_grpo_keeps_no_values_or_returns_and_the_cap_holds(tmp_path: Path) -> None:
    [only] = keep(tmp_path, critic=False, limit=1)
    assert only.index == 0 and only.values is None and only.returns is None
    assert only.advantages == [0.25, -0.25]


def test_zero_keeps_none(tmp_path: Path) -> None:
    logs: list[str] = []
    keeper = SamplesKeeper({"samples_per_rollout": 0}, str(tmp_path),
                           lambda level, msg, **kw: logs.append(msg), None)
    keeper.keep(0, batch(), None, None, None)
    keeper.close()
    assert list_rollouts(tmp_path) == [] and "no samples are kept" in logs[0]


@pytest.mark.parametrize("estimator", ["ppo", "grpo"])
def test_the_loop_writes_every_rollout(tmp_path: Path, estimator: str) -> None:
    """Through train() with stand-in roles: rollout 0 of PPO is the critic's warmup."""
    _run(tmp_path, estimator)
    run = tmp_path / "run"
    assert list_rollouts(run) == [0, 1, 2]
    warmup = read_samples(run, 0)[0]
    assert warmup.values == ([0.5] if estimator == "ppo" else None)
    assert warmup.prompt == "" and warmup.raw_reward is None  # no details, no tokenizer
