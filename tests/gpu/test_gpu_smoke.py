"""GPU smoke tests: run on the device machine only (`python -m pytest tests/gpu -m gpu -q`).

- our SDPA core attention agrees with Megatron's stock attention in bf16, and its no-mask
  path really runs on the FlashAttention backend (enable_gqa, causal);
- fast_generate's CUDA graph replays exactly what its eager decode loop computes;
- a tiny PPO round (a CriticWorker then an ActorWorker) trains on CUDA in bf16;
- NVML sampling (engine.host.machine.nvml_devices) sees the GPU.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ppodeck.engine.driver.cluster import free_port

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _close(mine: torch.Tensor, theirs: torch.Tensor, rel: float, what: str) -> None:
    scale = max(1.0, theirs.float().abs().max().item())
    diff = (mine.float() - theirs.float()).abs().max().item()
    assert diff <= rel * scale, f"{what}: max |diff| {diff:.3e} > {rel} x {scale:.3g}"


def _config(heads: int = 16, groups: int = 8, head_dim: int = 128):  # noqa: ANN202
    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism

    shape = ModelShape(num_layers=2, hidden_size=1024, ffn_hidden_size=3072,
                       num_attention_heads=heads, num_query_groups=groups,
                       kv_channels=head_dim, vocab_size=1024, max_sequence_length=2048,
                       normalization="RMSNorm", swiglu=True, qk_layernorm=True,
                       add_bias_linear=False)
    return shape, transformer_config(shape, Parallelism(), bf16=True)


def test_sdpa_attention_matches_stock_in_bf16(megatron) -> None:
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ppodeck.engine.train.attention import SDPADotProductAttention

    _, config = _config()
    kwargs = dict(config=config, layer_number=1, attn_mask_type=AttnMaskType.causal,
                  attention_type="self", pg_collection=SimpleNamespace(tp=SimpleNamespace(
                      size=lambda: 1)))
    ours, stock = SDPADotProductAttention(**kwargs), DotProductAttention(**kwargs)
    gen = torch.Generator(device="cuda").manual_seed(0)
    sq, b = 1024, 2

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16,
                           generator=gen).requires_grad_()

    q, k, v = leaf(sq, b, 16, 128), leaf(sq, b, 8, 128), leaf(sq, b, 8, 128)
    causal = torch.triu(torch.ones(sq, sq, dtype=torch.bool, device="cuda"), 1)[None, None]
    for mask, what in ((None, "no mask (flash, enable_gqa)"), (causal, "explicit mask")):
        results = []
        for module in (ours, stock):
            for t in (q, k, v):
                t.grad = None
            if module is ours and mask is None:
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # fails if flash cannot run
                    out = module(q, k, v, mask)
            else:
                out = module(q, k, v, mask)
            out.float().pow(2).sum().backward()
            results.append([out.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone()])
        for name, mine, theirs in zip(("out", "dq", "dk", "dv"), *results, strict=True):
            _close(mine, theirs, 3e-2, f"{what} {name}")


def test_gpt_logits_with_sdpa_match_stock_in_bf16(megatron, monkeypatch) -> None:
    from ppodeck.engine.train.model import build_gpt

    shape, config = _config()
    models = {}
    for attention in ("sdpa", "unfused"):
        monkeypatch.setenv("PPODECK_ATTENTION", attention)
        models[attention] = build_gpt(shape, "actor", config, seed=7).cuda().eval()
    models["unfused"].load_state_dict(models["sdpa"].state_dict())
    ids = torch.randint(0, shape.vocab_size, (4, 512), device="cuda")
    positions = torch.arange(512, device="cuda").expand_as(ids)
    with torch.no_grad():
        ours = models["sdpa"](ids, positions, None)
        theirs = models["unfused"](ids, positions, None)
    _close(ours, theirs, 5e-2, "logits")
    assert ours.argmax(-1).eq(theirs.argmax(-1)).float().mean() > 0.95


def test_fast_generate_graph_replays_the_eager_loop() -> None:
    from transformers import AutoModelForCausalLM

    from ppodeck.engine.model.convert import hf_config
    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.rollout.decoder import generate as fg

    shape = ModelShape(num_layers=4, hidden_size=256, ffn_hidden_size=512,
                       num_attention_heads=8, num_query_groups=4, kv_channels=32,
                       vocab_size=1024, max_sequence_length=512, rotary_base=1e6,
                       norm_epsilon=1e-6, normalization="RMSNorm", swiglu=True,
                       qk_layernorm=True, add_bias_linear=False)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(shape, "qwen3"),
                                             dtype=torch.bfloat16).cuda().eval()
    rows = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]] * 4
    kwargs = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=40, eos_token_id=None,
                  pad_token_id=0, seed=0)
    graph_tokens, graph_lps = fg.fast_generate(model, rows, use_cuda_graph=True, **kwargs)
    assert fg.decoder_for(model)._graphs, "no CUDA graph was captured"
    fg.release_decoders()
    eager_tokens, eager_lps = fg.fast_generate(model, rows, use_cuda_graph=False, **kwargs)
    assert graph_tokens == eager_tokens
    torch.testing.assert_close(torch.tensor(graph_lps), torch.tensor(eager_lps))
    sampled, _ = fg.fast_generate(model, rows, **{**kwargs, "temperature": 1.0})
    assert all(len(t) == 40 for t in sampled)


def _small_qwen3_bf16():  # noqa: ANN202
    from transformers import AutoModelForCausalLM

    from ppodeck.engine.model.convert import hf_config
    from ppodeck.engine.model.shape import ModelShape

    shape = ModelShape(num_layers=4, hidden_size=256, ffn_hidden_size=512,
                       num_attention_heads=8, num_query_groups=4, kv_channels=32,
                       vocab_size=1024, max_sequence_length=512, rotary_base=1e6,
                       norm_epsilon=1e-6, normalization="RMSNorm", swiglu=True,
                       qk_layernorm=True, add_bias_linear=False)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(hf_config(shape, "qwen3"),
                                            dtype=torch.bfloat16).cuda().eval()


@pytest.mark.parametrize("features", [
    dict(graph_sampling=True),  # today's layers: tokens must equal torch.multinomial's
    dict(fused=True),
    dict(packed=True, graph_sampling=True),
    dict(packed=True, graph_sampling=True, compiled=True),
])
def test_fast_generate_variant_graphs_replay_their_eager_loop(features) -> None:
    """Each decoder variant (issue 20): its CUDA graph (sampling inside for graph-sampling,
    the generator registered with it) replays exactly its eager
    loop, greedy and sampled; graph-sampling on today's layers draws today's tokens."""
    from ppodeck.engine.rollout.decoder import generate as fg
    from ppodeck.engine.rollout.decoder.features import REFERENCE, DecodeOptions

    model = _small_qwen3_bf16()
    options = DecodeOptions(**features)
    rows = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]] * 4
    for temperature in (0.0, 1.0):
        kwargs = dict(temperature=temperature, top_p=1.0, top_k=-1, max_new_tokens=40,
                      eos_token_id=None, pad_token_id=0, seed=3, options=options)
        graph = fg.fast_generate(model, rows, use_cuda_graph=True, **kwargs)
        assert fg.decoder_for(model, options)._graphs, "no CUDA graph was captured"
        fg.release_decoders()
        eager = fg.fast_generate(model, rows, use_cuda_graph=False, **kwargs)
        assert graph[0] == eager[0], f"T={temperature}"
        torch.testing.assert_close(torch.tensor(graph[1]), torch.tensor(eager[1]))
        if options == DecodeOptions(graph_sampling=True):
            reference = fg.fast_generate(model, rows, **{**kwargs, "options": REFERENCE})
            assert graph[0] == reference[0], f"T={temperature}"


def test_compiled_decoder_greedy_tokens_match_the_reference() -> None:
    """`compiled` (inductor kernels captured in our CUDA graph) against today's path, greedy,
    bf16: inductor computes a fused chain in fp32 and rounds once (emulate_precision_casts
    rounds like eager, but the residual adds are no longer inside the GEMM epilogue), so the
    tolerance of the fused/sdpa logits checks above applies: >= 95%
    of the tokens equal, log-probs within 5e-2 on each row's common prefix."""
    from ppodeck.engine.rollout.decoder import generate as fg
    from ppodeck.engine.rollout.decoder import layers
    from ppodeck.engine.rollout.decoder.features import REFERENCE, DecodeOptions

    model = _small_qwen3_bf16()
    rows = [[5 + i, 6 + 2 * i, 7 + 3 * i][: 1 + i % 3] for i in range(12)]
    kwargs = dict(temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=40, eos_token_id=None,
                  pad_token_id=0, seed=0)
    options = DecodeOptions(packed=True, graph_sampling=True, compiled=True)
    tokens, log_probs = fg.fast_generate(model, rows, options=options, **kwargs)
    assert fg.decoder_for(model, options)._graphs, "no CUDA graph was captured"
    assert layers._COMPILED, "the compiled functions were not built"
    fg.release_decoders()
    ref_tokens, ref_log_probs = fg.fast_generate(model, rows, options=REFERENCE, **kwargs)
    pairs = [(a, b) for ra, rb in zip(tokens, ref_tokens, strict=True)
             for a, b in zip(ra, rb, strict=True)]
    assert sum(a == b for a, b in pairs) / len(pairs) >= 0.95
    for ours, ref, lp, ref_lp in zip(tokens, ref_tokens, log_probs, ref_log_probs, strict=True):
        same = next((i for i, (a, b) in enumerate(zip(ours, ref, strict=True)) if a != b),
                    len(ref))
        torch.testing.assert_close(torch.tensor(lp[:same]), torch.tensor(ref_lp[:same]),
                                   rtol=0, atol=5e-2)


