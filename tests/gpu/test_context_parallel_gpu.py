"""Context parallelism's attention on one GPU (`python -m pytest
tests/gpu/test_context_parallel_gpu.py -m gpu -q`): every CP rank's chunk attention, all ranks
simulated on the one device, against whole-sequence causal attention (FlashAttention through
SDPA with a lower-right causal bias), forward and backward, bf16 at a Qwen3-like head shape.
Several GPUs (the all-gather and its reduce-scatter over NCCL) have not run."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("cp", [2, 4])
def test_chunk_attention_is_causal_attention_on_the_gpu(cp: int) -> None:
    import torch.nn.functional as F

    from ppodeck.engine.train.context_parallel import chunk_attention, local_positions

    gen = torch.Generator(device="cuda").manual_seed(0)
    b, heads, groups, seq, d = 2, 32, 8, 1024, 128

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=gen, device="cuda").to(torch.bfloat16)

    q, k, v, grad = randn(b, heads, seq, d), randn(b, groups, seq, d), randn(b, groups, seq, d), \
        randn(b, heads, seq, d)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(ref[0], ref[1].repeat_interleave(4, 1),
                                          ref[2].repeat_interleave(4, 1), is_causal=True)
    want.backward(grad)
    k_grad, v_grad = torch.zeros_like(k, dtype=torch.float32), torch.zeros_like(v,
                                                                             dtype=torch.float32)
    for rank in range(cp):
        keep = local_positions(seq, cp, rank).cuda()
        mine = [q[:, :, keep].clone().requires_grad_(), k.clone().requires_grad_(),
                v.clone().requires_grad_()]
        out = chunk_attention(*mine, cp, rank, scale=d ** -0.5)
        out.backward(grad[:, :, keep])
        assert _relative_error(out, want[:, :, keep]) < 2e-2, rank
        assert _relative_error(mine[0].grad, ref[0].grad[:, :, keep]) < 2e-2, rank
        k_grad += mine[1].grad.float()  # what the reduce-scatter sums over the CP ranks
        v_grad += mine[2].grad.float()
    assert _relative_error(k_grad, ref[1].grad) < 2e-2
    assert _relative_error(v_grad, ref[2].grad) < 2e-2


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest difference over the largest magnitude (bf16 kernels sum in other orders)."""
    want = want.float()
    return ((got.float() - want).abs().max() / want.abs().max().clamp(min=1e-6)).item()
