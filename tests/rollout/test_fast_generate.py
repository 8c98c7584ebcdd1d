"""The hf decoder (engine/rollout/decoder: static cache, CUDA graph) == transformers on the same
weights (CPU, fp32), each variant == the reference path, and the feature table is the single
source of the variants' names."""

from __future__ import annotations

import pytest
import torch

from ppodeck.engine.model.shape import ModelShape
from ppodeck.engine.rollout.decoder import features, kernels, layers, static_decoder
from ppodeck.engine.rollout.decoder import generate as fg
from ppodeck.engine.rollout.decoder import sampling as samplers
from ppodeck.engine.rollout.decoder.features import REFERENCE, DecodeOptions, parse_variant
from ppodeck.engine.rollout.decoder.kernels import decode_attention
from ppodeck.engine.rollout.decoder.state import Sampling

PAD, EOS = 0, 5
ROWS = [[3, 9, 4, 11], [7], [12, 2, 8], [6, 6]]  # ragged: left padding and positions matter


def tiny_model(arch: str):  # noqa: ANN201
    from transformers import AutoModelForCausalLM

    from ppodeck.engine.model.convert import hf_config

    shape = ModelShape(num_layers=2, hidden_size=64, ffn_hidden_size=96, num_attention_heads=4,
                       num_query_groups=2, kv_channels=16, vocab_size=48,
                       max_sequence_length=64, rotary_base=50000.0, norm_epsilon=1e-6,
                       normalization="RMSNorm", swiglu=True, qk_layernorm=arch == "qwen3",
                       add_bias_linear=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(shape, arch), dtype=torch.float32)
    return model.eval()


SAMPLINGS = (dict(temperature=0.0), dict(temperature=0.7, top_p=0.9, top_k=20))


def settings(new_tokens: int, **sampling: object) -> dict:
    """fast_generate's keyword arguments: no filters, no EOS, seed 3, and `sampling` on top."""
    return dict(top_p=1.0, top_k=-1, max_new_tokens=new_tokens, eos_token_id=None,
                pad_token_id=PAD, seed=3) | sampling


def assert_follows_reference(model, options, atol: float | None = None,  # noqa: ANN001
                             rows: list[list[int]] = ROWS, **kwargs) -> None:
    """The variant's tokens equal today's path's (REFERENCE) for these sampling settings; with
    `atol`, its log-probs too."""
    ours = fg.fast_generate(model, rows, options=options, **kwargs)
    ref = fg.fast_generate(model, rows, options=REFERENCE, **kwargs)
    assert ours[0] == ref[0], kwargs
    if atol is not None:
        torch.testing.assert_close(torch.tensor(ours[1]), torch.tensor(ref[1]), rtol=0,
                                   atol=atol)


def hf_greedy(model, rows: list[list[int]], new: int) -> list[list[int]]:  # noqa: ANN001
    from ppodeck.engine.rollout.hf_backend import left_pad

    ids, mask = left_pad(rows, PAD, torch.device("cpu"))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=new, min_new_tokens=new, pad_token_id=PAD,
                             eos_token_id=None)
    return out[:, ids.shape[1]:].tolist()


