"""decode_attention (fast_generate's `decode-attn`): the batched-matmul maths against the textbook
definition, the variant without Triton, its note; the Triton kernel itself runs under Triton's
CPU interpreter in a fresh process (interpreted_decode_attention.py; skipped where Triton is not
installed: the GPU image has it, and tests/gpu/test_decode_attention_gpu.py runs the kernel
compiled on the H200)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ppodeck.engine.rollout import decode_attention as da
from ppodeck.engine.rollout import fast_generate as fg
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
    options = fg.parse_variant("packed+decode-attn+graph-sampling")
    assert options.decode_attn and options.name == "packed+decode-attn+graph-sampling"
    model = tiny_model("qwen3")
    assert not fg.StaticDecoder(model, options).attention_kernel
    greedy = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=6, eos_token_id=None,
                  pad_token_id=PAD, seed=0)
    assert_follows_reference(model, options, **greedy)


def test_sdpa_and_decode_attn_are_exclusive_and_the_note_says_what_runs(monkeypatch) -> None:
    with pytest.raises(ValueError, match="two attention kernels"):
        fg.parse_variant("sdpa+decode-attn")
    with pytest.raises(ValueError, match="name graph-sampling too"):
        fg.parse_variant("fused-sampling")
    monkeypatch.setenv(fg.VARIANT_ENV, "decode-attn+compiled")
    options, note = fg.options_from_env()
    assert options == fg.DecodeOptions(decode_attn=True, compiled=True)
    assert "decode-attn" in note
    ok, why = da.kernel_status(torch.device("cuda"))
    assert ("decode-attn: its Triton kernel" in note) == ok
    if not ok:
        assert why in note and "batched matmuls" in note


def test_decode_attn_split_names_implies_decode_attn_and_round_trips() -> None:
    options = fg.parse_variant("packed+decode-attn-split+graph-sampling")
    assert options.decode_attn and options.decode_attn_split
    assert options.name == "packed+decode-attn+decode-attn-split+graph-sampling"
    assert fg.parse_variant(options.name) == options
    assert fg.DecodeOptions(decode_attn_split=True) == fg.DecodeOptions(
        decode_attn=True, decode_attn_split=True)
    assert fg.kernel_features(options) == ["decode-attn-split"]
    with pytest.raises(ValueError, match="two attention kernels"):
        fg.parse_variant("sdpa+decode-attn-split")


def follows_reference_and_env_note(model, name: str, monkeypatch) -> str:  # noqa: ANN001
    """Variant `name` decodes token for token today's path (greedy and sampled, log-probs
    within 1e-5); PPODECK_DECODE=name gives these options and returns their note."""
    options = fg.parse_variant(name)
    for temperature in (0.0, 1.0):
        kwargs = dict(temperature=temperature, top_p=1.0, top_k=-1, max_new_tokens=6,
                      eos_token_id=None, pad_token_id=PAD, seed=7)
        assert_follows_reference(model, options, atol=1e-5, **kwargs)
    monkeypatch.setenv(fg.VARIANT_ENV, name)
    from_env, note = fg.options_from_env()
    assert from_env == options
    return note


def test_without_triton_the_split_variant_runs_the_matmul_maths_and_says_so(
        monkeypatch) -> None:  # noqa: ANN001
    """On CPU (no interpreter) decode-attn-split decodes by batched matmuls, token for token
    today's path (greedy and sampled), and PPODECK_DECODE's note names that fallback."""
    name = "packed+decode-attn+decode-attn-split+graph-sampling+fused-sampling+fused-prefill"
    options = fg.parse_variant(name)
    model = tiny_model("qwen3")
    assert not fg.StaticDecoder(model, options).attention_kernel
    note = follows_reference_and_env_note(model, name, monkeypatch)
    assert f"'{name}'" in note
    ok, why = da.kernel_status(torch.device("cuda"))
    assert ("decode-attn-split: its Triton kernel" in note) == ok
    if not ok:
        assert f"decode-attn-split: {why}, so attention runs as batched matmuls" in note


def test_attn_rope_and_folded_norms_need_their_kernel_and_say_what_runs_without_it(
        monkeypatch) -> None:  # noqa: ANN001
    """attn-rope and folded-norms need packed + one-pass decode-attn; on CPU (no
    interpreter) neither kernel runs: the weights stay unfolded, the tokens are today's path's,
    and PPODECK_DECODE's note names both fallbacks."""
    for name, match in (("decode-attn+attn-rope", "name packed and decode-attn"),
                        ("packed+decode-attn-split+attn-rope", "not decode-attn-split"),
                        ("decode-attn+folded-norms", "name packed and decode-attn"),
                        ("packed+decode-attn-split+folded-norms", "not decode-attn-split"),
                        ("packed+decode-attn+pdl", "name folded-norms"),
                        ("packed+decode-attn+attn-rope+folded-norms+pdl", "without attn-rope"),
                        ("graph-sampling+cdf-sampling", "name fused-sampling")):
        with pytest.raises(ValueError, match=match):
            fg.parse_variant(name)
    name = "packed+decode-attn+graph-sampling+fused-prefill+attn-rope+folded-norms"
    options = fg.parse_variant(name)
    assert options.name == name and fg.parse_variant(options.name) == options
    assert fg.kernel_features(options) == ["decode-attn", "attn-rope", "folded-norms"]
    with_pdl = fg.parse_variant("packed+decode-attn+folded-norms+pdl")
    assert with_pdl.pdl and fg.kernel_features(with_pdl)[-1] == "pdl"
    assert not fg.StaticDecoder(tiny_model("qwen3"), with_pdl).pdl
    cdf = fg.parse_variant("graph-sampling+fused-sampling+cdf-sampling")
    assert fg.kernel_features(cdf) == ["fused-sampling", "cdf-sampling"]
    assert fg.parse_variant(cdf.name) == cdf
    assert not fg.StaticDecoder(tiny_model("qwen3"), cdf).cdf_kernel  # no Triton on CPU
    model = tiny_model("qwen3")
    decoder = fg.StaticDecoder(model, options)
    assert not (decoder.projection_kernel or decoder.folded)
    note = follows_reference_and_env_note(model, name, monkeypatch)
    ok, why = da.kernel_status(torch.device("cuda"))
    assert ("folded-norms: its Triton kernel" in note) == ok
    if not ok:
        assert f"attn-rope: {why}, so the q/k norms and RoPE run before attention" in note
        assert "folded-norms: " in note and "stay in their own kernels" in note


