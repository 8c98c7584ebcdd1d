"""Megatron `loss_func`s for one micro-batch: forward-only outputs, value loss, policy loss.

Scaling (miles' training_utils/loss.py): each loss is a sum over the micro-batch's samples of
per-sample token means
(`sum_of_sample_mean`), multiplied by num_microbatches * dp / gbs. Megatron divides by
num_microbatches and DDP averages over DP, so the gradient is that of the mean over the global
batch of per-sample token means, whatever the micro-batching or the DP size.
With --calculate-per-token-loss the reducer is a plain token sum (`sum_of_tokens`) and the
worker passes num_microbatches * dp / (trainable tokens of the global batch) as the scale: a
mean over every token of the global batch, so long responses weigh more (miles' per-token path,
where Megatron divides by the all-reduced token count). Metrics are the unscaled sums; the
worker adds them over micro-batches and DP ranks and divides by the same denominator.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..algo import (
    approx_kl,
    policy_loss,
    rollout_mismatch,
    sum_of_sample_mean,
    sum_of_tokens,
    truncated_importance_weights,
    value_loss,
)
from ..vocabulary import Metric
from .batching import MicroBatch
from .context_parallel import scatter_token_rows
from .logprobs import response_values, token_log_probs
from .settings import TrainSettings

LossOut = tuple[torch.Tensor, dict[str, torch.Tensor]]


def _on(device: torch.device, mb: MicroBatch, name: str) -> torch.Tensor:
    return mb.extras[name].to(device, non_blocking=True)


def forward_values(mb: MicroBatch) -> Callable[[torch.Tensor], LossOut]:
    """Forward only: the critic's [b, T] values, kept on the host."""
    def loss_func(output: torch.Tensor) -> LossOut:
        values = response_values(output, mb.response_index.to(output.device))
        return output.new_zeros(()), {"values": values.detach().cpu()}
    return loss_func


def forward_log_probs(mb: MicroBatch, settings: TrainSettings) -> Callable[[torch.Tensor], LossOut]:
    """Forward only: the actor's [b, T] log-probs of the response tokens, kept on the host."""
    def loss_func(output: torch.Tensor) -> LossOut:
        device = output.device
        logp, _ = token_log_probs(output, mb.response_index.to(device), mb.targets.to(device),
                                  settings.rollout_temperature, with_entropy=False,
                                  chunk_rows=settings.log_probs_chunk_size)
        return output.new_zeros(()), {"log_probs": logp.detach().cpu()}
    return loss_func


