"""--ci-test checks on their own: each passes on the good numbers and fails on the bad ones
with a message that names the check and the numbers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.driver.ci_checks import (
    CIChecks,
    CIFailure,
    check_grad_norms,
    check_kl,
    check_logprobs,
)


def args(**flags: Any) -> dict[str, Any]:  # noqa: ANN401
    return resolve_values({"ci_test": True, **flags}, os.environ)


def test_kl_check_at_the_first_step_only() -> None:
    check_kl([{"train/ppo_kl": 0.0, "train/pg_clipfrac": 0.0}, {"train/ppo_kl": 0.3}], 1, False)
    with pytest.raises(CIFailure, match=r"kl check failed: train/pg_clipfrac = 1\.000e-03"):
        check_kl([{"train/ppo_kl": 0.0, "train/pg_clipfrac": 1e-3}], 1, False)
    check_kl([{"train/ppo_kl": 0.0, "train/kl_loss": 0.2}], 2, first_rollout=False)
    with pytest.raises(CIFailure, match="train/kl_loss = 2.000e-01 at the run's first"):
        check_kl([{"train/ppo_kl": 0.0, "train/kl_loss": 0.2}], 1, first_rollout=True)


def test_logprob_checks() -> None:
    check_logprobs(3, {"rollout/log_probs": -1.00, "rollout/rollout_log_probs": -1.02})
    with pytest.raises(CIFailure, match=r"disagree by 0\.0500 nats"):
        check_logprobs(3, {"rollout/log_probs": -1.00, "rollout/rollout_log_probs": -1.05})
    with pytest.raises(CIFailure, match="rollout/ref_log_probs"):
        check_logprobs(0, {"rollout/log_probs": -1.0, "rollout/ref_log_probs": -1.001})
    check_logprobs(1, {"rollout/log_probs": -1.0, "rollout/ref_log_probs": -1.001})  # rollout 0


def test_grad_norms_saved_then_compared(tmp_path: Path) -> None:
    pattern = str(tmp_path / "{role}-{rollout_id}-{step_id}.pt")
    steps = [{"train/grad_norm": 1.0}, {"train/grad_norm": 2.0}]
    check_grad_norms(args(ci_save_grad_norm=pattern), "actor", 4, steps)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["actor-4-0.pt", "actor-4-1.pt"]
    load = args(ci_load_grad_norm=pattern)
    check_grad_norms(load, "actor", 4, [{"train/grad_norm": 1.02}, {"train/grad_norm": 2.05}])
    with pytest.raises(CIFailure, match=r"actor rollout 4 step 1: 2\.500000 vs 2\.000000"):
        check_grad_norms(load, "actor", 4, [{"train/grad_norm": 1.0}, {"train/grad_norm": 2.5}])
    with pytest.raises(CIFailure, match="no saved grad norm"):
        check_grad_norms(load, "critic", 4, [{"train/critic-grad_norm": 1.0}])


LOADED_CODE_RAN: list[str] = []


def _record_load() -> str:
    LOADED_CODE_RAN.append("ran")
    return "1.0"


class _RunsCodeOnLoad:
    def __reduce__(self) -> tuple:
        return (_record_load, ())


def test_a_saved_grad_norm_that_is_not_a_number_is_refused_unrun(tmp_path: Path) -> None:
    import torch

    pattern = str(tmp_path / "{role}-{rollout_id}-{step_id}.pt")
    torch.save(_RunsCodeOnLoad(), pattern.format(role="actor", rollout_id=0, step_id=0))
    with pytest.raises(CIFailure, match="holds more than a saved grad norm"):
        check_grad_norms(args(ci_load_grad_norm=pattern), "actor", 0, [{"train/grad_norm": 1.0}])
    assert LOADED_CODE_RAN == []


def test_weight_pushes_must_match_then_move() -> None:
    seen: list[str] = []
    ci = CIChecks(args(), lambda level, msg, source: seen.append(msg))
    assert seen == ["--ci-test: checks on: kl, logprobs, weight update"]
    with pytest.raises(CIFailure, match="1 of 9 rollout tensors differ"):
        ci.weight_push({"weight_check": {"checked": 9, "mismatched": ["lm_head"],
                                         "digest": "a"}}, actor_trained=False)
    ci.weight_push({"weight_check": {"checked": 9, "mismatched": [], "digest": "a"}}, False)
    ci.weight_push({"weight_check": {"digest": "a"}}, actor_trained=False)  # warmup: same
    with pytest.raises(CIFailure, match="bit-identical to the previous push"):
        ci.weight_push({"weight_check": {"digest": "a"}}, actor_trained=True)


def test_training_without_a_push_counts_at_the_next_push() -> None:
    ci = CIChecks(args(update_weights_interval=2), lambda *a: None)
    ci.weight_push({"weight_check": {"checked": 1, "mismatched": [], "digest": "a"}}, False)
    ci.after_rollout(0, None, {"step_metrics": []}, {}, pushed=False)  # trained, not pushed
    with pytest.raises(CIFailure, match="bit-identical"):
        ci.weight_push({"weight_check": {"digest": "a"}}, actor_trained=False)


def test_debug_modes_and_the_disable_flag_turn_the_weight_check_off() -> None:
    for flags in ({"debug_train_only": True}, {"debug_rollout_only": True},
                  {"ci_disable_weight_update_checker": True}):
        assert not args(**flags)["check_weight_update_equal"], flags
    assert args()["check_weight_update_equal"]
