"""The graph-sampling draw at T=1 in two Triton kernels (the decoder's `fused-sampling`).

Why: sampling over a 151,936-token vocabulary was a tenth of a batch-64 decode step (issue 20's
profile, docs/performance.md): an fp32 softmax and an fp32 log-softmax of the logits, each written
out in full ([64, 151936] fp32, 39 MB), then probs / noise and its argmax. The draw is the
Gumbel-max one torch.multinomial makes (argmax of p / q, q ~ Exp(1) from the generator): argmax(p_i
/ q_i) is argmax(logit_i - log q_i) (p_i = exp(logit_i) / S, S the same for every i), so one pass
over the logits and the noise gives the token, with the row's max and sum of exponentials (online)
for its log-prob, logit - max - log(sum). The noise is still drawn by torch (same generator, same
draws):
  - kernel 1, grid (rows, chunks of the vocabulary): per chunk its max logit, sum of
    exp(logit - max), best logit - log q and that token (the first one on a tie);
  - kernel 2, grid (rows,): the chunks combined -> token, log-prob.
Ties between two candidates' scores within float rounding may draw differently from
torch.multinomial's p / q (the same maths rounded otherwise); tokens otherwise are its tokens.

`cdf-sampling` draws from the same distribution by inverse CDF, from one uniform u per row
instead of a [B, V] fp32 noise tensor (drawing that noise is a kernel of its own, and reading it
back 39 MB more in kernel 1):
  - kernel 1 as above without the noise: per chunk its max logit and sum of exponentials;
  - kernel 2, grid (rows,): the chunks' masses exp(max_c - max) sum_c in vocabulary order, the
    first chunk whose running total passes u * total, then within it the first token whose
    running total (the earlier chunks' mass + its own prefix) passes the target -> token; the
    log-prob as above. Where rounding leaves the chunk's running total short of the target,
    the chunk's last token of non-zero probability.
The tokens follow the distribution torch.multinomial samples, not its draws.

`sample_plain(logits, noise)` and `sample_cdf(logits, uniform)` run them. `record` writes a
step's draw into the decode state in one kernel (what decoder.sampling.record and the cache
index's += 1 did in seven small ones). `kernel_status` is decode_attention's.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

CHUNK = 4096  # vocabulary entries per program of kernel 1


@functools.cache
def _kernels(interpret: bool) -> tuple[Any, Any, Any]:  # noqa: ANN401
    """(chunk kernel, Gumbel combine kernel, CDF combine kernel), jitted at first use
    (`interpret` keys the cache)."""
    del interpret
    import triton
    import triton.language as tl

    @triton.jit
    def gumbel_chunk_kernel(logits_ptr, noise_ptr, part_max_ptr, part_sum_ptr, part_score_ptr,
                            part_token_ptr, vocab, logits_stride, noise_stride, chunks,
                            CHUNK: tl.constexpr, GUMBEL: tl.constexpr):
        # GUMBEL: also the chunk's best logit - log q and its token; else (cdf-sampling) only
        # the max and the sum of exponentials
        row = tl.program_id(0).to(tl.int64)
        chunk = tl.program_id(1)
        tokens = chunk * CHUNK + tl.arange(0, CHUNK)
        ok = tokens < vocab
        logits = tl.load(logits_ptr + row * logits_stride + tokens, mask=ok,
                         other=float("-inf")).to(tl.float32)
        top = tl.max(logits, 0)
        total = tl.sum(tl.exp(logits - top), 0)
        out = row * chunks + chunk
        tl.store(part_max_ptr + out, top)
        tl.store(part_sum_ptr + out, total)
        if GUMBEL:
            noise = tl.load(noise_ptr + row * noise_stride + tokens, mask=ok, other=1.0)
            scores = tl.where(ok, logits - tl.log(noise), float("-inf"))
            best = tl.max(scores, 0)
            first = tl.min(tl.where(scores == best, tokens, vocab), 0)  # the first on a tie
            tl.store(part_score_ptr + out, best)
            tl.store(part_token_ptr + out, first)

    @triton.jit
    def gumbel_combine_kernel(logits_ptr, part_max_ptr, part_sum_ptr, part_score_ptr,
                              part_token_ptr, token_ptr, log_prob_ptr, logits_stride, chunks,
                              vocab, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        i = tl.arange(0, BLOCK)
        ok = i < chunks
        top = tl.load(part_max_ptr + row * chunks + i, mask=ok, other=float("-inf"))
        total = tl.load(part_sum_ptr + row * chunks + i, mask=ok, other=0.0)
        scores = tl.load(part_score_ptr + row * chunks + i, mask=ok, other=float("-inf"))
        candidates = tl.load(part_token_ptr + row * chunks + i, mask=ok, other=vocab)
        row_max = tl.max(top, 0)
        row_sum = tl.sum(total * tl.exp(top - row_max), 0)
        best = tl.max(scores, 0)
        token = tl.min(tl.where(scores == best, candidates, vocab), 0)
        logit = tl.load(logits_ptr + row * logits_stride + token).to(tl.float32)
        tl.store(token_ptr + row, token.to(tl.int64))
        tl.store(log_prob_ptr + row, logit - row_max - tl.log(row_sum))

    @triton.jit
    def cdf_combine_kernel(logits_ptr, part_max_ptr, part_sum_ptr, uniform_ptr, token_ptr,
                           log_prob_ptr, logits_stride, chunks, vocab, BLOCK: tl.constexpr,
                           CHUNK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        i = tl.arange(0, BLOCK)
        ok = i < chunks
        top = tl.load(part_max_ptr + row * chunks + i, mask=ok, other=float("-inf"))
        total = tl.load(part_sum_ptr + row * chunks + i, mask=ok, other=0.0)
        row_max = tl.max(top, 0)
        mass = tl.where(ok, total * tl.exp(top - row_max), 0.0)
        running = tl.cumsum(mass, 0)
        row_sum = tl.sum(mass, 0)
        target = tl.load(uniform_ptr + row) * row_sum
        chunk = tl.minimum(tl.min(tl.where(running > target, i, BLOCK), 0), chunks - 1)
        before = tl.sum(tl.where(i < chunk, mass, 0.0), 0)
        tokens = chunk * CHUNK + tl.arange(0, CHUNK)
        logits = tl.load(logits_ptr + row * logits_stride + tokens, mask=tokens < vocab,
                         other=float("-inf")).to(tl.float32)
        p = tl.exp(logits - row_max)
        passed = tl.where(before + tl.cumsum(p, 0) > target, tokens, vocab)
        token = tl.min(passed, 0)
        last = tl.max(tl.where(p > 0, tokens, -1), 0)  # rounding left the chunk short
        token = tl.where(token == vocab, last, token)
        logit = tl.load(logits_ptr + row * logits_stride + token).to(tl.float32)
        tl.store(token_ptr + row, token.to(tl.int64))
        tl.store(log_prob_ptr + row, logit - row_max - tl.log(row_sum))

    return gumbel_chunk_kernel, gumbel_combine_kernel, cdf_combine_kernel


@functools.cache
def _record_kernel(interpret: bool) -> Any:  # noqa: ANN401
    """`record`'s kernel, jitted at first use (`interpret` keys the cache)."""
    del interpret
    import triton
    import triton.language as tl

    @triton.jit
    def record_kernel(tokens_ptr, log_probs_ptr, token_ptr, out_tokens_ptr, out_log_probs_ptr,
                      finished_ptr, step_ptr, index_ptr, eos_ptr, rows, out_stride,
                      BLOCK: tl.constexpr):
        # one program: every row's writes, then the step and the cache index moved on (after a
        # barrier, so no thread reads the step another has already moved)
        r = tl.arange(0, BLOCK)
        ok = r < rows
        step = tl.load(step_ptr)
        index = tl.load(index_ptr)
        tokens = tl.load(tokens_ptr + r, mask=ok)
        tl.store(out_tokens_ptr + r * out_stride + step, tokens, mask=ok)
        tl.store(out_log_probs_ptr + r * out_stride + step, tl.load(log_probs_ptr + r, mask=ok),
                 mask=ok)
        ended = tl.load(finished_ptr + r, mask=ok) != 0
        tl.store(finished_ptr + r, (ended | (tokens == tl.load(eos_ptr))).to(tl.int8), mask=ok)
        tl.store(token_ptr + r, tokens, mask=ok)
        tl.debug_barrier()
        tl.store(step_ptr, step + 1)
        tl.store(index_ptr, index + 1)

    return record_kernel


