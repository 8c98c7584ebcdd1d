"""The algorithm flags change what the worker trains on (one CPU rank, tiny model).

Each check compares the first optimizer step of a rollout with a hand computation: at that step
the policy is still pi_old (ratio 1, unless pi_old is the rollout's), so pg_loss is a plain
weighted mean of -A (times the TIS weights), and the critic's value loss is (V - R)^2 with
R = reward on every token (gamma = lambda = 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.train.worker_harness import run_ranks, tiny_args, tiny_batch

pytestmark = pytest.mark.timeout(300)

PLAIN = {"use_kl_loss": False, "entropy_coef": 0.0, "normalize_advantages": False}
STEP = 4  # samples in the first optimizer step (gbs 4)
REWARDS = [1.0, -0.5, 0.25, 2.0, -1.0, 0.5, 1.5, -2.0]  # step 0's sample and token means differ


def _batch() -> Any:  # noqa: ANN401 - a RolloutBatch
    batch = tiny_batch()
    batch.rewards = list(REWARDS)
    return batch


def _scenarios(rank: int, world: int, ports: list[int]) -> dict[str, Any]:
    from ppodeck.engine.train.worker import train_worker

    def worker(role: str, port: int, **flags: Any) -> Any:
        w = train_worker(role, rank, world, "127.0.0.1", ports[port], tiny_args(**flags))
        w.init()
        return w

    batch, out = _batch(), {}
    # grpo: no values, advantages = the (already group-normalized) reward on every token
    actor = worker("actor", 0, advantage_estimator="grpo", n_samples_per_prompt=2, **PLAIN)
    samples, _ = actor._shard(batch)
    train_lp = actor._forward_only(samples, actor._log_probs_factory(), "log_probs")
    out["train_log_probs"] = [t.tolist() for t in train_lp]
    advantages, _raw, _ = actor._advantages(samples, None, train_lp, None, None)
    out["grpo_advantages"] = [a.tolist() for a in advantages]
    out["grpo"] = actor.train_actor(0, batch, None)
    # per-token loss, same weights' log-probs at the first step (ratio 1 either way)
    actor.settings = _replace(actor.settings, calculate_per_token_loss=True)
    out["grpo_per_token"] = actor.train_actor(1, batch, None)
    actor.shutdown()

    # TIS and rollout log-probs: rollout log-probs = the trainer's minus a known offset
    offsets = [[(-1.0, 0.5, -0.02, 0.0)[t % 4] for t in range(n)] for n in batch.response_lengths]
    shifted = _batch()
    shifted.rollout_log_probs = [[lp - d for lp, d in zip(row, off, strict=True)]
                                 for row, off in zip(out["train_log_probs"], offsets, strict=True)]
    out["offsets"] = offsets
    tis = {"advantage_estimator": "grpo", "n_samples_per_prompt": 2, **PLAIN}
    actor = worker("actor", 1, use_tis=True, tis_clip=1.5, tis_clip_low=0.8, **tis)
    out["tis"] = actor.train_actor(0, shifted, None)
    actor.shutdown()
    actor = worker("actor", 2, use_rollout_logprobs=True, **tis)
    out["rollout_logprobs"] = actor.train_actor(0, shifted, None)
    actor.shutdown()

    # the critic, per-sample vs per-token value loss on the same values
    for name, port, per_token in (("critic", 3, False), ("critic_per_token", 4, True)):
        critic = worker("critic", port, calculate_per_token_loss=per_token, **PLAIN)
        out[name] = critic.train_critic(0, batch)
        critic.shutdown()

    # --ref-update-interval 2: the ref is the actor after rollouts 1, 3, ...
    actor = worker("actor", 5, advantage_estimator="grpo", n_samples_per_prompt=2,
                   use_kl_loss=True, kl_loss_coef=0.0, ref_update_interval=2, entropy_coef=0.0)
    out["ref_rounds"] = [actor.train_actor(i, batch, None)["rollout_metrics"] for i in range(3)]
    actor.shutdown()

    # --seed reaches the random init unchanged, 0 included
    weights = {}
    for port, seed in ((6, 0), (7, 0), (8, 1234)):
        w = worker("actor", port, seed=seed)
        weights.setdefault(seed, []).append(w.gather_full_state_dict())
        out[f"settings_seed_{port}"] = w.settings.seed
        w.shutdown()
    out["same_seed_equal"] = _states_equal(weights[0][0], weights[0][1])
    out["other_seed_equal"] = _states_equal(weights[0][0], weights[1234][0])
    return out


def _replace(settings: Any, **changes: Any) -> Any:  # noqa: ANN401
    from dataclasses import replace

    return replace(settings, **changes)


def _states_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_ranks(1, _scenarios, Path(tmp_path_factory.mktemp("flags")), ports=9)[0]


def _first(out: dict, key: str) -> float:
    return out["step_metrics"][0][key]


def _step_rows(values: list[list[float]]) -> list[tuple[list[float], list[int]]]:
    """(per-token values, loss mask) of the first step's samples."""
    batch = _batch()
    return [(values[i], batch.loss_masks[i]) for i in range(STEP)]


