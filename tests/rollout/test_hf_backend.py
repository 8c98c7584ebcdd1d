"""The hf rollout backend: seeded sampling, log-probs, EOS handling, left padding, weights."""

from __future__ import annotations

import time

import pytest
import torch

from ppodeck.engine.model.shape import ModelShape
from ppodeck.engine.rollout.hf_backend import (
    HFGenerator,
    cut_at_eos,
    left_pad,
    model_offloader,
    row_limits,
)

EOS, PAD = 1, 0
SHAPE = ModelShape(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                   num_query_groups=2, kv_channels=16, vocab_size=32, max_sequence_length=64,
                   norm_epsilon=1e-6)
UNTIED_SHAPE = ModelShape(**{**SHAPE.__dict__, "untie_embeddings": True})
QWEN_SHAPE = ModelShape(**{**SHAPE.__dict__, "qk_layernorm": True, "untie_embeddings": True})
PROMPTS = [[4, 5, 6, 13], [7, 13], [3, 3, 9, 10, 11, 13]]


@pytest.fixture(scope="module")
def generator() -> HFGenerator:
    gen = HFGenerator(UNTIED_SHAPE, "llama", init_seed=1)
    with torch.no_grad():  # logits with a std of about 1.6: peaked, yet diverse samples
        gen.model.lm_head.weight.normal_(0.0, 0.2, generator=torch.Generator().manual_seed(0))
    return gen


def sample(gen: HFGenerator, prompts=PROMPTS, **kw):  # noqa: ANN001, ANN201
    params = dict(n_samples=3, temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=6,
                  eos_token_id=EOS, pad_token_id=PAD, seed=5)
    return gen.generate(prompts, **{**params, **kw})


def test_same_seed_same_samples_other_seed_differs(generator: HFGenerator) -> None:
    a, b = sample(generator), sample(generator)
    assert a == b and len(a) == 9
    assert sample(generator, seed=6) != a