def test_split_count_comes_from_static_shapes() -> None:
    """The 0.6B decode shape (64 rows x 8 KV heads, 320 slots) on 132 SMs: 5 chunks (2,560
    programs, ~64 slots each at the last step); a batch that fills the SMs alone: 1; a short
    cache: no chunk under MIN_SPLIT_SLOTS slots; never above MAX_SPLITS."""
    assert da.split_count(64, 8, 320, 132) == 5
    assert da.split_count(512, 8, 320, 132) == 1
    assert da.split_count(4, 2, 64, 132) == 64 // da.MIN_SPLIT_SLOTS
    assert da.split_count(4, 2, 8, 132) == 1
    assert da.split_count(1, 1, 4096, 132) == da.MAX_SPLITS
    assert da.multiprocessors(torch.device("cpu")) == da.NOMINAL_SMS


def test_split_attend_refuses_a_split_count_outside_the_cache() -> None:
    case = cache_case((2, 4, 2, 9, 8), torch.float32)
    for splits in (0, 10):
        with pytest.raises(ValueError, match="splits must be in"):
            da.attend_split(**case, splits=splits)


def test_the_kernel_under_the_triton_interpreter() -> None:
    """interpreted_decode_attention.py in a fresh process with TRITON_INTERPRET=1: the kernel
    and split-K's kernels against the matmul maths (fp32, bf16, GQA groups 1-3, pads, rows of
    one slot to all, empty chunks, NaN outside the filled slots, launch options, split counts)
    and fast_generate's decode-attn and decode-attn-split variants against today's path. The
    opt-in variants measured slower (split-K, two streams, attn-rope) run under -m slow."""
    pytest.importorskip("triton")
    assert_interpreted_file_passes(Path(__file__).with_name("interpreted_decode_attention.py"))


@pytest.mark.slow
def test_the_slower_opt_in_kernels_under_the_triton_interpreter() -> None:
    """The interpreter checks of the opt-in variants measured slower (split-K, two streams,
    attn-rope), which the default suite leaves out."""
    pytest.importorskip("triton")
    assert_interpreted_file_passes(Path(__file__).with_name("interpreted_decode_attention.py"),
                                   marks="slow")


def test_without_triton_fused_sampling_draws_graph_samplings_tokens() -> None:
    options = fg.parse_variant("graph-sampling+fused-sampling")
    assert options.name == "graph-sampling+fused-sampling"
    model = tiny_model("qwen3")
    assert not fg.StaticDecoder(model, options).sampling_kernel
    kwargs = dict(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=6, eos_token_id=None,
                  pad_token_id=PAD, seed=2)
    assert_follows_reference(model, options, **kwargs)