def teacher_forced_log_probs(model, rows, tokens, temperature):  # noqa: ANN001, ANN201
    """log-softmax(logits / T) of `tokens` given prompt + earlier tokens, by transformers."""
    from ppodeck.engine.rollout.hf_backend import left_pad

    full = [r + t for r, t in zip(rows, tokens, strict=True)]
    ids, mask = left_pad(full, PAD, torch.device("cpu"))
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    new = len(tokens[0])
    logits = logits[:, -new - 1:-1].float() / temperature
    chosen = torch.tensor(tokens)
    return torch.log_softmax(logits, -1).gather(-1, chosen[..., None]).squeeze(-1)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_greedy_tokens_match_transformers(arch) -> None:
    model = tiny_model(arch)
    tokens, log_probs = fg.fast_generate(model, ROWS, temperature=0.0, top_p=1.0, top_k=-1,
                                         max_new_tokens=9, eos_token_id=None, pad_token_id=PAD,
                                         seed=1)
    assert tokens == hf_greedy(model, ROWS, 9)
    assert all(len(lp) == 9 for lp in log_probs)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_sampled_log_probs_match_teacher_forcing(arch) -> None:
    model = tiny_model(arch)
    tokens, log_probs = fg.fast_generate(model, ROWS, temperature=0.7, top_p=0.9, top_k=20,
                                         max_new_tokens=8, eos_token_id=None, pad_token_id=PAD,
                                         seed=3)
    expected = teacher_forced_log_probs(model, ROWS, tokens, 0.7)
    torch.testing.assert_close(torch.tensor(log_probs), expected, rtol=0, atol=2e-5)
    again, _ = fg.fast_generate(model, ROWS, temperature=0.7, top_p=0.9, top_k=20,
                                max_new_tokens=8, eos_token_id=None, pad_token_id=PAD, seed=3)
    assert again == tokens  # seeded


def test_weights_loaded_later_are_seen() -> None:
    """The decoder reads the model's parameters in place: load_state_dict needs no rebuild."""
    model = tiny_model("qwen3")
    first, _ = fg.fast_generate(model, ROWS, temperature=0.0, top_p=1.0, top_k=-1,
                                max_new_tokens=4, eos_token_id=None, pad_token_id=PAD, seed=0)
    other = tiny_model("qwen3")
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.5)
    model.load_state_dict(other.state_dict())
    second, _ = fg.fast_generate(model, ROWS, temperature=0.0, top_p=1.0, top_k=-1,
                                 max_new_tokens=4, eos_token_id=None, pad_token_id=PAD, seed=0)
    assert second == hf_greedy(model, ROWS, 4)
    assert second != first


def test_early_stop_once_every_row_ended() -> None:
    model = tiny_model("qwen3")
    decoder = fg.decoder_for(model, REFERENCE)  # its logits() is patched below
    real = decoder.logits
    bias = torch.full((48,), -1e4)
    bias[EOS] = 0.0
    decoder.logits = lambda x: real(x) + bias  # every row samples EOS at once
    tokens, _ = fg.fast_generate(model, ROWS, temperature=1.0, top_p=1.0, top_k=-1,
                                 max_new_tokens=100, eos_token_id=EOS, pad_token_id=PAD, seed=0,
                                 options=REFERENCE)
    assert all(len(t) == fg.EARLY_STOP_EVERY for t in tokens)


def test_filter_logits_like_transformers() -> None:
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    logits = torch.randn(3, 40, generator=torch.Generator().manual_seed(0))
    ours = samplers.filter_logits(logits, 0.8, 0.7, 10)
    theirs = logits.clone()
    for warper in (TemperatureLogitsWarper(0.8), TopKLogitsWarper(10), TopPLogitsWarper(0.7)):
        theirs = warper(None, theirs)
    assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
    torch.testing.assert_close(ours[~torch.isinf(ours)], theirs[~torch.isinf(theirs)])


def test_refuses_unknown_models() -> None:
    ok, why = fg.can_use(object())
    assert not ok and "model_type" in why


def test_moving_the_model_rebuilds_the_decoder() -> None:
    """Offload/onload moves parameters to new storage under the same Parameter objects; a
    decoder (and CUDA graph) captured before must not be reused: on the H200 it read freed
    memory (illegal memory access at the first rollout after an offload)."""
    model = tiny_model("qwen3")
    before = fg.decoder_for(model)
    assert fg.decoder_for(model) is before  # same placement: the captured graphs are reused
    weight = model.model.embed_tokens.weight
    model.to(torch.float64).to(torch.float32)  # like .to("cpu") then .to("cuda"): new storage
    assert model.model.embed_tokens.weight is weight
    rebuilt = fg.decoder_for(model)
    assert rebuilt is not before
    tokens, _ = fg.fast_generate(model, ROWS, temperature=0.0, top_p=1.0, top_k=-1,
                                 max_new_tokens=4, eos_token_id=None, pad_token_id=PAD, seed=0)
    assert tokens == hf_greedy(model, ROWS, 4)


