"""Qwen2 (q/k/v biases, --add-qkv-bias) and Llama 3 (rope scaling, --use-rope-scaling) through
HF <-> Megatron: tiny random transformers models, logits equal both ways, exact round trips."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from ppodeck.engine.model.convert import (
    ConversionError,
    arch_for,
    check_shape_matches,
    hf_config,
    hf_to_mcore,
    mcore_to_hf,
    save_hf_config,
    shape_from_hf_config,
)
from ppodeck.engine.model.shape import ModelShape
from tests.model.test_convert import build_mcore, load_strict, mcore_logits

TOL = 1e-4
VOCAB = 48
# Llama 3.2's rope: theta 5e5, factor 32 (low/high 1/4, original 8192 are Megatron's fixed ones)
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def tiny_family(family: str, tied: bool = True, seed: int = 0):  # noqa: ANN201
    """A 2-layer, hidden-64 model made by transformers from a config (no hub): "qwen2" with
    random q/k/v biases, "llama3" with Llama 3 rope scaling."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    kwargs = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=tied)
    torch.manual_seed(seed)
    if family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(
            **kwargs, rope_parameters={"rope_type": "default", "rope_theta": 1e6}))
    else:
        model = LlamaForCausalLM(LlamaConfig(**kwargs, rope_parameters=dict(LLAMA3_ROPE)))
    with torch.no_grad():  # norms start at 1 and biases at 0: make every mapping visible
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                param.normal_(0.0, 0.5)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                param.normal_(0.0, 0.3)  # sharp attention: positions (RoPE) change the logits
    return model.eval()


CASES = [("qwen2", True), ("qwen2", False), ("llama3", True), ("llama3", False)]


def test_shapes_read_from_the_configs() -> None:
    qwen = shape_from_hf_config(tiny_family("qwen2").config)
    assert arch_for(qwen) == "qwen2" and qwen.add_qkv_bias and not qwen.rope_scaling
    assert qwen.rotary_base == 1e6
    llama = shape_from_hf_config(tiny_family("llama3").config)
    assert arch_for(llama) == "llama" and not llama.add_qkv_bias
    assert llama.rope_scaling and llama.rope_scaling_factor == 32.0


def test_llama3_rope_really_scales() -> None:
    """The tiny head dim still spans all three of Llama 3's bands (kept, smoothed, divided),
    so the logits tests below exercise the whole scaling."""
    from transformers import LlamaConfig, LlamaForCausalLM

    scaled = tiny_family("llama3")
    plain = LlamaForCausalLM(LlamaConfig(**{**scaled.config.to_dict(), "rope_parameters": {
        "rope_type": "default", "rope_theta": 500000.0}}))
    ours, base = scaled.model.rotary_emb.inv_freq, plain.model.rotary_emb.inv_freq
    ratio = base / ours
    assert ratio[0] == 1.0 and ratio[-1] == pytest.approx(32.0)
    assert ((ratio > 1.0) & (ratio < 32.0)).any()