def reducer(settings: TrainSettings, mb: MicroBatch | None = None
            ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """miles' loss reducer: per-sample token means summed, or a token sum (per-token loss).
    Under context parallelism a rank holds part of each sample's tokens: its per-sample sums
    are divided by the whole sample's mask count, so the CP ranks' results add up."""
    if settings.calculate_per_token_loss:
        return sum_of_tokens
    if mb is not None and mb.sample_denoms is not None:
        return functools.partial(sum_of_sample_mean, sample_denoms=mb.sample_denoms)
    return sum_of_sample_mean


def critic_loss(mb: MicroBatch, settings: TrainSettings,
                scale: float) -> Callable[[torch.Tensor], LossOut]:
    """Clipped value loss (no 0.5, no coefficient) against the GAE returns."""
    reduce = reducer(settings, mb)

    def loss_func(output: torch.Tensor) -> LossOut:
        device = output.device
        mask = mb.loss_mask.to(device)
        values = response_values(output, mb.response_index.to(device))
        out = value_loss(values, _on(device, mb, "old_values"), _on(device, mb, "returns"),
                         settings.value_clip)
        loss = reduce(out.loss, mask)
        metrics = {
            Metric.VALUE_LOSS: loss.detach(),
            Metric.VALUE_CLIPFRAC: reduce(out.clipfrac, mask).detach(),
        }
        return loss * scale, metrics
    return loss_func


def actor_loss(mb: MicroBatch, settings: TrainSettings, scale: float,
               entropy_sink: dict[int, torch.Tensor] | None = None
               ) -> Callable[[torch.Tensor], LossOut]:
    """PPO clipped surrogate (times the TIS weights with --use-tis) - entropy_coef * entropy
    + kl_loss_coef * KL(pi || ref) (miles' loss_hub/losses.py). pi_old is `old_log_probs`: the
    trainer's
    recomputed log-probs, or the rollout's with --use-rollout-logprobs (the worker decides).
    `entropy_sink`: where the entropy is computed anyway, each sample's [T] row is kept
    there by its position (on the device: no sync here; the run's samples files)."""
    reduce = reducer(settings, mb)

    def loss_func(output: torch.Tensor) -> LossOut:
        device = output.device
        mask = mb.loss_mask.to(device)
        logp, entropy = _log_probs_and_entropy(output, mb, settings)
        old_logp = _on(device, mb, "old_log_probs")
        pg = policy_loss(logp, old_logp, _on(device, mb, "advantages"), mask,
                         settings.eps_clip, settings.eps_clip_high, settings.eps_clip_c)
        pg_tokens, metrics = pg.pg_loss, {}
        if "rollout_log_probs" in mb.extras:
            pg_tokens, metrics = _rollout_correction(pg_tokens, pg.ppo_kl, mb, mask, settings,
                                                     reduce)
        pg_loss = reduce(pg_tokens, mask)
        loss = pg_loss
        entropy_loss = pg_loss.new_zeros(())  # miles logs 0 when entropy is not computed
        if entropy is not None:
            entropy_loss = reduce(entropy, mask)
            if entropy_sink is not None:
                rows = entropy.detach().float()
                if mb.token_index is not None:  # CP: whole rows, this rank's tokens filled in
                    rows = scatter_token_rows(rows, mb)
                entropy_sink.update(zip(mb.samples, rows, strict=True))
            if settings.entropy_coef != 0.0:
                loss = loss - settings.entropy_coef * entropy_loss
        metrics.update({
            "train/pg_loss": pg_loss.detach(),
            Metric.PG_CLIPFRAC: reduce(pg.clipfrac, mask).detach(),
            Metric.PPO_KL: reduce(pg.ppo_kl, mask).detach(),
            Metric.ENTROPY: entropy_loss.detach(),
        })
        if settings.use_kl_loss:
            ratio = (logp - old_logp).exp() if settings.use_unbiased_kl else None
            kl = approx_kl(logp, _on(device, mb, "ref_log_probs"), settings.kl_loss_type,
                           importance_ratio=ratio, mask=mask)
            kl_loss = reduce(kl, mask)
            if settings.kl_loss_coef != 0.0:
                loss = loss + settings.kl_loss_coef * kl_loss
            metrics[Metric.KL_LOSS] = kl_loss.detach()
        metrics[Metric.LOSS] = loss.detach()
        return loss * scale, metrics
    return loss_func


def _rollout_correction(pg_tokens: torch.Tensor, ppo_kl: torch.Tensor, mb: MicroBatch,
                        mask: torch.Tensor, settings: TrainSettings,
                        reduce: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                        ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """miles' train/rollout mismatch metrics, and with --use-tis the per-token policy loss
    times clamp(exp(train_logp - rollout_logp), tis_clip_low, tis_clip).

    train_logp is the trainer's recomputed pi_old (always computed here, also under
    --use-rollout-logprobs, so the mismatch is measured rather than 0 as miles then logs it).
    """
    device = pg_tokens.device
    train_logp = _on(device, mb, "train_log_probs")
    rollout_logp = _on(device, mb, "rollout_log_probs")
    abs_diff, kl = rollout_mismatch(train_logp, rollout_logp, mask)
    metrics = {Metric.LOGPROB_GAP: reduce(abs_diff, mask).detach(),
               "train/train_rollout_kl": reduce(kl, mask).detach()}
    if not settings.use_tis:
        return pg_tokens, metrics
    tis = truncated_importance_weights(train_logp, rollout_logp, settings.tis_clip_low,
                                       settings.tis_clip)
    metrics.update({"train/tis": reduce(tis.ratio, mask).detach(),
                    "train/tis_clipfrac": reduce(tis.clipfrac, mask).detach(),
                    "train/tis_abs": reduce(tis.abs_dev, mask).detach(),
                    "train/ois": reduce((-ppo_kl).exp(), mask).detach()})
    return pg_tokens * tis.weights, metrics


def _log_probs_and_entropy(output: torch.Tensor, mb: MicroBatch, settings: TrainSettings
                           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    device = output.device
    index, targets = mb.response_index.to(device), mb.targets.to(device)
    temperature, chunk = settings.rollout_temperature, settings.log_probs_chunk_size
    if not settings.needs_entropy or settings.entropy_coef != 0.0:
        return token_log_probs(output, index, targets, temperature,
                               with_entropy=settings.needs_entropy, chunk_rows=chunk)
    # observed only: the entropy needs no graph
    logp, _ = token_log_probs(output, index, targets, temperature, False, chunk)
    with torch.no_grad():
        _, entropy = token_log_probs(output.detach(), index, targets, temperature, True, chunk)
    return logp, entropy
