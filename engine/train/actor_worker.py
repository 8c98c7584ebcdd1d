"""The actor's rank: ref and old log-probs (forward only, all samples before the first step),
advantages (GAE from the critic's values, or grpo's), optional whitening over DP, one PPO step
per global batch; then its weights exported to the rollout as HF tensors.

The reference policy (--use-kl-loss) is a host copy of weights (miles' TensorBackuper "ref"
tag): --ref-load's when it holds a torch_dist checkpoint, else the actor's weights right after
init (HF or random); a ref forward swaps it in and back.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import torch

from ..host.clock import PartClock
from . import weights
from .base_worker import LossFactory, TrainWorker, per_sample_arrays
from .batching import TrainSample, pad_rows, unpad_rows
from .platform import has_cuda
from .settings import Role


class ActorWorker(TrainWorker):
    ROLE: ClassVar[Role] = "actor"

    def __init__(self, role: Role, rank: int, world_size: int, master_addr: str,
                 master_port: int, args: dict[str, Any]) -> None:
        super().__init__(role, rank, world_size, master_addr, master_port, args)
        self._ref_weights: dict[str, torch.Tensor] | None = None
        self._own_weights: dict[str, torch.Tensor] | None = None  # parked during a ref forward
        self._ipc_buffer: Any = None  # the last export, while the rollout may map it

    def _after_load(self, clock: PartClock) -> None:
        if self.settings.use_kl_loss and self._ref_weights is None:
            self._ref_weights = weights.backup(self.model)  # the initial weights are the ref
            clock.done("ref copy")

    def _load_from(self, sources: list[str]) -> dict:
        """--ref-load is also the KL reference when it holds a checkpoint."""
        from .checkpoint import load_checkpoint

        ref_load, chunks = self.args.get("ref_load"), [self.ddp]
        opt, sched = self.optimizer, self.scheduler
        resume = sources[0] == self.settings.load
        if self.settings.use_kl_loss and ref_load in sources:
            loaded = load_checkpoint(ref_load, chunks, opt, sched, finetune=True)
            self._ref_weights = weights.backup(self.model)
            if not resume:
                return loaded
        return load_checkpoint(sources[0], chunks, opt, sched, finetune=not resume)

    def shutdown(self) -> None:
        self._ref_weights = self._own_weights = None
        super().shutdown()

    def _pinned_copies_bytes(self) -> int:
        """The KL reference and the swap copy are pinned host memory too."""
        return sum(_host_bytes(saved) for saved in (self._ref_weights, self._own_weights))

    def train_actor(self, rollout_id: int, batch: Any,  # noqa: ANN401 - RolloutBatch
                    values: dict[int, list[float]] | None) -> dict:
        """`values`: the critic's, keyed by sample index (ppo); None without a critic (grpo)."""
        self._require_awake("train")
        samples, steps = self._shard(batch)
        ref_log_probs = None
        if self.settings.use_kl_loss:
            with self._weights_swapped(self._ref_weights):
                ref_log_probs = self._forward_only(samples, self._log_probs_factory(),
                                                   "log_probs")
        # recomputed even under --use-rollout-logprobs: TIS and the mismatch metrics need it
        train_log_probs = self._forward_only(samples, self._log_probs_factory(), "log_probs")
        extras: dict[str, Sequence[Any]] = {}
        rollout_metrics: dict[str, float | None] = {}
        keep: dict[str, Sequence[torch.Tensor]] | None = None  # for the run's samples files
        if train_log_probs is not None:  # the last PP stage: it computes the loss
            rollout_log_probs = _rollout_log_probs(batch, samples)
            needs_rollout = self.settings.use_rollout_logprobs or self.settings.use_tis
            if needs_rollout and rollout_log_probs is None:
                flag = "--use-tis" if self.settings.use_tis else "--use-rollout-logprobs"
                raise ValueError(f"{flag}: the rollout batch carries no log-probs from the "
                                 "rollout backend")
            old_log_probs = (rollout_log_probs if self.settings.use_rollout_logprobs
                             else train_log_probs)
            advantages, raw_advantages, rollout_metrics = self._advantages(
                samples, values, old_log_probs, ref_log_probs, rollout_log_probs)
            if self._tp_rank == 0 and self._keeps_samples():
                keep = {"log_probs": train_log_probs, "advantages": raw_advantages}
            extras = {"old_log_probs": old_log_probs, "advantages": advantages}
            if rollout_log_probs is not None:
                extras["rollout_log_probs"] = rollout_log_probs
                extras["train_log_probs"] = train_log_probs
            if ref_log_probs is not None:
                extras["ref_log_probs"] = ref_log_probs
        from .loss import actor_loss

        entropy: dict[int, torch.Tensor] | None = {} if keep is not None else None
        loss = actor_loss if entropy is None else functools.partial(actor_loss,
                                                                     entropy_sink=entropy)
        step_metrics = self._train_steps(samples, steps, extras, loss, "train/")
        self._cp.sum_rows(entropy or {})  # CP: each rank filled in its tokens
        kept: dict[str, Any] = {}
        if keep is not None and self._cp.rank == 0:  # CP ranks hold the same samples: one ships
            if entropy and len(entropy) == len(samples):  # computed where the loss needs it
                keep["entropy"] = [entropy[p][:x.response_len] for p, x in enumerate(samples)]
            kept = per_sample_arrays(samples, **keep)
        self._maybe_update_ref(rollout_id)
        logging = self._is_logging_rank()
        return {"step_metrics": step_metrics if logging else [],
                "rollout_metrics": rollout_metrics if logging else {}, "samples": kept,
                "overrides": self._overrides()}


    def _maybe_update_ref(self, rollout_id: int) -> None:
        """--ref-update-interval N: the KL reference becomes the current actor after every N-th
        rollout (miles: (rollout_id + 1) % N == 0, only when a ref model is kept)."""
        interval = self.settings.ref_update_interval
        if not interval or self._ref_weights is None or (rollout_id + 1) % interval:
            return
        self._ref_weights = weights.backup(self.model, into=self._ref_weights)
        if self._is_logging_rank():
            print(f"[ppodeck] updating the ref model at rollout {rollout_id} "
                  f"(--ref-update-interval {interval})", file=sys.stderr, flush=True)

    def _advantages(self, samples: list[TrainSample], values: dict[int, list[float]] | None,
                    old_log_probs: list[torch.Tensor], ref_log_probs: list[torch.Tensor] | None,
                    rollout_log_probs: list[torch.Tensor] | None
                    ) -> tuple[list[torch.Tensor], list[torch.Tensor], dict[str, float | None]]:
        """ppo: GAE from the critic's pre-update values (the critic's returns are the same);
        grpo: the group-normalized reward on every token. Then whitening over the DP group,
        then the trainer-side rollout metrics. Returns the advantages trained on, the raw
        ones (before whitening) and the metrics."""
        from ..algo import compute_gae, grpo_advantages, normalize_advantages

        lengths = [x.response_len for x in samples]
        mask = pad_rows([x.loss_mask for x in samples])
        rewards = torch.tensor([x.reward for x in samples])
        series: dict[str, torch.Tensor] = {}
        if self.settings.use_critic:
            padded_values = pad_rows(self._critic_values(samples, values))
            advantages, returns = compute_gae(padded_values, rewards, mask, self.settings.gamma,
                                              self.settings.lambd)
            series = {"rollout/values": padded_values, "rollout/returns": returns}
        else:
            advantages = grpo_advantages(rewards, mask)
            series = {"rollout/returns": advantages.clone()}
        if os.environ.get("PPODECK_TEST_FLIP_ADVANTAGES") == "1":  # the canary's self-test
            advantages = -advantages
        raw = advantages
        if self.settings.normalize_advantages:
            advantages = normalize_advantages(advantages, mask, group=self._dp_group_or_none())
        series.update({"rollout/advantages": advantages,
                       "rollout/log_probs": pad_rows(old_log_probs)})
        if ref_log_probs is not None:
            series["rollout/ref_log_probs"] = pad_rows(ref_log_probs)
        if rollout_log_probs is not None:
            series["rollout/rollout_log_probs"] = pad_rows(rollout_log_probs)
        metrics: dict[str, float | None] = dict(self._sample_means(series, mask))
        metrics["rollout/rewards"] = self._mean_over_dp([x.reward for x in samples])
        return unpad_rows(advantages, lengths), unpad_rows(raw, lengths), metrics

    @staticmethod
    def _critic_values(samples: list[TrainSample],
                       values: dict[int, list[float]] | None) -> list[torch.Tensor]:
        if values is None:
            raise ValueError("--advantage-estimator ppo needs the critic's values")
        missing = [x.index for x in samples if x.index not in values]
        if missing:
            raise KeyError(f"no critic values for samples {missing[:5]} (of {len(missing)})")
        return [torch.tensor(values[x.index], dtype=torch.float32) for x in samples]


    def _log_probs_factory(self) -> LossFactory:
        from .loss import forward_log_probs

        return lambda mb: forward_log_probs(mb, self.settings)

    @contextlib.contextmanager
    def _weights_swapped(self, other: dict[str, torch.Tensor] | None) -> Iterator[None]:
        if other is None:
            raise RuntimeError("the reference weights were not kept (use_kl_loss was off at init)")
        self._own_weights = weights.backup(self.model, into=self._own_weights)
        weights.restore(self.model, other)
        try:
            yield
        finally:
            weights.restore(self.model, self._own_weights)

    # ----------------------------------------------------------------------------------------
    # export to the rollout
    # ----------------------------------------------------------------------------------------
    def export_hf_weights(self, device: str = "cpu") -> dict[str, torch.Tensor] | None:
        """Full HF-named tensors on `device` on global rank 0 (every rank must call), None
        elsewhere."""
        if self._bridge is not None:
            return self._bridge_export()
        start = time.perf_counter()
        # asleep: the state comes back for the gather
        state = self.gather_full_state_dict(device)
        if state is None:
            return None
        from ..model.convert import arch_for, mcore_to_hf

        gathered = time.perf_counter()
        hf = mcore_to_hf(state, self.shape, arch_for(self.shape))
        # where a slow weight sync goes (driver.log): gather includes waking and sleeping
        print(f"[ppodeck] {self.role} export: gather {gathered - start:.3f} s, convert "
              f"{time.perf_counter() - gathered:.3f} s", file=sys.stderr, flush=True)
        return hf

    def export_hf_weights_packed(self) -> Any:  # noqa: ANN401
        """export_hf_weights() as one flat buffer for Ray (engine/model/weight_transfer.py)."""
        from ..model.ipc_sync import CUDA_IPC, pack_torch_ipc, weight_sync_path
        from ..model.weight_transfer import pack, pack_cuda_ipc

        path = weight_sync_path(self.args, has_cuda(), importlib.util.find_spec("sglang")
                                is not None)
        ipc = path.name == CUDA_IPC
        hf = self.export_hf_weights("cuda" if ipc else "cpu")
        if hf is None:
            return None
        if ipc:
            # the rollout process maps this buffer through CUDA IPC: keep it until the next export
            self._ipc_buffer = None
            if self.args["rollout_backend"] == "sglang":
                packed, self._ipc_buffer = pack_cuda_ipc(hf)
            else:
                packed, self._ipc_buffer = pack_torch_ipc(hf, torch.device("cuda",
                                                                         torch.cuda.current_device()))
            del hf  # only the flat buffer stays on the GPU
            print(f"[ppodeck] actor export: CUDA IPC buffer {packed.nbytes / 1e9:.2f} GB, "
                  f"{packed.flatten_seconds:.3f} s ({path.reason})", file=sys.stderr, flush=True)
            return packed
        return pack(hf)

    def release_export(self) -> None:
        """After the hf rollout copied the pushed weights (it holds no view of them anymore):
        the flat buffer goes back to the allocator instead of staying through generate and
        the critic's phase. SGLang's bucket stays until the next export, as before."""
        if self.args["rollout_backend"] == "hf":
            self._ipc_buffer = None
            if has_cuda():
                release_cached_device_memory()

    def _bridge_export(self) -> dict[str, torch.Tensor] | None:
        from .bridge import export_hf_weights

        with self._awake():
            hf = export_hf_weights(self._bridge, self.model)
        return hf if torch.distributed.get_rank() == 0 else None