def test_sampling_leaves_the_global_rng_alone(generator: HFGenerator) -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    sample(generator)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_log_probs_equal_teacher_forced_temperature_scaled(generator: HFGenerator,
                                                            temperature: float) -> None:
    outs = sample(generator, temperature=temperature)
    for i, out in enumerate(outs):
        prompt = PROMPTS[i // 3]
        ids = torch.tensor([prompt + out.response_ids])
        with torch.no_grad():
            logits = generator.model(ids).logits[0, len(prompt) - 1:-1].float()
        # unfiltered by top-p/top-k: the same quantity the actor computes
        if temperature != 1.0:
            logits = logits / temperature
        expected = torch.log_softmax(logits, -1).gather(
            -1, torch.tensor(out.response_ids).unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-5), i


def test_responses_end_at_first_eos_or_are_truncated(generator: HFGenerator) -> None:
    outs = sample(generator, n_samples=16, max_new_tokens=5, temperature=1.0)
    assert any(o.truncated for o in outs) and any(not o.truncated for o in outs)
    for out in outs:
        assert len(out.response_ids) == len(out.log_probs) <= 5
        if out.truncated:
            assert EOS not in out.response_ids and len(out.response_ids) == 5
        else:
            assert out.response_ids[-1] == EOS and EOS not in out.response_ids[:-1]


def test_cut_at_eos_keeps_eos_as_a_token() -> None:
    outs = cut_at_eos([[5, 1, 0, 0], [5, 6, 7, 8], [1, 0, 0, 0]],
                      [[-1.0, -2.0, -3.0, -4.0]] * 3, eos_token_id=1, limits=[4, 4, 4])
    assert [o.response_ids for o in outs] == [[5, 1], [5, 6, 7, 8], [1]]
    assert [o.log_probs for o in outs] == [[-1.0, -2.0], [-1.0, -2.0, -3.0, -4.0], [-1.0]]
    assert [o.truncated for o in outs] == [False, True, False]


def test_the_context_length_bounds_prompt_plus_response_per_row(generator) -> None:
    """--rollout-max-context-len: each row stops where its prompt + response fills the context
    (truncated), as SGLang's context length bounds it; without it, max_new_tokens alone."""
    prompts = [[3, 4], [3, 4, 5, 6, 7, 8]]
    assert row_limits(prompts, 6, None) == [6, 6]
    assert row_limits(prompts, 6, 9) == [6, 3]
    assert row_limits([[1] * 9], 6, 9) == [1]  # a full context still gets one token
    generator.max_context_len = 9
    try:
        outs = generator.generate(prompts, n_samples=1, temperature=0.0, max_new_tokens=6,
                                  eos_token_id=None, pad_token_id=0, seed=0)
    finally:
        generator.max_context_len = None
    assert [len(o.response_ids) for o in outs] == [6, 3]
    assert all(o.truncated for o in outs)


def test_left_padding_gives_the_same_greedy_answers_as_one_by_one(generator) -> None:
    batched = sample(generator, n_samples=1, temperature=0.0)
    alone = [sample(generator, prompts=[p], n_samples=1, temperature=0.0)[0] for p in PROMPTS]
    assert [o.response_ids for o in batched] == [o.response_ids for o in alone]
    for b, a in zip(batched, alone, strict=True):
        assert torch.allclose(torch.tensor(b.log_probs), torch.tensor(a.log_probs), atol=1e-5)


def test_left_pad_layout() -> None:
    ids, mask = left_pad([[7, 8, 9], [5]], PAD, torch.device("cpu"))
    assert ids.tolist() == [[7, 8, 9], [0, 0, 5]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


@pytest.mark.parametrize(("shape", "arch"), [(SHAPE, "llama"), (QWEN_SHAPE, "qwen3")])
def test_load_weights_strict_with_tied_head_left_out(shape: ModelShape, arch: str) -> None:
    source = HFGenerator(shape, arch, init_seed=3)
    target = HFGenerator(shape, arch, init_seed=4)
    state = {k: v.clone() for k, v in source.model.state_dict().items()}
    if not shape.untie_embeddings:
        del state["lm_head.weight"]  # what tied safetensors files and mcore_to_hf give
    size = target.load_weights(state)
    assert size == sum(t.numel() * t.element_size() for t in state.values())
    ids = torch.tensor([[4, 5, 6]])
    with torch.no_grad():
        assert torch.equal(target.model(ids).logits, source.model(ids).logits)
    del state["model.norm.weight"]
    with pytest.raises(KeyError, match="model.norm.weight"):
        target.load_weights(state)


def test_offload_is_a_reported_noop_on_cpu(generator: HFGenerator) -> None:
    assert generator.offload() == {"noop": True, "bytes": 0, "seconds": 0.0, "gbps": None,
                                   "where": "cpu"}
    assert generator.onload()["noop"] is True


def test_model_offloader_frees_every_weight_and_restores_the_same_model() -> None:
    """The CUDA rollout offload's seam, run on CPU storages: each tied weight is moved once,
    every storage is emptied, and the model after onload generates exactly as before."""
    gen = HFGenerator(SHAPE, "llama", init_seed=5)  # tied: lm_head is the embedding
    ids = torch.tensor([[4, 5, 6, 7]])
    with torch.no_grad():
        before = gen.model(ids).logits.clone()
    tensors = [*gen.model.parameters(), *gen.model.buffers()]
    unique = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}
    offloader = model_offloader(gen.model, "cpu")
    report = offloader.offload()
    assert report["bytes"] == sum(unique.values())
    assert all(t.untyped_storage().nbytes() == 0 for t in tensors)
    offloader.onload()
    assert gen.model.lm_head.weight is gen.model.model.embed_tokens.weight
    with torch.no_grad():
        assert torch.equal(gen.model(ids).logits, before)


def test_batch_64_by_6_tokens_is_fast(generator: HFGenerator) -> None:
    prompts = [[3 + (i * 7 + j) % 10 for j in range(4)] + [13] for i in range(64)]
    kw = dict(prompts=prompts, n_samples=1, max_new_tokens=6, temperature=1.0, top_p=1.0,
              top_k=-1)
    sample(generator, **kw)  # warm-up
    start = time.perf_counter()
    outs = sample(generator, **kw)
    seconds = time.perf_counter() - start
    print(f"hf generate 64 x 6 tokens: {seconds * 1000:.1f} ms")
    # about 12-30 ms on an idle 2-core machine; the bound only catches pathologies (a lost KV
    # cache, per-step [B, V] logits kept), since shared CI machines are noisy
    assert len(outs) == 64 and seconds < 3.0


def test_top_k_minus_one_means_no_top_k_and_top_k_filters() -> None:
    # HF's GenerationConfig defaults to top_k=50: miles' -1 must not turn into that
    wide = ModelShape(**{**SHAPE.__dict__, "vocab_size": 256})
    gen = HFGenerator(wide, "llama", init_seed=0)  # near-uniform next-token distribution

    def distinct_first_tokens(top_k: int) -> int:
        outs = gen.generate([[5, 6]], n_samples=200, temperature=1.0, top_p=1.0, top_k=top_k,
                            max_new_tokens=1, eos_token_id=None, pad_token_id=PAD, seed=0)
        return len({o.response_ids[0] for o in outs})

    assert distinct_first_tokens(-1) > 50
    assert distinct_first_tokens(5) <= 5


def test_without_eos_every_response_runs_to_max_new_tokens() -> None:
    # the HF config's default eos id (2 for Llama) must not stop generation
    uniform = HFGenerator(SHAPE, "llama", init_seed=0)  # near-uniform: token 2 shows up
    outs = sample(uniform, n_samples=8, eos_token_id=None, temperature=1.0)
    assert all(len(o.response_ids) == 6 and o.truncated for o in outs)
    assert any(2 in o.response_ids[:-1] for o in outs)


def test_decoder_variant_env_is_noted(monkeypatch) -> None:
    """PPODECK_DECODE picks the fast decoder's variant; the init notes say so (and that the
    CPU backend does not use it); a bad name falls back to 'ref', also noted."""
    monkeypatch.setenv("PPODECK_DECODE", "fused+graph-sampling")
    gen = HFGenerator(SHAPE, "llama", init_seed=5)
    assert gen.decode_options.fused and gen.decode_options.graph_sampling
    assert len(gen.notes) == 1 and "fused+graph-sampling" in gen.notes[0]
    assert "CUDA only" in gen.notes[0]
    monkeypatch.setenv("PPODECK_DECODE", "warp")
    assert "ignored" in HFGenerator(SHAPE, "llama", init_seed=5).notes[0]
    monkeypatch.delenv("PPODECK_DECODE")
    assert HFGenerator(SHAPE, "llama", init_seed=5).notes == []


@pytest.mark.parametrize(("shape", "arch"), [(SHAPE, "llama"), (QWEN_SHAPE, "qwen3")])
def test_a_generator_whose_weights_will_be_pushed_skips_the_random_init(
        shape: ModelShape, arch: str) -> None:
    """init_weights=False: every parameter is zeros on the device (no meta tensor left), a
    tied head stays the embedding, the buffers (RoPE) are those of a normal build, and after
    a push it samples exactly as a randomly initialized generator given the same weights."""
    empty = HFGenerator(shape, arch, init_weights=False)
    source = HFGenerator(shape, arch, init_seed=3)
    params = dict(empty.model.named_parameters())
    assert params and all(not p.is_meta and not p.any() for p in params.values())
    assert not empty.weights_initialized and "weights init" not in " ".join(empty.parts)
    assert {"model import", "model build", "to device"} <= set(empty.parts)
    if not shape.untie_embeddings:
        assert empty.model.lm_head.weight is empty.model.model.embed_tokens.weight
    for (name, buffer), (_, built) in zip(empty.model.named_buffers(),
                                          source.model.named_buffers(), strict=True):
        assert torch.equal(buffer, built), name
    empty.load_weights({k: v.clone() for k, v in source.model.state_dict().items()})
    assert sample(empty) == sample(source)


def test_a_generator_without_a_push_keeps_its_seeded_random_weights() -> None:
    """--debug-rollout-only / --debug-train-only sample from the generator's own weights:
    real, seeded, reproducible."""
    a, b = HFGenerator(SHAPE, "llama", init_seed=7), HFGenerator(SHAPE, "llama", init_seed=7)
    assert a.weights_initialized and "model build + weights init" in a.parts
    for (name, x), (_, y) in zip(a.model.named_parameters(), b.model.named_parameters(),
                                 strict=True):
        assert torch.equal(x, y), name
    assert a.model.model.embed_tokens.weight.std() > 0.01
