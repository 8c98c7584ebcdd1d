"""SDPA core attention == Megatron's stock DotProductAttention (outputs and gradients, fp32)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ppodeck.engine.model.shape import ModelShape

TOL = 1e-5  # of each tensor's largest entry: fp32 sums of O(10) gradients differ by ulps


def assert_close(mine: torch.Tensor, theirs: torch.Tensor, what: str = "") -> None:
    scale = max(1.0, theirs.abs().max().item())
    diff = (mine - theirs).abs().max().item()
    assert diff <= TOL * scale, f"{what}: max |diff| {diff:.3e} > {TOL:g} x {scale:.3g}"
SHAPE = ModelShape(num_layers=2, hidden_size=64, ffn_hidden_size=96, num_attention_heads=4,
                   num_query_groups=2, kv_channels=16, vocab_size=64, max_sequence_length=64,
                   rotary_base=10000.0, norm_epsilon=1e-6, normalization="RMSNorm",
                   swiglu=True, qk_layernorm=True, add_bias_linear=False)


def build(monkeypatch: pytest.MonkeyPatch, attention: str) -> torch.nn.Module:
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope

    monkeypatch.setenv("PPODECK_ATTENTION", attention)
    with device_scope():
        config = transformer_config(SHAPE, Parallelism(), bf16=False)
        return build_gpt(SHAPE, "actor", config, seed=7)


def core_attention_types(model: torch.nn.Module) -> set[str]:
    return {type(layer.self_attention.core_attention).__name__
            for layer in model.decoder.layers}


def forward_backward(model: torch.nn.Module, ids: torch.Tensor,
                     mask: torch.Tensor | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    from ppodeck.engine.train.platform import device_scope

    model.zero_grad(set_to_none=True)
    position_ids = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    with device_scope():
        logits = model(ids, position_ids, mask)
        # a fixed random projection so every logit (and so every position) gets a gradient
        weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))
        (logits * weights).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return logits.detach(), grads


@pytest.mark.parametrize("explicit_mask", [False, True], ids=["mask-none", "mask-causal"])
def test_gpt_with_sdpa_matches_stock_attention(megatron, monkeypatch, explicit_mask) -> None:
    ours = build(monkeypatch, "sdpa")
    stock = build(monkeypatch, "unfused")
    assert core_attention_types(ours) == {"SDPADotProductAttention"}
    assert core_attention_types(stock) == {"DotProductAttention"}
    stock.load_state_dict(ours.state_dict())

    ids = torch.randint(0, SHAPE.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0))
    seq = ids.shape[1]
    mask = (torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)
            if explicit_mask else None)
    logits_ours, grads_ours = forward_backward(ours, ids, mask)
    logits_stock, grads_stock = forward_backward(stock, ids, mask)

    assert_close(logits_ours, logits_stock, "logits")
    assert grads_ours.keys() == grads_stock.keys()
    for name, grad in grads_ours.items():
        assert_close(grad, grads_stock[name], name)
    assert any(g.abs().max() > 0 for g in grads_ours.values())


class _FakeTP:
    """A tensor-parallel group of `size` ranks, enough for the head-count arithmetic."""

    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size


@pytest.mark.parametrize("tp", [1, 2])
def test_module_matches_stock_per_tp_rank(megatron, tp) -> None:
    """Heads per partition follow the TP size; GQA, causal and explicit masks agree."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    from ppodeck.engine.train.attention import SDPADotProductAttention
    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope

    with device_scope():
        config = transformer_config(SHAPE, Parallelism(), bf16=False)
    pgs = SimpleNamespace(tp=_FakeTP(tp))
    kwargs = dict(config=config, layer_number=1, attn_mask_type=AttnMaskType.causal,
                  attention_type="self", pg_collection=pgs)
    ours, stock = SDPADotProductAttention(**kwargs), DotProductAttention(**kwargs)
    heads, groups = SHAPE.num_attention_heads // tp, SHAPE.num_query_groups // tp
    assert ours.num_attention_heads_per_partition == heads
    assert ours.num_query_groups_per_partition == groups
    assert ours.hidden_size_per_partition == heads * SHAPE.kv_channels

    gen = torch.Generator().manual_seed(1)
    sq, b, hn = 9, 2, SHAPE.kv_channels
    q = torch.randn(sq, b, heads, hn, generator=gen, requires_grad=True)
    k = torch.randn(sq, b, groups, hn, generator=gen, requires_grad=True)
    v = torch.randn(sq, b, groups, hn, generator=gen, requires_grad=True)
    pad = torch.zeros(b, 1, sq, sq, dtype=torch.bool)
    pad[1, :, :, :3] = True  # sample 1: three left-pad keys nobody may attend to
    causal_pad = pad | torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1)
    for mask in (None, causal_pad):
        # queries 0-2 of sample 1 see only padding: their (meaningless) outputs differ between
        # the two softmax flavours, so they are left out of the loss and the comparison
        keep = torch.ones(sq, b, 1)
        if mask is not None:
            keep[:3, 1] = 0
        outs = []
        for module in (ours, stock):
            for t in (q, k, v):
                t.grad = None
            with device_scope():
                out = module(q, k, v, mask, attn_mask_type=AttnMaskType.causal)
            (out * keep).pow(2).sum().backward()
            outs.append((out.detach() * keep, q.grad.clone(), k.grad.clone(), v.grad.clone()))
        assert outs[0][0].shape == (sq, b, heads * hn)
        names = ("output", "dq", "dk", "dv")
        for name, mine, theirs in zip(names, outs[0], outs[1], strict=True):
            assert_close(mine, theirs, f"tp={tp} mask={mask is not None} {name}")


