"""Trainer ranks on CPU ranks: PPO steps run and learn; TP=2, DP=2 and PP=2 match one rank.

Each scenario runs once per module (a fixture) in fresh gloo ranks; the tests compare what the
ranks returned.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.train.worker_harness import all_values, run_ranks, tiny_args, tiny_batch

pytestmark = pytest.mark.timeout(300)

TP_TOL = 1e-5
DP_TOL = 1e-5
REPEATS = 4  # train_critic / train_actor calls when checking that training moves the numbers


def _ppo_round(rank: int, world: int, ports: list[int], overrides: dict[str, Any]) -> dict:
    """Critic then actor on one rollout, as the driver runs them; plus export and offload."""
    from ppodeck.engine.train.worker import train_worker

    args, batch = tiny_args(**overrides), tiny_batch()
    critic = train_worker("critic", rank, world, "127.0.0.1", ports[0], args)
    result: dict[str, Any] = {"critic_init": critic.init()}
    result["critic"] = critic.train_critic(0, batch)
    values = all_values(result["critic"]["values"])
    result["sleep"], result["wake"] = critic.sleep(), critic.wake_up()
    critic.shutdown()
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[1], args)
    result["actor_init"] = actor.init()
    result["actor"] = actor.train_actor(0, batch, values)
    result["full_state"] = actor.gather_full_state_dict()
    result["hf"] = actor.export_hf_weights()
    actor.shutdown()
    return result


def _learning(rank: int, world: int, ports: list[int]) -> dict:
    """Repeated rounds on a fixed batch: the value loss falls; with a positive advantage on
    every token the log-probs of the response rise."""
    from ppodeck.engine.train.worker import train_worker

    args, batch = tiny_args(normalize_advantages=False), tiny_batch()
    critic = train_worker("critic", rank, world, "127.0.0.1", ports[0], args)
    critic.init()
    manual_values = _per_sample_outputs(critic, batch, lambda out: out[..., 0])
    results = [critic.train_critic(i, batch) for i in range(REPEATS)]
    value_losses = [r["step_metrics"][0]["train/critic-value_loss"] for r in results]
    critic.shutdown()
    winning = tiny_batch(reward=1.0)
    zero_values = {i: [0.0] * n for i, n in enumerate(winning.response_lengths)}
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[1], args)
    actor.init()
    manual_log_probs = _per_sample_outputs(actor, batch, _manual_log_probs(batch, args))
    samples, _ = actor._shard(batch)
    batched_log_probs = actor._forward_only(samples, actor._log_probs_factory(), "log_probs")
    log_probs = [actor.train_actor(i, winning, zero_values)["rollout_metrics"]["rollout/log_probs"]
                 for i in range(REPEATS)]
    actor.shutdown()
    dynamic = train_worker("critic", rank, world, "127.0.0.1", ports[2],
                          tiny_args(use_dynamic_batch_size=True, max_tokens_per_gpu=40))
    dynamic.init()
    first_dynamic = dynamic.train_critic(0, batch)["step_metrics"][0]
    dynamic.shutdown()
    return {"value_losses": value_losses, "log_probs": log_probs, "dynamic": first_dynamic,
            "manual_values": manual_values, "values": results[0]["values"],
            "manual_log_probs": manual_log_probs,
            "batched_log_probs": [t.tolist() for t in batched_log_probs]}


def _per_sample_outputs(worker: Any, batch: Any, pick: Any) -> list[list[float]]:  # noqa: ANN401
    """One unpadded forward per sample; `pick(output [L, X], sample)` -> [L] per position;
    keeps the entries at prompt_len + t - 1, the outputs that predict response token t."""
    from ppodeck.engine.train.platform import device_scope

    rows = []
    with torch.no_grad(), device_scope():
        for i, tokens in enumerate(batch.tokens):
            ids = torch.tensor([tokens])
            length = ids.shape[1]
            mask = torch.triu(torch.ones(1, 1, length, length, dtype=torch.bool), 1)
            out = worker.model(ids, torch.arange(length).unsqueeze(0), mask)[0]
            prompt, response = batch.prompt_lengths[i], batch.response_lengths[i]
            picked = pick(out) if pick.__code__.co_argcount == 1 else pick(out, i)
            rows.append(picked[prompt - 1:prompt + response - 1].tolist())
    return rows


def _manual_log_probs(batch: Any, args: dict[str, Any]) -> Any:  # noqa: ANN401
    def pick(logits: torch.Tensor, i: int) -> torch.Tensor:
        logp = torch.log_softmax(logits.float() / args["rollout_temperature"], dim=-1)
        following = torch.tensor(batch.tokens[i][1:] + [0])  # token after each position
        return logp.gather(-1, following.unsqueeze(-1))[..., 0]
    return pick


def _resume(rank: int, world: int, ports: list[int], root: str) -> dict:
    """Save, resume in a new worker, train on: the resumed worker continues exactly. The KL
    reference comes from --ref-load (the initial weights, saved before training)."""
    from ppodeck.engine.train.worker import train_worker

    ref_dir, run_dir = f"{root}/ref", f"{root}/run"
    batch = tiny_batch()
    values = {i: [0.1] * n for i, n in enumerate(batch.response_lengths)}
    first = train_worker("actor", rank, world, "127.0.0.1", ports[0],
                        tiny_args(save=ref_dir))
    first.init()
    first.save(0)
    first.args["save"] = run_dir
    first.train_actor(1, batch, values)
    first.save(2, extra={"note": "after rollout 2"})
    saved = first.gather_full_state_dict()
    continued = first.train_actor(3, batch, values)["step_metrics"]
    first.shutdown()
    resumed = train_worker("actor", rank, world, "127.0.0.1", ports[1],
                          tiny_args(load=run_dir, ref_load=ref_dir))
    init = resumed.init()
    state = resumed.gather_full_state_dict()
    after = resumed.train_actor(3, batch, values)["step_metrics"]
    resumed.shutdown()
    critic = train_worker("critic", rank, world, "127.0.0.1", ports[2],
                         tiny_args(ref_load=ref_dir))
    critic_init = critic.init()
    critic_steps = critic.train_critic(0, batch)["step_metrics"]
    critic.shutdown()
    return {"init": init, "continued": continued, "after": after, "saved": saved,
            "state": state, "critic_init": critic_init, "critic_steps": critic_steps}


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_ranks(1, _ppo_round, tmp_path_factory.mktemp("one"), {})[0]


@pytest.fixture(scope="module")
def learning(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_ranks(1, _learning, tmp_path_factory.mktemp("learn"), ports=3)[0]


def _from_hf(rank: int, world: int, ports: list[int], hf_dir: str) -> dict:
    """Actor and critic start from an HF checkpoint under TP=2 (untied embeddings)."""
    from ppodeck.engine.train.worker import train_worker

    args = tiny_args(tensor_model_parallel_size=2, untie_embeddings_and_output_weights=True,
                     model_init="hf", hf_checkpoint=hf_dir)
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[0], args)
    actor.init()
    exported = actor.export_hf_weights()
    actor.shutdown()
    critic = train_worker("critic", rank, world, "127.0.0.1", ports[1], args)
    critic.init()
    critic_state = critic.gather_full_state_dict()
    critic.shutdown()
    return {"hf": exported, "critic_state": critic_state}


def _write_hf_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    from transformers import LlamaForCausalLM

    from ppodeck.engine.model.convert import hf_config
    from ppodeck.engine.model.shape import ModelShape

    shape = ModelShape.from_args(tiny_args(untie_embeddings_and_output_weights=True))
    torch.manual_seed(3)
    model = LlamaForCausalLM(hf_config(shape, "llama"))
    model.save_pretrained(path)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def from_hf(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict]]:
    root = tmp_path_factory.mktemp("hf")
    hf_state = _write_hf_checkpoint(root / "ckpt")
    return hf_state, run_ranks(2, _from_hf, root / "out", str(root / "ckpt"))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    root = tmp_path_factory.mktemp("ckpt")
    return run_ranks(2, _resume, root / "out", str(root), ports=3)


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    # DP=1 here, so the plain (non-distributed) Megatron optimizer is the one covered
    return run_ranks(2, _ppo_round, tmp_path_factory.mktemp("tp2"),
                     {"tensor_model_parallel_size": 2, "use_distributed_optimizer": False})


@pytest.fixture(scope="module")
def dp2(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return run_ranks(2, _ppo_round, tmp_path_factory.mktemp("dp2"), {})


@pytest.fixture(scope="module")
def pp2(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return run_ranks(2, _ppo_round, tmp_path_factory.mktemp("pp2"),
                     {"pipeline_model_parallel_size": 2})


def _first(result: dict, role: str, key: str) -> float:
    return result[role]["step_metrics"][0][key]


def _assert_first_steps_match(ref: dict, other: dict, tol: float) -> None:
    for role, key in [("critic", "train/critic-value_loss"),
                      ("critic", "train/critic-value_clipfrac"),
                      ("actor", "train/pg_loss"), ("actor", "train/entropy_loss"),
                      ("actor", "train/loss")]:
        assert _first(other, role, key) == pytest.approx(_first(ref, role, key), abs=tol), key
    # the second step runs on weights the first step changed: the optimizer agrees too
    for role, key in [("critic", "train/critic-value_loss"), ("actor", "train/pg_loss"),
                      ("actor", "train/kl_loss")]:
        second, want = other[role]["step_metrics"][1][key], ref[role]["step_metrics"][1][key]
        assert second == pytest.approx(want, abs=10 * tol), key


def _assert_values_match(ref: dict[int, list[float]], other: dict[int, list[float]],
                         tol: float) -> None:
    assert sorted(other) == sorted(ref)
    for index, want in ref.items():
        assert torch.allclose(torch.tensor(other[index]), torch.tensor(want), atol=tol), index


def _merged_values(results: list[dict]) -> dict[int, list[float]]:
    merged: dict[int, list[float]] = {}
    for r in results:
        merged.update(r["critic"]["values"])
    return merged


def _logging_rank(results: list[dict]) -> dict:
    with_metrics = [r for r in results if r["critic"]["step_metrics"]]
    assert len(with_metrics) == 1, "exactly one rank logs"
    return with_metrics[0]


# --------------------------------------------------------------------------------------------
# one rank
# --------------------------------------------------------------------------------------------
def test_one_rank_round_returns_finite_metrics(one_rank: dict) -> None:
    critic, actor = one_rank["critic"], one_rank["actor"]
    assert len(critic["step_metrics"]) == len(actor["step_metrics"]) == 2  # 8 samples / gbs 4
    for step in critic["step_metrics"]:
        assert {"train/critic-value_loss", "train/critic-value_clipfrac",
                "train/critic-grad_norm", "train/critic-lr-pg_0"} <= set(step)
    for step in actor["step_metrics"]:
        assert {"train/loss", "train/pg_loss", "train/pg_clipfrac", "train/ppo_kl",
                "train/entropy_loss", "train/kl_loss", "train/grad_norm",
                "train/lr-pg_0"} <= set(step)
    assert set(actor["rollout_metrics"]) == {"rollout/values", "rollout/returns",
                                             "rollout/advantages", "rollout/log_probs",
                                             "rollout/ref_log_probs", "rollout/rewards"}
    numbers = [v for s in critic["step_metrics"] + actor["step_metrics"] for v in s.values()]
    numbers += [*actor["rollout_metrics"].values(), *critic["rollout_metrics"].values()]
    assert all(math.isfinite(v) for v in numbers)
    assert critic["step_metrics"][0]["train/critic-lr-pg_0"] == pytest.approx(1e-3)


def test_first_actor_step_is_on_policy(one_rank: dict) -> None:
    first = one_rank["actor"]["step_metrics"][0]
    assert first["train/ppo_kl"] == pytest.approx(0.0, abs=1e-6)
    assert first["train/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # ref = initial weights
    rollout = one_rank["actor"]["rollout_metrics"]
    assert rollout["rollout/log_probs"] == pytest.approx(rollout["rollout/ref_log_probs"])


def test_critic_values_cover_every_response_token(one_rank: dict) -> None:
    batch = tiny_batch()
    values = one_rank["critic"]["values"]
    assert sorted(values) == batch.sample_indices
    assert [len(values[i]) for i in batch.sample_indices] == batch.response_lengths


def test_num_params_counts_the_model(one_rank: dict) -> None:
    from ppodeck.engine.model.shape import ModelShape

    shape = ModelShape.from_args(tiny_args())
    assert one_rank["actor_init"]["num_params"] == shape.num_params()
    value_head = shape.hidden_size + 1  # the actor's head is tied to the embeddings
    assert one_rank["critic_init"]["num_params"] == shape.num_params() + value_head


def test_sleep_and_wake_up_are_reported_noops_on_cpu(one_rank: dict) -> None:
    for report in (one_rank["sleep"], one_rank["wake"]):
        assert report["noop"] is True
        assert report["seconds"] == 0.0
        assert report["bytes"] > 4 * 60_000  # fp32 params alone, plus Adam state
        assert report["freed_bytes"] > report["bytes"]  # grad buffers are freed, not copied


def test_export_hf_weights_is_a_llama_state_dict(one_rank: dict) -> None:
    hf = one_rank["hf"]
    assert hf["model.embed_tokens.weight"].shape == (32, 64)
    assert hf["model.layers.1.mlp.gate_proj.weight"].shape == (128, 64)
    assert "lm_head.weight" not in hf  # tied embeddings


def test_value_loss_falls_on_a_fixed_batch(learning: dict) -> None:
    losses = learning["value_losses"]
    assert losses[-1] < 0.8 * losses[0], losses


def test_positive_advantage_raises_log_probs(learning: dict) -> None:
    log_probs = learning["log_probs"]
    assert all(b > a for a, b in zip(log_probs, log_probs[1:], strict=False)), log_probs


def test_log_probs_and_values_sit_at_the_position_before_each_token(learning: dict) -> None:
    """Spec 5.2, temperature 0.8 on the logits and none on the value head; padded
    micro-batches give what unpadded single-sample forwards give."""
    batch = tiny_batch()
    for i in batch.sample_indices:
        assert torch.allclose(torch.tensor(learning["batched_log_probs"][i]),
                              torch.tensor(learning["manual_log_probs"][i]), atol=1e-5), i
        assert torch.allclose(torch.tensor(learning["values"][i]),
                              torch.tensor(learning["manual_values"][i]), atol=1e-5), i


def test_dynamic_batch_matches_fixed_micro_batches(one_rank: dict, learning: dict) -> None:
    fixed = one_rank["critic"]["step_metrics"][0]  # the critic ignores normalize_advantages
    for key in ("train/critic-value_loss", "train/critic-grad_norm"):
        assert learning["dynamic"][key] == pytest.approx(fixed[key], abs=1e-5), key


# --------------------------------------------------------------------------------------------
# two ranks
# --------------------------------------------------------------------------------------------
def test_tp2_matches_one_rank(one_rank: dict, tp2: list[dict]) -> None:
    """--tensor-model-parallel-size 2: the layers split over two ranks, same numbers."""
    _assert_first_steps_match(one_rank, _logging_rank(tp2), TP_TOL)
    assert tp2[1]["critic"]["values"] == {}  # TP rank 1 does not ship values
    _assert_values_match(one_rank["critic"]["values"], _merged_values(tp2), TP_TOL)


def test_tp2_export_matches_one_rank(one_rank: dict, tp2: list[dict]) -> None:
    assert tp2[1]["hf"] is None
    _assert_state_dicts_match(one_rank["hf"], tp2[0]["hf"], 1e-5)


def test_dp2_matches_one_rank(one_rank: dict, dp2: list[dict]) -> None:
    _assert_first_steps_match(one_rank, _logging_rank(dp2), DP_TOL)
    assert all(r["critic"]["values"] for r in dp2)  # each DP rank ships its shard
    _assert_values_match(one_rank["critic"]["values"], _merged_values(dp2), DP_TOL)
    rollout, want = _logging_rank(dp2)["actor"]["rollout_metrics"], one_rank["actor"]
    for key, value in want["rollout_metrics"].items():
        assert rollout[key] == pytest.approx(value, abs=DP_TOL), key
    assert _logging_rank(dp2)["critic"]["rollout_metrics"]["critic/explained_variance"] == \
        pytest.approx(one_rank["critic"]["rollout_metrics"]["critic/explained_variance"], abs=1e-5)


def test_pp2_values_and_losses_match_one_rank(one_rank: dict, pp2: list[dict]) -> None:
    """--pipeline-model-parallel-size 2: two stages, the last one holds the values."""
    assert pp2[0]["critic"]["values"] == {}  # only the last stage has values
    _assert_values_match(one_rank["critic"]["values"], pp2[1]["critic"]["values"], 1e-5)
    _assert_first_steps_match(one_rank, _logging_rank(pp2), 1e-5)


def test_pp2_export_matches_one_rank(one_rank: dict, pp2: list[dict]) -> None:
    assert pp2[1]["hf"] is None
    _assert_state_dicts_match(one_rank["full_state"], pp2[0]["full_state"], 1e-5)
    _assert_state_dicts_match(one_rank["hf"], pp2[0]["hf"], 1e-5)


def _assert_state_dicts_match(ref: dict[str, torch.Tensor], other: dict[str, torch.Tensor],
                              tol: float) -> None:
    assert sorted(other) == sorted(ref)
    for name, tensor in ref.items():
        assert other[name].shape == tensor.shape, name
        assert torch.allclose(other[name], tensor, atol=tol), name



# --------------------------------------------------------------------------------------------
# checkpoints (DP=2, distributed optimizer)
# --------------------------------------------------------------------------------------------
def test_resume_continues_exactly(resumed: list[dict]) -> None:
    logging = _logging_rank_of(resumed, "after")
    assert [r["init"]["start_rollout_id"] for r in resumed] == [3, 3]
    assert logging["init"]["loaded_from"].endswith("iter_0000002")
    _assert_state_dicts_match(logging["saved"], logging["state"], 0.0)
    for want, got in zip(logging["continued"], logging["after"], strict=True):
        for key in ("train/pg_loss", "train/kl_loss", "train/grad_norm", "train/lr-pg_0"):
            assert got[key] == pytest.approx(want[key], abs=1e-6), key


def test_critic_starts_from_the_policy_checkpoint_with_a_fresh_head(resumed: list[dict]) -> None:
    from ppodeck.engine.train.checkpoint import CRITIC_HEAD_NOTE

    logging = _logging_rank_of(resumed, "critic_steps")
    assert CRITIC_HEAD_NOTE in logging["critic_init"]["notes"]
    assert logging["critic_init"]["start_rollout_id"] == 0
    assert all(math.isfinite(v) for step in logging["critic_steps"] for v in step.values())


def _logging_rank_of(results: list[dict], key: str) -> dict:
    with_metrics = [r for r in results if r[key]]
    assert len(with_metrics) == 1
    return with_metrics[0]


# --------------------------------------------------------------------------------------------
# HF initial weights (TP=2)
# --------------------------------------------------------------------------------------------
def test_actor_from_hf_exports_the_same_weights(from_hf: tuple[dict, list[dict]]) -> None:
    hf_state, results = from_hf
    assert results[1]["hf"] is None
    _assert_state_dicts_match(hf_state, results[0]["hf"], 0.0)


def test_critic_from_hf_has_the_trunk_and_a_value_head(from_hf: tuple[dict, list[dict]]) -> None:
    hf_state, results = from_hf
    critic = results[0]["critic_state"]
    assert torch.equal(critic["embedding.word_embeddings.weight"],
                       hf_state["model.embed_tokens.weight"])
    assert torch.equal(critic["decoder.layers.1.mlp.linear_fc2.weight"],
                       hf_state["model.layers.1.mlp.down_proj.weight"])
    assert critic["output_layer.weight"].shape == (1, 64)
    assert critic["output_layer.bias"].shape == (1,)
