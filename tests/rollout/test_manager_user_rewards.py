"""The rollout manager with the reward side users bring: a custom reward function for a task
the engine does not know, a remote reward model on a local HTTP server, and DAPO's dynamic
sampling with miles' built-in filter (its dotted miles name)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.rollout import manager as manager_module
from ppodeck.engine.rollout.manager import DATA_STATE_FILE, RolloutManager
from tests.rollout.test_manager import tiny_args
from tests.rollout.test_user_rewards import RewardServer

NEXT_DIGIT = '''
CALLS = []

async def score(args, sample, **kwargs):
    """The next digit after the label, K = 4 times: a task the engine does not know."""
    CALLS.append(sample.index)
    target = str((int(sample.label) + 1) % 10)
    return sum(t == target for t in sample.response.split()[:4]) / 4

async def by_group(args, sample, **kwargs):
    """Rewards that vary only within every third prompt group."""
    CALLS.append((sample.group_index, sample.index))
    return float(sample.index % 2) if sample.group_index % 3 == 0 else 1.0

def shift(args, samples):
    raw = [s.get_reward_value(args) for s in samples]
    return raw, [r + 10 for r in raw]
'''

MILES_STD_FILTER = "miles.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"


@pytest.fixture
def rm_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:  # noqa: ANN401
    code = tmp_path / "code"
    code.mkdir()
    (code / "rm_next_digit.py").write_text(NEXT_DIGIT)
    monkeypatch.setenv("PPODECK_CODE_DIR", str(code))
    yield
    sys.modules.pop("rm_next_digit", None)
    if str(code) in sys.path:
        sys.path.remove(str(code))


def started(tmp_path: Path, **overrides: Any) -> RolloutManager:  # noqa: ANN401
    small = {"rollout_batch_size": 8, "n_samples_per_prompt": 2, "global_batch_size": 16,
             "synthetic_num_prompts": 32, **overrides}
    mgr = RolloutManager(tiny_args(tmp_path / "run", **small))
    mgr.info = mgr.init()
    return mgr


def test_a_custom_reward_is_called_for_every_sample_and_trained_on(tmp_path: Path,
                                                                   rm_module: Any) -> None:
    mgr = started(tmp_path, custom_rm_path="rm_next_digit.score",
                  custom_reward_post_process_path="rm_next_digit.shift")
    calls = sys.modules["rm_next_digit"].CALLS
    batch = mgr.generate(0)
    assert sorted(calls) == list(range(16))  # 8 prompts x 2 samples, each scored once
    assert len(batch) == 16
    # post-process: trains on raw + 10, reports the raw mean as rollout/raw_reward
    raw = [r - 10 for r in batch.rewards]
    assert all(0.0 <= r <= 1.0 for r in raw)
    assert batch.metrics["rollout/raw_reward"] == pytest.approx(statistics.fmean(raw))
    assert any("--custom-rm-path rm_next_digit.score: loaded" in n for n in mgr.info["notes"])
    calls.clear()
    mgr.generate(1)
    assert sorted(calls) == list(range(16, 32))  # miles' index runs on across rollouts
    mgr.shutdown()


def test_a_remote_rm_gets_every_sample_and_its_answers_are_trained_on(tmp_path: Path) -> None:
    """The README's example: tiny-cpu's synthetic task with --rm-type remote_rm --rm-url URL
    (its samples name no rm_type of their own, so the flag reaches every one)."""
    with RewardServer() as server:
        mgr = started(tmp_path, rm_type="remote_rm", rm_url=server.url)
        assert not any("wins over --rm-type" in note for note in mgr.info["overrides"])
        assert any(f"remote reward model: {server.url}" in n for n in mgr.info["notes"])
        batch = mgr.generate(0)
        mgr.shutdown()
    assert len(server.bodies) == len(batch) == 16
    answers = sorted(len(b["response"]) / 10 for b in server.bodies)
    assert sorted(batch.rewards) == pytest.approx(answers)
    assert {b["label"] for b in server.bodies} <= {str(d) for d in range(10)}


def test_dynamic_sampling_keeps_only_groups_the_filter_passes(tmp_path: Path,
                                                              rm_module: Any) -> None:
    mgr = started(tmp_path, rollout_batch_size=4, over_sampling_batch_size=8,
                  global_batch_size=8, custom_rm_path="rm_next_digit.by_group",
                  dynamic_sampling_filter_path=MILES_STD_FILTER)
    calls = sys.modules["rm_next_digit"].CALLS
    batch = mgr.generate(0)
    # stream groups 0, 3, 6 pass in round one (8 groups), 9 in round two: 4 kept
    assert len(batch) == 8 and batch.rewards == [0.0, 1.0] * 4
    m = batch.metrics
    assert m["rollout/dynamic_filter/sampled_groups"] == 16
    assert m["rollout/dynamic_filter/dropped_groups"] == 16 - 6  # 0 3 6 9 12 15 pass
    assert m["rollout/dynamic_filter/drop_zero_std_1.0"] == 10
    assert m["rollout/over_sampling_rounds"] == 2
    assert max(g for g, _ in calls) == 15
    # the next rollout continues the stream where this one stopped, also after a restart
    state = (tmp_path / "run" / DATA_STATE_FILE).read_text()
    assert '"rollout_id": 0, "next_position": 16' in state
    mgr.shutdown()
    calls.clear()
    resumed = started(tmp_path, rollout_batch_size=4, over_sampling_batch_size=8,
                      global_batch_size=8, custom_rm_path="rm_next_digit.by_group",
                      dynamic_sampling_filter_path=MILES_STD_FILTER)
    resumed.generate(1)
    assert min(g for g, _ in calls) == 16
    resumed.shutdown()


def test_a_filter_that_never_passes_fails_the_rollout_with_its_drops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager_module, "MIN_ROUNDS", 2)  # the limit: max(2 rounds, an epoch)
    mgr = started(tmp_path, rollout_batch_size=4, over_sampling_batch_size=4,
                  global_batch_size=8, rm_type="copy-digit", synthetic_num_prompts=8,
                  dynamic_sampling_filter_path=MILES_STD_FILTER.replace(
                      "check_reward_nonzero_std", "check_no_aborted"))
    assert len(mgr.generate(0)) == 8  # nothing is aborted: the first 4 groups pass
    mgr.filter_fn = lambda args, samples: False
    with pytest.raises(ValueError, match=r"kept 0 of the 4 prompt groups needed after 8 "
                                         r"groups in 2 rounds"):
        mgr.generate(1)
    mgr.shutdown()