def _rollout_log_probs(batch: Any, samples: list[TrainSample]  # noqa: ANN401
                       ) -> list[torch.Tensor] | None:
    """The rollout backend's per-token log-probs of this rank's samples, or None."""
    if batch.rollout_log_probs is None:
        return None
    position = {int(index): p for p, index in enumerate(batch.sample_indices)}
    rows = [torch.tensor(batch.rollout_log_probs[position[x.index]], dtype=torch.float32)
            for x in samples]
    for x, row in zip(samples, rows, strict=True):
        if row.numel() != x.response_len:
            raise ValueError(f"sample {x.index}: {row.numel()} rollout log-probs for "
                             f"{x.response_len} response tokens")
    return rows




def _host_bytes(saved: dict[str, torch.Tensor] | None) -> int:
    return sum(t.numel() * t.element_size() for t in (saved or {}).values())


def release_cached_device_memory() -> None:
    """Hand freed blocks back to the driver. The actor is asleep when its export buffer goes:
    the sleep's empty_cache ran while the buffer was still mapped by the rollout, so without
    this the freed 2 B/param block stayed reserved in the actor's cache through generate and
    the critic's phase (issue 20's memory table). ipc_collect first frees the blocks torch
    keeps in its IPC limbo until the receiver has closed its mapping."""
    torch.cuda.ipc_collect()
    torch.cuda.empty_cache()
