"""decode-attn on the GPU (`python -m pytest tests/gpu/test_decode_attention_gpu.py -m gpu -q`):
the Triton kernel compiled for the device against the fp32-softmax matmul maths at the
Qwen3-0.6B decode shape, replayed from a CUDA graph; folded-norms' and the sampling kernels;
and the decoder's decode-attn variants (the backend's default among them) against today's path
and transformers.generate."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _case(dtype: torch.dtype, b: int = 64, heads: int = 16, kv: int = 8, slots: int = 384,
          d: int = 128, index: int = 300) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=gen, device="cuda").to(dtype)

    pad = torch.tensor([(i % 4) * 8 for i in range(b)], device="cuda")
    return dict(q=randn(b, heads + kv, d)[:, :heads], cache_k=randn(b, kv, slots, d),
                cache_v=randn(b, kv, slots, d), pad=pad,
                index=torch.tensor(index, device="cuda"), scale=d ** -0.5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kernel_is_the_matmul_maths_at_the_decode_shape(dtype) -> None:  # noqa: ANN001
    from ppodeck.engine.rollout.decoder.kernels import decode_attention as da

    assert da.kernel_status(torch.device("cuda")) == (True, "ok")
    case = _case(dtype)
    expected = da.attend_by_matmul(**case).float()
    atol = 1.6e-2 if dtype == torch.bfloat16 else 1e-5
    for block, warps in ((32, 4), (64, 4), (128, 8)):
        out = da.attend(**case, block=block, num_warps=warps)
        torch.testing.assert_close(out.float(), expected, rtol=0, atol=atol)
    slots = torch.arange(case["cache_k"].shape[2], device="cuda")
    outside = (slots[None, :] < case["pad"][:, None]) | (slots[None, :] > case["index"])
    for name in ("cache_k", "cache_v"):  # never read: NaN there must not reach the output
        case[name] = case[name].masked_fill(outside[:, None, :, None], float("nan"))
    torch.testing.assert_close(da.attend(**case).float(), expected, rtol=0, atol=atol)


def test_kernel_writes_the_steps_kv_at_the_decode_shape() -> None:
    """new_kv (bf16, batch 64): the kernel writes the step's k/v into slot `index` and
    attends them from registers: the matmul maths' output, and the cache holds them after."""
    from ppodeck.engine.rollout.decoder.kernels import decode_attention as da

    case = _case(torch.bfloat16)
    expected = da.attend_by_matmul(**case).float()
    index = int(case["index"])
    filled = (case["cache_k"].clone(), case["cache_v"].clone())
    new_kv = (filled[0][:, :, index].clone(), filled[1][:, :, index].clone())
    case["cache_k"][:, :, index] = float("nan")
    case["cache_v"][:, :, index] = float("nan")
    out = da.attend(**case, new_kv=new_kv)
    torch.testing.assert_close(out.float(), expected, rtol=0, atol=1.6e-2)
    assert torch.equal(case["cache_k"], filled[0]) and torch.equal(case["cache_v"], filled[1])


def test_kernel_replays_from_a_cuda_graph_with_new_index_and_pads() -> None:
    from ppodeck.engine.rollout.decoder.kernels import decode_attention as da

    case = _case(torch.bfloat16)
    da.attend(**case)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = da.attend(**case)
    for index, shift in ((130, 0), (383, 3), (200, 5)):
        case["index"].fill_(index)
        case["pad"].copy_((torch.arange(64, device="cuda") * shift) % 100)
        graph.replay()
        torch.testing.assert_close(out, da.attend(**case), rtol=0, atol=0)


