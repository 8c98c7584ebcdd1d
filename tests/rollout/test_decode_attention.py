"""decode_attention (the decoder's `decode-attn`): the batched-matmul maths against the textbook
definition, the variant without Triton, its note; the Triton kernel itself runs under Triton's
CPU interpreter in a fresh process (interpreted_decode_attention.py; skipped where Triton is not
installed: the GPU image has it, and tests/gpu/test_decode_attention_gpu.py runs the kernel
compiled on the H200)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ppodeck.engine.rollout.decoder import generate as fg
from ppodeck.engine.rollout.decoder.features import VARIANT_ENV, DecodeOptions, parse_variant
from ppodeck.engine.rollout.decoder.kernels import decode_attention as da
from ppodeck.engine.rollout.decoder.static_decoder import StaticDecoder
from tests.rollout.interpreter import assert_interpreted_file_passes
from tests.rollout.test_fast_generate import PAD, assert_follows_reference, tiny_model

# (batch, heads, kv heads, cache slots, head dim): GQA groups of 2 and 3 (not a power of two),
# plain MHA, a head dim below tl.dot's 16 and one not a power of two, more slots than a block
SHAPES = [(3, 4, 2, 70, 16), (2, 6, 2, 20, 24), (2, 3, 3, 9, 8), (2, 16, 8, 130, 128)]


def cache_case(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> dict:
    """Random q (a strided slice, as the packed projection gives it), k/v cache, left pads
    (0 for row 0) and the step's slot, two slots short of the cache's end."""
    b, heads, kv, slots, d = shape
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, heads + kv, d, generator=gen).to(dtype)[:, :heads]
    k = torch.randn(b, kv, slots, d, generator=gen).to(dtype)
    v = torch.randn(b, kv, slots, d, generator=gen).to(dtype)
    pad = torch.tensor([(3 * i) % max(1, slots // 2) for i in range(b)])
    return dict(q=q, cache_k=k, cache_v=v, pad=pad, index=torch.tensor(slots - 3),
                scale=d ** -0.5)


def test_matmul_maths_is_attention_over_each_rows_filled_slots() -> None:
    for shape in SHAPES:
        case = cache_case(shape, torch.float64)
        out = da.attend_by_matmul(**case)
        b, heads, kv, _, d = shape
        end = int(case["index"]) + 1
        for row in range(b):
            first = int(case["pad"][row])
            k = case["cache_k"][row, :, first:end].repeat_interleave(heads // kv, dim=0)
            v = case["cache_v"][row, :, first:end].repeat_interleave(heads // kv, dim=0)
            expected = F.scaled_dot_product_attention(case["q"][row][:, None], k, v)[:, 0]
            torch.testing.assert_close(out[row], expected, rtol=0, atol=1e-12)


def test_without_triton_the_variant_runs_the_matmul_maths() -> None:
    """On CPU (no interpreter) the kernel cannot run: `decode-attn` decodes by batched matmuls,
    token for token today's path."""
    options = parse_variant("packed+decode-attn+graph-sampling")
    assert options.decode_attn and options.name == "packed+decode-attn+graph-sampling"
    model = tiny_model("qwen3")
    assert not StaticDecoder(model, options).attention_kernel
    greedy = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=6, eos_token_id=None,
                  pad_token_id=PAD, seed=0)
    assert_follows_reference(model, options, **greedy)


def test_the_note_says_what_decode_attn_runs(monkeypatch) -> None:
    with pytest.raises(ValueError, match="'fused-sampling' needs 'graph-sampling'"):
        parse_variant("fused-sampling")
    monkeypatch.setenv(VARIANT_ENV, "decode-attn+compiled")
    options, note = fg.options_from_env()
    assert options == DecodeOptions(decode_attn=True, compiled=True)
    assert "decode-attn" in note
    ok, why = da.kernel_status(torch.device("cuda"))
    assert ("decode-attn: its Triton kernel" in note) == ok
    if not ok:
        assert why in note and "batched matmuls" in note


