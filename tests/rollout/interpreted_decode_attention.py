"""The decode-attention kernel run by Triton's CPU interpreter (CPU tensors): collected only
when named, by test_decode_attention.py::test_the_kernel_under_the_triton_interpreter, which runs
this file in a fresh process with TRITON_INTERPRET=1 (triton.jit reads it when Triton's own
library is decorated, at its import)."""

from __future__ import annotations

import os

import pytest
import torch

from ppodeck.engine.rollout.decoder import generate as fg
from ppodeck.engine.rollout.decoder.features import (
    BACKEND_VARIANT,
    REFERENCE,
    DecodeOptions,
    parse_variant,
)
from ppodeck.engine.rollout.decoder.kernels import decode_attention as da
from ppodeck.engine.rollout.decoder.kernels import sampling_kernel as sk
from ppodeck.engine.rollout.decoder.static_decoder import StaticDecoder
from tests.rollout.test_decode_attention import (
    SHAPES,
    assert_draws_follow_the_softmax,
    cache_case,
    heavy_row,
)
from tests.rollout.test_fast_generate import (
    PAD,
    ROWS,
    SAMPLINGS,
    assert_follows_reference,
    settings,
    teacher_forced_log_probs,
    tiny_model,
)


@pytest.fixture
def interpreted() -> None:
    """The kernel under Triton's interpreter (CPU tensors)."""
    assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_decode_attention.py"
    assert da.kernel_status(torch.device("cpu")) == (True, "ok")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_is_the_matmul_maths(interpreted, dtype) -> None:  # noqa: ANN001
    for shape in SHAPES:
        case = cache_case(shape, dtype)
        out = da.attend(**case)
        assert out.dtype == dtype and out.shape == case["q"].shape
        expected = da.attend_by_matmul(**case)
        atol = 1e-5 if dtype == torch.float32 else 1.6e-2  # bf16: ~1 ulp of |out| <= 2
        torch.testing.assert_close(out.float(), expected.float(), rtol=0, atol=atol)


def test_kernel_reads_only_the_rows_filled_slots(interpreted) -> None:  # noqa: ANN001
    """NaN in every pad slot and past the step's slot: a read there would reach the output."""
    case = cache_case((3, 4, 2, 70, 16), torch.float32)
    expected = da.attend_by_matmul(**case)
    slots = torch.arange(70)
    outside = (slots[None, :] < case["pad"][:, None]) | (slots[None, :] > case["index"])
    for name in ("cache_k", "cache_v"):
        case[name] = case[name].masked_fill(outside[:, None, :, None], float("nan"))
    torch.testing.assert_close(da.attend(**case), expected, rtol=0, atol=1e-5)