# ---- decoder variants (issue 20): each must be today's path, token for token ----------------
VARIANTS = {
    "fused": DecodeOptions(fused=True),
    "graph-sampling": DecodeOptions(graph_sampling=True),
    "packed": DecodeOptions(packed=True),
    "all": DecodeOptions(fused=True, packed=True, graph_sampling=True),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_is_the_reference_path(name) -> None:
    """Same greedy tokens as today's path (so as transformers: the tests above), same sampled
    tokens with the same seed (top-k/top-p/temperature included), log-probs within 1e-5
    (fp32)."""
    model = tiny_model("qwen3")
    options = VARIANTS[name]
    greedy = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=9, eos_token_id=None,
                  pad_token_id=PAD, seed=1)
    tokens, log_probs = fg.fast_generate(model, ROWS, options=options, **greedy)
    ref_tokens, ref_log_probs = fg.fast_generate(model, ROWS, options=REFERENCE, **greedy)
    assert tokens == ref_tokens
    torch.testing.assert_close(torch.tensor(log_probs), torch.tensor(ref_log_probs),
                               rtol=0, atol=1e-5)
    for sampling in (dict(temperature=0.7, top_p=0.9, top_k=20), dict(temperature=1.0)):
        assert_follows_reference(model, options, atol=1e-5, **{**greedy, **sampling, "seed": 3})


def test_packed_weights_follow_loads_and_llama() -> None:
    """Packed weights are copied at every call (a load between rollouts is seen); a model
    without q/k norms (llama) takes the same path."""
    options = DecodeOptions(packed=True, graph_sampling=True)
    kwargs = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=5, eos_token_id=None,
                  pad_token_id=PAD, seed=0)
    llama = tiny_model("llama")
    assert fg.fast_generate(llama, ROWS, options=options, **kwargs)[0] == \
        fg.fast_generate(llama, ROWS, options=REFERENCE, **kwargs)[0]
    model = tiny_model("qwen3")
    first, _ = fg.fast_generate(model, ROWS, options=options, **kwargs)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    second, _ = fg.fast_generate(model, ROWS, options=options, **kwargs)
    assert second != first
    assert second == fg.fast_generate(model, ROWS, options=REFERENCE, **kwargs)[0]


def test_graph_sampling_stops_early_like_the_reference(monkeypatch) -> None:
    model = tiny_model("qwen3")
    real = samplers.sample_sync_free

    def always_eos(logits, settings, generator):  # noqa: ANN001, ANN202
        tokens, log_probs = real(logits, settings, generator)
        return torch.full_like(tokens, EOS), log_probs

    monkeypatch.setattr(samplers, "sample_sync_free", always_eos)
    tokens, _ = fg.fast_generate(model, ROWS, temperature=1.0, top_p=1.0, top_k=-1,
                                 max_new_tokens=100, eos_token_id=EOS, pad_token_id=PAD, seed=0,
                                 options=DecodeOptions(graph_sampling=True))
    assert [len(t) for t in tokens] == [fg.EARLY_STOP_EVERY] * len(ROWS)
    assert all(t == [EOS] * fg.EARLY_STOP_EVERY for t in tokens)


def test_variant_names_round_trip(monkeypatch) -> None:
    for options in (REFERENCE, *VARIANTS.values()):
        assert parse_variant(options.name) == options
    assert parse_variant("packed+compiled") == DecodeOptions(packed=True, compiled=True)
    with pytest.raises(ValueError, match="unknown decoder feature"):
        parse_variant("fused+turbo")
    monkeypatch.delenv(features.VARIANT_ENV, raising=False)
    backend_default = parse_variant(features.BACKEND_VARIANT)
    assert backend_default.graph_sampling and backend_default.folded_norms
    options, note = fg.options_from_env()
    assert options == backend_default
    # unset, a note only where its Triton kernels cannot run (then it names the fallback)
    triton_runs = decode_attention.kernel_status(torch.device("cuda"))[0]
    assert (note is None) == triton_runs
    assert triton_runs or ("default variant" in note and "batched matmuls" in note)
    monkeypatch.setenv(features.VARIANT_ENV, "graph-sampling")
    options, note = fg.options_from_env()
    assert options.graph_sampling and "graph-sampling" in note
    monkeypatch.setenv(features.VARIANT_ENV, "nope")
    options, note = fg.options_from_env()
    assert options == backend_default and "ignored" in note and features.BACKEND_VARIANT in note


