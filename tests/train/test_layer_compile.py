"""Regional compilation of the transformer layers (engine/train/layer_compile.py), on CPU.

On CPU the device shim splits each layer's graph (its torch-function mode is seen by dynamo),
so graph counts are checked on the GPU (tests/gpu/test_fused_gpu.py); here: the wrapping, the
switch and the eager fallback, and (`-m slow`) the same numbers as eager across micro-batch
shapes.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("megatron")


def _shape():  # noqa: ANN202
    from ppodeck.engine.model.shape import ModelShape

    return ModelShape(num_layers=3, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                      num_query_groups=2, kv_channels=16, vocab_size=128,
                      max_sequence_length=64, rotary_base=1e6, norm_epsilon=1e-6,
                      normalization="RMSNorm", swiglu=True, qk_layernorm=True,
                      add_bias_linear=False)


def _pair():  # noqa: ANN202
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism

    config = transformer_config(_shape(), Parallelism(), bf16=False)
    eager = build_gpt(_shape(), "actor", config, seed=3)
    compiled = build_gpt(_shape(), "actor", config, seed=3)
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled


def _run(model, batch: int, length: int, seed: int):  # noqa: ANN001, ANN202
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 128, (batch, length), generator=gen)
    positions = torch.arange(length).expand_as(ids)
    model.zero_grad(set_to_none=True)
    out = model(ids, positions, None)
    (out.float() ** 2).mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_compile_layers_wraps_every_layer_and_says_so() -> None:
    """The wrapping alone (torch.compile is lazy: nothing compiles until a layer runs)."""
    from ppodeck.engine.train.fastpaths import describe
    from ppodeck.engine.train.layer_compile import compile_layers, layers_compiled
    from ppodeck.engine.train.platform import device_scope

    with device_scope():
        _eager, compiled = _pair()
        assert compile_layers(compiled) and layers_compiled(compiled) == 3
        assert any(line.startswith("transformer layers: 3 compiled")
                   for line in describe(compiled, None))


# Inductor's CPU compile of three layers, forward and backward, at three shapes: minutes on a
# loaded 2-core CI. The same numbers are checked on CUDA, where the compile runs in a real run
# (tests/gpu/test_fused_gpu.py, modes `layers` and `layers-static`); the wrapping and the log
# line stay in the default suite above. The nightly bench runs these two.
@pytest.mark.slow
def test_compiled_layers_match_eager_across_micro_batch_shapes() -> None:
    from ppodeck.engine.train.fastpaths import describe
    from ppodeck.engine.train.layer_compile import compile_layers, layers_compiled
    from ppodeck.engine.train.platform import device_scope

    with device_scope():
        eager, compiled = _pair()
        assert compile_layers(compiled) and layers_compiled(compiled) == 3
        assert any(line.startswith("transformer layers: 3 compiled")
                   for line in describe(compiled, None))
        for batch, length, seed in ((2, 12, 0), (3, 20, 1), (1, 7, 2)):
            want_out, want_grads = _run(eager, batch, length, seed)
            out, grads = _run(compiled, batch, length, seed)
            tol = {"rtol": 1e-4, "atol": 1e-5}
            torch.testing.assert_close(out, want_out, **tol)
            for name, grad in want_grads.items():
                torch.testing.assert_close(grads[name], grad, msg=name, **tol)
    assert not compiled.decoder.layers[0]._compiled_call_impl.state["failed"]


def test_fixed_micro_batches_mark_the_batch_dim_static(monkeypatch) -> None:
    """What fixed_micro_batches asks of the compile, without compiling: the batch dim marked
    static, the sequence dim dynamic, on every layer, and the log line says which."""
    from ppodeck.engine.train import model as model_mod
    from ppodeck.engine.train.fastpaths import describe
    from ppodeck.engine.train.layer_compile import _mark_tokens_dynamic, compiled_calls
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope

    hidden = torch.zeros(5, 3, 8)
    _mark_tokens_dynamic({"hidden_states": hidden}, static_batch=True)
    assert 1 in hidden._dynamo_static_indices and 0 in hidden._dynamo_weak_dynamic_indices
    hidden = torch.zeros(5, 3, 8)
    _mark_tokens_dynamic({"hidden_states": hidden}, static_batch=False)
    assert {0, 1} <= hidden._dynamo_weak_dynamic_indices
    with device_scope():
        config = transformer_config(_shape(), Parallelism(), bf16=False)
        eager = build_gpt(_shape(), "actor", config, seed=3)  # CPU: no layer compile
        monkeypatch.setattr(model_mod, "fusion_mode", lambda: "layers")  # as on CUDA
        fixed = build_gpt(_shape(), "actor", config, seed=3, fixed_micro_batches=True)
        assert not compiled_calls(eager)
        assert len(compiled_calls(fixed)) == 3
        assert all(call.static_batch for call in compiled_calls(fixed))
        assert any("batch dim static" in line for line in describe(fixed, None))


@pytest.mark.slow  # the numbers under the compile: see the note above the first slow test
def test_fixed_micro_batches_compile_the_batch_dim_static(monkeypatch) -> None:
    """fixed_micro_batches: the layers' batch dim marked static (dynamo then never makes it
    dynamic), the sequence dim dynamic; the numbers still equal eager's across lengths and a
    last, smaller batch, and the log line says which."""
    from ppodeck.engine.train import model as model_mod
    from ppodeck.engine.train.fastpaths import describe
    from ppodeck.engine.train.layer_compile import _mark_tokens_dynamic, compiled_calls
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope


    hidden = torch.zeros(5, 3, 8)
    _mark_tokens_dynamic({"hidden_states": hidden}, static_batch=True)
    assert 1 in hidden._dynamo_static_indices and 0 in hidden._dynamo_weak_dynamic_indices
    hidden = torch.zeros(5, 3, 8)
    _mark_tokens_dynamic({"hidden_states": hidden}, static_batch=False)
    assert {0, 1} <= hidden._dynamo_weak_dynamic_indices
    with device_scope():
        config = transformer_config(_shape(), Parallelism(), bf16=False)
        eager = build_gpt(_shape(), "actor", config, seed=3)  # CPU: no layer compile
        monkeypatch.setattr(model_mod, "fusion_mode", lambda: "layers")  # as on CUDA
        fixed = build_gpt(_shape(), "actor", config, seed=3, fixed_micro_batches=True)
        fixed.load_state_dict(eager.state_dict())
        assert not compiled_calls(eager)
        assert len(compiled_calls(fixed)) == 3
        assert all(call.static_batch for call in compiled_calls(fixed))
        assert any("batch dim static" in line for line in describe(fixed, None))
        for batch, length, seed in ((2, 12, 0), (2, 20, 1), (1, 7, 2)):
            want_out, want_grads = _run(eager, batch, length, seed)
            out, grads = _run(fixed, batch, length, seed)
            torch.testing.assert_close(out, want_out, rtol=1e-4, atol=1e-5)
            for name, grad in want_grads.items():
                torch.testing.assert_close(grads[name], grad, msg=name, rtol=1e-4, atol=1e-5)


def test_a_compile_failure_runs_every_layer_eager_with_one_warning(monkeypatch) -> None:
    from ppodeck.engine.train.layer_compile import compile_layers
    from ppodeck.engine.train.platform import device_scope

    def broken_compile(fn, **_):  # noqa: ANN001, ANN202
        def run(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
            raise RuntimeError("inductor exploded")
        return run

    with device_scope():
        eager, compiled = _pair()
        monkeypatch.setattr(torch, "compile", broken_compile)
        compile_layers(compiled)
        with pytest.warns(UserWarning, match="transformer layers: torch.compile failed") as seen:
            out, _ = _run(compiled, 2, 9, 0)
        assert len([w for w in seen if "torch.compile failed" in str(w.message)]) == 1
        want, _ = _run(eager, 2, 9, 0)
    torch.testing.assert_close(out, want)
    assert all(layer._compiled_call_impl.state["failed"] for layer in compiled.decoder.layers)
    from ppodeck.engine.train.layer_compile import new_fallback

    said = new_fallback(compiled)  # the driver announces it once (Telemetry.announce)
    assert said is not None and "inductor exploded" in said and "run eager" in said
    assert new_fallback(compiled) is None and new_fallback(eager) is None


def test_the_switch_picks_layers_ops_or_none(monkeypatch) -> None:
    from ppodeck.engine.train import model

    monkeypatch.setattr(model, "fused_layer_ops", lambda: True)
    assert model.fusion_mode() == "layers"
    monkeypatch.setenv("PPODECK_COMPILE_LAYERS", "0")
    assert model.fusion_mode() == "ops"
    monkeypatch.delenv("PPODECK_COMPILE_LAYERS")
    monkeypatch.setattr(model, "fused_layer_ops", lambda: False)  # CPU, TE, or PPODECK_FUSED=0
    assert model.fusion_mode() == "none"