def sample_plain(logits: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] (unit last stride), noise [B, V] fp32 ~ Exp(1) -> (tokens [B] long: argmax of
    softmax(logits) / noise, log-probs [B] fp32: log-softmax(logits) of those tokens)."""
    rows, vocab = logits.shape
    chunks = -(-vocab // CHUNK)
    device = logits.device
    parts = [torch.empty((rows, chunks), dtype=torch.float32, device=device) for _ in range(3)]
    part_token = torch.empty((rows, chunks), dtype=torch.int32, device=device)
    tokens = torch.empty(rows, dtype=torch.long, device=device)
    log_probs = torch.empty(rows, dtype=torch.float32, device=device)
    chunk_kernel, combine_kernel, _ = _kernels(os.environ.get("TRITON_INTERPRET") == "1")
    chunk_kernel[(rows, chunks)](logits, noise, *parts, part_token, vocab, logits.stride(0),
                                 noise.stride(0), chunks, CHUNK=CHUNK, GUMBEL=True, num_warps=8)
    combine_kernel[(rows,)](logits, *parts, part_token, tokens, log_probs, logits.stride(0),
                            chunks, vocab, BLOCK=max(16, 1 << (chunks - 1).bit_length()),
                            num_warps=1)
    return tokens, log_probs


def sample_cdf(logits: torch.Tensor, uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] (unit last stride), uniform [B] fp32 in [0, 1) -> (tokens [B] long: the
    first token whose cumulative softmax(logits) passes its row's u, log-probs [B] fp32:
    log-softmax(logits) of those tokens). The noise-free draw of cdf-sampling."""
    rows, vocab = logits.shape
    chunks = -(-vocab // CHUNK)
    device = logits.device
    part_max, part_sum = (torch.empty((rows, chunks), dtype=torch.float32, device=device)
                          for _ in range(2))
    tokens = torch.empty(rows, dtype=torch.long, device=device)
    log_probs = torch.empty(rows, dtype=torch.float32, device=device)
    chunk_kernel, _, combine_kernel = _kernels(os.environ.get("TRITON_INTERPRET") == "1")
    chunk_kernel[(rows, chunks)](logits, logits, part_max, part_sum, part_max, part_max, vocab,
                                 logits.stride(0), 0, chunks, CHUNK=CHUNK, GUMBEL=False,
                                 num_warps=8)
    combine_kernel[(rows,)](logits, part_max, part_sum, uniform, tokens, log_probs,
                            logits.stride(0), chunks, vocab,
                            BLOCK=max(16, 1 << (chunks - 1).bit_length()), CHUNK=CHUNK,
                            num_warps=8)
    return tokens, log_probs


def sample_cdf_by_torch(logits: torch.Tensor,
                        uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sample_cdf's maths in torch ops (fp32 softmax, one cumulative sum over the vocabulary):
    the tests' reference (without Triton the decoder samples by sample_sync_free instead)."""
    probs = torch.softmax(logits, -1, dtype=torch.float32)
    running = probs.cumsum(-1)
    target = uniform[:, None] * running[:, -1:]
    tokens = (running <= target).sum(-1).clamp(max=logits.shape[-1] - 1)
    log_probs = torch.log_softmax(logits, -1, dtype=torch.float32)
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


def record(tokens: torch.Tensor, log_probs: torch.Tensor, token: torch.Tensor,
           out_tokens: torch.Tensor, out_log_probs: torch.Tensor, finished: torch.Tensor,
           step: torch.Tensor, index: torch.Tensor, eos: torch.Tensor) -> None:
    """A step's draw into the decode state, in place, one launch: out_tokens[:, step] and
    out_log_probs[:, step] <- tokens, log_probs; finished |= tokens == eos; token <- tokens;
    step += 1; index += 1 (decoder.sampling.record + the cache index's move, same contract).
    Long tokens, fp32 log-probs, bool finished, 0-d long step/index/eos, outputs rows with a
    unit last stride."""
    rows = tokens.shape[0]
    if out_tokens.stride() != out_log_probs.stride() or out_tokens.stride(-1) != 1:
        raise ValueError("record: out_tokens and out_log_probs need the same strides, unit last")
    kernel = _record_kernel(os.environ.get("TRITON_INTERPRET") == "1")
    kernel[(1,)](tokens, log_probs, token, out_tokens, out_log_probs, finished.view(torch.int8),
                 step, index, eos, rows, out_tokens.stride(0),
                 BLOCK=max(16, 1 << (rows - 1).bit_length()), num_warps=4)