# A GPU bench's CPU smoke run: it checks the bench tool, not what PPO Deck ships, so it runs
# with the nightly bench (`make nightly`) and before a device session (`pytest -m slow -k
# smoke`), not in every CI run.
@pytest.mark.slow
def test_decode_profile_smoke_runs(capsys) -> None:
    """bench/gpu_decode_profile.py --smoke (CPU, tiny): the lead runs it once on the GPU, so
    its every section must run here first."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import gpu_decode_profile as profile

    assert profile.main(["--smoke", "--variant", "ref", "--variant",
                         "packed+graph-sampling", "--variant",
                         "packed+decode-attn+graph-sampling+fused-sampling"]) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out and "Traceback" not in out
    assert "=== attention alone" in out and "matmul (fused)" in out
    assert "=== decode-attn's per-call cost" in out  # the fit where Triton runs (the GPU)
    summary = out[out.index("=== summary"):]
    for row in ("tokens/s", "decode alone (replay)", "kernels/step", "greedy tokens = ref",
                "log-prob max|diff| vs fp32 (ours)", "vs fp32 (transformers')"):
        assert row in summary
    greedy_row = next(line for line in summary.splitlines()
                      if line.startswith("greedy tokens = ref"))
    assert "(3) packed+decode-attn+graph-sampling+fused-sampling" in summary
    assert greedy_row.split()[-3:] == ["1", "1", "1"]  # every variant: each greedy token



COMPILED_ALL = "packed+graph-sampling+compiled"


def assert_compiled_is_the_reference_path(model) -> None:  # noqa: ANN001
    """Greedy and sampled (same seed) tokens equal today's path, log-probs within 1e-4."""
    options = parse_variant(COMPILED_ALL)
    assert options.compiled and options.name == COMPILED_ALL
    for sampling in (dict(temperature=0.0), dict(temperature=0.7, top_p=0.9, top_k=20)):
        kwargs = {**dict(top_p=1.0, top_k=-1, max_new_tokens=9, eos_token_id=None,
                         pad_token_id=PAD, seed=3), **sampling}
        ours = fg.fast_generate(model, ROWS, options=options, **kwargs)
        ref = fg.fast_generate(model, ROWS, options=REFERENCE, **kwargs)
        assert ours[0] == ref[0], sampling
        torch.testing.assert_close(torch.tensor(ours[1]), torch.tensor(ref[1]), rtol=0,
                                   atol=1e-4)


def test_compiled_layer_functions_are_the_reference_path(monkeypatch) -> None:
    """`compiled`'s split of a layer (head: norms, q/k/v, RoPE, the k/v cache writes; mlp:
    RMSNorm, gate/up, SiLU*up between the in-place residual GEMMs) run eagerly (torch.compile's
    force_eager stance: no inductor, ~1 s), on both q/k-norm layouts; the inductor build itself
    is the slow test below."""
    calls = []
    monkeypatch.setattr(layers, "_COMPILED", {})
    real = layers.compiled
    monkeypatch.setattr(static_decoder, "compiled",
                        lambda fn: calls.append(fn.__name__) or real(fn))
    with torch.compiler.set_stance("force_eager"):
        assert_compiled_is_the_reference_path(tiny_model("qwen3"))
        options = DecodeOptions(compiled=True)  # unpacked weights, llama: no q/k norms
        greedy = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=6,
                      eos_token_id=None, pad_token_id=PAD, seed=0)
        llama = tiny_model("llama")
        assert fg.fast_generate(llama, ROWS, options=options, **greedy)[0] == \
            fg.fast_generate(llama, ROWS, options=REFERENCE, **greedy)[0]
    assert {"layer_head", "layer_mlp"} <= set(calls)


