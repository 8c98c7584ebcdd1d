"""RolloutManager on the tiny synthetic task: shapes, rewards, trimming, metrics, weights."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

from ppodeck.engine.rollout.manager import RolloutManager, pick_backend
from ppodeck.engine.rollout.synthetic import PROMPT_DIGITS
from ppodeck.engine.rollout.types import RolloutBatch

TINY_MODEL = dict(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                  group_query_attention=True, num_query_groups=2, vocab_size=32,
                  max_position_embeddings=64, swiglu=True, normalization="RMSNorm",
                  disable_bias_linear=True, use_rotary_position_embeddings=True,
                  rotary_base=10000, norm_epsilon=1e-6)


def tiny_args(run_dir: Path, **overrides: Any) -> dict[str, Any]:  # noqa: ANN401
    """The resolved args the driver hands the manager (every key, miles' fallbacks applied)."""
    from ppodeck.engine.config.resolve import resolve_values

    args = dict(TINY_MODEL, synthetic_task="copy-digit", synthetic_num_prompts=64,
                run_dir=str(run_dir), input_key="prompt", label_key="label",
                metadata_key="metadata", rollout_shuffle=True, rollout_seed=42,
                rollout_batch_size=16, n_samples_per_prompt=4, global_batch_size=24,
                rollout_max_response_len=6, rollout_temperature=1.0, rollout_top_p=1.0,
                rollout_top_k=-1, rollout_backend="auto", rm_type=None, hf_checkpoint=None,
                prompt_data=None, advantage_estimator="ppo")
    values = {k: v for k, v in {**args, **overrides}.items() if v is not None}
    return resolve_values(values, os.environ)


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> RolloutManager:
    mgr = RolloutManager(tiny_args(tmp_path_factory.mktemp("run")))
    mgr.info = mgr.init()
    return mgr


def test_init_reports_backend_data_and_notes(manager: RolloutManager) -> None:
    info = manager.info
    assert info["backend"] == "hf" and info["num_prompts"] == 64
    assert any("auto picked hf" in note for note in info["notes"])
    assert any("synthetic task 'copy-digit'" in note for note in info["notes"])
    assert Path(info["prompt_data"]).is_file() and info["tokenizer_vocab"] <= 32


def test_generate_builds_a_consistent_batch(manager: RolloutManager) -> None:
    batch = manager.generate(0)
    assert isinstance(batch, RolloutBatch)
    assert len(batch) == 48 and manager.last_trimmed == 16  # 64 samples -> multiple of 24
    assert batch.sample_indices == list(range(48))
    for i in range(len(batch)):
        prompt_len, response_len = batch.prompt_lengths[i], batch.response_lengths[i]
        assert prompt_len == PROMPT_DIGITS + 1 and 1 <= response_len <= 6
        assert len(batch.tokens[i]) == prompt_len + response_len
        assert batch.loss_masks[i] == [1] * response_len
        assert len(batch.rollout_log_probs[i]) == response_len
        assert all(lp <= 0.0 for lp in batch.rollout_log_probs[i])
        assert 0.0 <= batch.rewards[i] <= 1.0
        assert batch.truncated[i] == (response_len == 6 and batch.tokens[i][-1] != 1)
    # the four samples of a prompt share it
    assert batch.tokens[0][:PROMPT_DIGITS + 1] == batch.tokens[3][:PROMPT_DIGITS + 1]


def test_random_model_scores_low(manager: RolloutManager) -> None:
    rewards = [r for rollout in range(2) for r in manager.generate(rollout).rewards]
    assert statistics.fmean(rewards) < 0.3


def test_metrics(manager: RolloutManager) -> None:
    batch = manager.generate(1)
    m = batch.metrics
    assert m["rollout/raw_reward"] == pytest.approx(statistics.fmean(batch.rewards))
    assert m["rollout/raw_reward/min"] == min(batch.rewards)
    assert m["rollout/raw_reward/max"] == max(batch.rewards)
    assert m["rollout/response_len/mean"] == pytest.approx(
        statistics.fmean(batch.response_lengths))
    assert m["rollout/response_len/median"] == statistics.median(batch.response_lengths)
    assert m["rollout/response_len/max"] == max(batch.response_lengths)
    assert m["rollout/response_len/min"] == min(batch.response_lengths)
    assert m["rollout/truncated_ratio"] == pytest.approx(
        sum(batch.truncated) / len(batch))
    assert m["rollout/trimmed_samples"] == 16
    assert m["perf/rollout_time"] > 0 and m["perf/tokens_per_sec"] > 0
    assert json.loads(json.dumps(m)) == m  # plain floats for the event stream


def test_same_rollout_id_same_batch_and_next_ids_differ(manager: RolloutManager) -> None:
    a, b = manager.generate(3), manager.generate(3)
    assert a.tokens == b.tokens and a.rewards == b.rewards
    assert manager.generate(4).tokens != a.tokens


def test_rewards_follow_the_reward_function(manager: RolloutManager) -> None:
    from ppodeck.engine.rollout.rewards import get_reward_fn

    batch = manager.generate(5)
    tok = manager.tokenizer
    fn = get_reward_fn("copy-digit")
    for i in range(len(batch)):
        prompt = tok.decode(batch.tokens[i][:batch.prompt_lengths[i]])
        response = tok.decode(batch.tokens[i][batch.prompt_lengths[i]:], skip_special_tokens=True)
        assert batch.rewards[i] == fn(response, prompt.split()[0], {"target_len": 4})


def test_update_weights_changes_generation_and_reports_bytes(tmp_path: Path) -> None:
    mgr = RolloutManager(tiny_args(tmp_path, rollout_batch_size=4, global_batch_size=16))
    mgr.init()
    before = mgr.generate(0)
    model = mgr.generator.model
    state = {k: torch.randn_like(v) for k, v in model.state_dict().items()
             if k != "lm_head.weight"}  # tied: the head is the embedding
    report = mgr.update_weights(state)
    assert report["bytes"] == sum(t.numel() * 4 for t in state.values())
    assert report["seconds"] >= 0
    assert torch.equal(model.lm_head.weight, state["model.embed_tokens.weight"])
    assert mgr.generate(0).tokens != before.tokens
    assert len(before) == 16 and mgr.last_trimmed == 0
    assert mgr.offload()["noop"] is True and mgr.onload()["noop"] is True
    mgr.shutdown()


def test_synthetic_task_uses_its_own_record_keys(tmp_path: Path) -> None:
    args = tiny_args(tmp_path, input_key="input", label_key=None, rollout_batch_size=2,
                     global_batch_size=None)
    mgr = RolloutManager(args)
    assert not any("ignored" in note for note in mgr.init()["overrides"])
    assert all(p.label in "0123456789" and p.metadata for p in mgr.source.prompts)
    odd = RolloutManager({**args, "input_key": "question"})
    # an override of what was asked: the driver announces it as a warning, not a note
    assert any("--input-key question ignored" in note for note in odd.init()["overrides"])


def test_sglang_backend_without_cuda_or_sglang_is_refused_by_name(tmp_path: Path) -> None:
    mgr = RolloutManager(tiny_args(tmp_path, rollout_backend="sglang"))
    with pytest.raises(ValueError, match="--rollout-backend sglang cannot run here"):
        mgr.init()
    assert pick_backend("hf")[0] == "hf"


def test_clear_errors_for_bad_setups(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--prompt-data"):
        RolloutManager(tiny_args(tmp_path, synthetic_task=None)).init()
    with pytest.raises(ValueError, match="--rollout-max-response-len"):
        RolloutManager(tiny_args(tmp_path, rollout_max_response_len=None)).init()
    with pytest.raises(ValueError, match="--vocab-size"):
        RolloutManager(tiny_args(tmp_path, vocab_size=16)).init()
    with pytest.raises(ValueError, match="--global-batch-size"):
        mgr = RolloutManager(tiny_args(tmp_path, rollout_batch_size=2, global_batch_size=24))
        mgr.init()
        mgr.generate(0)


def test_flag_rm_type_is_used_when_metadata_has_none(tmp_path: Path) -> None:
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{d} 1 :", "label": str(d)}) + "\n"
                            for d in range(8)))
    task_dir = tmp_path / "run" / "data" / "copy-digit"
    from ppodeck.engine.rollout.synthetic import prepare_synthetic_task

    prepare_synthetic_task("copy-digit", task_dir, 4, seed=0)
    args = tiny_args(tmp_path / "run", synthetic_task=None, prompt_data=str(data),
                     hf_checkpoint=str(task_dir), rollout_batch_size=8, n_samples_per_prompt=1,
                     global_batch_size=8)
    with pytest.raises(ValueError, match="--rm-type"):
        RolloutManager(args).init()
    mgr = RolloutManager({**args, "rm_type": "copy-digit"})
    mgr.init()
    batch = mgr.generate(0)
    assert len(batch) == 8 and all(0.0 <= r <= 1.0 for r in batch.rewards)


