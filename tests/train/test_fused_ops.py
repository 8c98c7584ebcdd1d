"""Fused RoPE / RMSNorm (engine/train/fused.py) and Megatron's fused SwiGLU, checked on CPU
against the Megatron code they replace: values, gradients, state dicts, a whole GPTModel."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch

from ppodeck.engine.model.shape import ModelShape

# Reference tests on CPU, against Megatron's eager maths under the pinned torch (2.13). On a
# CUDA machine transformer_config() turns the fused ops on by itself and models are built on
# the GPU, so these comparisons do not apply there; tests/gpu/test_fused_gpu.py covers CUDA.
_CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(),
                               reason="CPU reference tests (CUDA: tests/gpu/test_fused_gpu.py)")

pytestmark = [_CPU_ONLY, pytest.mark.usefixtures("megatron")]

# bench/gpu_bench.py's TINY shape (Qwen3-like: GQA, qk-layernorm, SwiGLU, no biases)
SHAPE = ModelShape(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                   num_query_groups=2, kv_channels=16, vocab_size=256, max_sequence_length=128,
                   rotary_base=10000.0, norm_epsilon=1e-6, normalization="RMSNorm", swiglu=True,
                   qk_layernorm=True, add_bias_linear=False)
FP32_TOL = 1e-5  # of each tensor's largest entry (as tests/train/test_attention.py)


def assert_close(mine: torch.Tensor, theirs: torch.Tensor, what: str = "",
                 tol: float = FP32_TOL) -> None:
    scale = max(1.0, theirs.abs().max().item())
    diff = (mine.float() - theirs.float()).abs().max().item()
    assert diff <= tol * scale, f"{what}: max |diff| {diff:.3e} > {tol:g} x {scale:.3g}"


def bf16_ulps(mine: torch.Tensor, theirs: torch.Tensor) -> float:
    """Largest difference in units of bf16's last place at `theirs` (0 where both are 0)."""
    exponent = torch.floor(torch.log2(theirs.float().abs().clamp_min(2.0 ** -126)))
    return ((mine.float() - theirs.float()).abs() / torch.exp2(exponent - 7)).max().item()


