"""The models PPO work starts from, by name: Qwen2.5 (and -Math, q/k/v biases) and Llama 3.1 /
3.2 (rope scaling). Their args come from the model table, the engine honours every one of their
flags, and the parameter count (with the q/k/v biases) is the published one."""

from __future__ import annotations

import os

import pytest

from ppodeck.engine.config import check, parse_argv
from ppodeck.engine.config.memory import count_params
from ppodeck.engine.config.resolve import resolve
from ppodeck.engine.miles.models import BUILTIN, DECK_ADDED, lookup

from .conftest import GPU_MACHINE

# total parameters as the models' HF pages state them (safetensors metadata)
PUBLISHED = {
    "qwen2.5-0.5B": 494_032_768, "qwen2.5-1.5B": 1_543_714_304,
    "qwen2.5-3B": 3_085_938_688, "qwen2.5-7B": 7_615_616_512,
    "qwen2.5-math-1.5B": 1_543_714_304, "qwen2.5-math-7B": 7_615_616_512,
    "llama3.1-8B": 8_030_261_248, "llama3.1-8B-Instruct": 8_030_261_248,
    "llama3.2-1B": 1_235_814_400, "llama3.2-3B": 3_212_749_824,
    "llama3.2-3B-Instruct": 3_212_749_824,
}


def model_config(name: str):  # noqa: ANN201
    args, _source = lookup(name, {})
    assert args is not None, name
    config, issues = parse_argv(args.split())
    assert not issues, issues
    return config


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_is_the_published_one(name: str) -> None:
    assert count_params(resolve(model_config(name), os.environ)) == PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_model_flag_runs_on_the_engine(name: str) -> None:
    report = check(model_config(name), GPU_MACHINE)
    assert not {"engine.refused", "engine.command_only"} & report.codes(), report.issues
    values = model_config(name).values
    if name.startswith("qwen2.5"):
        assert values["add_qkv_bias"] and values["disable_bias_linear"]
    else:
        assert values["use_rope_scaling"] and values["rotary_scaling_factor"] in (8.0, 32.0)


def test_added_entries_say_they_are_not_miles_files() -> None:
    assert not set(DECK_ADDED) & set(BUILTIN)
    _args, source = lookup("qwen2.5-math-7B", {})
    assert "miles has no such file" in source
    _args, source = lookup("qwen2.5-7B", {})
    assert "miles scripts/models/qwen2.5-7B.py" in source
    assert "did you mean qwen2.5-math-7B" in lookup("qwen2.5-math7B", {})[1]


def write_config(path, **fields) -> str:  # noqa: ANN001
    import json

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(fields))
    return str(path)


# the fields of the models' config.json files that decide the Megatron flags
QWEN25_15B = dict(model_type="qwen2", num_hidden_layers=28, hidden_size=1536,
                  intermediate_size=8960, num_attention_heads=12, num_key_value_heads=2,
                  vocab_size=151936, rope_theta=1000000.0, tie_word_embeddings=True)
LLAMA32_1B = dict(model_type="llama", num_hidden_layers=16, hidden_size=2048,
                  intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                  head_dim=64, vocab_size=128256, rope_theta=500000.0,
                  rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                "original_max_position_embeddings": 8192,
                                "rope_type": "llama3"})


def mismatch(name: str, checkpoint: str) -> list:
    config = model_config(name).with_values(hf_checkpoint=checkpoint)
    return [i for i in check(config, GPU_MACHINE).errors if i.code == "engine.hf_config_mismatch"]


def test_a_checkpoint_whose_rope_base_differs_is_an_error(tmp_path) -> None:
    """miles' qwen2.5-1.5B file says --rotary-base 10000 (Qwen2.5-Math-1.5B's); Qwen2.5-1.5B's
    config.json says 1000000: check() names the flag before the run trains another network."""
    qwen = write_config(tmp_path / "Qwen2.5-1.5B", **QWEN25_15B)
    [issue] = mismatch("qwen2.5-1.5B", qwen)
    assert "--rotary-base 10000 (the checkpoint's: 1e+06)" in issue.message
    assert issue.flags == ("--hf-checkpoint", "--rotary-base")
    math = write_config(tmp_path / "Qwen2.5-Math-1.5B", **{**QWEN25_15B, "rope_theta": 10000.0})
    assert mismatch("qwen2.5-1.5B", math) == mismatch("qwen2.5-math-1.5B", math) == []


def test_llama3_rope_scaling_is_compared_in_both_config_styles(tmp_path) -> None:
    old_style = write_config(tmp_path / "v4", **LLAMA32_1B)
    assert mismatch("llama3.2-1B", old_style) == []
    new_style = write_config(tmp_path / "v5", **{
        **{k: v for k, v in LLAMA32_1B.items() if k not in ("rope_theta", "rope_scaling")},
        "rope_parameters": {**LLAMA32_1B["rope_scaling"], "rope_theta": 500000.0}})
    assert mismatch("llama3.2-1B", new_style) == []
    [issue] = mismatch("llama3.1-8B", old_style)  # another model: every differing flag named
    for said in ("--num-layers 32 (the checkpoint's: 16)", "--rotary-scaling-factor 8 (the "
                 "checkpoint's: 32)", "--kv-channels 128 (the checkpoint's: 64)"):
        assert said in issue.message
    unscaled = write_config(tmp_path / "plain", **{**LLAMA32_1B, "rope_scaling": None})
    [issue] = mismatch("llama3.2-1B", unscaled)
    assert "--use-rope-scaling on (the checkpoint's: off)" in issue.message
