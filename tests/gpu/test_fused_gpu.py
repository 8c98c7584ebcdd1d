"""The CUDA fast paths against the stock local spec, on the GPU (`-m gpu`, device only).

A Qwen3-like GPTModel built by engine.train.model with every fast path on (whole layers
compiled, or per-op fused RoPE, RMSNorm and Megatron's SwiGLU; direct linears, batch-first
logits) and one built with PPODECK_FUSED=0 get the same weights; their logits, the PPO
actor's log-probs (the fused TP=1 path against Megatron's vocab-parallel cross entropy) and the
gradients must agree: tightly in fp32, within bf16
rounding in bf16. Shapes vary between calls, as dynamic micro-batches do, to catch recompile
trouble on the GPU machine's torch.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _shape():  # noqa: ANN202
    from ppodeck.engine.model.shape import ModelShape

    return ModelShape(num_layers=2, hidden_size=256, ffn_hidden_size=512,
                      num_attention_heads=4, num_query_groups=2, kv_channels=64,
                      vocab_size=1024, max_sequence_length=256, rotary_base=1e6,
                      norm_epsilon=1e-6, normalization="RMSNorm", swiglu=True,
                      qk_layernorm=True, add_bias_linear=False)


def _build(dtype: torch.dtype, mode: str, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    """mode: 'layers' (whole layers compiled, the default), 'layers-static' (the same for
    fixed-size micro-batches: the batch dim static), 'ops' (per-op fusion) or 'stock'."""
    from ppodeck.engine.train.model import build_gpt, fusion_mode, transformer_config
    from ppodeck.engine.train.platform import Parallelism

    monkeypatch.setenv("PPODECK_FUSED", "0" if mode == "stock" else "1")
    monkeypatch.setenv("PPODECK_COMPILE_LAYERS", "0" if mode == "ops" else "1")
    assert fusion_mode() == {"stock": "none", "layers-static": "layers"}.get(mode, mode)
    shape = _shape()
    config = transformer_config(shape, Parallelism(), bf16=dtype == torch.bfloat16)
    model = build_gpt(shape, "actor", config, seed=11,
                      fixed_micro_batches=mode == "layers-static").cuda()
    per_op = mode == "ops"
    assert config.apply_rope_fusion == per_op and config.bias_activation_fusion == per_op
    return model


def _step(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:  # noqa: ANN001
    from ppodeck.engine.train.logprobs import token_log_probs

    model.zero_grad(set_to_none=True)
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    logits = model(ids, positions, None)
    index = torch.arange(ids.numel(), device=ids.device).reshape(ids.shape)[:, 3:]
    targets = torch.roll(ids, -1, dims=1)[:, 3:]
    logp, entropy = token_log_probs(logits, index, targets, 0.8, with_entropy=True)
    (logp.mean() - 0.01 * entropy.mean()).backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters()}
    return logits.float().detach(), logp.detach(), grads


@pytest.mark.parametrize("mode", ["layers", "layers-static", "ops"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fast_paths_match_the_stock_local_spec_on_cuda(dtype: torch.dtype, mode: str,
                                                       megatron: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._dynamo
    from torch._dynamo.utils import counters

    from ppodeck.engine.train.fused import FusedRMSNorm
    from ppodeck.engine.train.layer_compile import layers_compiled

    torch._dynamo.reset()
    counters.clear()
    fast = _build(dtype, mode, monkeypatch)
    stock = _build(dtype, "stock", monkeypatch)
    stock.load_state_dict(fast.state_dict())
    assert any(isinstance(m, FusedRMSNorm) for m in fast.modules()) == (mode == "ops")
    assert layers_compiled(fast) == (0 if mode == "ops" else 2)
    assert not any(isinstance(m, FusedRMSNorm) for m in stock.modules())
    tol = 2e-4 if dtype == torch.float32 else 3e-2
    graphs_after_warmup = 0
    shapes = ((3, 48), (5, 80), (1, 21), (2, 33), (4, 64), (6, 40))  # dynamic micro-batches
    if mode == "layers-static":  # fixed-size micro-batches: the size, a last one, lengths vary
        shapes = ((3, 48), (3, 80), (1, 21), (3, 33), (3, 64), (3, 40))
    for step, (batch, seq) in enumerate(shapes):
        if step == 3:  # train + no_grad graphs, a batch of one: all compiled by now
            graphs_after_warmup = counters["stats"]["unique_graphs"]
        ids = torch.randint(0, 1024, (batch, seq), device="cuda",
                            generator=torch.Generator("cuda").manual_seed(seq))
        monkeypatch.setenv("PPODECK_FUSED", "1")
        fast_logits, fast_logp, fast_grads = _step(fast, ids)
        with torch.no_grad():  # the old-log-prob pass
            fast(ids, torch.arange(seq, device="cuda").expand_as(ids), None)
        monkeypatch.setenv("PPODECK_FUSED", "0")
        stock_logits, stock_logp, stock_grads = _step(stock, ids)
        scale = stock_logits.abs().max().item()
        assert (fast_logits - stock_logits).abs().max().item() <= tol * max(scale, 1.0)
        assert (fast_logp - stock_logp).abs().max().item() <= tol * 10
        for name, grad in stock_grads.items():
            cos = torch.nn.functional.cosine_similarity(fast_grads[name].flatten(),
                                                        grad.flatten(), dim=0).item()
            assert cos > (0.99999 if dtype == torch.float32 else 0.999), (name, seq, cos)
    graphs = counters["stats"]["unique_graphs"]
    print(f"{mode} {dtype}: {graphs_after_warmup} graphs after 3 shapes, {graphs} after 6")
    if mode != "ops":  # new token counts reuse the graphs: nothing recompiles
        assert graphs == graphs_after_warmup, (graphs_after_warmup, graphs)
        assert not fast.decoder.layers[0]._compiled_call_impl.state["failed"]
