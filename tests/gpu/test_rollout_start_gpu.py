"""The hf rollout's start on CUDA (`python -m pytest tests/gpu/test_rollout_start_gpu.py -m gpu`):
a generator built without init (zeros on the device, the actor's push to follow) samples
exactly as a seeded one once given its weights, on the fast decoder, also after a warm-up on
its zero weights; a seeded one is reproducible on the device."""

from __future__ import annotations

import pytest
import torch

from ppodeck.engine.model.shape import ModelShape
from ppodeck.engine.rollout.hf_backend import HFGenerator

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SHAPE = ModelShape(num_layers=2, hidden_size=256, ffn_hidden_size=512, num_attention_heads=4,
                   num_query_groups=2, kv_channels=64, vocab_size=512, max_sequence_length=256,
                   norm_epsilon=1e-6, qk_layernorm=True)
PROMPTS = [[4, 5, 6, 13], [7, 13, 9, 9]]


def sample(gen: HFGenerator) -> list:
    return gen.generate(PROMPTS, n_samples=2, temperature=1.0, top_p=1.0, top_k=-1,
                        max_new_tokens=8, eos_token_id=None, pad_token_id=0, seed=3)


def test_an_uninitialized_generator_samples_as_the_seeded_one_after_the_push() -> None:
    seeded = HFGenerator(SHAPE, "qwen3", device="cuda", dtype=torch.bfloat16, init_seed=2)
    again = HFGenerator(SHAPE, "qwen3", device="cuda", dtype=torch.bfloat16, init_seed=2)
    for x, y in zip(seeded.model.parameters(), again.model.parameters(), strict=True):
        assert x.is_cuda and torch.equal(x, y)
    empty = HFGenerator(SHAPE, "qwen3", device="cuda", dtype=torch.bfloat16,
                        init_weights=False)
    assert all(p.is_cuda and not p.any() for p in empty.model.parameters())
    assert empty.compiles_at_first_use()
    sample(empty)  # the warm-up on zero weights: uniform samples, dropped
    empty.offload()
    empty.onload()
    empty.load_weights({k: v.clone() for k, v in seeded.model.state_dict().items()})
    assert sample(empty) == sample(seeded)