@pytest.mark.slow
def test_compiled_variant_is_the_reference_path() -> None:
    """The same with inductor's C++ backend (CPU, fp32): ~32 s with a cold inductor cache on
    2 cores, ~11 s warm."""
    assert_compiled_is_the_reference_path(tiny_model("qwen3"))
    assert layers._COMPILED, "the compiled functions were not built"


def test_compile_failure_falls_back_to_eager_and_says_so(monkeypatch) -> None:
    def broken(fn, **_):  # noqa: ANN001, ANN202
        def fails(*args):  # noqa: ANN002, ANN202
            raise RuntimeError("no C compiler")
        return fails

    monkeypatch.setattr(layers, "_COMPILED", {})
    monkeypatch.setattr(torch, "compile", broken)
    model = tiny_model("qwen3")
    greedy = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=5, eos_token_id=None,
                  pad_token_id=PAD, seed=0)
    with pytest.warns(UserWarning, match="no C compiler"):
        tokens, _ = fg.fast_generate(model, ROWS, options=DecodeOptions(compiled=True),
                                     **greedy)
    assert tokens == fg.fast_generate(model, ROWS, options=REFERENCE, **greedy)[0]
    assert all(f.failed for f in layers._COMPILED.values())


def test_skinny_down_falls_back_on_cpu_with_its_note(monkeypatch) -> None:
    """Without CUDA (no interpreter) the down projection stays cuBLAS, said in the note;
    tokens and log-probs are the reference path's."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    note = fg.kernel_note("skinny-down", torch.device("cpu"))
    assert note.startswith("skinny-down: its Triton kernels need CUDA") and "cuBLAS" in note
    monkeypatch.setenv(features.VARIANT_ENV, "packed+graph-sampling+skinny-down")
    options, note = fg.options_from_env()
    assert options.skinny_down and options.layers_fused
    assert "'packed+graph-sampling+skinny-down'" in note and "skinny-down: " in note
    model = tiny_model("qwen3")
    assert not static_decoder.StaticDecoder(model, options).down_kernel
    greedy = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=6, eos_token_id=None,
                  pad_token_id=PAD, seed=0)
    assert_follows_reference(model, options, atol=1e-5, **greedy)
    assert_follows_reference(model, options, atol=1e-5,
                             **{**greedy, "temperature": 0.7, "top_k": 20, "seed": 2})


def test_each_feature_notes_its_own_kernels_fallback(monkeypatch) -> None:
    """The default variant's note names the features whose kernel cannot run, each by its own
    module's kernel_status (skinny_gemm's here, decode_attention's for the others)."""
    monkeypatch.setitem(kernels._STATUS, "skinny_gemm", lambda device: (False, "no GEMM"))
    monkeypatch.setitem(kernels._STATUS, "decode_attention", lambda device: (True, "ok"))
    note = fg._fallback_note(parse_variant("packed+decode-attn+skinny-down"))
    assert note is not None and "skinny-down: no GEMM, so" in note and "decode-attn:" not in note
    assert fg._fallback_note(parse_variant("packed+decode-attn")) is None


# ---- the feature table is the single source of the variants ---------------------------------
def test_every_option_field_has_one_table_row() -> None:
    assert features.option_fields() == [f.field for f in features.FEATURES]
    assert len(features.BY_NAME) == len(features.FEATURES)
    assert not set(features.BY_NAME) & set(features.REMOVED)
    for feature in features.FEATURES:  # what a row names exists, and a Triton row says its
        assert set(feature.needs) | set(feature.implies) <= set(features.BY_NAME)  # fallback
        assert feature.measured and feature.does
        assert (feature.kernel is None) == (feature.fallback == ""), feature.name
        assert feature.kernel is None or feature.kernel in kernels._STATUS, feature.name