@pytest.fixture
def empty_rope_slot(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Megatron's fused-RoPE slot as without TE (None), restored afterwards."""
    from megatron.core.models.common.embeddings import rope_utils

    monkeypatch.setattr(rope_utils, "fused_apply_rotary_pos_emb", None)
    yield


@pytest.fixture
def no_compile_warnings() -> Iterator[None]:
    """Fail if any fused op fell back to eager (both such warnings name torch.compile)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    fell_back = [str(w.message) for w in caught if "torch.compile" in str(w.message)]
    assert not fell_back, fell_back


# --- RoPE --------------------------------------------------------------------------------------
def rope_freqs(seq: int, rot_dim: int) -> torch.Tensor:
    """Megatron's RotaryEmbedding layout: [s, 1, 1, rot_dim] fp32, the halves repeated."""
    inv = 1.0 / (10000.0 ** (torch.arange(0, rot_dim, 2, dtype=torch.float32) / rot_dim))
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    return torch.cat((freqs, freqs), dim=-1)[:, None, None, :]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("rot_dim", [16, 8], ids=["full", "partial"])
def test_fused_rope_matches_megatron(dtype: torch.dtype, rot_dim: int,
                                     no_compile_warnings: None) -> None:
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    from ppodeck.engine.train.fused import fused_rope

    gen = torch.Generator().manual_seed(0)
    seq, batch, heads, dim = 11, 2, 3, 16
    # q of a fused [s, b, h, 3d] qkv projection: a non-contiguous view
    qkv = (torch.randn(seq, batch, heads, 3 * dim, generator=gen) * 2).to(dtype)
    freqs = rope_freqs(seq, rot_dim)
    grad_out = torch.randn(seq, batch, heads, dim, generator=gen).to(dtype)
    results = []
    for fn in (fused_rope, _apply_rotary_pos_emb_bshd):
        leaf = qkv.clone().requires_grad_()
        t = leaf.split(dim, dim=-1)[0]
        assert not t.is_contiguous()
        out = fn(t, freqs)
        out.backward(grad_out)
        results.append((out.detach(), leaf.grad[..., :dim].clone()))
    (ours, our_grad), (theirs, their_grad) = results
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype and ours.is_contiguous()
    torch.testing.assert_close(ours[..., rot_dim:], qkv[..., rot_dim:dim], rtol=0, atol=0)
    if dtype == torch.float32:
        assert_close(ours, theirs, "rope fp32", tol=1e-6)
        assert_close(our_grad, their_grad, "rope fp32 grad", tol=1e-6)
    else:  # intermediates rounded like eager (emulate_precision_casts): at most 1 ulp
        assert bf16_ulps(ours, theirs) <= 1.0
        assert bf16_ulps(our_grad, their_grad) <= 1.0


def test_fused_rope_refuses_interleaved() -> None:
    from ppodeck.engine.train.fused import fused_rope

    with pytest.raises(NotImplementedError, match="interleaved"):
        fused_rope(torch.zeros(2, 1, 1, 4), rope_freqs(2, 4), interleaved=True)


def test_install_fused_rope_fills_only_an_empty_slot(monkeypatch: pytest.MonkeyPatch,
                                                     empty_rope_slot: None) -> None:
    from megatron.core.models.common.embeddings import rope_utils

    from ppodeck.engine.train.fused import fused_rope, install_fused_rope

    monkeypatch.setenv("PPODECK_FUSED", "0")
    assert install_fused_rope() is False
    assert rope_utils.fused_apply_rotary_pos_emb is None
    monkeypatch.delenv("PPODECK_FUSED")
    assert install_fused_rope() is True
    assert install_fused_rope() is True  # idempotent
    assert rope_utils.fused_apply_rotary_pos_emb is fused_rope

    def te_rope(t: torch.Tensor, freqs: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
        return t

    monkeypatch.setattr(rope_utils, "fused_apply_rotary_pos_emb", te_rope)
    assert install_fused_rope() is False
    assert rope_utils.fused_apply_rotary_pos_emb is te_rope
def test_apply_rope_fusion_config_needs_the_slot_filled(empty_rope_slot: None) -> None:
    from ppodeck.engine.train.fused import install_fused_rope
    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism

    config = transformer_config(SHAPE, Parallelism(), bf16=False)
    with pytest.raises(ValueError, match="apply_rope_fusion is not available"):
        dataclasses.replace(config, apply_rope_fusion=True)
    assert install_fused_rope()
    assert dataclasses.replace(config, apply_rope_fusion=True).apply_rope_fusion


# --- RMSNorm -----------------------------------------------------------------------------------
def stock_and_fused_norm(hidden: int, dtype: torch.dtype
                         ) -> tuple[torch.nn.Module, torch.nn.Module]:
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from ppodeck.engine.train.fused import FusedRMSNorm
    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism

    config = transformer_config(SHAPE, Parallelism(), bf16=False)
    kwargs = dict(config=config, hidden_size=hidden, eps=config.layernorm_epsilon)
    stock, fused = WrappedTorchNorm(**kwargs), FusedRMSNorm(**kwargs)
    with torch.no_grad():
        stock.weight.copy_(torch.randn(hidden, generator=torch.Generator().manual_seed(5)) + 1)
        fused.weight.copy_(stock.weight)
    return stock.to(dtype), fused.to(dtype)


def test_fused_rmsnorm_is_the_same_module_as_wrapped_torch_norm() -> None:
    stock, fused = stock_and_fused_norm(16, torch.float32)
    assert type(stock) is torch.nn.RMSNorm and isinstance(fused, torch.nn.RMSNorm)
    assert [n for n, _ in fused.named_parameters()] == ["weight"]
    assert fused.state_dict().keys() == stock.state_dict().keys()
    assert (fused.eps, fused.normalized_shape) == (stock.eps, stock.normalized_shape)
    assert fused.weight.dtype == stock.weight.dtype
    assert vars(fused.weight).keys() == vars(stock.weight).keys()  # no extra param attributes


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("lead", [(7, 3), (7, 3, 4)], ids=["hidden", "per-head"])
def test_fused_rmsnorm_matches_torch(dtype: torch.dtype, lead: tuple[int, ...],
                                     no_compile_warnings: None) -> None:
    hidden = 16
    stock, fused = stock_and_fused_norm(hidden, dtype)
    gen = torch.Generator().manual_seed(2)
    # a non-contiguous input, as the q/k norms get after the qkv split
    x = (torch.randn(*lead, 2 * hidden, generator=gen) * 3).to(dtype)[..., hidden:]
    grad_out = torch.randn(*lead, hidden, generator=gen).to(dtype)
    results = []
    for norm in (fused, stock):
        leaf = x.detach().clone().requires_grad_()
        out = norm(leaf)
        out.backward(grad_out)
        results.append((out.detach(), leaf.grad, norm.weight.grad))
    (ours, our_dx, our_dw), (theirs, their_dx, their_dw) = results
    assert ours.dtype == theirs.dtype == dtype and our_dw.dtype == their_dw.dtype
    if dtype == torch.float32:
        for what, mine, ref in (("y", ours, theirs), ("dx", our_dx, their_dx),
                                ("dw", our_dw, their_dw)):
            assert_close(mine, ref, f"rmsnorm fp32 {what}", tol=1e-6)
    else:  # fp32 inside, one rounding: results agree to bf16's last place or so
        assert bf16_ulps(ours, theirs) <= 1.0
        torch.testing.assert_close(our_dx, their_dx, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(our_dw, their_dw, rtol=2e-2, atol=2e-2)


def test_fused_rmsnorm_refuses_what_wrapped_torch_norm_would_not_build() -> None:
    from ppodeck.engine.train.fused import FusedRMSNorm
    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism

    layernorm = dataclasses.replace(SHAPE, normalization="LayerNorm")
    config = transformer_config(layernorm, Parallelism(), bf16=False)
    with pytest.raises(ValueError, match="RMSNorm"):
        FusedRMSNorm(config=config, hidden_size=16, eps=1e-6)


def test_local_spec_norms_swaps_the_four_rmsnorms(monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.torch_norm import L2Norm, WrappedTorchNorm

    from ppodeck.engine.train.fused import FusedRMSNorm, local_spec_norms

    def norms(spec) -> list[type]:  # noqa: ANN001
        attn = spec.submodules.self_attention.submodules
        return [spec.submodules.input_layernorm, spec.submodules.pre_mlp_layernorm,
                attn.q_layernorm, attn.k_layernorm]

    stock = get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")
    fused = local_spec_norms(stock, "RMSNorm")
    assert norms(fused) == [FusedRMSNorm] * 4
    assert norms(stock) == [WrappedTorchNorm] * 4  # the given spec is left alone
    assert fused.submodules.sharded_state_dict_keys_map == (
        stock.submodules.sharded_state_dict_keys_map)

    no_qk = local_spec_norms(get_gpt_layer_local_spec(normalization="RMSNorm"), "RMSNorm")
    assert norms(no_qk) == [FusedRMSNorm, FusedRMSNorm, IdentityOp, IdentityOp]
    l2 = local_spec_norms(get_gpt_layer_local_spec(normalization="RMSNorm", qk_l2_norm=True),
                          "RMSNorm")
    assert norms(l2)[2:] == [L2Norm, L2Norm]
    layernorm = get_gpt_layer_local_spec(qk_layernorm=True, normalization="LayerNorm")
    assert local_spec_norms(layernorm, "LayerNorm") is layernorm
    monkeypatch.setenv("PPODECK_FUSED", "0")
    assert local_spec_norms(stock, "RMSNorm") is stock


# --- SwiGLU (Megatron's own fused path) --------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_megatron_fused_swiglu_matches_unfused(dtype: torch.dtype, bias: bool) -> None:
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.mlp import MLP, MLPSubmodules

    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope

    shape = dataclasses.replace(SHAPE, add_bias_linear=bias)
    base = transformer_config(shape, Parallelism(), bf16=dtype == torch.bfloat16)
    submodules = MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(9, 2, shape.hidden_size, generator=gen).to(dtype)
    results = []
    with device_scope():
        mlps = [MLP(dataclasses.replace(base, bias_activation_fusion=fusion), submodules)
                for fusion in (True, False)]
        mlps[1].load_state_dict(mlps[0].state_dict())
        for mlp in mlps:
            mlp.to(dtype)
            leaf = x.clone().requires_grad_()
            out, out_bias = mlp(leaf)  # fc2's bias comes back unadded (skip_bias_add)
            if out_bias is not None:
                out = out + out_bias
            (out.float() * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
            grads = {n: p.grad for n, p in mlp.named_parameters()}
            results.append((out, leaf.grad, grads))
    (ours, our_dx, our_grads), (theirs, their_dx, their_grads) = results
    assert our_grads.keys() == their_grads.keys()
    pairs = [("out", ours, theirs), ("dx", our_dx, their_dx)]
    pairs += [(n, g, their_grads[n]) for n, g in our_grads.items()]
    for what, mine, ref in pairs:
        if dtype == torch.float32:
            assert_close(mine, ref, f"swiglu fp32 {what}")
        else:
            torch.testing.assert_close(mine, ref, rtol=2e-2, atol=2e-2, msg=what)


# --- a whole GPTModel --------------------------------------------------------------------------
def build_pair(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype = torch.float32
               ) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(fused, stock) tiny GPTModels via engine.train.model.build_gpt, same weights. Fused:
    FusedRMSNorm spec, apply_rope_fusion (ours in the slot), bias_activation_fusion."""
    from ppodeck.engine.train import model as model_mod
    from ppodeck.engine.train.fused import install_fused_rope, local_spec_norms
    from ppodeck.engine.train.platform import Parallelism, device_scope

    stock_spec: Callable = model_mod.layer_spec
    bf16 = dtype == torch.bfloat16
    with device_scope():
        config = model_mod.transformer_config(SHAPE, Parallelism(), bf16=bf16)
        stock = model_mod.build_gpt(SHAPE, "actor", config, seed=7)
        assert install_fused_rope()
        fused_config = dataclasses.replace(config, apply_rope_fusion=True,
                                           bias_activation_fusion=True)
        monkeypatch.setattr(model_mod, "layer_spec",
                            lambda shape: local_spec_norms(stock_spec(shape), shape.normalization))
        fused = model_mod.build_gpt(SHAPE, "actor", fused_config, seed=7)
    fused.load_state_dict(stock.state_dict())
    return fused, stock


def forward_backward(model: torch.nn.Module, ids: torch.Tensor
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    from ppodeck.engine.train.platform import device_scope

    model.zero_grad(set_to_none=True)
    position_ids = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    with device_scope():
        logits = model(ids, position_ids, None)
        weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))
        (logits.float() * weights).sum().backward()
    return logits.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}
# A whole GPTModel through the compiled fused ops, forward and backward: the slowest tests of
# tests/train on a 2-core CI. The same comparison runs on CUDA, where the fused ops run in a real
# run (tests/gpu/test_fused_gpu.py, mode `ops`, fp32 and bf16); each op's own match against
# Megatron stays in the default suite above. The nightly bench runs these two.
@pytest.mark.slow
def test_fused_gpt_matches_stock_local_spec(monkeypatch: pytest.MonkeyPatch,
                                            empty_rope_slot: None,
                                            no_compile_warnings: None) -> None:
    from megatron.core.models.common.embeddings import rope_utils

    from ppodeck.engine.train import fused as fused_mod
    from ppodeck.engine.train.fused import FusedRMSNorm
    from ppodeck.engine.train.platform import device_scope

    fused, stock = build_pair(monkeypatch)
    layer = fused.decoder.layers[0]
    assert all(isinstance(m, FusedRMSNorm) for m in (
        layer.input_layernorm, layer.pre_mlp_layernorm, layer.self_attention.q_layernorm,
        layer.self_attention.k_layernorm))
    assert not any(isinstance(m, FusedRMSNorm) for m in stock.modules())
    assert fused.config.apply_rope_fusion and fused.config.bias_activation_fusion

    calls = []

    def spy(t: torch.Tensor, freqs: torch.Tensor, interleaved: bool = False) -> torch.Tensor:
        calls.append(t.shape)
        return fused_mod.fused_rope(t, freqs, interleaved=interleaved)

    monkeypatch.setattr(rope_utils, "fused_apply_rotary_pos_emb", spy)
    ids = torch.randint(0, SHAPE.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0))
    logits_fused, grads_fused = forward_backward(fused, ids)
    assert len(calls) == 2 * SHAPE.num_layers  # q and k of every layer
    logits_stock, grads_stock = forward_backward(stock, ids)

    assert_close(logits_fused, logits_stock, "logits")
    assert grads_fused.keys() == grads_stock.keys()
    for name, grad in grads_fused.items():
        assert_close(grad, grads_stock[name], name)
    # the log-prob passes run without grad: their own graphs, the same numbers
    with torch.no_grad(), device_scope():
        position_ids = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
        assert_close(fused(ids, position_ids, None), logits_stock, "no-grad logits")
    assert all(op.compiled is not None and not op.failed
               for op in (fused_mod._ROPE, fused_mod._RMS_NORM))
@pytest.mark.slow  # see the note above the previous test
def test_fused_gpt_bf16_stays_close_to_stock(monkeypatch: pytest.MonkeyPatch,
                                             empty_rope_slot: None,
                                             no_compile_warnings: None) -> None:
    fused, stock = build_pair(monkeypatch, torch.bfloat16)
    ids = torch.randint(0, SHAPE.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    logits_fused, grads_fused = forward_backward(fused, ids)
    logits_stock, grads_stock = forward_backward(stock, ids)
    assert_close(logits_fused, logits_stock, "bf16 logits", tol=2e-2)
    for name, grad in grads_fused.items():
        assert_close(grad, grads_stock[name], f"bf16 {name}", tol=5e-2)
def test_fused_gpt_has_the_stock_state_dict_and_checkpoint_keys(
        monkeypatch: pytest.MonkeyPatch, empty_rope_slot: None) -> None:
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    from ppodeck.engine.train.platform import device_scope

    fused, stock = build_pair(monkeypatch)
    assert list(fused.state_dict().keys()) == list(stock.state_dict().keys())
    with device_scope():
        sharded = [model.sharded_state_dict() for model in (fused, stock)]
    assert sharded[0].keys() == sharded[1].keys()
    fields = ("key", "global_shape", "global_offset", "axis_fragmentations", "replica_id",
              "dtype")
    for name, ours in sharded[0].items():
        theirs = sharded[1][name]
        assert type(ours) is type(theirs), name
        if isinstance(ours, ShardedTensor):
            assert [getattr(ours, f) for f in fields] == [getattr(theirs, f) for f in fields]
    # the layer spec's sharded_state_dict_keys_map (TE-compatible names) still applies
    norm = sharded[0]["decoder.layers.0.input_layernorm.weight"]
    assert norm.key == "decoder.layers.self_attention.linear_qkv.layer_norm_weight"


# --- switches and fallbacks --------------------------------------------------------------------
def test_compile_failure_falls_back_to_eager_once_with_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ppodeck.engine.train import fused as fused_mod

    def broken_compile(fn, **_):  # noqa: ANN001, ANN202
        def run(*_args):  # noqa: ANN002, ANN202
            raise RuntimeError("inductor exploded")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    op = fused_mod.CompiledOrEager("fused test-op", fused_mod._rms_norm_math)
    x, w = torch.randn(3, 4), torch.ones(4)
    with pytest.warns(UserWarning, match="fused test-op: torch.compile failed"):
        out = op(x, w, 1e-6)
    torch.testing.assert_close(out, torch.nn.functional.rms_norm(x, (4,), w, 1e-6))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call is eager and quiet
        op(x, w, 1e-6)
    with pytest.raises(RuntimeError):  # a genuine error still raises (from the eager maths)
        op(x, torch.ones(5), 1e-6)


def test_genuine_errors_keep_the_compiled_path() -> None:
    from ppodeck.engine.train import fused as fused_mod

    def scale_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * w

    op = fused_mod.CompiledOrEager("fused test-op", scale_rows)
    with pytest.raises(RuntimeError):
        op(torch.randn(3, 4), torch.ones(5))
    assert not op.failed
    torch.testing.assert_close(op(torch.ones(3, 4), torch.full((4,), 2.0)),
                               torch.full((3, 4), 2.0))
    assert op.compiled is not None and not op.failed


def test_availability_probe_and_env_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    from ppodeck.engine.train import fused as fused_mod

    assert fused_mod.fused_ops_available()  # this machine has a C++ compiler
    monkeypatch.setenv("PPODECK_FUSED", "0")
    assert not fused_mod.fused_enabled() and not fused_mod.fused_ops_available()
    monkeypatch.delenv("PPODECK_FUSED")

    def broken_compile(fn, **_):  # noqa: ANN001, ANN202
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken_compile)
    fused_mod._compile_probe.cache_clear()
    try:
        with pytest.warns(UserWarning, match="fused ops unavailable"):
            assert fused_mod.fused_ops_available() is False
    finally:
        fused_mod._compile_probe.cache_clear()


def test_disabled_ops_run_the_eager_maths(monkeypatch: pytest.MonkeyPatch) -> None:
    from ppodeck.engine.train import fused as fused_mod

    seen = []
    monkeypatch.setattr(fused_mod._ROPE, "eager", lambda *a: seen.append("eager") or a[0])
    monkeypatch.setenv("PPODECK_FUSED", "0")
    t = torch.zeros(2, 1, 1, 4)
    assert fused_mod.fused_rope(t, rope_freqs(2, 4)) is t
    assert seen == ["eager"]


def test_rmsnorm_graphs_stay_few_across_ranks_strides_and_lengths() -> None:
    """One graph per (width, grad mode): the 2.11 GPU torch has a global limit of 8 graphs per
    function, and hitting it made every later norm call pay a failed compile (~7 ms)."""
    from megatron.core.transformer.transformer_config import TransformerConfig
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    config = TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=4,
                               normalization="RMSNorm")
    from ppodeck.engine.train import fused as fused_mod
    from ppodeck.engine.train.fused import FusedRMSNorm

    hidden, head = FusedRMSNorm(config, 32), FusedRMSNorm(config, 8)
    torch._dynamo.reset()

    def graphs_after(lengths: tuple[int, ...]) -> int:
        for length in lengths:
            for grad in (True, False):
                with torch.set_grad_enabled(grad):
                    hidden(torch.randn(length, 2, 32, requires_grad=grad))
                    qkv = torch.randn(length, 2, 2, 32, requires_grad=grad)  # (q,q,k,v) x 2
                    query, key, _ = torch.split(qkv, [16, 8, 8], dim=-1)
                    head(query.reshape(length, 2, 4, 8))
                    head(key)  # a strided view, rank 4
        return len(_debug_get_cache_entry_list(fused_mod._rms_norm_math.__code__))

    first = graphs_after((3, 5))
    assert graphs_after((7, 11, 13, 17)) == first  # new lengths reuse the graphs
    assert first <= 6  # width x grad mode (+ the first, static-length compile)
