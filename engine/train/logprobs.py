"""Per-response-token log-probs, entropy and values from the model output.

The actor's output is vocab-parallel logits [b, S, V/tp]; only the rows that predict response
tokens are taken (position prompt_len + t - 1, as miles' logit_processors.py), divided by the
rollout temperature,
and reduced in chunks of rows so that no extra full-vocab fp32 copy of the whole micro-batch
exists. Log-probs come from Megatron's vocab_parallel_cross_entropy and entropy from an
all-reduce over the TP group, so TP=1 and TP>1 give the same numbers.

On CUDA with TP=1 the rows go instead through one torch.compile'd function (gather, fp32 cast,
temperature, logsumexp, entropy, and their backward fused): the eager path makes ~10 passes
over fp32 full-vocab rows, a tenth of a train step (docs/performance.md).
`PPODECK_FUSED=0` turns it off; if compiling fails the eager maths run and a warning says so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def response_rows(output: torch.Tensor, response_index: torch.Tensor) -> torch.Tensor:
    """[b, S, X] model output -> [b*T, X], the rows at `response_index` ([b, T] flat indices)."""
    flat = output.reshape(-1, output.shape[-1])
    return flat.index_select(0, response_index.reshape(-1))


def response_values(output: torch.Tensor, response_index: torch.Tensor) -> torch.Tensor:
    """The critic's [b, S, 1] value-head output -> [b, T] fp32 values (never temperature-scaled)."""
    rows = response_rows(output, response_index)
    return rows.reshape(response_index.shape).float()


def scale_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """fp32 logits divided by the rollout temperature when it is neither 0 nor 1 (miles)."""
    logits = logits.float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    return logits


def token_log_probs(output: torch.Tensor, response_index: torch.Tensor, targets: torch.Tensor,
                    temperature: float, with_entropy: bool, chunk_rows: int = -1
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log pi(target), entropy or None), both [b, T] fp32, from vocab-parallel logits."""
    index = response_index.reshape(-1)
    flat = output.reshape(-1, output.shape[-1])
    flat_targets = targets.reshape(-1)
    chunk = index.numel() if chunk_rows <= 0 else chunk_rows
    fused = fused_rows_fn(flat)
    log_probs, entropies = [], []
    for start in range(0, index.numel(), max(chunk, 1)):
        rows_index, rows_targets = index[start:start + chunk], flat_targets[start:start + chunk]
        if fused is not None:
            logp, entropy = fused_log_probs(fused, flat, rows_index, rows_targets, temperature,
                                            with_entropy, every_row=chunk >= index.numel())
            log_probs.append(logp)
            if with_entropy:
                entropies.append(entropy)
            continue
        rows = scale_logits(flat.index_select(0, rows_index), temperature)
        if with_entropy:
            entropies.append(vocab_parallel_entropy(rows))
            rows = rows.clone()  # cross entropy below works in place on its input
        log_probs.append(vocab_parallel_log_probs(rows, rows_targets))
    shape = response_index.shape
    logp = torch.cat(log_probs).reshape(shape)
    entropy = torch.cat(entropies).reshape(shape) if with_entropy else None
    return logp, entropy


def vocab_parallel_log_probs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] over the full (TP-sharded) vocabulary. Mutates `logits`."""
    from megatron.core import tensor_parallel

    return -tensor_parallel.vocab_parallel_cross_entropy(logits, targets)


def vocab_parallel_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax over the full vocabulary from TP-sharded fp32 logits [N, V/tp].

    H = log Z - sum_v p_v (z_v - m), with m the global max and Z = sum_v exp(z_v - m). The sums
    are all-reduced with megatron's reduce_from_tensor_model_parallel_region (backward: identity),
    which gives each TP rank the right gradient for its shard.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

    max_logit = logits.detach().max(dim=-1, keepdim=True).values
    if ps.get_tensor_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(max_logit, op=torch.distributed.ReduceOp.MAX,
                                     group=ps.get_tensor_model_parallel_group())
    shifted = logits - max_logit
    exp = shifted.exp()
    sums = torch.stack([exp.sum(dim=-1), (exp * shifted).sum(dim=-1)])
    sums = reduce_from_tensor_model_parallel_region(sums)
    normalizer, weighted = sums[0], sums[1]
    return normalizer.log() - weighted / normalizer


# --- fused TP=1 path ------------------------------------------------------------------------
_COMPILED: dict[str, Callable] = {}


def fused_log_probs(row_maths: Callable, flat: torch.Tensor, index: torch.Tensor,
                    targets: torch.Tensor, temperature: float, with_entropy: bool,
                    every_row: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`row_maths` (the compiled `_row_maths`) on the indexed rows of `flat`.

    `every_row`: run it over all rows of `flat` and pick the indexed results afterwards. The
    backward then writes the logits' gradient in one fused pass instead of zero-filling it and
    scattering the selected rows into it (a full-vocab pass of its own); responses
    are most of the rows, so the extra rows cost less than the scatter. The index work stays
    outside the compiled function, which sees plain rows only."""
    if not every_row:
        return row_maths(flat.index_select(0, index), targets, temperature, with_entropy)
    all_targets = torch.zeros(flat.shape[0], dtype=targets.dtype, device=targets.device)
    all_targets[index] = targets
    logp, entropy = row_maths(flat, all_targets, temperature, with_entropy)
    return logp[index], None if entropy is None else entropy[index]


def row_maths(rows: torch.Tensor, targets: torch.Tensor, temperature: float,
              with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(z)[target] and entropy of softmax(z), z = rows in fp32 / temperature: the
    eager path's maths on whole-vocabulary rows (TP=1), written to be compiled."""
    logits = rows.float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    log_z = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    if not with_entropy:
        return logp, None
    probs = torch.softmax(logits, dim=-1)
    return logp, log_z - (probs * logits).sum(dim=-1)


def fused_rows_fn(flat: torch.Tensor) -> Callable | None:
    """The compiled `row_maths` when it applies (CUDA, TP=1, enabled), else None."""
    from .platform import fused_enabled

    if not (flat.is_cuda and fused_enabled() and _tp_world_size() == 1):
        return None
    if "rows" not in _COMPILED:
        from .fused import CompiledOrEager

        # compile failures fall back to the eager maths with one warning
        _COMPILED["rows"] = CompiledOrEager("fused log-probs", row_maths, all_dynamic=True)
    return _COMPILED["rows"]


def _tp_world_size() -> int:
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return 1
    return ps.get_tensor_model_parallel_world_size()