@pytest.mark.parametrize("features", [
    dict(packed=True, decode_attn=True, graph_sampling=True),
    dict(packed=True, decode_attn=True, graph_sampling=True, compiled=True),
    dict(packed=True, decode_attn=True, graph_sampling=True, fused_sampling=True,
         fused_prefill=True, compiled=True),
    dict(decode_attn=True),
    dict(packed=True, decode_attn=True, graph_sampling=True, fused_sampling=True,
         fused_prefill=True, folded_norms=True),
    dict(packed=True, decode_attn=True, graph_sampling=True, fused_sampling=True,
         fused_prefill=True, compiled=True, folded_norms=True, skinny_down=True),
    dict(packed=True, decode_attn=True, graph_sampling=True, fused_sampling=True,
         fused_prefill=True, compiled=True, folded_norms=True, skinny_down=True,
         cdf_sampling=True),
])
def test_decode_attn_variant_graphs_replay_and_follow_the_reference(features) -> None:  # noqa: ANN001
    """Its CUDA graphs replay its eager loop exactly; greedy (bf16) against today's path:
    log-probs within 5e-2 on each row's common prefix (the tolerance of the other fused
    variants' GPU tests), and where a row's tokens part, both picked a top token of the same
    log-prob within 5e-2: a near-tie of the random-init model, not a wrong kernel. (A share of
    equal tokens is no measure: one near-tie changes every later token of its row; 789 of 840
    on the H200 for the fused-sampling variant.)"""
    from ppodeck.engine.rollout.decoder import generate as fg
    from ppodeck.engine.rollout.decoder.features import REFERENCE, DecodeOptions
    from tests.gpu.test_gpu_smoke import _small_qwen3_bf16

    model = _small_qwen3_bf16()
    options = DecodeOptions(**features)
    rows = [[5 + i, 6 + 2 * i, 7 + 3 * i][: 1 + i % 3] for i in range(12)]
    kwargs = dict(top_p=1.0, top_k=-1, max_new_tokens=70, eos_token_id=None, pad_token_id=0,
                  seed=3, options=options)
    for temperature in (0.0, 1.0):
        graph = fg.fast_generate(model, rows, temperature=temperature, **kwargs)
        decoder = fg.decoder_for(model, options)
        assert decoder.attention_kernel and decoder._graphs, "kernel or graph missing"
        assert decoder.folded == options.folded_norms
        assert decoder.down_kernel == options.skinny_down
        assert decoder.sampling_kernel == options.fused_sampling
        assert decoder.cdf_kernel == options.cdf_sampling
        fg.release_decoders()
        eager = fg.fast_generate(model, rows, temperature=temperature, use_cuda_graph=False,
                                 **kwargs)
        assert graph[0] == eager[0], f"T={temperature}"
        torch.testing.assert_close(torch.tensor(graph[1]), torch.tensor(eager[1]))
    tokens, log_probs = fg.fast_generate(model, rows, temperature=0.0, **kwargs)
    ref_tokens, ref_log_probs = fg.fast_generate(
        model, rows, temperature=0.0, **{**kwargs, "options": REFERENCE})
    parted = 0
    for ours, ref, lp, ref_lp in zip(tokens, ref_tokens, log_probs, ref_log_probs, strict=True):
        same = next((i for i, (a, b) in enumerate(zip(ours, ref, strict=True)) if a != b),
                    len(ref))
        torch.testing.assert_close(torch.tensor(lp[:same]), torch.tensor(ref_lp[:same]),
                                   rtol=0, atol=5e-2)
        if same < len(ref):  # the same prefix, two argmaxes: their log-probs must tie
            parted += 1
            assert abs(lp[same] - ref_lp[same]) <= 5e-2, (same, lp[same], ref_lp[same])
    assert parted < len(rows), "every row parted from the reference"