def test_fully_masked_rows_stay_finite(megatron) -> None:
    from megatron.core.transformer.enums import AttnMaskType

    from ppodeck.engine.train.attention import SDPADotProductAttention
    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope

    with device_scope():
        config = transformer_config(SHAPE, Parallelism(), bf16=False)
    module = SDPADotProductAttention(config, 1, AttnMaskType.causal, "self",
                                     pg_collection=SimpleNamespace(tp=_FakeTP(1)))
    q = torch.randn(4, 1, 4, 16)
    kv = torch.randn(4, 1, 2, 16)
    with device_scope():
        out = module(q, kv, kv, torch.ones(1, 1, 4, 4, dtype=torch.bool))
    assert torch.isfinite(out).all()


def test_attention_choice_env(monkeypatch) -> None:
    from ppodeck.engine.train.attention import attention_choice

    monkeypatch.delenv("PPODECK_ATTENTION", raising=False)
    assert attention_choice() == "sdpa"
    monkeypatch.setenv("PPODECK_ATTENTION", "UNFUSED")
    assert attention_choice() == "unfused"
    monkeypatch.setenv("PPODECK_ATTENTION", "flash")
    with pytest.raises(ValueError, match="PPODECK_ATTENTION"):
        attention_choice()


# Inductor's CPU compile at three shapes: over a minute on a loaded 2-core CI. On CUDA the whole
# layers compile with this attention inside them and their graphs are counted across token
# counts (tests/gpu/test_fused_gpu.py, "nothing recompiles"), which a graph break at SDPA fails.
# The nightly bench runs this one.
@pytest.mark.slow
def test_compiles_without_a_graph_break_and_no_recompile_for_new_lengths(megatron) -> None:
    """Under torch.compile with symbolic token dims (how engine/train/layer_compile.py compiles
    whole layers on CUDA), the causal flag must stay a python bool: on a GPU a symbolic one
    split every compiled layer at SDPA and recompiled for every new micro-batch shape."""
    import torch._dynamo
    from megatron.core.transformer.enums import AttnMaskType
    from torch._dynamo.utils import counters

    from ppodeck.engine.train.attention import SDPADotProductAttention
    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope

    with device_scope():
        config = transformer_config(SHAPE, Parallelism(), bf16=False)
    module = SDPADotProductAttention(config, 1, AttnMaskType.causal, "self",
                                     pg_collection=SimpleNamespace(tp=_FakeTP(1)))
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(module, fullgraph=True)  # fullgraph: a graph break raises
    for sq, b in ((9, 2), (13, 3), (21, 2)):
        q = torch.randn(sq, b, 4, 16)
        kv = torch.randn(sq, b, 2, 16)
        for t in (q, kv):  # the token dims symbolic, heads and head size static
            torch._dynamo.mark_dynamic(t, 0)
            torch._dynamo.mark_dynamic(t, 1)
        assert_close(compiled(q, kv, kv, None), module(q, kv, kv, None), f"sq={sq}")
    assert counters["stats"]["unique_graphs"] == 1