def follows_reference_and_env_note(model, name: str, monkeypatch) -> str:  # noqa: ANN001
    """Variant `name` decodes token for token today's path (greedy and sampled, log-probs
    within 1e-5); PPODECK_DECODE=name gives these options and returns their note."""
    options = parse_variant(name)
    for temperature in (0.0, 1.0):
        kwargs = dict(temperature=temperature, top_p=1.0, top_k=-1, max_new_tokens=6,
                      eos_token_id=None, pad_token_id=PAD, seed=7)
        assert_follows_reference(model, options, atol=1e-5, **kwargs)
    monkeypatch.setenv(VARIANT_ENV, name)
    from_env, note = fg.options_from_env()
    assert from_env == options
    return note


def test_folded_norms_needs_its_kernel_and_says_what_runs_without_it(monkeypatch) -> None:
    """folded-norms needs packed + decode-attn and implies `compiled`; on CPU (no interpreter)
    its kernels do not run: the weights stay unfolded, the layers run as `compiled` (eagerly
    here: force_eager), the tokens are today's path's, and PPODECK_DECODE's note says so."""
    for name, match in (("decode-attn+folded-norms", "needs 'packed'"),
                        ("packed+folded-norms", "needs 'decode-attn'"),
                        ("graph-sampling+cdf-sampling", "needs 'fused-sampling'")):
        with pytest.raises(ValueError, match=match):
            parse_variant(name)
    name = "packed+decode-attn+graph-sampling+fused-prefill+folded-norms"
    options = parse_variant(name)
    assert options.name == name and parse_variant(options.name) == options
    assert options.compiled  # implied: the layers where folded-norms' kernels cannot run
    assert fg.kernel_features(options) == ["decode-attn", "folded-norms"]
    cdf = parse_variant("graph-sampling+fused-sampling+cdf-sampling")
    assert fg.kernel_features(cdf) == ["fused-sampling", "cdf-sampling"]
    assert parse_variant(cdf.name) == cdf
    assert not StaticDecoder(tiny_model("qwen3"), cdf).cdf_kernel  # no Triton on CPU
    model = tiny_model("qwen3")
    assert not StaticDecoder(model, options).folded
    with torch.compiler.set_stance("force_eager"):
        note = follows_reference_and_env_note(model, name, monkeypatch)
    ok, why = da.kernel_status(torch.device("cuda"))
    assert ("folded-norms: its Triton kernel" in note) == ok
    if not ok:
        assert f"folded-norms: {why}, so the RMSNorm weights stay in their own kernels" in note
        assert "`compiled`" in note


def test_multiprocessors_off_cuda_is_the_h200s() -> None:
    assert da.multiprocessors(torch.device("cpu")) == da.NOMINAL_SMS


def test_the_kernel_under_the_triton_interpreter() -> None:
    """interpreted_decode_attention.py in a fresh process with TRITON_INTERPRET=1: the kernel
    against the matmul maths (fp32, bf16, GQA groups 1-3, pads, rows of one slot to all, NaN
    outside the filled slots, launch options), project_heads and folded_norms.gated against
    their torch maths, and the decoder's decode-attn and folded-norms variants and its
    default (BACKEND_VARIANT, greedy) against today's path."""
    pytest.importorskip("triton")
    assert_interpreted_file_passes(Path(__file__).with_name("interpreted_decode_attention.py"))


# The interpreted file's long cases (whole decoder runs on long rows, 600 interpreted draws):
# the nightly bench's, each with a comment there naming what holds it in the default suite.
@pytest.mark.slow
def test_the_kernels_long_cases_under_the_triton_interpreter() -> None:
    pytest.importorskip("triton")
    assert_interpreted_file_passes(Path(__file__).with_name("interpreted_decode_attention.py"),
                                   marks="slow")


def test_the_torch_inverse_cdf_follows_the_softmax() -> None:
    """sample_cdf_by_torch, which the interpreted cdf kernel must match token for token: 600
    draws from one row whose mass sits on five tokens in three chunks and a long tail, each
    token's share within 4.5 sigma of its probability, never a token of probability 0."""
    from ppodeck.engine.rollout.decoder.kernels import sampling_kernel as sk

    logits, heavy = heavy_row(sk.CHUNK)
    draws = 600
    uniform = torch.rand(draws, generator=torch.Generator().manual_seed(1))
    tokens, _ = sk.sample_cdf_by_torch(logits.expand(draws, len(logits)), uniform)
    assert_draws_follow_the_softmax(tokens, logits, heavy)


