"""Eval rollouts, --debug-train-only's reused batch and the --ci-test weight check, on the
rollout manager of the tiny-cpu preset (resolved, as the driver hands it over)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from ppodeck.engine.config import resolve
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.rollout.manager import RolloutManager


def resolved_tiny(run_dir: Path, **flags: Any) -> dict[str, Any]:  # noqa: ANN401
    base = dict(synthetic_num_prompts=64, rollout_batch_size=8, global_batch_size=32,
                eval_interval=2, eval_prompt_data=["held-out", "${RUN_DIR}/data/copy-digit/"
                                                   "eval.jsonl"])
    config = resolve_preset(load_preset("tiny-cpu")).with_values(
        run_dir=str(run_dir), **{**base, **flags})
    return dict(resolve(config, os.environ))


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> RolloutManager:
    mgr = RolloutManager(resolved_tiny(tmp_path_factory.mktemp("run"), ci_test=True,
                                       eval_temperature=0.0))
    mgr.info = mgr.init()
    return mgr


def test_eval_scores_the_held_out_set_with_miles_metric_names(manager: RolloutManager) -> None:
    assert any("eval set 'held-out': 64 prompts" in n for n in manager.info["notes"])
    metrics = manager.eval(0)
    assert set(metrics) == {"eval/held-out", "eval/held-out-truncated_ratio",
                            "eval/held-out/response_len/mean", "eval/held-out/response_len/median",
                            "eval/held-out/response_len/max", "eval/held-out/response_len/min"}
    assert 0.0 <= metrics["eval/held-out"] <= 1.0
    assert metrics["eval/held-out/response_len/max"] <= 6  # the rollout's max length (fallback)


def test_eval_uses_the_current_weights(manager: RolloutManager) -> None:
    """All-zero weights give all-zero logits: greedy eval (--eval-temperature 0) then picks
    token 0 (<pad>, not EOS) at every step, so every response runs to the rollout's max length
    (the eval max length's fallback) and scores 0 with the copy-digit reward."""
    zeros = {k: torch.zeros_like(v) for k, v in manager.generator.model.state_dict().items()
             if k != "lm_head.weight"}
    manager.update_weights(zeros)
    metrics = manager.eval(1)
    assert metrics["eval/held-out"] == 0.0
    assert metrics["eval/held-out-truncated_ratio"] == 1.0
    assert metrics["eval/held-out/response_len/min"] == 6


def test_first_push_is_compared_tensor_by_tensor(tmp_path: Path) -> None:
    mgr = RolloutManager(resolved_tiny(tmp_path, ci_test=True))
    mgr.init()
    state = {k: torch.randn_like(v) for k, v in mgr.generator.model.state_dict().items()
             if k != "lm_head.weight"}
    first = mgr.update_weights(state)["weight_check"]
    assert first["mismatched"] == [] and first["checked"] == len(state)
    assert len(first["digest"]) == 64
    again = mgr.update_weights(state)["weight_check"]
    assert again == {"digest": first["digest"]}  # only the first push is compared

    broken = RolloutManager(resolved_tiny(tmp_path, ci_test=True))
    broken.init()
    real_load = broken.generator.load_weights
    dropped = "model.norm.weight"
    broken.generator.load_weights = lambda sd: real_load(  # a push that loses one tensor
        {k: (torch.zeros_like(v) if k == dropped else v) for k, v in sd.items()})
    check = broken.update_weights(state)["weight_check"]
    assert check["mismatched"] == [dropped]


def test_debug_train_only_generates_once_and_releases_the_generator(tmp_path: Path) -> None:
    mgr = RolloutManager(resolved_tiny(tmp_path, debug_train_only=True))
    info = mgr.init()
    assert not any("eval set" in n for n in info["notes"])  # miles: no eval in this mode
    first = mgr.generate(0)
    assert first.metrics["rollout/raw_reward"] >= 0.0 and mgr.generator is None
    again = mgr.generate(1)
    assert again.tokens == first.tokens and again.rewards == first.rewards
    assert again.metrics == {}  # miles logs no rollout metrics for reused data
    assert mgr.offload()["noop"] and mgr.onload()["noop"]


def test_an_eval_sets_metadata_rm_type_over_the_flag_is_an_override(tmp_path: Path) -> None:
    """Eval samples are scored like training ones: a sample's metadata rm_type wins over
    --rm-type there too (miles' order), and the driver announces it."""
    import json

    base = RolloutManager(resolved_tiny(tmp_path / "a"))
    base.init()
    source = tmp_path / "a" / "data" / "copy-digit" / "eval.jsonl"
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    for row in rows[:5]:
        row["metadata"] = {**(row.get("metadata") or {}), "rm_type": "math"}
    held = tmp_path / "eval-math.jsonl"
    held.write_text("".join(json.dumps(row) + "\n" for row in rows))
    mgr = RolloutManager(resolved_tiny(tmp_path / "b", eval_prompt_data=["mixed", str(held)]))
    overrides = mgr.init()["overrides"]
    assert any(line.startswith("eval set 'mixed': the prompt metadata names rm_type math "
                               "(5 prompts), which wins over --rm-type copy-digit")
               for line in overrides), overrides
    assert not any("eval set" in line for line in base.init()["overrides"])
