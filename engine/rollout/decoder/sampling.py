"""Sampling with transformers' semantics: temperature, then top-k, then top-p (min 1 token kept);
log-probs are log-softmax(logits / T) of the chosen token before filtering, exactly what
hf_backend.chosen_log_probs computes. `sample` is the host-side path (torch.multinomial),
`sample_sync_free` graph-sampling's capturable draw, `sample_fused` fused-sampling's and
cdf-sampling's Triton kernels, `advance` the in-graph tail of a graph-sampling step."""

from __future__ import annotations

import torch

from .kernels import sampling_kernel
from .state import DecodeState, Sampling


def filter_logits(logits: torch.Tensor, temperature: float, top_p: float,
                  top_k: int) -> torch.Tensor:
    scores = logits.float()
    if temperature > 0 and temperature != 1.0:
        scores = scores / temperature
    if top_k and top_k > 0 and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
        cumulative = sorted_scores.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_scores.softmax(-1) >= top_p  # keep the token crossing top_p
        drop[..., 0] = False
        scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return scores


def chosen_log_probs(logits: torch.Tensor, tokens: torch.Tensor,
                     temperature: float) -> torch.Tensor:
    """log-softmax(logits / T) of the chosen tokens (hf_backend.chosen_log_probs)."""
    raw = logits.float()
    if temperature not in (0.0, 1.0) and temperature > 0:
        raw = raw / temperature
    return torch.log_softmax(raw, -1).gather(-1, tokens[:, None]).squeeze(-1)


def sample(logits: torch.Tensor, temperature: float, top_p: float, top_k: int,
           generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [B], log-probs [B]) with hf_backend.chosen_log_probs' definition."""
    if temperature <= 0:
        tokens = logits.argmax(-1)
    else:
        probs = filter_logits(logits, temperature, top_p, top_k).softmax(-1)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, chosen_log_probs(logits, tokens, temperature)


def sample_sync_free(logits: torch.Tensor, sampling: Sampling,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample` without host syncs (graph-capturable): torch.multinomial draws one sample as
    argmax(p / q), q ~ Exp(1), after checking p on the host; the same draws without the check.
    At T=1 without filters the fp32 softmax/log-softmax read the logits as they are (dtype=):
    the same values without a float copy of [B, vocab] each."""
    temperature = sampling.temperature
    plain = temperature == 1.0 and sampling.top_p >= 1.0 and not 0 < sampling.top_k < \
        logits.shape[-1]
    if temperature <= 0:
        tokens = logits.argmax(-1)
    else:
        probs = torch.softmax(logits, -1, dtype=torch.float32) if plain else \
            filter_logits(logits, temperature, sampling.top_p, sampling.top_k).softmax(-1)
        noise = torch.empty_like(probs).exponential_(1, generator=generator)
        tokens = (probs / noise).argmax(-1)
    if temperature <= 0 or temperature == 1.0:
        log_probs = torch.log_softmax(logits, -1, dtype=torch.float32)
        return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, chosen_log_probs(logits, tokens, temperature)


def record(state: DecodeState, tokens: torch.Tensor, log_probs: torch.Tensor) -> None:
    """Write a step's tokens into the output column state.step and feed them back."""
    column = state.step.view(1)
    state.out_tokens.index_copy_(1, column, tokens[:, None])
    state.out_log_probs.index_copy_(1, column, log_probs[:, None])
    state.finished |= tokens == state.eos
    state.token.copy_(tokens)
    state.step += 1


def sample_fused(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator,
                 cdf: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """`fused-sampling`: sample_sync_free's draw, at T=1 without filters by the Triton kernels
    (kernels/sampling_kernel.py: the same noise, no softmax/log-softmax written out);
    `cdf` (cdf-sampling): by inverse CDF from one uniform per row, no noise tensor."""
    if sampling.temperature != 1.0 or sampling.top_p < 1.0 or \
            0 < sampling.top_k < logits.shape[-1]:
        return sample_sync_free(logits, sampling, generator)
    if cdf:
        uniform = torch.rand(logits.shape[0], generator=generator, device=logits.device)
        return sampling_kernel.sample_cdf(logits, uniform)
    noise = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    return sampling_kernel.sample_plain(logits, noise.exponential_(1, generator=generator))


def advance(state: DecodeState, sampling: Sampling, kernel: bool = False,
            cdf: bool = False) -> None:
    """The in-graph tail of a graph-sampling step: sample from state.logits (`kernel`: by
    fused-sampling's kernels, `cdf`: cdf-sampling's), record, and move the cache index to the
    next slot (`kernel`: both in sampling_kernel.record's one launch)."""
    if kernel:  # the draw and its bookkeeping in fused-sampling's kernels
        tokens, log_probs = sample_fused(state.logits, sampling, state.generator, cdf)
        sampling_kernel.record(tokens, log_probs, state.token, state.out_tokens,
                               state.out_log_probs, state.finished, state.step, state.index,
                               state.eos)
        return
    record(state, *sample_sync_free(state.logits, sampling, state.generator))
    state.index += 1