def test_hf_rollout_offload_frees_the_gpu_and_generates_the_same_after() -> None:
    """The rollout offload on CUDA: weights to pinned host at copy speed, KV cache and graphs
    freed, and greedy generation identical after onload (the graphs are recaptured)."""
    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.rollout.hf_backend import HFGenerator

    shape = ModelShape(num_layers=4, hidden_size=512, ffn_hidden_size=1024,
                       num_attention_heads=8, num_query_groups=4, kv_channels=64,
                       vocab_size=32000, max_sequence_length=512, rotary_base=1e6,
                       norm_epsilon=1e-6, normalization="RMSNorm", swiglu=True,
                       qk_layernorm=True, add_bias_linear=False, untie_embeddings=True)
    gen = HFGenerator(shape, "qwen3", device="cuda", dtype=torch.bfloat16, init_seed=2)
    kwargs = dict(n_samples=1, max_new_tokens=24, temperature=0.0, top_p=1.0, top_k=-1,
                  eos_token_id=None, pad_token_id=0, seed=0)
    rows = [[5, 6, 7, 8], [9, 10]] * 8
    first = gen.generate(rows, **kwargs)
    used = torch.cuda.memory_allocated()
    down = gen.offload()
    assert not down["noop"] and down["bytes"] > 0
    assert used - torch.cuda.memory_allocated() >= down["bytes"]  # weights and KV cache gone
    up = gen.onload()
    assert up["bytes"] == down["bytes"]
    again = gen.offload(), gen.onload()  # pinned buffers exist now: the copy rate is real
    assert again[0]["gbps"] > 5 and again[1]["gbps"] > 5, again
    second = gen.generate(rows, **kwargs)
    assert [o.response_ids for o in first] == [o.response_ids for o in second]