def test_the_kernels_compile_for_hopper() -> None:
    """The features' kernels (decode-attn, attn-rope's, folded-norms', decode-attn-split's
    pair, fused-sampling) through Triton's whole compiler (to a cubin for sm_90 with the
    wheel's ptxas, no GPU needed) at the 0.6B shapes and launches the bench tries (split counts
    1, 5, 16 among them): what the interpreter cannot check (tile shapes, dot operand types,
    loop-carried types)."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ppodeck.engine.rollout import folded_norms
    from ppodeck.engine.rollout import sampling_kernel as sk

    target = GPUTarget("cuda", 90, 32)
    kernel = da._kernel(False)
    types = ["*bf16"] * 4 + ["*i64", "*i64", "*bf16", "*bf16", "fp32"] + ["i32"] * 14
    signature = dict(zip(kernel.arg_names, types + ["constexpr"] * 9, strict=True))
    for block, warps, write, pdl in ((32, 4, True, False), (64, 4, True, True),
                                     (64, 4, False, False), (128, 8, True, False)):
        constants = dict(GROUP=2, BLOCK_G=16, HEAD_DIM=128, BLOCK_D=128, BLOCK=block,
                         PRECISION="tf32", UPCAST=False, WRITE=write, PDL=pdl)
        triton.compile(ASTSource(kernel, signature, constants), target=target,
                       options=dict(num_warps=warps, num_stages=2, launch_pdl=pdl))
    qkv_kernel = da._qkv_kernel(False)
    types = ["*bf16"] * 8 + ["*i64", "*i64", "fp32", "fp32"] + ["i32"] * 12
    signature = dict(zip(qkv_kernel.arg_names, types + ["constexpr"] * 12, strict=True))
    for norm, row_scale in ((True, True), (True, False), (False, False)):
        constants = dict(HEADS=16, KV_HEADS=8, BLOCK_G=16, HEAD_DIM=128, BLOCK_D=128,
                         HIDDEN=1024, BLOCK_X=1024, BLOCK=64, PRECISION="tf32", UPCAST=False,
                         NORM=norm, ROW_SCALE=row_scale)
        triton.compile(ASTSource(qkv_kernel, signature, constants), target=target,
                       options=dict(num_warps=4, num_stages=2))
    project = da._project_kernel(False)
    types = ["*bf16"] * 6 + ["fp32"] + ["i32"] * 5
    signature = dict(zip(project.arg_names, types + ["constexpr"] * 9, strict=True))
    for norm, row_scale, pdl in ((True, True, True), (False, True, False)):
        constants = dict(HEADS=16, KV_HEADS=8, HEAD_DIM=128, BLOCK_D=128, HIDDEN=1024,
                         BLOCK_X=1024, NORM=norm, ROW_SCALE=row_scale, PDL=pdl)
        triton.compile(ASTSource(project, signature, constants), target=target,
                       options=dict(num_warps=da.PROJECT_WARPS))
    gated = folded_norms._kernel(False)
    signature = dict(zip(gated.arg_names, ["*bf16"] * 3 + ["fp32"] + ["i32"] * 3
                         + ["constexpr"] * 4, strict=True))
    constants = dict(FFN=3072, HIDDEN=1024, BLOCK_X=1024, BLOCK_F=folded_norms.BLOCK_F)
    triton.compile(ASTSource(gated, signature, constants), target=target,
                   options=dict(num_warps=folded_norms.NUM_WARPS))
    split, merge = da._split_kernels(False)
    types = ["*bf16"] * 3 + ["*fp32"] * 3 + ["*i64", "*i64", "fp32"] + ["i32"] * 9
    signature = dict(zip(split.arg_names, types + ["constexpr"] * 8, strict=True))
    merge_types = ["*fp32"] * 3 + ["*bf16"] + ["i32"] * 3
    merge_signature = dict(zip(merge.arg_names, merge_types + ["constexpr"] * 4, strict=True))
    for splits, block, warps in ((1, 64, 4), (5, 32, 4), (5, 64, 4), (16, 128, 8)):
        constants = dict(SPLITS=splits, GROUP=2, BLOCK_G=16, HEAD_DIM=128, BLOCK_D=128,
                         BLOCK=block, PRECISION="tf32", UPCAST=False)
        triton.compile(ASTSource(split, signature, constants), target=target,
                       options=dict(num_warps=warps, num_stages=2))
        constants = dict(SPLITS=splits, BLOCK_S=da._pow2(splits), HEAD_DIM=128, BLOCK_D=128)
        triton.compile(ASTSource(merge, merge_signature, constants), target=target,
                       options=dict(num_warps=da.MERGE_WARPS))
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
    options = fg.parse_variant(variant)
    assert options.fused_prefill and options.name == variant
    for sampling in (dict(temperature=0.0), dict(temperature=0.7, top_p=0.9, top_k=20)):
        kwargs = dict(top_p=1.0, top_k=-1, max_new_tokens=5, eos_token_id=None,
                      pad_token_id=PAD, seed=4) | sampling
        assert_follows_reference(model, options, atol=1e-5, **kwargs)


def test_the_full_decode_attn_variant_is_the_reference_path() -> None:
    """The bench's decode-attn combination (compiled's layer functions run eagerly by the
    force_eager stance; the kernels' torch fallbacks on CPU): tokens equal today's path."""
    options = fg.parse_variant(
        "packed+decode-attn+graph-sampling+fused-sampling+fused-prefill+compiled")
    model = tiny_model("qwen3")
    with torch.compiler.set_stance("force_eager"):
        for temperature in (0.0, 1.0):
            kwargs = dict(temperature=temperature, top_p=1.0, top_k=-1, max_new_tokens=6,
                          eos_token_id=None, pad_token_id=PAD, seed=6)
            assert_follows_reference(model, options, atol=1e-5, **kwargs)