@pytest.mark.parametrize(("family", "tied"), CASES)
def test_hf_to_mcore_logits_match(megatron, family: str, tied: bool) -> None:
    hf = tiny_family(family, tied)
    shape = shape_from_hf_config(hf.config)
    model = build_mcore(shape)
    load_strict(model, hf_to_mcore(hf.state_dict(), shape, arch_for(shape)))
    # long enough that the scaled low frequencies turn by a visible angle
    ids = torch.randint(0, VOCAB, (2, 120), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
    assert (mcore_logits(model, ids) - expected).abs().max().item() < TOL


@pytest.mark.parametrize("family", ["qwen2", "llama3"])
def test_leaving_the_feature_out_would_be_seen(megatron, family: str) -> None:
    """The logits test above can fail: without the biases / the scaling the same weights give
    logits far outside its tolerance, and Megatron's inverse frequencies are HF's."""
    hf = tiny_family(family)
    shape = shape_from_hf_config(hf.config)
    full = hf_to_mcore(hf.state_dict(), shape, arch_for(shape))
    if family == "qwen2":
        full = {k: torch.zeros_like(v) if k.endswith(".bias") else v for k, v in full.items()}
    else:
        shape = ModelShape(**{**shape.__dict__, "rope_scaling": False})
        scaled = build_mcore(shape_from_hf_config(hf.config))
        assert torch.allclose(scaled.rotary_pos_emb.inv_freq.float(),
                              hf.model.rotary_emb.inv_freq.float(), rtol=1e-6, atol=0)
    model = build_mcore(shape)
    load_strict(model, full)
    ids = torch.randint(0, VOCAB, (2, 120), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
    assert (mcore_logits(model, ids) - expected).abs().max().item() > 100 * TOL


@pytest.mark.parametrize(("family", "tied"), CASES)
def test_round_trips_are_exact_and_load_into_transformers(megatron, family: str,
                                                          tied: bool) -> None:
    from transformers import AutoModelForCausalLM

    hf = tiny_family(family, tied)
    shape = shape_from_hf_config(hf.config)
    arch = arch_for(shape)
    sd = hf_to_mcore(hf.state_dict(), shape, arch)
    back = mcore_to_hf(sd, shape, arch)
    for key, value in hf.state_dict().items():
        if not (tied and key == "lm_head.weight"):
            assert torch.equal(back[key], value), key
    assert torch.equal(hf_to_mcore(back, shape, arch)[
        "decoder.layers.1.self_attention.linear_qkv.bias" if family == "qwen2" else
        "decoder.layers.1.self_attention.linear_qkv.weight"],
        sd["decoder.layers.1.self_attention.linear_qkv." + (
            "bias" if family == "qwen2" else "weight")])
    # the config we write for the rollout builds the same network from the converted weights
    model = build_mcore(shape)
    load_strict(model, sd)
    rebuilt = AutoModelForCausalLM.from_config(hf_config(shape, arch)).eval()
    missing, unexpected = rebuilt.load_state_dict(back, strict=False)
    assert unexpected == [] and missing == (["lm_head.weight"] if tied else [])
    rebuilt.tie_weights()
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = rebuilt(ids).logits
    assert (got - mcore_logits(model, ids)).abs().max().item() < TOL


def test_qkv_bias_rows_follow_the_query_groups() -> None:
    """Megatron's bias rows are [group: q heads, k, v], like its weight rows."""
    hf = tiny_family("qwen2")
    shape = shape_from_hf_config(hf.config)
    sd = hf_to_mcore(hf.state_dict(), shape, "qwen2")
    fused = sd["decoder.layers.0.self_attention.linear_qkv.bias"]
    q = hf.state_dict()["model.layers.0.self_attn.q_proj.bias"]
    k = hf.state_dict()["model.layers.0.self_attn.k_proj.bias"]
    assert fused.shape == (16 * (4 + 2 * 2),)
    assert torch.equal(fused[:32], q[:32]) and torch.equal(fused[32:48], k[:16])


def test_biases_the_flags_leave_out_are_refused() -> None:
    hf = tiny_family("qwen2")
    no_bias = ModelShape(**{**shape_from_hf_config(hf.config).__dict__, "add_qkv_bias": False})
    with pytest.raises(ConversionError, match="set --add-qkv-bias"):
        hf_to_mcore(hf.state_dict(), no_bias, "llama")
    with pytest.raises(ConversionError, match="--add-qkv-bias must be on for qwen2"):
        hf_config(no_bias, "qwen2")
    llama = tiny_family("llama3")
    biased = ModelShape(**{**shape_from_hf_config(llama.config).__dict__, "add_qkv_bias": True})
    with pytest.raises(ConversionError, match="--add-qkv-bias is on"):
        hf_to_mcore(llama.state_dict(), biased, "qwen2")


def test_flags_that_differ_from_the_checkpoint_are_named() -> None:
    config = tiny_family("llama3").config
    shape = shape_from_hf_config(config)
    check_shape_matches(config, shape, "ckpt")
    wrong = ModelShape(**{**shape.__dict__, "rope_scaling_factor": 8.0, "rotary_base": 1e4})
    with pytest.raises(ConversionError) as err:
        check_shape_matches(config, wrong, "ckpt")
    assert "--rotary-scaling-factor is 8, the checkpoint's is 32" in str(err.value)
    assert "--rotary-base is 10000, the checkpoint's is 500000" in str(err.value)
    unscaled = ModelShape(**{**shape.__dict__, "rope_scaling": False})
    with pytest.raises(ConversionError, match="--use-rope-scaling is off, the checkpoint's is on"):
        check_shape_matches(config, unscaled, "ckpt")


def test_rope_scalings_megatron_cannot_reproduce_are_refused() -> None:
    from transformers import LlamaConfig

    other = {**LLAMA3_ROPE, "original_max_position_embeddings": 4096}
    with pytest.raises(ConversionError, match="cannot be reproduced"):
        shape_from_hf_config(LlamaConfig(rope_parameters=other))
    with pytest.raises(ConversionError, match="'yarn' is not supported"):
        shape_from_hf_config(LlamaConfig(rope_parameters={
            "rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}))


def test_sglang_config_carries_bias_and_llama3_rope(tmp_path: Path) -> None:
    """What SGLang reads: Qwen2's architecture (its q/k/v biases) and the llama3 rope, in
    transformers 5's rope_parameters and in the rope_scaling/rope_theta of transformers 4."""
    from transformers import AutoConfig

    llama = shape_from_hf_config(tiny_family("llama3").config)
    written = json.loads(save_hf_config(llama, "llama", tmp_path / "l").read_text())
    assert written["rope_scaling"] == {k: v for k, v in LLAMA3_ROPE.items() if k != "rope_theta"}
    assert written["rope_theta"] == 500000.0 and written["rope_parameters"] == LLAMA3_ROPE
    assert shape_from_hf_config(AutoConfig.from_pretrained(tmp_path / "l")) == llama
    qwen = shape_from_hf_config(tiny_family("qwen2").config)
    written = json.loads(save_hf_config(qwen, "qwen2", tmp_path / "q").read_text())
    assert written["architectures"] == ["Qwen2ForCausalLM"] and "rope_scaling" not in written
    assert shape_from_hf_config(AutoConfig.from_pretrained(tmp_path / "q")) == qwen


def test_biases_train_save_and_resume_exactly(megatron, tmp_path: Path) -> None:
    """torch_dist save and resume of a model with q/k/v biases and scaled RoPE: weights (the
    biases among them, trained away from 0), Adam state, scheduler and RNG come back equal."""
    from ppodeck.engine.train.checkpoint import load_checkpoint, save_checkpoint
    from tests.train.test_checkpoint import SHAPE, after_resume, assert_same, build, train_step

    shape = ModelShape(**{**SHAPE.__dict__, "add_qkv_bias": True, "rope_scaling": True,
                          "rope_scaling_factor": 32.0, "rotary_base": 500000.0})
    ddp, optimizer, scheduler = build(shape=shape, seed=1)
    train_step(ddp, optimizer, scheduler)
    train_step(ddp, optimizer, scheduler)
    bias = "decoder.layers.0.self_attention.linear_qkv.bias"
    assert ddp.module.state_dict()[bias].abs().max() > 0  # the bias trains
    save_checkpoint(tmp_path / "ckpt", 3, [ddp], optimizer, scheduler, extra={"rollout_id": 3})
    expected = after_resume(ddp, optimizer, scheduler)
    ddp, optimizer, scheduler = build(shape=shape, seed=77)
    info = load_checkpoint(tmp_path / "ckpt", [ddp], optimizer, scheduler)
    assert info["iteration"] == 3 and info["loaded_optim"], info
    got = after_resume(ddp, optimizer, scheduler)
    assert bias in got["weights"]
    assert_same(got, expected)


@pytest.mark.parametrize("family", ["qwen2", "llama3"])
def test_parameter_counts_include_the_biases(megatron, family: str) -> None:
    """ModelShape.num_params (the worker's log) and check()'s count_params (the memory
    estimate) both count what Megatron builds, q/k/v biases included."""
    from ppodeck.engine.config.memory import count_params
    from ppodeck.engine.config.resolve import resolve_values

    hf = tiny_family(family, tied=False)
    shape = shape_from_hf_config(hf.config)
    built = sum(p.numel() for p in build_mcore(shape).parameters())
    assert shape.num_params() == built == sum(p.numel() for p in hf.parameters())
    args = resolve_values({
        "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 96, "num_attention_heads": 4,
        "group_query_attention": True, "num_query_groups": 2, "kv_channels": 16,
        "vocab_size": VOCAB, "make_vocab_size_divisible_by": 16, "swiglu": True,
        "normalization": "RMSNorm",
        "disable_bias_linear": True, "add_qkv_bias": family == "qwen2",
        "untie_embeddings_and_output_weights": True}, os.environ)
    assert count_params(args) == built


def test_prepare_conversion_checks_the_feature_flags(megatron, tmp_path: Path) -> None:
    """`ppodeck prepare`'s HF -> torch_dist conversion: flags that change no tensor shape are
    compared with the checkpoint too, and a matching run converts (biases included)."""
    from ppodeck.engine.train.checkpoint import convert_hf_to_torch_dist, read_tracker

    hf = tiny_family("qwen2")
    hf.save_pretrained(tmp_path / "hf")
    with pytest.raises(ConversionError, match=r"--add-qkv-bias off does not match .* \(on\)"):
        convert_hf_to_torch_dist(tmp_path / "hf", tmp_path / "bad", {"add_qkv_bias": False},
                                 log=lambda _: None)
    out = convert_hf_to_torch_dist(tmp_path / "hf", tmp_path / "ok",
                                   {"add_qkv_bias": True, "use_rope_scaling": False},
                                   log=lambda _: None)
    assert read_tracker(out) == "release"