def test_init_reports_its_parts_and_builds_no_random_weights_before_a_push(
        manager: RolloutManager) -> None:
    """The rollout_start step's parts (the driver shows them like the trainers'); the
    actor's initial push overwrites the model, so it was not randomly initialized."""
    parts = manager.info["parts"]
    assert list(parts)[:4] == ["imports", "prompt data", "tokenizer", "prompts"]
    assert {"engine setup", "model import", "model build", "to device"} <= set(parts)
    assert all(seconds >= 0 for seconds in parts.values())
    assert manager.generator.weights_initialized is False


def test_debug_rollout_only_samples_from_seeded_random_weights(tmp_path: Path) -> None:
    args = tiny_args(tmp_path, debug_rollout_only=True)
    assert args["initial_weight_push"] is False
    mgr = RolloutManager(args)
    assert "model build + weights init" in mgr.init()["parts"]
    assert mgr.generator.weights_initialized is True


def test_a_warm_up_runs_rollout_0s_shapes_once_where_the_decoder_compiles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """init(warm_up=True) (the driver starts the trainers alongside) sends rollout 0's prompts
    through the generator once, with rollout 0's sampling, where the decoder compiles at first
    use (CUDA); elsewhere, or without warm_up, nothing runs."""
    from ppodeck.engine.rollout.hf_backend import HFGenerator

    seen: list[tuple[int, int, int]] = []
    generate = HFGenerator.generate

    def recorded(self, prompt_ids, **kw):  # noqa: ANN001, ANN003, ANN202
        seen.append((len(prompt_ids), kw["n_samples"], kw["max_new_tokens"]))
        return generate(self, prompt_ids, **kw)

    monkeypatch.setattr(HFGenerator, "generate", recorded)
    assert "decoder warm-up" not in RolloutManager(tiny_args(tmp_path)).init(warm_up=True)["parts"]
    monkeypatch.setattr(HFGenerator, "compiles_at_first_use", lambda self: True)
    assert "decoder warm-up" not in RolloutManager(tiny_args(tmp_path)).init()["parts"]
    assert seen == []
    mgr = RolloutManager(tiny_args(tmp_path))
    assert mgr.init(warm_up=True)["parts"]["decoder warm-up"] >= 0
    assert seen == [(16, 4, 6)]
    mgr.generate(0)
    assert seen == [(16, 4, 6)] * 2
