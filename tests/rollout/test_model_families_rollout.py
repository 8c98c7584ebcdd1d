"""The hf rollout for Qwen2 (q/k/v biases) and Llama 3 (rope scaling): the model it builds takes
the actor's converted weights, the fast decoder runs Llama 3's RoPE and refuses Qwen2's biases,
and its fallback to transformers' generate is said."""

from __future__ import annotations

import torch

from ppodeck.engine.model.convert import arch_for, hf_to_mcore, mcore_to_hf, shape_from_hf_config
from ppodeck.engine.rollout.decoder import generate as fg
from ppodeck.engine.rollout.hf_backend import HFGenerator
from tests.model.test_convert_families import tiny_family
from tests.rollout.test_fast_generate import PAD, ROWS, hf_greedy


def test_llama3_rope_runs_in_the_fast_decoder_like_transformers() -> None:
    model = tiny_family("llama3")
    assert fg.can_use(model) == (True, "ok")
    tokens, log_probs = fg.fast_generate(model, ROWS, temperature=0.0, top_p=1.0, top_k=-1,
                                         max_new_tokens=9, eos_token_id=None, pad_token_id=PAD,
                                         seed=1)
    assert tokens == hf_greedy(model, ROWS, 9)
    assert all(len(lp) == 9 for lp in log_probs)


def test_qwen2_biases_are_refused_by_the_fast_decoder() -> None:
    ok, why = fg.can_use(tiny_family("qwen2"))
    assert not ok and "q/k/v biases" in why


def test_the_rollout_model_takes_converted_weights_with_biases() -> None:
    hf = tiny_family("qwen2", tied=False)
    shape = shape_from_hf_config(hf.config)
    gen = HFGenerator(shape, arch_for(shape), init_weights=False)
    pushed = mcore_to_hf(hf_to_mcore(hf.state_dict(), shape, "qwen2"), shape, "qwen2")
    gen.load_weights(pushed)
    bias = "model.layers.1.self_attn.v_proj.bias"
    assert torch.equal(gen.model.state_dict()[bias], hf.state_dict()[bias])
    ids = torch.tensor([[3, 9, 4, 11]])
    with torch.no_grad():
        torch.testing.assert_close(gen.model(ids).logits, hf(ids).logits, rtol=0, atol=1e-5)


def test_a_cuda_fallback_to_generate_is_named(monkeypatch) -> None:
    """On CUDA the fast decoder is the default: a model it cannot run gets an override (a
    warning the rollout manager announces at start), not a silent switch. The device is faked:
    the check reads it."""
    shape = shape_from_hf_config(tiny_family("qwen2").config)
    gen = HFGenerator(shape, "qwen2", init_weights=False)
    assert not any("fast decoder" in n for n in gen.notes + gen.overrides)  # CPU: none anyway
    gen.device = torch.device("cuda")
    gen._note_decoder_fallback()
    assert any("cannot run this model (Qwen2's q/k/v biases are not implemented)" in n
               and "transformers' generate" in n for n in gen.overrides), gen.overrides
    monkeypatch.setenv("PPODECK_FAST_GENERATE", "0")  # turned off by the user: nothing to say
    gen.overrides.clear()
    gen._note_decoder_fallback()
    assert gen.overrides == []