def heavy_row(chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One row of logits whose mass sits on five tokens in three chunks of `chunk` (one past
    the last full chunk) over a long tail, its last token of probability 0 (logit -inf); and
    the five tokens."""
    logits = torch.full((2 * chunk + 5,), -30.0)
    heavy = torch.tensor([3, chunk - 1, chunk, 2 * chunk + 1, 2 * chunk + 3])
    logits[heavy] = torch.tensor([1.0, 0.0, 2.0, 0.5, -1.0])
    logits[2 * chunk + 4] = float("-inf")
    return logits, heavy


def assert_draws_follow_the_softmax(tokens: torch.Tensor, logits: torch.Tensor,
                                    heavy: torch.Tensor) -> None:
    """Each heavy token's share of the draws within 4.5 sigma of its probability; never the
    token of probability 0 (the row's last)."""
    draws, vocab = len(tokens), len(logits)
    probs = torch.softmax(logits.double(), -1)
    counts = torch.bincount(tokens, minlength=vocab).double()
    assert counts[vocab - 1] == 0
    for token in heavy.tolist():
        p = probs[token].item()
        sigma = (p * (1 - p) / draws) ** 0.5
        assert abs(counts[token].item() / draws - p) <= 4.5 * sigma, (token, p)


def test_without_triton_fused_sampling_draws_graph_samplings_tokens() -> None:
    options = parse_variant("graph-sampling+fused-sampling")
    assert options.name == "graph-sampling+fused-sampling"
    model = tiny_model("qwen3")
    assert not StaticDecoder(model, options).sampling_kernel
    kwargs = dict(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=6, eos_token_id=None,
                  pad_token_id=PAD, seed=2)
    assert_follows_reference(model, options, **kwargs)


def test_the_kernels_compile_for_hopper() -> None:
    """The features' kernels (decode-attn, folded-norms' two, fused-sampling's and
    cdf-sampling's) through Triton's whole compiler (to a cubin for sm_90 with the wheel's
    ptxas, no GPU needed) at the 0.6B shapes and the launches the bench tries: what the
    interpreter cannot check (tile shapes, dot operand types, loop-carried types)."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ppodeck.engine.rollout.decoder.kernels import folded_norms
    from ppodeck.engine.rollout.decoder.kernels import sampling_kernel as sk

    target = GPUTarget("cuda", 90, 32)
    kernel = da._kernel(False)
    types = ["*bf16"] * 4 + ["*i64", "*i64", "*bf16", "*bf16", "fp32"] + ["i32"] * 14
    signature = dict(zip(kernel.arg_names, types + ["constexpr"] * 8, strict=True))
    for block, warps, write in ((32, 4, True), (64, 4, True), (64, 4, False), (128, 8, True)):
        constants = dict(GROUP=2, BLOCK_G=16, HEAD_DIM=128, BLOCK_D=128, BLOCK=block,
                         PRECISION="tf32", UPCAST=False, WRITE=write)
        triton.compile(ASTSource(kernel, signature, constants), target=target,
                       options=dict(num_warps=warps, num_stages=2))
    project = da._project_kernel(False)
    types = ["*bf16"] * 6 + ["fp32"] + ["i32"] * 5
    signature = dict(zip(project.arg_names, types + ["constexpr"] * 8, strict=True))
    for norm, row_scale in ((True, True), (False, True)):
        constants = dict(HEADS=16, KV_HEADS=8, HEAD_DIM=128, BLOCK_D=128, HIDDEN=1024,
                         BLOCK_X=1024, NORM=norm, ROW_SCALE=row_scale)
        triton.compile(ASTSource(project, signature, constants), target=target,
                       options=dict(num_warps=da.PROJECT_WARPS))
    gated = folded_norms._kernel(False)
    signature = dict(zip(gated.arg_names, ["*bf16"] * 3 + ["fp32"] + ["i32"] * 3
                         + ["constexpr"] * 4, strict=True))
    constants = dict(FFN=3072, HIDDEN=1024, BLOCK_X=1024, BLOCK_F=folded_norms.BLOCK_F)
    triton.compile(ASTSource(gated, signature, constants), target=target,
                   options=dict(num_warps=folded_norms.NUM_WARPS))
    chunk, combine, cdf = sk._kernels(False)
    types = ["*bf16", "*fp32", "*fp32", "*fp32", "*fp32", "*i32", "i32", "i32", "i32", "i32"]
    for gumbel in (True, False):
        triton.compile(ASTSource(chunk, dict(zip(chunk.arg_names, [*types, "constexpr",
                                                                   "constexpr"], strict=True)),
                                 dict(CHUNK=sk.CHUNK, GUMBEL=gumbel)),
                       target=target, options=dict(num_warps=8))
    types = ["*bf16", "*fp32", "*fp32", "*fp32", "*i32", "*i64", "*fp32", "i32", "i32", "i32"]
    triton.compile(ASTSource(combine, dict(zip(combine.arg_names, [*types, "constexpr"],
                                               strict=True)), dict(BLOCK=64)),
                   target=target, options=dict(num_warps=1))
    types = ["*bf16", "*fp32", "*fp32", "*fp32", "*i64", "*fp32", "i32", "i32", "i32"]
    triton.compile(ASTSource(cdf, dict(zip(cdf.arg_names, [*types, "constexpr", "constexpr"],
                                           strict=True)), dict(BLOCK=64, CHUNK=sk.CHUNK)),
                   target=target, options=dict(num_warps=8))
    record = sk._record_kernel(False)
    types = ["*i64", "*fp32", "*i64", "*i64", "*fp32", "*i8", "*i64", "*i64", "*i64", "i32",
             "i32"]
    triton.compile(ASTSource(record, dict(zip(record.arg_names, [*types, "constexpr"],
                                              strict=True)), dict(BLOCK=64)),
                   target=target, options=dict(num_warps=4))


@pytest.mark.parametrize(("arch", "variant"), [("qwen3", "packed+graph-sampling+fused-prefill"),
                                               ("llama", "fused-prefill")])
def test_fused_prefill_is_the_reference_path(arch, variant) -> None:  # noqa: ANN001
    """fused-prefill (packed q/k norms on qwen3; separate weights, no q/k norms on llama):
    greedy and sampled tokens equal today's path, log-probs within 1e-5 (fp32)."""
    model = tiny_model(arch)
    options = parse_variant(variant)
    assert options.fused_prefill and options.name == variant
    for sampling in (dict(temperature=0.0), dict(temperature=0.7, top_p=0.9, top_k=20)):
        kwargs = dict(top_p=1.0, top_k=-1, max_new_tokens=5, eos_token_id=None,
                      pad_token_id=PAD, seed=4) | sampling
        assert_follows_reference(model, options, atol=1e-5, **kwargs)


@pytest.mark.parametrize("variant", [
    "packed+decode-attn+graph-sampling+fused-sampling+fused-prefill+compiled",
    "BACKEND_VARIANT"])
def test_the_full_decode_attn_variants_are_the_reference_path(variant) -> None:  # noqa: ANN001
    """The bench's decode-attn combination and the backend's default (compiled's layer
    functions run eagerly by the force_eager stance; the kernels' torch fallbacks on CPU):
    tokens equal today's path."""
    from ppodeck.engine.rollout.decoder.features import BACKEND_VARIANT

    options = parse_variant(BACKEND_VARIANT if variant == "BACKEND_VARIANT" else variant)
    model = tiny_model("qwen3")
    with torch.compiler.set_stance("force_eager"):
        for temperature in (0.0, 1.0):
            kwargs = dict(temperature=temperature, top_p=1.0, top_k=-1, max_new_tokens=6,
                          eos_token_id=None, pad_token_id=PAD, seed=6)
            assert_follows_reference(model, options, atol=1e-5, **kwargs)