def test_tiny_ppo_round_trains_on_cuda() -> None:
    """Critic (values, GAE returns, value steps), then the actor with those values, bf16."""
    import math

    from ppodeck.engine.train.worker import train_worker
    from tests.train.worker_harness import tiny_args, tiny_batch

    args, batch = tiny_args(), tiny_batch()
    critic = train_worker("critic", 0, 1, "127.0.0.1", free_port(), args)
    critic.init()
    critic_out = critic.train_critic(0, batch)
    dtype = next(critic.model.parameters()).dtype
    critic.shutdown()
    assert dtype == torch.bfloat16
    values = critic_out["values"]
    assert sorted(values) == batch.sample_indices
    actor = train_worker("actor", 0, 1, "127.0.0.1", free_port(), args)
    actor.init()
    before = {n: p.detach().float().clone() for n, p in actor.model.named_parameters()}
    actor_out = actor.train_actor(0, batch, values)
    changed = any(not torch.equal(before[n], p.detach().float())
                  for n, p in actor.model.named_parameters())
    actor.shutdown()
    metrics = critic_out["step_metrics"] + actor_out["step_metrics"]
    assert metrics and all(math.isfinite(v) for m in metrics for v in m.values())
    assert changed


def test_nvml_sampling_sees_the_gpu() -> None:
    from ppodeck.engine.host.machine import nvml_devices

    devices = nvml_devices()
    assert devices, "nvml_devices() returned nothing (is nvidia-ml-py installed?)"
    assert len(devices) >= torch.cuda.device_count()
    for device in devices:
        assert 0 < device["used_bytes"] <= device["total_bytes"]
    total = torch.cuda.get_device_properties(0).total_memory
    assert any(abs(d["total_bytes"] - total) / total < 0.1 for d in devices)
