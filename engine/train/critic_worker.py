"""The critic's rank: values with the pre-update critic (forward only) -> GAE returns -> one
value-loss optimizer step per global batch. Its output layer is a fresh value head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from ..vocabulary import Metric
from .base_worker import LossFactory, TrainWorker, per_sample_arrays
from .batching import pad_rows, unpad_rows
from .settings import Role


class CriticWorker(TrainWorker):
    ROLE: ClassVar[Role] = "critic"
    FRESH_PREFIXES: ClassVar[tuple[str, ...]] = ("output_layer.",)  # the value head

    def _load_from(self, sources: list[str]) -> dict:
        """Through load_for_critic, which keeps the fresh value head when pointed at a policy
        checkpoint (--critic-load unset: --ref-load's)."""
        from .checkpoint import load_for_critic

        return load_for_critic(sources[0], [self.ddp], self.optimizer, self.scheduler,
                               finetune=sources[0] == self.args.get("ref_load"))

    def train_critic(self, rollout_id: int, batch: Any) -> dict:  # noqa: ANN401 - RolloutBatch
        self._require_awake("train")
        samples, steps = self._shard(batch)
        old_values = self._forward_only(samples, _values_loss_factory(), "values")
        extras: dict[str, Sequence[Any]] = {}
        rollout_metrics: dict[str, float | None] = {}
        if old_values is not None:
            from ..algo import compute_gae, explained_variance

            lengths = [x.response_len for x in samples]
            values, mask = pad_rows(old_values), pad_rows([x.loss_mask for x in samples])
            rewards = torch.tensor([x.reward for x in samples])
            _, returns = compute_gae(values, rewards, mask, self.settings.gamma,
                                     self.settings.lambd)
            ev = explained_variance(values, returns, mask, group=self._dp_group_or_none())
            rollout_metrics[Metric.EXPLAINED_VARIANCE] = ev
            extras = {"old_values": old_values, "returns": unpad_rows(returns, lengths)}
        from .loss import critic_loss

        step_metrics = self._train_steps(samples, steps, extras, critic_loss, "train/critic-")
        values_out, kept = {}, {}
        if old_values is not None and self._tp_rank == 0 and self._cp.rank == 0:
            values_out = {x.index: v.tolist() for x, v in zip(samples, old_values, strict=True)}
            if self._keeps_samples():  # the run's samples files (engine/run/samples.py)
                kept = per_sample_arrays(samples, returns=extras["returns"])
        logging = self._is_logging_rank()
        return {"values": values_out, "samples": kept,
                "step_metrics": step_metrics if logging else [],
                "rollout_metrics": rollout_metrics if logging else {},
                "overrides": self._overrides()}



def _values_loss_factory() -> LossFactory:
    from .loss import forward_values

    return forward_values