def test_the_backend_default_is_the_tables_defaults() -> None:
    default = parse_variant(features.BACKEND_VARIANT)
    assert default.name == features.BACKEND_VARIANT
    assert {f.name for f in default.features} == \
        {f.name for f in features.FEATURES if f.default} | {"compiled"}  # folded-norms' fallback
    assert "compiled" not in features.BACKEND_VARIANT.split("+")  # not named: implied
    # the name docs/performance.md shows for the default before `compiled` was implied
    old = ("packed+decode-attn+graph-sampling+fused-sampling+fused-prefill+compiled"
           "+folded-norms+skinny-down+cdf-sampling")
    assert parse_variant(old) == default


def test_names_derive_from_the_table() -> None:
    def with_needs(name: str) -> list[str]:
        return [n for need in features.BY_NAME[name].needs for n in with_needs(need)] + [name]

    for feature in features.FEATURES:  # each feature alone with what it needs round-trips
        options = parse_variant("+".join(with_needs(feature.name)))
        assert getattr(options, feature.field)
        assert parse_variant(options.name) == options
        assert all(getattr(options, features.BY_NAME[i].field) for i in feature.implies)
    assert parse_variant("fused+packed").name == "packed"  # implied features go unnamed
    with pytest.raises(ValueError, match="'cdf-sampling' needs 'fused-sampling'"):
        parse_variant("graph-sampling+cdf-sampling")
    with pytest.raises(ValueError, match="'folded-norms' needs 'decode-attn'"):
        DecodeOptions(packed=True, folded_norms=True)


@pytest.mark.parametrize("removed", sorted(features.REMOVED))
def test_removed_features_say_so_and_what_to_use(removed, monkeypatch) -> None:
    why, instead = features.REMOVED[removed]
    with pytest.raises(ValueError, match=f"'{removed}' was removed"):
        parse_variant(f"packed+{removed}")
    monkeypatch.setenv(features.VARIANT_ENV, f"packed+{removed}")
    options, note = fg.options_from_env()
    assert options == parse_variant(features.BACKEND_VARIANT)
    assert f"'{removed}' was removed ({why}): use {instead}" in note
    assert f"decoding with '{features.BACKEND_VARIANT}'" in note


def test_rope_tables_rows_are_ropes_values() -> None:
    """The decode step's gathered RoPE rows are exactly `rope`'s values at those positions
    (the same elementwise ops), sin_signed its sin with the first half negated; row i is
    position i - length, so the capture's warm-ups (cache index 0, positions -pad) stay in
    the tables."""
    decoder = static_decoder.StaticDecoder(tiny_model("qwen3"), parse_variant("packed"))
    cos_table, sin_table = decoder.rope_tables(40)
    assert cos_table.shape[0] == sin_table.shape[0] == 80
    positions = torch.tensor([-40, -3, 0, 5, 17, 39])
    cos, sin = decoder.rope(positions)
    half = decoder.head_dim // 2
    assert torch.equal(cos_table[positions + 40], cos)
    assert torch.equal(sin_table[positions + 40], torch.cat((-sin[:, :half], sin[:, half:]), -1))


def test_a_warm_up_step_at_cache_index_0_reads_inside_the_rope_tables() -> None:
    """What the CUDA-graph capture's warm-ups run (index 0, left-padded rows): every gathered
    row index in [0, 2 length), so no out-of-range gather (on the GPU an index assert)."""
    model = tiny_model("qwen3")
    decoder = static_decoder.StaticDecoder(model, parse_variant("packed+graph-sampling"))
    rows = [[5, 6, 7], [8]]
    state = fg._state_for(decoder, 2, 64, fg.left_padded(rows, 0, torch.device("cpu"))[1])
    state.index.zero_()
    table_rows = state.index + state.rope_shift
    assert table_rows.min() >= 0 and table_rows.max() < 2 * 64
    with torch.no_grad():
        decoder.decode_step(state, Sampling(1.0, 1.0, -1))
