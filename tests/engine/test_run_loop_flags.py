"""One short tiny-cpu run with the run-loop flags of issue #14 on: --ci-test (every check),
--eval-interval with the synthetic held-out set, --update-weights-interval 2, --use-kl-loss and
--use-tensorboard. Each flag's effect is read back from the events and files."""

from __future__ import annotations

import pytest

from tests.engine.helpers import driver_log_tail, metric_series, phase_starts, run_preset
from tests.tracking.files import read_tensorboard_scalars

NUM_ROLLOUT = 3


@pytest.fixture(scope="module")
def flagged_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flags")
    grad_norms = tmp / "grad_norm_{role}_{rollout_id}_{step_id}.pt"
    return tmp, run_preset(
        tmp, "tiny-cpu", timeout=300, num_rollout=NUM_ROLLOUT, ci_test=True,
        ci_save_grad_norm=str(grad_norms), eval_interval=2,
        eval_prompt_data=["held-out", "${RUN_DIR}/data/copy-digit/eval.jsonl"],
        n_samples_per_eval_prompt=1, update_weights_interval=2, use_kl_loss=True,
        kl_loss_coef=0.01, use_tensorboard=True, tb_project_name="deck",
        tb_experiment_name="flags")


def test_the_run_succeeds_with_every_ci_check_on(flagged_run):
    _tmp, (rundir, status, events) = flagged_run
    assert status["state"] == "succeeded", driver_log_tail(rundir)
    logs = [e["msg"] for e in events if e["kind"] == "log"]
    assert "--ci-test: checks on: kl, logprobs, weight update, grad norm" in logs


def test_eval_runs_before_training_and_every_second_rollout(flagged_run):
    _tmp, (_rundir, _status, events) = flagged_run
    evals = [rid for rid, name in phase_starts(events) if name == "eval"]
    assert evals == [0, 1]  # before rollout 0, after rollout 1 ((1 + 1) % 2 == 0)
    series = metric_series(events, "eval/held-out", step_key="eval/step")
    assert [step for step, _ in series] == [0, 1]
    assert all(0.0 <= reward <= 1.0 for _, reward in series)


def test_weights_are_pushed_every_second_rollout_only(flagged_run):
    _tmp, (_rundir, _status, events) = flagged_run
    pushes = [rid for rid, name in phase_starts(events) if name == "update_weights"]
    assert pushes == [1]
    skipped = [e["msg"] for e in events if e["kind"] == "log" and "not pushed" in e["msg"]]
    assert len(skipped) == 2 and "after rollout 0" in skipped[0]


def test_ci_checks_saw_a_zero_kl_first_step_and_close_log_probs(flagged_run):
    _tmp, (_rundir, _status, events) = flagged_run
    actor = [e for e in events if e["kind"] == "metrics" and e.get("role") == "actor"]
    first_steps = [e["metrics"] for e in actor if e["step"] % 4 == 0]
    assert first_steps and all(abs(m["train/ppo_kl"]) < 1e-9 for m in first_steps)
    assert "train/kl_loss" in actor[0]["metrics"]
    rollout = {step: m for step, m in metric_series(events, "rollout/rollout_log_probs")}
    trainer = dict(metric_series(events, "rollout/log_probs"))
    assert trainer and all(abs(trainer[s] - rollout[s]) < 0.03 for s in trainer)


def test_grad_norms_were_saved_per_role_rollout_and_step(flagged_run):
    tmp, _run = flagged_run
    saved = sorted(p.name for p in tmp.glob("grad_norm_*.pt"))
    assert len(saved) == 4 * NUM_ROLLOUT + 4 * (NUM_ROLLOUT - 1)  # critic every rollout
    assert "grad_norm_critic_0_0.pt" in saved and "grad_norm_actor_1_3.pt" in saved


def test_tensorboard_holds_the_run_metrics(flagged_run):
    _tmp, (rundir, _status, events) = flagged_run
    scalars = read_tensorboard_scalars(rundir.path / "tensorboard" / "deck" / "flags")
    rewards = metric_series(events, "rollout/raw_reward")
    assert [step for step, _ in scalars["rollout/raw_reward"]] == [s for s, _ in rewards]
    assert [step for step, _ in scalars["eval/held-out"]] == [0, 1]