def test_projection_kernel_is_the_torch_maths_at_the_decode_shape() -> None:
    """folded-norms' project_heads (bf16, q/k norms, with and without the row scale) against
    projection_by_torch, then decode-attn's kernel with its k/v as new_kv against the matmul
    maths: k/v written within two bf16 ulps of RoPE's terms, the output within the one-pass
    kernel's tolerance."""
    from ppodeck.engine.rollout.decoder.kernels import decode_attention as da

    case = _case(torch.bfloat16)
    del case["q"]
    b, kv, _, d = case["cache_k"].shape
    heads, index = 16, int(case["index"])
    gen = torch.Generator(device="cuda").manual_seed(1)
    qkv = torch.randn(b, (heads + 2 * kv) * d, generator=gen, device="cuda").bfloat16()
    angles = torch.rand(b, d // 2, generator=gen, device="cuda") * 6
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    rope = (cos.bfloat16(), torch.cat((-sin[:, :d // 2], sin[:, d // 2:]), -1).bfloat16())
    norm = (torch.rand(heads + kv, d, generator=gen, device="cuda") + 0.5).bfloat16()
    for x in (None, torch.randn(b, 1024, generator=gen, device="cuda").bfloat16()):
        keys, values = case["cache_k"].clone(), case["cache_v"].clone()
        projected = da.project_heads(qkv, rope, norm, 1e-6, heads, kv, x=x)
        out = da.attend(projected[0], keys, values, case["pad"], case["index"], case["scale"],
                        new_kv=projected[1:])
        q, k, v = da.projection_by_torch(qkv, rope, norm, 1e-6, heads, kv, x=x)
        torch.testing.assert_close(keys[:, :, index].float(), k.float(), rtol=0, atol=6.3e-2)
        torch.testing.assert_close(values[:, :, index].float(), v.float(), rtol=0, atol=6.3e-2)
        expected = da.attend_by_matmul(q, keys, values, case["pad"], case["index"],
                                       case["scale"])
        torch.testing.assert_close(out.float(), expected.float(), rtol=0, atol=3.2e-2)
        for ours, theirs in zip(projected, (q, k, v), strict=True):
            torch.testing.assert_close(ours.float(), theirs.float(), rtol=0, atol=6.3e-2)


def test_gated_kernel_is_the_torch_maths_at_the_decode_shape() -> None:
    """folded-norms' SiLU kernel at batch 64 x 3072 (bf16): SiLU's tail turns a one-ulp
    difference of the scaled gate into 1 + |gate| ulps."""
    from ppodeck.engine.rollout.decoder.kernels import folded_norms

    gen = torch.Generator(device="cuda").manual_seed(2)
    gate_up = (torch.randn(64, 6144, generator=gen, device="cuda") * 4).bfloat16()
    x = torch.randn(64, 1024, generator=gen, device="cuda").bfloat16()
    torch.testing.assert_close(folded_norms.gated(gate_up, x, 1e-6).float(),
                               folded_norms.gated_by_torch(gate_up, x, 1e-6).float(),
                               rtol=0.04, atol=1e-2)


def _with_features(variant: str, extra: str) -> object:
    from ppodeck.engine.rollout.decoder.features import parse_variant

    parts = variant.split("+") + [p for p in extra.split("+") if p and p != "default"]
    return parse_variant("+".join(dict.fromkeys(parts)))


def test_sampling_kernels_draw_torch_multinomials_tokens_at_the_vocab_size() -> None:
    """fused-sampling's kernels at batch 64 x 151,936 (bf16 logits): the tokens of
    argmax(softmax / noise), the log-softmax of each within 1e-5."""
    from ppodeck.engine.rollout.decoder.kernels import sampling_kernel as sk

    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(64, 151_936, generator=gen, device="cuda") * 4).to(torch.bfloat16)
    noise = torch.empty(64, 151_936, device="cuda").exponential_(1, generator=gen)
    tokens, log_probs = sk.sample_plain(logits, noise)
    expected = (torch.softmax(logits, -1, dtype=torch.float32) / noise).argmax(-1)
    assert tokens.tolist() == expected.tolist()
    log_softmax = torch.log_softmax(logits, -1, dtype=torch.float32)
    torch.testing.assert_close(log_probs, log_softmax.gather(-1, expected[:, None])[:, 0],
                               rtol=0, atol=1e-5)


def test_cdf_sampling_draws_the_inverse_cdf_token_at_the_vocab_size() -> None:
    """sample_cdf at the decode shape (64 rows x 151,936, bf16) against one fp32 cumulative
    sum over the vocabulary: the same tokens, log-softmax of each; then 4,096 draws of one
    row, each heavy token's share within 4.5 sigma of its probability."""
    from ppodeck.engine.rollout.decoder.kernels import sampling_kernel as sk

    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(64, 151_936, generator=gen, device="cuda") * 4).to(torch.bfloat16)
    uniform = torch.rand(64, generator=gen, device="cuda")
    tokens, log_probs = sk.sample_cdf(logits, uniform)
    expected, expected_lp = sk.sample_cdf_by_torch(logits, uniform)
    assert tokens.tolist() == expected.tolist()
    torch.testing.assert_close(log_probs, expected_lp, rtol=0, atol=1e-5)
    row = torch.full((151_936,), -20.0, device="cuda")
    heavy = torch.tensor([7, 4095, 4096, 100_000, 151_935], device="cuda")
    row[heavy] = torch.tensor([1.0, 0.0, 2.0, 0.5, -1.0], device="cuda")
    draws = 4096
    tokens, _ = sk.sample_cdf(row.expand(draws, -1).to(torch.bfloat16).contiguous(),
                              torch.rand(draws, generator=gen, device="cuda"))
    probs = torch.softmax(row.to(torch.bfloat16).double(), -1)
    counts = torch.bincount(tokens, minlength=151_936).double()
    for token in heavy.tolist():
        p = probs[token].item()
        assert abs(counts[token].item() / draws - p) <= 4.5 * (p * (1 - p) / draws) ** 0.5


@pytest.mark.parametrize("variant", ["default", "+folded-norms", "+folded-norms+skinny-down"])
def test_the_backend_default_follows_transformers_generate(variant) -> None:  # noqa: ANN001
    """The hf backend's CUDA default (features.BACKEND_VARIANT; with features added, where not
    in it already) against
    transformers.generate, greedy in bf16: the same tokens up to each row's first difference,
    and there a near-tie by transformers' own log-probs (teacher-forced, within 5e-2 of the
    token it picked), not a wrong kernel."""
    from ppodeck.engine.rollout.decoder import generate as fg
    from ppodeck.engine.rollout.decoder.features import BACKEND_VARIANT
    from ppodeck.engine.rollout.hf_backend import left_pad
    from tests.gpu.test_gpu_smoke import _small_qwen3_bf16

    model = _small_qwen3_bf16()
    rows = [[5 + i, 6 + 2 * i, 7 + 3 * i][: 1 + i % 3] for i in range(12)]
    new = 48
    tokens, _ = fg.fast_generate(model, rows, temperature=0.0, top_p=1.0, top_k=-1,
                                 max_new_tokens=new, eos_token_id=None, pad_token_id=0, seed=0,
                                 options=_with_features(BACKEND_VARIANT, variant))
    ids, mask = left_pad(rows, 0, torch.device("cuda"))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
                             eos_token_id=None)
    theirs = out[:, ids.shape[1]:].tolist()
    ours_lp = _teacher_forced(model, rows, tokens)
    theirs_lp = _teacher_forced(model, rows, theirs)
    parted = 0
    for row, (ours, ref) in enumerate(zip(tokens, theirs, strict=True)):
        same = next((i for i, (a, b) in enumerate(zip(ours, ref, strict=True)) if a != b), new)
        if same < new:
            parted += 1
            gap = float(theirs_lp[row, same] - ours_lp[row, same])
            assert gap <= 5e-2, (row, same, gap)
    assert parted < len(rows), "every row parted from transformers.generate"


def _teacher_forced(model, rows, tokens) -> torch.Tensor:  # noqa: ANN001
    """log-softmax of `tokens` given the prompt and the tokens before, by transformers."""
    from ppodeck.engine.rollout.hf_backend import left_pad

    full = [r + t for r, t in zip(rows, tokens, strict=True)]
    ids, mask = left_pad(full, 0, torch.device("cuda"))
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    new = len(tokens[0])
    chosen = torch.tensor(tokens, device="cuda")
    return torch.log_softmax(logits[:, -new - 1:-1].float(), -1).gather(
        -1, chosen[..., None]).squeeze(-1)
