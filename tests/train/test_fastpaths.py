"""The GPU fast paths, checked against the code they replace: on CPU in CI, on CUDA (nccl
world, where Megatron's collectives need device tensors) by bench/gpu_device_run.sh tests."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("megatron")


def _rows(n_all: int = 12, vocab: int = 50, seed: int = 0) -> tuple[torch.Tensor, ...]:
    from ppodeck.engine.train.platform import device

    gen = torch.Generator().manual_seed(seed)
    flat = (torch.randn(n_all, vocab, generator=gen) * 3).to(device()).requires_grad_()
    index = torch.tensor([1, 3, 4, 7, 11], device=device())
    targets = torch.randint(0, vocab, (5,), generator=gen).to(device())
    return flat, index, targets


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize(("compiled", "every_row"), [(False, False), (False, True),
                                                     (True, False), (True, True)])
def test_fused_rows_match_megatrons_vocab_parallel_maths(temperature: float, compiled: bool,
                                                         every_row: bool) -> None:
    from ppodeck.engine.train.logprobs import (
        fused_log_probs,
        row_maths,
        scale_logits,
        vocab_parallel_entropy,
        vocab_parallel_log_probs,
    )

    flat, index, targets = _rows()
    rows = scale_logits(flat.index_select(0, index), temperature)
    want_logp = vocab_parallel_log_probs(rows.clone(), targets)
    want_entropy = vocab_parallel_entropy(rows)
    (want_logp.sum() + 0.3 * want_entropy.sum()).backward()
    want_grad, flat.grad = flat.grad.clone(), None

    fn = torch.compile(row_maths, dynamic=True) if compiled else row_maths
    logp, entropy = fused_log_probs(fn, flat, index, targets, temperature, True, every_row)
    (logp.sum() + 0.3 * entropy.sum()).backward()
    # the same fp32 maths in another order (logsumexp/softmax vs megatron's max-shifted sums,
    # then compiler reassociation): ~1e-6 absolute apart, 1e-5 relative on entropies near 0
    tol = {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(logp, want_logp, **tol)
    torch.testing.assert_close(entropy, want_entropy, **tol)
    torch.testing.assert_close(flat.grad, want_grad, **tol)


def test_fused_path_is_only_taken_on_cuda_and_can_be_turned_off(monkeypatch) -> None:
    from ppodeck.engine.train import fastpaths, logprobs

    flat = torch.zeros(2, 3)
    assert logprobs.fused_rows_fn(flat) is None  # CPU: the eager path
    assert fastpaths.fused_enabled()
    monkeypatch.setenv("PPODECK_FUSED", "0")
    assert not fastpaths.fused_enabled()


def test_compile_failure_falls_back_to_eager_with_a_warning(monkeypatch) -> None:
    from ppodeck.engine.train import logprobs
    from ppodeck.engine.train.fused import CompiledOrEager

    def broken_compile(fn, **_):  # noqa: ANN001, ANN202
        def run(*_args):  # noqa: ANN002, ANN202
            raise RuntimeError("inductor exploded")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    call = CompiledOrEager("fused log-probs", logprobs.row_maths, all_dynamic=True)
    flat, index, targets = _rows()
    with pytest.warns(UserWarning, match="fused log-probs: torch.compile failed"):
        logp, _ = call(flat.index_select(0, index), targets, 1.0, False)
    assert logp.shape == (5,)


def test_foreach_grad_norm_and_scale_equal_megatrons_fallbacks() -> None:
    from megatron.core.utils import local_multi_tensor_l2_norm, local_multi_tensor_scale

    from ppodeck.engine.train.fastpaths import foreach_l2_norm, foreach_scale

    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(shape, generator=gen) for shape in ((3, 4), (7,), (2, 2, 5))]
    ours, _ = foreach_l2_norm(0, None, [grads], False)
    direct = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))
    torch.testing.assert_close(ours, direct.reshape(1))
    if torch.cuda.is_available():  # megatron's fallback hard-codes a CUDA result
        theirs, _ = local_multi_tensor_l2_norm(0, None, [grads], False)
        torch.testing.assert_close(ours.cpu(), theirs.cpu())

    targets = [torch.empty_like(g, dtype=torch.bfloat16) for g in grads]
    foreach_scale(0, None, [grads, targets], 0.5)
    want = [torch.empty_like(t) for t in targets]
    local_multi_tensor_scale(0, None, [grads, want], 0.5)
    for got, exp in zip(targets, want, strict=True):
        assert torch.equal(got, exp)
    copies = [g.clone() for g in grads]
    foreach_scale(0, None, [copies, copies], 2.0)  # in place, as clip_grads calls it
    for got, g in zip(copies, grads, strict=True):
        assert torch.equal(got, g * 2.0)


def test_grad_kernels_install_and_turn_off(monkeypatch) -> None:
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads

    from ppodeck.engine.train import fastpaths

    fastpaths.install_grad_kernels()
    assert clip_grads.l2_norm_impl is fastpaths.foreach_l2_norm
    assert clip_grads.multi_tensor_scale_impl is fastpaths.foreach_scale
    assert fastpaths.install_grad_kernels() == []  # idempotent: nothing left to replace
    monkeypatch.setenv("PPODECK_FUSED", "0")
    fastpaths.install_grad_kernels()
    assert clip_grads.l2_norm_impl is utils.local_multi_tensor_l2_norm
    assert clip_grads.multi_tensor_scale_impl is utils.local_multi_tensor_scale
    monkeypatch.delenv("PPODECK_FUSED")
    fastpaths.install_grad_kernels()


def test_batch_first_output_layer_gives_the_same_logits_and_grads(monkeypatch) -> None:
    from megatron.core.tensor_parallel import ColumnParallelLinear

    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.train.fastpaths import batch_first_output_layer
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism, device, device_scope

    shape = ModelShape(num_layers=1, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                       num_query_groups=2, kv_channels=8, vocab_size=64,
                       max_sequence_length=32)
    with device_scope():
        monkeypatch.setenv("PPODECK_FUSED", "0")  # the same (unfused) layers in both models
        config = transformer_config(shape, Parallelism(), bf16=False)
        stock = build_gpt(shape, "actor", config, seed=3).to(device())
        fast = build_gpt(shape, "actor", config, seed=3).to(device())
        assert batch_first_output_layer(stock) == []  # turned off
        monkeypatch.delenv("PPODECK_FUSED")
        assert batch_first_output_layer(fast)
        fast.load_state_dict(stock.state_dict())
        assert type(stock.output_layer) is ColumnParallelLinear
        assert type(fast.output_layer) is not ColumnParallelLinear
        assert fast.state_dict().keys() == stock.state_dict().keys()
        device = next(stock.parameters()).device
        ids = torch.randint(0, 64, (3, 10), device=device)
        pos = torch.arange(10, device=device).expand_as(ids)
        outs = []
        for model in (stock, fast):
            out = model(ids, pos, None)
            (out.float() ** 2).mean().backward()
            outs.append(out)
    assert outs[1].is_contiguous()
    # the same maths, but GEMMs of another shape: accumulation order may differ on a GPU
    tol = {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(outs[0], outs[1], **tol)
    for (name, a), (_, b) in zip(stock.named_parameters(), fast.named_parameters(),
                                 strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name, **tol)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the fused AdamW kernel is CUDA-only")
def test_fuse_adam_switches_cuda_adamw_groups() -> None:
    from ppodeck.engine.train.fastpaths import fuse_adam

    param = torch.nn.Parameter(torch.zeros(4, device="cuda"))
    opt = torch.optim.AdamW([param])

    class Wrapper:
        optimizer = opt

    assert fuse_adam(Wrapper())
    assert opt.param_groups[0]["fused"] is True


def test_direct_linears_give_megatrons_outputs_and_grads(monkeypatch) -> None:
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.train.fastpaths import DirectColumnLinear, DirectRowLinear, describe
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism, device, device_scope

    shape = ModelShape(num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                       num_query_groups=2, kv_channels=8, vocab_size=64,
                       max_sequence_length=32, swiglu=True, add_bias_linear=True)
    with device_scope():
        config = transformer_config(shape, Parallelism(), bf16=False)
        fast = build_gpt(shape, "critic", config, seed=5).to(device())
        monkeypatch.setenv("PPODECK_FUSED", "0")
        stock = build_gpt(shape, "critic", config, seed=5).to(device())
        monkeypatch.delenv("PPODECK_FUSED")
        stock.load_state_dict(fast.state_dict())
        kinds = {type(m) for m in fast.modules()}
        assert {DirectColumnLinear, DirectRowLinear} <= kinds
        assert not {type(m) for m in stock.modules()} & {DirectColumnLinear, DirectRowLinear}
        assert all(m.direct for m in fast.modules()
                   if isinstance(m, DirectColumnLinear | DirectRowLinear))
        assert any(line.startswith("linears: 8 direct") for line in describe(fast, None))
        ids = torch.randint(0, 64, (3, 10), device=device())
        pos = torch.arange(10, device=device()).expand_as(ids)
        outs = []
        for model in (stock, fast):
            out = model(ids, pos, None)
            (out.float() ** 2).mean().backward()
            outs.append(out)
    tol = {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(outs[0], outs[1], **tol)
    grads = 0
    for (name, a), (_, b) in zip(stock.named_parameters(), fast.named_parameters(),
                                 strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=name, **tol)
        grads += "linear" in name and a.grad.abs().sum().item() > 0
    assert grads >= 8  # every linear (weights and biases) got a gradient through both paths
    assert isinstance(fast.decoder.layers[0].mlp.linear_fc2, RowParallelLinear)
    assert isinstance(fast.decoder.layers[0].self_attention.linear_qkv, ColumnParallelLinear)
