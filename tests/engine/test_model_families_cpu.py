"""Qwen2 (--add-qkv-bias) and Llama 3 (--use-rope-scaling) through a whole CPU run: a tiny random
model made by transformers from a config is the --hf-checkpoint, a 2-rollout PPO run (every
--ci-test check on: the hf rollout's log-probs equal Megatron's) trains and saves it, and the
saved torch_dist checkpoint converted back loads in transformers with the engine's logits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ppodeck.engine.presets import load_preset, resolve_preset
from tests.engine.helpers import driver_log_tail, metric_series, run_preset

# each run: Ray, the driver and the trainers start, 2 rollouts of 128 samples (60-85 s here)
pytestmark = pytest.mark.slow

PRESETS = {"qwen2": "tiny-qwen2-cpu", "llama3": "tiny-llama3-cpu"}
TOL = 1e-4


def preset_args(preset: str) -> dict:
    from ppodeck.engine.config.resolve import resolve

    return resolve(resolve_preset(load_preset(preset)), os.environ)


def write_start_checkpoint(root: Path, preset: str) -> Path:
    """The preset's shape as a transformers model with random weights (biases and norms not
    at their 0/1 init, so a dropped mapping shows), saved with the copy-digit tokenizer."""
    from transformers import AutoModelForCausalLM

    from ppodeck.engine.model.convert import arch_for, hf_config
    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.rollout.synthetic import build_copy_digit_tokenizer

    shape = ModelShape.from_args(preset_args(preset))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(shape, arch_for(shape)),
                                             dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.3)
            elif "norm" in name:
                param.uniform_(0.8, 1.2)
    model.save_pretrained(str(root))
    build_copy_digit_tokenizer().save_pretrained(str(root))
    return root


@pytest.fixture(scope="module", params=sorted(PRESETS))
def family_run(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    preset = PRESETS[request.param]
    start = write_start_checkpoint(tmp / "hf", preset)
    # 8 prompts x 4 samples = one optimizer step per rollout: the run is mostly start-up
    run = run_preset(tmp, preset, timeout=300, num_rollout=2, rollout_batch_size=8,
                     model_init=None, hf_checkpoint=str(start), save=str(tmp / "ckpt"),
                     save_interval=2, ci_test=True)
    return request.param, preset, tmp, run


def test_the_run_trains_from_the_hf_checkpoint(family_run) -> None:
    family, _preset, _tmp, (rundir, status, events) = family_run
    assert status["state"] == "succeeded", driver_log_tail(rundir)
    logs = [e["msg"] for e in events if e["kind"] == "log"]
    assert "--ci-test: checks on: kl, logprobs, weight update" in logs
    # the rollout (transformers, from our HF config) and the trainer (Megatron) agree
    rollout = dict(metric_series(events, "rollout/rollout_log_probs"))
    trainer = dict(metric_series(events, "rollout/log_probs"))
    assert trainer and all(abs(trainer[s] - rollout[s]) < 0.03 for s in trainer), family


def test_the_saved_checkpoint_converts_back_to_transformers(family_run, megatron) -> None:
    from transformers import AutoModelForCausalLM

    from ppodeck.engine.model.convert import arch_for, hf_to_mcore, load_hf_checkpoint
    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.train.checkpoint import convert_torch_dist_to_hf
    from tests.model.test_convert import build_mcore, load_strict, mcore_logits

    family, preset, tmp, (rundir, status, _events) = family_run
    assert status["state"] == "succeeded", driver_log_tail(rundir)
    args = preset_args(preset)
    out = convert_torch_dist_to_hf(tmp / "ckpt", tmp / "back", args, log=lambda _: None)
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    shape = ModelShape.from_args(args)
    _, trained = load_hf_checkpoint(out)
    _, start = load_hf_checkpoint(tmp / "hf")
    assert trained.keys() == start.keys()
    assert not torch.equal(trained["model.layers.0.self_attn.q_proj.weight"],
                           start["model.layers.0.self_attn.q_proj.weight"])  # it trained
    if family == "qwen2":
        assert not torch.equal(trained["model.layers.0.self_attn.k_proj.bias"],
                               start["model.layers.0.self_attn.k_proj.bias"])
    else:
        assert hf.config.rope_parameters["rope_type"] == "llama3"
    model = build_mcore(shape)
    load_strict(model, hf_to_mcore(trained, shape, arch_for(shape)))
    ids = torch.randint(0, shape.vocab_size, (2, 48), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = hf(ids).logits
    assert (mcore_logits(model, ids) - expected).abs().max().item() < TOL