def _sample_mean(rows: list[tuple[list[float], list[int]]]) -> float:
    means = [sum(v * m for v, m in zip(x, mask, strict=True)) / sum(mask) for x, mask in rows]
    return sum(means) / len(rows)


def _token_mean(rows: list[tuple[list[float], list[int]]]) -> float:
    total = sum(v * m for x, mask in rows for v, m in zip(x, mask, strict=True))
    return total / sum(sum(mask) for _, mask in rows)


def _per_token_rows(fn: Any) -> list[tuple[list[float], list[int]]]:  # noqa: ANN401
    batch = _batch()
    return [([fn(i, t) for t in range(batch.response_lengths[i])], batch.loss_masks[i])
            for i in range(STEP)]


# --------------------------------------------------------------------------------- grpo


def test_grpo_advantages_are_the_reward_on_every_response_token(results: dict) -> None:
    batch = _batch()
    for i, row in enumerate(results["grpo_advantages"]):  # 0 where the loss mask has a hole
        assert row == [batch.rewards[i] * m for m in batch.loss_masks[i]]


def test_grpo_trains_without_critic_values_and_logs_no_critic_series(results: dict) -> None:
    rollout = results["grpo"]["rollout_metrics"]
    assert "rollout/values" not in rollout
    assert rollout["rollout/advantages"] == pytest.approx(sum(REWARDS) / 8)
    first = _first(results["grpo"], "train/pg_loss")
    rewards = _batch().rewards
    expected = -_sample_mean(_per_token_rows(lambda i, t: rewards[i]))
    assert first == pytest.approx(expected, abs=1e-5)


# ------------------------------------------------------------------------ per-token loss


def test_per_token_loss_weighs_samples_by_their_trainable_tokens(results: dict) -> None:
    rewards = _batch().rewards
    rows = _per_token_rows(lambda i, t: -rewards[i])
    per_sample, per_token = _sample_mean(rows), _token_mean(rows)
    assert abs(per_sample - per_token) > 0.05  # unequal lengths: the two means differ
    assert _first(results["grpo"], "train/pg_loss") == pytest.approx(per_sample, abs=1e-5)
    assert _first(results["grpo_per_token"], "train/pg_loss") == pytest.approx(per_token,
                                                                               abs=1e-5)


def test_per_token_value_loss_is_a_token_mean(results: dict) -> None:
    rewards = _batch().rewards
    values = results["critic"]["values"]
    assert values == results["critic_per_token"]["values"]  # same init, same V_old
    rows = _per_token_rows(lambda i, t: (values[i][t] - rewards[i]) ** 2)
    assert _first(results["critic"], "train/critic-value_loss") == pytest.approx(
        _sample_mean(rows), rel=1e-5)
    assert _first(results["critic_per_token"], "train/critic-value_loss") == pytest.approx(
        _token_mean(rows), rel=1e-5)


# ------------------------------------------------------------- TIS and rollout log-probs


