"""transformer-engine selection: why TE is or is not used, and a failing TE spec or model that
falls back to the local spec instead of crashing start-up (issue 19 part 4). CPU only: TE's
own failures are simulated; bench/gpu_device_run.sh te-build/te-bench run the real one."""

from __future__ import annotations

import pytest

from ppodeck.engine.model.shape import ModelShape
from ppodeck.engine.train import platform


@pytest.fixture
def cuda_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the CUDA gate, TE's not-given-up state restored after the test."""
    monkeypatch.setattr(platform, "has_cuda", lambda: True)
    monkeypatch.setattr(platform, "_te_given_up", None)
    monkeypatch.delenv(platform.TE_ENV, raising=False)


def test_status_says_why_te_is_not_used(cuda_here, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "transformer_engine.pytorch", None)
    # TE is opt-in (the local spec measured faster on the H200): unasked, the reason says so
    assert platform.transformer_engine_status() == (False, platform.TE_NOT_ASKED)
    assert "PPODECK_TE=1" in platform.TE_NOT_ASKED
    monkeypatch.setenv(platform.TE_ENV, "1")
    assert platform.transformer_engine_status() == (
        False, "transformer_engine.pytorch does not import (ModuleNotFoundError)")
    monkeypatch.setenv(platform.TE_ENV, "0")
    assert platform.transformer_engine_status() == (False, "PPODECK_TE=0")
    monkeypatch.setattr(platform, "has_cuda", lambda: False)
    assert platform.transformer_engine_status() == (False, "no CUDA")
    assert not platform.has_transformer_engine()


def test_given_up_wins_over_an_importable_te(cuda_here, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    monkeypatch.setitem(sys.modules, "transformer_engine", types.ModuleType("transformer_engine"))
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch",
                        types.ModuleType("transformer_engine.pytorch"))
    assert platform.transformer_engine_status() == (False, platform.TE_NOT_ASKED)
    monkeypatch.setenv(platform.TE_ENV, "1")
    assert platform.transformer_engine_status() == (
        True, "transformer_engine.pytorch imports and PPODECK_TE=1")
    platform.give_up_transformer_engine("its model failed to build (RuntimeError: x)")
    assert platform.transformer_engine_status() == (
        False, "its model failed to build (RuntimeError: x)")


SHAPE_ARGS = {"num_layers": 1, "hidden_size": 32, "ffn_hidden_size": 64,
              "num_attention_heads": 4, "num_query_groups": 2, "kv_channels": 8,
              "vocab_size": 64, "max_sequence_length": 32}


@pytest.mark.usefixtures("megatron")
def test_a_failing_te_spec_gives_the_local_spec_and_a_reason(
        cuda_here, monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.core.models.gpt import gpt_layer_specs

    from ppodeck.engine.train import model

    def broken_te_spec(**_: object) -> object:
        raise AssertionError("megatron found no usable TE")

    monkeypatch.setattr(model, "has_transformer_engine", lambda: platform._te_given_up is None)
    monkeypatch.setattr(gpt_layer_specs, "get_gpt_layer_with_transformer_engine_spec",
                        broken_te_spec)
    monkeypatch.setattr(platform, "has_cuda", lambda: False)  # the local spec as on CPU
    spec = model.layer_spec(ModelShape(**SHAPE_ARGS))
    assert spec.submodules.self_attention.submodules.core_attention.__name__ == \
        "SDPADotProductAttention"
    assert platform._te_given_up == "its layer spec failed (AssertionError: megatron found no " \
                                    "usable TE)"


@pytest.mark.usefixtures("megatron")
def test_a_te_model_that_fails_to_build_is_built_with_the_local_spec(
        cuda_here, monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.core.models.gpt import gpt_layer_specs

    from ppodeck.engine.train import model
    from ppodeck.engine.train.platform import Parallelism, device_scope

    built, specs = model._gpt_model, []

    def te_model_fails(shape, config, spec, **kwargs):  # noqa: ANN001, ANN202
        specs.append(spec)
        if spec == "te spec":
            raise RuntimeError("cuDNN version mismatch")
        return built(shape, config, spec, **kwargs)

    monkeypatch.setattr(gpt_layer_specs, "get_gpt_layer_with_transformer_engine_spec",
                        lambda **_: "te spec")
    monkeypatch.setattr(model, "_gpt_model", te_model_fails)
    monkeypatch.setattr(model, "has_transformer_engine", lambda: platform._te_given_up is None)
    monkeypatch.setattr(platform, "has_cuda", lambda: False)  # the local spec as on CPU
    monkeypatch.setenv("PPODECK_FUSED", "0")
    shape = ModelShape(**SHAPE_ARGS)
    with device_scope():
        config = model.transformer_config(shape, Parallelism(), bf16=False)
        gpt = model.build_gpt(shape, "actor", config, seed=3)
    assert specs[0] == "te spec" and len(specs) == 2
    assert type(gpt.decoder.layers[0].self_attention.core_attention).__name__ == \
        "SDPADotProductAttention"
    assert platform._te_given_up == "its model failed to build (RuntimeError: cuDNN version " \
                                    "mismatch)"
    monkeypatch.setattr(platform, "has_cuda", lambda: True)  # the line a CUDA run logs
    monkeypatch.setenv(platform.TE_ENV, "1")  # asked for TE, and it failed
    assert model.describe_layer_spec() == (
        "layer spec: megatron's local spec with SDPA attention; transformer-engine not used: "
        "its model failed to build (RuntimeError: cuDNN version mismatch)")