def with_new_kv(case: dict) -> tuple[dict, tuple[torch.Tensor, torch.Tensor]]:
    """The case with its step's slot poisoned (NaN) in the cache and its k/v [B, KV, d] (as
    strided views, as the packed projection gives them) to pass as new_kv."""
    index = int(case["index"])
    b, kv, _, d = case["cache_k"].shape
    new = []
    for name in ("cache_k", "cache_v"):
        wide = torch.zeros(b, kv + 1, d, dtype=case[name].dtype)
        wide[:, 1:] = case[name][:, :, index]
        new.append(wide[:, 1:])
        case[name] = case[name].clone()
        case[name][:, :, index] = float("nan")
    return case, (new[0], new[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_writes_the_steps_kv_and_attends_it(interpreted, dtype) -> None:  # noqa: ANN001
    """new_kv: the kernel writes this step's k/v into slot `index` and attends them from its
    registers: the same output as with them in the cache, and the cache then holds them."""
    for shape in SHAPES:
        case = cache_case(shape, dtype)
        expected = da.attend_by_matmul(**case)
        filled = (case["cache_k"].clone(), case["cache_v"].clone())
        case, new_kv = with_new_kv(case)
        out = da.attend(**case, new_kv=new_kv)
        atol = 1e-5 if dtype == torch.float32 else 1.6e-2
        torch.testing.assert_close(out.float(), expected.float(), rtol=0, atol=atol)
        assert torch.equal(case["cache_k"], filled[0]) and torch.equal(case["cache_v"], filled[1])


def test_kernel_with_new_kv_gives_zeros_for_a_row_without_slots(interpreted) -> None:  # noqa: ANN001
    """A capture warm-up's step: slot `index` before a row's pad attends nothing (zeros, not
    NaN) and still writes the slot."""
    case = cache_case((2, 4, 2, 20, 16), torch.float32)
    case["index"] = torch.tensor(2)
    case["pad"] = torch.tensor([0, 5])
    expected = da.attend_by_matmul(**case)
    case, new_kv = with_new_kv(case)
    out = da.attend(**case, new_kv=new_kv)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    torch.testing.assert_close(out[0], expected[0], rtol=0, atol=1e-5)
    assert torch.equal(case["cache_k"][:, :, 2], new_kv[0])


def test_kernel_launch_options_give_the_same_result(interpreted) -> None:  # noqa: ANN001
    case = cache_case((2, 4, 2, 70, 16), torch.float32)
    expected = da.attend_by_matmul(**case)
    for block in (16, 32, 128):
        torch.testing.assert_close(da.attend(**case, block=block, num_warps=8), expected,
                                   rtol=0, atol=1e-5)


def assert_long_rows_follow_reference(arch: str, options: DecodeOptions) -> None:
    """With the attention kernel in every layer, greedy and sampled tokens equal today's path,
    log-probs within 1e-5; the steps cross a 64-slot block (left pads of 0-3)."""
    model = tiny_model(arch)
    assert StaticDecoder(model, options).attention_kernel
    rows = [ROWS[0] * 15, ROWS[1] * 15, ROWS[2] * 20, ROWS[3] * 30]  # 60, 15, 60, 60 tokens
    for sampling in SAMPLINGS:
        assert_follows_reference(model, options, 1e-5, rows, **settings(6, **sampling))


# nightly (`slow`): the default suite's fused/cdf-sampling variants run decode-attn's kernel in
# every layer (tokens and log-probs against today's path), its multi-block loop is checked on
# 70- and 130-slot caches above, and llama's decoder without q/k norms by the packed and
# fused-prefill tests of test_fast_generate.py and test_decode_attention.py
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_decode_attn_variant_is_the_reference_path(interpreted, arch) -> None:  # noqa: ANN001
    """The decoder with the kernel in every layer (fp32): greedy and sampled tokens equal
    today's path, log-probs within 1e-5; the steps cross a 64-slot block (left pads of 0-3)."""
    assert_long_rows_follow_reference(
        arch, DecodeOptions(packed=True, decode_attn=True, graph_sampling=True))


@pytest.mark.parametrize(("dtype", "rows", "vocab"), [
    (torch.float32, 4, 48), (torch.bfloat16, 3, 10_000), (torch.float32, 2, 2 * sk.CHUNK + 5)])
def test_sampling_kernels_draw_torch_multinomials_tokens(interpreted, dtype, rows,  # noqa: ANN001
                                                          vocab) -> None:
    """argmax(softmax / noise), as torch.multinomial draws, and log-softmax of the token."""
    gen = torch.Generator().manual_seed(vocab)
    logits = (torch.randn(rows, vocab, generator=gen) * 3).to(dtype)
    noise = torch.empty(rows, vocab).exponential_(1, generator=gen)
    tokens, log_probs = sk.sample_plain(logits, noise)
    expected = (torch.softmax(logits, -1, dtype=torch.float32) / noise).argmax(-1)
    assert tokens.dtype == torch.long and tokens.tolist() == expected.tolist()
    log_softmax = torch.log_softmax(logits, -1, dtype=torch.float32)
    torch.testing.assert_close(log_probs, log_softmax.gather(-1, expected[:, None])[:, 0],
                               rtol=0, atol=1e-5)


def test_sampling_kernels_take_the_first_of_tied_tokens(interpreted) -> None:  # noqa: ANN001
    logits = torch.zeros(2, 3 * sk.CHUNK)
    noise = torch.ones(2, 3 * sk.CHUNK)  # every score equal: torch's argmax takes token 0
    tokens, log_probs = sk.sample_plain(logits, noise)
    assert tokens.tolist() == [0, 0]
    uniform = -torch.log(torch.tensor(3.0 * sk.CHUNK))
    torch.testing.assert_close(log_probs, uniform.expand(2))


@pytest.mark.parametrize(("dtype", "rows", "vocab"), [
    (torch.float32, 6, 48), (torch.bfloat16, 3, 10_000), (torch.float32, 4, 2 * sk.CHUNK + 5)])
def test_cdf_sampling_draws_the_inverse_cdf_token(interpreted, dtype, rows,  # noqa: ANN001
                                                  vocab) -> None:
    """sample_cdf against sample_cdf_by_torch (one cumulative sum over the vocabulary): the
    same tokens for the same uniforms, across chunk boundaries, and log-softmax of the token;
    u = 0 takes the first token."""
    gen = torch.Generator().manual_seed(vocab)
    logits = (torch.randn(rows, vocab, generator=gen) * 3).to(dtype)
    uniform = torch.rand(rows, generator=gen)
    uniform[0] = 0.0
    tokens, log_probs = sk.sample_cdf(logits, uniform)
    expected, expected_lp = sk.sample_cdf_by_torch(logits, uniform)
    assert tokens.dtype == torch.long and tokens.tolist() == expected.tolist()
    assert tokens[0] == 0
    torch.testing.assert_close(log_probs, expected_lp, rtol=0, atol=1e-5)


# nightly (`slow`): 600 interpreted draws; the default suite holds the kernel to the torch
# inverse CDF token for token (above), that inverse CDF to the softmax (test_decode_attention.py)
# and the kernel's u -> 1 edge (below)
@pytest.mark.slow
def test_cdf_sampling_follows_the_softmax(interpreted) -> None:  # noqa: ANN001
    """600 draws from one row whose mass sits on five tokens in three chunks (one past the
    last full chunk) and a long tail: each token's share within 4.5 sigma of its probability;
    never a token of probability 0 (logit -inf), even at u just under 1."""
    logits, heavy = heavy_row(sk.CHUNK)
    draws = 600  # interpreted: each row costs ~8 ms; 4.5 sigma still sees a wrong token
    uniform = torch.rand(draws, generator=torch.Generator().manual_seed(1))
    uniform[-1] = 1.0 - 2.0 ** -24
    tokens, _ = sk.sample_cdf(logits.expand(draws, len(logits)).contiguous(), uniform)
    assert_draws_follow_the_softmax(tokens, logits, heavy)


def test_cdf_sampling_never_draws_a_token_of_probability_zero(interpreted) -> None:  # noqa: ANN001
    """The row of test_cdf_sampling_follows_the_softmax (mass on five tokens in three chunks,
    the last token's logit -inf) at u = 0, 0.5 and just under 1, where rounding can leave the
    running total short of the target: never the token of probability 0; below that edge, the
    torch inverse CDF's token."""
    logits, _ = heavy_row(sk.CHUNK)
    uniform = torch.tensor([0.0, 0.5, 1.0 - 2.0 ** -20, 1.0 - 2.0 ** -24])
    rows = logits.expand(len(uniform), len(logits)).contiguous()
    tokens, _ = sk.sample_cdf(rows, uniform)
    assert 2 * sk.CHUNK + 4 not in tokens.tolist(), tokens
    expected, _ = sk.sample_cdf_by_torch(rows[:2], uniform[:2])
    assert tokens[:2].tolist() == expected.tolist() and tokens[0] == 0


def test_cdf_sampling_variant_samples_consistently(interpreted) -> None:  # noqa: ANN001
    """cdf-sampling in fast_generate: at T=1 its log-probs are the reference decoder's
    log-softmax of the tokens it drew, the same seed draws the same tokens, another seed
    others; greedy and T=0.7 with filters (graph-sampling's torch ops) are today's path."""
    model = tiny_model("qwen3")
    options = parse_variant("packed+decode-attn+graph-sampling+fused-sampling+cdf-sampling")
    assert StaticDecoder(model, options).cdf_kernel
    kwargs = dict(top_p=1.0, top_k=-1, max_new_tokens=8, eos_token_id=None, pad_token_id=PAD)
    tokens, log_probs = fg.fast_generate(model, ROWS, options=options, temperature=1.0,
                                         seed=5, **kwargs)
    again = fg.fast_generate(model, ROWS, options=options, temperature=1.0, seed=5, **kwargs)
    other = fg.fast_generate(model, ROWS, options=options, temperature=1.0, seed=6, **kwargs)
    assert again[0] == tokens and other[0] != tokens
    forced = teacher_forced_log_probs(model, ROWS, tokens, 1.0)
    torch.testing.assert_close(torch.tensor(log_probs), forced, rtol=0, atol=1e-5)
    for sampling in (dict(temperature=0.0), dict(temperature=0.7, top_p=0.9, top_k=20)):
        ours = fg.fast_generate(model, ROWS, options=options, seed=5, **(kwargs | sampling))
        ref = fg.fast_generate(model, ROWS, options=REFERENCE, seed=5, **(kwargs | sampling))
        assert ours[0] == ref[0], sampling


def test_fused_sampling_variant_draws_todays_tokens(interpreted) -> None:  # noqa: ANN001
    """Both kernels in fast_generate: T=1 by the sampling kernels, T=0.7 with filters by
    graph-sampling's torch ops; tokens equal today's path, log-probs within 1e-5."""
    model = tiny_model("qwen3")
    options = parse_variant("packed+decode-attn+graph-sampling+fused-sampling")
    decoder = StaticDecoder(model, options)
    assert decoder.attention_kernel and decoder.sampling_kernel
    for sampling in (dict(temperature=1.0), dict(temperature=0.7, top_p=0.9, top_k=20)):
        kwargs = dict(top_p=1.0, top_k=-1, max_new_tokens=8, eos_token_id=None,
                      pad_token_id=PAD, seed=5) | sampling
        ours = fg.fast_generate(model, ROWS, options=options, **kwargs)
        ref = fg.fast_generate(model, ROWS, options=REFERENCE, **kwargs)
        assert ours[0] == ref[0], sampling
        torch.testing.assert_close(torch.tensor(ours[1]), torch.tensor(ref[1]), rtol=0,
                                   atol=1e-5)


def projection_case(dtype: torch.dtype, norm: bool, row_scale: bool, seed: int = 0) -> dict:
    """A raw packed projection [B, (H + 2 KV) d] (GQA group 2, head dim 16), RoPE tables of
    each row's position, per-head q/k norm weights, a residual stream, and the cache_case."""
    b, heads, kv, slots, d, hidden = 3, 4, 2, 70, 16, 24
    case = cache_case((b, heads, kv, slots, d), dtype, seed)
    del case["q"]
    gen = torch.Generator().manual_seed(seed + 1)
    inv_freq = 1.0 / (10_000 ** (torch.arange(0, d, 2).float() / d))
    angles = (torch.arange(b) + 5)[:, None].float() * inv_freq
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    sin_signed = torch.cat((-sin[:, :d // 2], sin[:, d // 2:]), -1)
    return case | dict(
        qkv=torch.randn(b, (heads + 2 * kv) * d, generator=gen).to(dtype),
        rope=(cos.to(dtype), sin_signed.to(dtype)),
        norm=(torch.rand(heads + kv, d, generator=gen) + 0.5).to(dtype) if norm else None,
        x=3 * torch.randn(b, hidden, generator=gen).to(dtype) if row_scale else None,
        eps=1e-6, heads=heads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("norm", "row_scale"), [(True, True), (True, False), (False, False)])
def test_project_heads_then_attend_is_the_torch_maths(interpreted, dtype, norm,  # noqa: ANN001
                                                      row_scale) -> None:
    """folded-norms' two kernels as the decoder runs them: project_heads, then attend with its
    k/v as new_kv: the step's k/v written into their slot are projection_by_torch's (row
    scale, q/k norms, RoPE), the output is attention of its q over the cache with them (bf16:
    within two ulps of RoPE's terms, below 8: the two round the same ops in the same order,
    but an ulp apart before the norm stays apart after it)."""
    case = projection_case(dtype, norm, row_scale)
    index, kv = int(case["index"]), case["cache_k"].shape[1]
    expected_k, expected_v = case["cache_k"].clone(), case["cache_v"].clone()
    q, k, v = da.projection_by_torch(case["qkv"], case["rope"], case["norm"], case["eps"],
                                     case["heads"], kv, x=case["x"])
    expected_k[:, :, index], expected_v[:, :, index] = k, v
    case["cache_k"][:, :, index] = float("nan")  # the kernel writes the slot before reading
    case["cache_v"][:, :, index] = float("nan")
    q_ours, k_ours, v_ours = da.project_heads(case["qkv"], case["rope"], case["norm"],
                                              case["eps"], case["heads"], kv, x=case["x"])
    out = da.attend(q_ours, case["cache_k"], case["cache_v"], case["pad"], case["index"],
                    q.shape[-1] ** -0.5, new_kv=(k_ours, v_ours))
    expected = da.attend_by_matmul(q, expected_k, expected_v, case["pad"], case["index"],
                                   q.shape[-1] ** -0.5)
    atol = 1e-5 if dtype == torch.float32 else 6.3e-2
    torch.testing.assert_close(case["cache_k"].float(), expected_k.float(), rtol=0, atol=atol)
    torch.testing.assert_close(case["cache_v"].float(), expected_v.float(), rtol=0, atol=atol)
    torch.testing.assert_close(out.float(), expected.float(), rtol=0, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("norm", "row_scale"), [(True, True), (False, True), (True, False)])
def test_project_heads_is_the_torch_maths(interpreted, dtype, norm, row_scale) -> None:  # noqa: ANN001
    """folded-norms' kernel before attention: q, k, v as projection_by_torch gives them (bf16:
    the tolerance above)."""
    case = projection_case(dtype, norm, row_scale)
    kv = case["cache_k"].shape[1]
    args = (case["qkv"], case["rope"], case["norm"], case["eps"], case["heads"], kv)
    atol = 1e-5 if dtype == torch.float32 else 6.3e-2
    for ours, theirs in zip(da.project_heads(*args, x=case["x"]),
                            da.projection_by_torch(*args, x=case["x"]), strict=True):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours.float(), theirs.float(), rtol=0, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gated_kernel_is_the_torch_maths(interpreted, dtype) -> None:  # noqa: ANN001
    """folded_norms.gated over a width that is not a whole number of column blocks (bf16: the
    scaled gate may round one ulp apart, which SiLU's tail turns into 1 + |gate| ulps)."""
    from ppodeck.engine.rollout.decoder.kernels import folded_norms

    gen = torch.Generator().manual_seed(3)
    ffn = folded_norms.BLOCK_F + 40
    gate_up = torch.randn(3, 2 * ffn, generator=gen).to(dtype) * 4
    x = torch.randn(3, 24, generator=gen).to(dtype)
    out = folded_norms.gated(gate_up, x, 1e-6)
    tolerance = dict(rtol=0, atol=1e-5) if dtype == torch.float32 else dict(rtol=0.04, atol=1e-2)
    torch.testing.assert_close(out.float(), folded_norms.gated_by_torch(gate_up, x, 1e-6).float(),
                               **tolerance)


def folded_model(arch: str):  # noqa: ANN201
    """tiny_model with its norm weights away from 1, so a missed or doubled fold shows."""
    model = tiny_model(arch)
    with torch.no_grad():
        for layer in model.model.layers:
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                norm.weight.uniform_(0.5, 1.5)
    return model


# nightly (`slow`): the backend default below runs every kernel of folded-norms on the same
# folded model (log-probs within 1e-5), test_skinny_gemm's interpreted folded-norms variant
# samples through them, and the norm-less projection (llama) is test_project_heads_* above
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_folded_norms_variant_is_the_reference_path(interpreted, arch) -> None:  # noqa: ANN001
    """folded-norms (the norms' weights in the packed weights, the row scales in project_heads
    before decode-attn's kernel and in folded_norms.gated; the fused prefill on the folded
    weights), fp32: tokens equal today's path, log-probs within 1e-5 (in bf16 the rounding
    order differs: the GPU test's tolerance)."""
    options = parse_variant("packed+decode-attn+graph-sampling+fused-prefill+folded-norms")
    model = folded_model(arch)
    assert StaticDecoder(model, options).folded
    rows = [ROWS[0] * 15, ROWS[1] * 15, ROWS[2] * 20, ROWS[3] * 30]
    for sampling in SAMPLINGS:
        assert_follows_reference(model, options, 1e-5, rows, **settings(6, **sampling))


def test_the_backend_default_is_the_reference_path_greedy(interpreted) -> None:  # noqa: ANN001
    """BACKEND_VARIANT with every kernel it names (decode-attn, folded-norms' two, skinny-down's
    GEMM, fused/cdf-sampling's), fp32, greedy: tokens equal today's path, log-probs within
    1e-5 (cdf-sampling's draws are not torch.multinomial's: sampled tokens differ by design)."""
    options = parse_variant(BACKEND_VARIANT)
    model = folded_model("qwen3")
    decoder = StaticDecoder(model, options)
    assert decoder.folded and decoder.down_kernel and decoder.cdf_kernel
    rows = [ROWS[0] * 15, ROWS[1] * 15, ROWS[2] * 20, ROWS[3] * 30]
    assert_follows_reference(model, options, 1e-5, rows, **settings(6, temperature=0.0))