def test_tis_weights_clip_and_multiply_the_policy_loss(results: dict) -> None:
    import math

    rewards, offsets = _batch().rewards, results["offsets"]
    ratio = lambda i, t: math.exp(offsets[i][t])  # noqa: E731 - exp(train - rollout)
    weight = lambda i, t: min(max(ratio(i, t), 0.8), 1.5)  # noqa: E731
    first = results["tis"]["step_metrics"][0]
    assert first["train/tis"] == pytest.approx(_sample_mean(_per_token_rows(ratio)), rel=1e-4)
    clipped = _per_token_rows(lambda i, t: float(weight(i, t) != ratio(i, t)))
    assert first["train/tis_clipfrac"] == pytest.approx(_sample_mean(clipped), abs=1e-6)
    assert 0.3 < first["train/tis_clipfrac"] < 0.7  # offsets -1 and 0.5 clip, the rest not
    expected = -_sample_mean(_per_token_rows(lambda i, t: rewards[i] * weight(i, t)))
    assert first["train/pg_loss"] == pytest.approx(expected, abs=1e-4)
    abs_diff = _sample_mean(_per_token_rows(lambda i, t: abs(offsets[i][t])))
    assert first["train/train_rollout_logprob_abs_diff"] == pytest.approx(abs_diff, rel=1e-4)
    assert first["train/ois"] == pytest.approx(1.0, abs=1e-5)  # pi_old is the trainer's


def test_rollout_logprobs_become_pi_old(results: dict) -> None:
    """--use-rollout-logprobs: pi_old is the rollout's log-probs, not the trainer's."""
    offsets = results["offsets"]
    first = results["rollout_logprobs"]["step_metrics"][0]
    # ppo_kl = old - logp = (train - offset) - train at the first step
    expected = _sample_mean(_per_token_rows(lambda i, t: -offsets[i][t]))
    assert first["train/ppo_kl"] == pytest.approx(expected, abs=1e-5)
    assert first["train/pg_clipfrac"] > 0  # ratios e^1 and e^-0.5 leave the clip range
    assert "train/tis" not in first and "train/train_rollout_kl" in first


# ------------------------------------------------------------------- ref update, seed


def test_ref_update_interval_copies_the_actor_into_the_ref(results: dict) -> None:
    first, second, third = results["ref_rounds"]
    assert first["rollout/ref_log_probs"] == pytest.approx(first["rollout/log_probs"])
    # rollout 0 trained the actor; (0 + 1) % 2 != 0: the ref stayed the initial weights
    assert abs(second["rollout/ref_log_probs"] - second["rollout/log_probs"]) > 1e-4
    # after rollout 1 the ref became the actor
    assert third["rollout/ref_log_probs"] == pytest.approx(third["rollout/log_probs"], abs=1e-6)


def test_seed_zero_reaches_the_random_init(results: dict) -> None:
    """--seed picks the random init (0 included): same seed, same weights."""
    assert results["settings_seed_6"] == results["settings_seed_7"] == 0
    assert results["same_seed_equal"] and not results["other_seed_equal"]


# --------------------------------------------------------------- per-token loss over DP


def _per_token_dp(rank: int, world: int, ports: list[int]) -> dict[str, Any]:
    from ppodeck.engine.train.worker import train_worker

    flags = {**PLAIN, "calculate_per_token_loss": True}
    critic = train_worker("critic", rank, world, "127.0.0.1", ports[0], tiny_args(**flags))
    critic.init()
    out = {"critic": critic.train_critic(0, _batch())}
    critic.shutdown()
    return out


@pytest.fixture(scope="module")
def dp2(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_ranks(2, _per_token_dp, Path(tmp_path_factory.mktemp("dp2")), ports=1)


def test_per_token_loss_counts_the_tokens_of_every_dp_rank(results: dict,
                                                          dp2: list[dict]) -> None:
    """Each DP rank holds 2 of the step's 4 samples: the token count is all-reduced, so the
    value loss and its gradient step match one rank holding all 4."""
    [logging] = [r["critic"] for r in dp2 if r["critic"]["step_metrics"]]
    for step in range(2):
        for key in ("train/critic-value_loss", "train/critic-grad_norm"):
            want = results["critic_per_token"]["step_metrics"][step][key]
            assert logging["step_metrics"][step][key] == pytest.approx(want, rel=1e-4), key
