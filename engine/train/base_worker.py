"""The plumbing an actor rank and a critic rank share (engine/train/actor_worker.py and
critic_worker.py hold what differs): Megatron-core GPTModel + DDP + get_megatron_optimizer, the
pipeline schedules, checkpoints, offload (sleep/wake_up), memory reports and the parallel
coordinates.

Batches: every rank gets the whole RolloutBatch and keeps its DP shard by the shared rule
(sample position i -> step i // gbs, DP rank (i % gbs) // (gbs // dp)); values are keyed by
the batch's sample_indices.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from ..host.clock import PartClock
from ..model.shape import ModelShape
from . import weights
from .batching import (
    MicroBatch,
    TrainSample,
    build_micro_batch,
    local_positions,
    make_sample,
    plan_micro_batches,
)
from .context_parallel import CPLayout
from .model import build_gpt, describe_layer_spec, transformer_config
from .platform import (
    Parallelism,
    device,
    device_scope,
    has_cuda,
    has_transformer_engine,
    init_distributed,
    shutdown_distributed,
)
from .settings import Role, TrainSettings

LossFactory = Callable[[MicroBatch], Callable[[torch.Tensor], Any]]
_RECOMPUTE_KEYS = ("recompute_granularity", "recompute_method", "recompute_num_layers")
# what init() imports lazily, heaviest first; warm_imports() loads them ahead of init
_INIT_IMPORTS = ("megatron.core.parallel_state", "megatron.core.tensor_parallel",
                 "megatron.core.distributed",
                 "megatron.core.optimizer", "megatron.core.optimizer_param_scheduler",
                 "ppodeck.engine.train.fastpaths", "ppodeck.engine.train.optimizer")


class TrainWorker:
    """One rank of a role; a subclass per role names it (ROLE) and adds its train call."""

    ROLE: ClassVar[Role]
    # parameter-name prefixes an HF checkpoint does not hold for this role (kept fresh)
    FRESH_PREFIXES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, role: Role, rank: int, world_size: int, master_addr: str,
                 master_port: int, args: dict[str, Any]) -> None:
        # the role stays an argument: the driver starts every role's Ray actor the same way
        if role != getattr(self, "ROLE", None):
            raise ValueError(f"{type(self).__name__} runs no {role!r} rank")
        self.role: Role = role
        self.rank = rank
        self.world_size = world_size
        self.master_addr = master_addr
        self.master_port = master_port
        self.args = dict(args)
        self.settings = TrainSettings.from_args(role, args, world_size, cuda=has_cuda())
        self.shape = ModelShape.from_args(args)
        self.ddp: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self._offloader: Any = None
        self._cp: CPLayout | None = None  # set by init(), with Megatron's parallel state
        self._init_notes: list[str] = []  # e.g. the critic's fresh value head, for the events
        self._bridge: Any = None
        if args.get("megatron_to_hf_mode") == "bridge":
            from .bridge import auto_bridge

            # before anything is built: a missing Megatron-Bridge is a clear error, not a crash
            self._bridge = auto_bridge(args.get("hf_checkpoint"))

    # ----------------------------------------------------------------------------------------
    # lifecycle
    # ----------------------------------------------------------------------------------------
    def warm_imports(self) -> dict[str, Any]:
        """Import what init() needs (megatron-core: ~5 s) while the rollout engine starts.

        Host-only: no CUDA call, so nothing competes with the rollout's memory sizing; the
        report says whether this process got a CUDA context all the same (torch's lazy init,
        or NVML seeing it on a GPU: an import of transformer-engine could do that).
        """
        from ..host.machine import has_gpu_context

        start = time.perf_counter()
        for module in _INIT_IMPORTS:
            importlib.import_module(module)
        seconds = round(time.perf_counter() - start, 3)
        context = has_cuda() and (torch.cuda.is_initialized() or has_gpu_context(os.getpid()))
        return {"seconds": seconds, "cuda_initialized": bool(context)}

    def init(self) -> dict:
        """Process groups, model, DDP, Megatron optimizer and LR scheduler."""
        s = self.settings
        clock = PartClock()
        init_distributed(self.rank, self.world_size, self.master_addr, self.master_port,
                         Parallelism(tp=s.tp, pp=s.pp, cp=s.cp), seed=s.seed)
        clock.done("process group")
        from megatron.core import parallel_state as ps

        from . import fastpaths
        from .optimizer import (
            build_optimizer,
            build_scheduler,
            hook_schedule,
            wrap_ddp,
        )

        with device_scope():
            recompute = {k: self.args.get(k) for k in _RECOMPUTE_KEYS}
            config = transformer_config(self.shape, Parallelism(s.tp, s.pp, s.cp), bf16=s.bf16,
                                        recompute=recompute,
                                        sequence_parallel=s.sequence_parallel,
                                        cp_comm_type="all_gather" if s.allgather_cp else "p2p")
            self._cp = CPLayout(s.tp, s.sequence_parallel)
            config.variable_seq_lengths = s.pp > 1  # micro-batches differ in length and size
            model = build_gpt(self.shape, self.role, config,
                              pre_process=ps.is_pipeline_first_stage(),
                              post_process=ps.is_pipeline_last_stage(), seed=s.seed,
                              fixed_micro_batches=not s.use_dynamic_batch_size)
            model.to(device())  # the critic's value head is built on the host
            clock.done("model build")
            if not self._checkpoint_sources():
                self._init_weights(model, config)
                clock.done("weights init")
            self.ddp = wrap_ddp(model, config, s)
            self.optimizer = build_optimizer(self.ddp, s)
            self.scheduler = build_scheduler(self.optimizer, s)
            hook_schedule(config, self.ddp, self.optimizer)
            clock.done("optimizer")
            self._init_notes.append(f"{self.role} {describe_layer_spec()}")
            self._init_notes += [f"{self.role} {line}" for line in self._cp.describe(
                has_transformer_engine(), config.cp_comm_type)]
            self._init_notes += [f"{self.role} fast path: {line}" for line in
                                 fastpaths.describe(model, self.optimizer)]
        loaded = self._load_checkpoints()
        clock.done("weights load")
        self._after_load(clock)
        return {"num_params": self._count_params(),
                "start_rollout_id": int(loaded.get("start_rollout_id", 0)),
                "loaded_from": loaded.get("path"),
                "notes": self._init_notes + list(loaded.get("notes", [])),
                "parts": clock.parts}

    def save(self, rollout_id: int, extra: dict[str, Any] | None = None) -> dict:
        """Megatron torch_dist checkpoint of model, optimizer, scheduler and RNG to --save
        (actor) or --critic-save (critic), iteration = rollout_id (miles). Collective."""
        from .checkpoint import save_checkpoint

        save_dir = self.args.get("critic_save" if self.role == "critic" else "save")
        if not save_dir:
            flag = "--critic-save" if self.role == "critic" else "--save"
            raise ValueError(f"{flag} is not set: nowhere to save the {self.role}")
        self._require_awake("save")
        start = time.perf_counter()
        path = save_checkpoint(save_dir, rollout_id, [self.ddp], self.optimizer,
                               self.scheduler, extra=extra or {})
        return {"path": str(path), "seconds": time.perf_counter() - start}

    def shutdown(self) -> None:
        import gc

        self.ddp = self.optimizer = self.scheduler = self._offloader = None
        shutdown_distributed()
        # NB: Megatron DDP's grad hooks keep the model alive in this process after shutdown
        # (seen on CUDA); a Ray worker's process ends, so only same-process reuse pays for it
        gc.collect()
        if has_cuda():
            torch.cuda.empty_cache()

    @property
    def model(self) -> torch.nn.Module:
        return self.ddp.module

    def _checkpoint_sources(self) -> list[str]:
        """The torch_dist checkpoints init will load, in miles' order: --load (--critic-load)
        to resume, else --ref-load as the starting weights."""
        from .checkpoint import has_checkpoint

        candidates = [self.settings.load, self.args.get("ref_load")]
        return [c for c in candidates if has_checkpoint(c)]

    def _load_checkpoints(self) -> dict:
        """Resume from --load, or start from --ref-load's weights (finetune: no optimizer, no
        RNG), as miles does; each role's _load_from says how it loads them."""
        sources = self._checkpoint_sources()
        return self._load_from(sources) if sources else {}

    def _after_load(self, clock: PartClock) -> None:
        """What a role does once its weights are in (the actor keeps its KL reference)."""

    def _load_from(self, sources: list[str]) -> dict:
        raise NotImplementedError(f"{type(self).__name__} loads no checkpoint")

    def _init_weights(self, model: torch.nn.Module, config) -> None:  # noqa: ANN001
        """No checkpoint to load: HF weights (--hf-checkpoint) or a seeded random init."""
        s = self.settings
        if self._bridge is not None and s.model_init != "random":
            from .bridge import load_hf_weights

            load_hf_weights(self._bridge, model, self.role, self._init_notes.append)
        elif s.model_init != "random" and s.hf_checkpoint:
            self._load_hf(model, s.hf_checkpoint)
        else:
            weights.init_weights(model, config, s.seed, self.role, self._tp_rank, s.tp)

    def _load_hf(self, model: torch.nn.Module, path: str) -> None:
        from ..model.convert import (
            arch_for,
            check_shape_matches,
            hf_to_mcore,
            load_hf_checkpoint,
        )

        hf_config, hf_state = load_hf_checkpoint(path)
        check_shape_matches(hf_config, self.shape, path)  # RoPE, biases: not in tensor shapes
        full = hf_to_mcore(hf_state, self.shape, arch_for(self.shape), self.role,
                           te_layout=has_transformer_engine(), notes=self._init_notes.append)
        weights.load_full_state_dict(model, full, self._tp_rank, self.settings.tp,
                                     allow_missing=self.FRESH_PREFIXES)

    def _count_params(self) -> int:
        """Parameters of the whole network: TP shards once, replicated tensors once."""
        from megatron.core import parallel_state as ps

        local = sum(p.numel() for name, p in self.model.named_parameters()
                    if not weights.is_tied_head_copy(self.model, name)
                    and (weights.tp_layout(p).dim is not None or self._tp_rank == 0))
        total = torch.tensor([local], dtype=torch.float64, device=device())
        dist.all_reduce(total, group=ps.get_model_parallel_group())
        return int(total.item())

    def _keeps_samples(self) -> bool:
        """--samples-per-rollout 0 keeps none: then nothing per token goes back."""
        return self.args.get("samples_per_rollout") != 0

    def _mean_over_dp(self, numbers: list[float]) -> float:
        stats = torch.tensor([sum(numbers), float(len(numbers))], dtype=torch.float64,
                             device=device())
        if self._dp_size > 1:
            dist.all_reduce(stats, group=self._dp_group())
        return (stats[0] / stats[1].clamp(min=1)).item()

    # ----------------------------------------------------------------------------------------
    # shared machinery
    # ----------------------------------------------------------------------------------------
    def _shard(self, batch: Any) -> tuple[list[TrainSample], list[list[int]]]:  # noqa: ANN401
        """This DP rank's samples and, per optimizer step, their positions in that list."""
        per_step = local_positions(len(batch), self.settings.global_batch_size,
                                   self._dp_size, self._dp_rank)
        if not per_step:
            raise ValueError(f"the rollout has {len(batch)} samples, fewer than one global batch "
                             f"({self.settings.global_batch_size})")
        samples = [make_sample(batch, p) for step in per_step for p in step]
        steps, start = [], 0
        for step in per_step:
            steps.append(list(range(start, start + len(step))))
            start += len(step)
        return samples, steps

    def _plan(self, samples: Sequence[TrainSample], positions: list[int],
              max_tokens: int | None) -> list[list[int]]:
        s = self.settings
        # with CP, --max-tokens-per-gpu counts the tokens one CP rank holds (miles)
        lengths = self._cp.plan_lengths([samples[p].total_len for p in positions])
        budget = max_tokens if s.use_dynamic_batch_size else None
        groups = plan_micro_batches(lengths, s.micro_batch_size, budget)
        return [[positions[i] for i in group] for group in groups]

    def _forward_only(self, samples: list[TrainSample], loss_factory: LossFactory,
                      key: str) -> list[torch.Tensor] | None:
        """One no-grad pass over all of this rank's samples; per-sample [response_len] host
        tensors on the last PP stage, None elsewhere."""
        plan = self._plan(samples, list(range(len(samples))),
                          self.settings.log_probs_max_tokens_per_gpu)
        micro_batches = [self._cp.local(build_micro_batch(samples, group), samples)
                         for group in plan]
        self.model.eval()
        try:
            with torch.no_grad():
                outputs = self._run(micro_batches, loss_factory, forward_only=True)
        finally:
            self.model.train()
        if not self._is_last_stage():
            return None
        result: list[torch.Tensor | None] = [None] * len(samples)
        for mb, out in zip(micro_batches, outputs, strict=True):
            rows = self._cp.whole_rows(out[key], mb)  # CP: each rank computed its tokens
            for row, position in enumerate(mb.samples):
                result[position] = rows[row, :samples[position].response_len].clone()
        return result  # type: ignore[return-value]

    def _train_steps(self, samples: list[TrainSample], steps: list[list[int]],
                     extras: dict[str, Sequence[Any]], make_loss: Callable[..., Any],
                     prefix: str) -> list[dict[str, float]]:
        s = self.settings
        metrics = []
        for positions in steps:
            plan = self._plan(samples, positions, s.max_tokens_per_gpu)
            micro_batches = [self._cp.local(build_micro_batch(samples, group, extras), samples)
                             for group in plan]
            denominator = self._loss_denominator(samples, positions)
            # DDP averages over DP x CP; Megatron's schedule multiplies each CP rank's loss
            # (a part of the sum) by CP, so the gradient is that of the whole sum
            scale = len(micro_batches) * self._dp_size / denominator
            metrics.append(self._optimizer_step(
                micro_batches, lambda mb, scale=scale: make_loss(mb, s, scale), prefix,
                denominator))
        return metrics

    def _loss_denominator(self, samples: list[TrainSample], positions: list[int]) -> float:
        """What one optimizer step's loss is a mean over: its global batch of samples, or with
        --calculate-per-token-loss its trainable tokens (each sample counts at least 1, as in
        miles), summed over the DP ranks that share the step."""
        if not self.settings.calculate_per_token_loss:
            return float(self.settings.global_batch_size)
        tokens = sum(max(float(samples[p].loss_mask.sum()), 1.0) for p in positions)
        total = torch.tensor([tokens], dtype=torch.float64, device=device())
        if self._dp_size > 1:
            dist.all_reduce(total, group=self._dp_group())
        return total.item()

    def _optimizer_step(self, micro_batches: list[MicroBatch], loss_factory: LossFactory,
                        prefix: str, denominator: float) -> dict[str, float]:
        start = time.perf_counter()
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        outputs = self._run(micro_batches, loss_factory, forward_only=False)
        with device_scope():
            updated, grad_norm, _ = self.optimizer.step()
            if updated:
                self.scheduler.step(increment=self.settings.global_batch_size)
        # as miles logs it: the scheduler's lr after this step (the next step's lr)
        lrs = [self.scheduler.get_lr(group) for group in self.optimizer.param_groups]
        metrics = (self._reduce_step_metrics(outputs, denominator) if self._is_last_stage()
                   else {})
        metrics[prefix + "grad_norm"] = float(grad_norm) if grad_norm is not None else 0.0
        for i, lr in enumerate(lrs):
            metrics[f"{prefix}lr-pg_{i}"] = float(lr)
        metrics[f"perf/{self.role}_step_time"] = time.perf_counter() - start
        return metrics

    def _run(self, micro_batches: list[MicroBatch], loss_factory: LossFactory,
             forward_only: bool) -> list[dict]:
        """Megatron's forward-backward schedule (1F1B under PP) over the micro-batches."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        target = device()

        def forward_step(data_iterator: Iterator[MicroBatch], model: torch.nn.Module):  # noqa: ANN202
            mb = next(data_iterator)
            # attention_mask None = causal, exact under right padding (see batching.py)
            output = model(mb.tokens.to(target), mb.position_ids.to(target), None)
            return output, loss_factory(mb)

        with device_scope():
            return get_forward_backward_func()(
                forward_step_func=forward_step,
                data_iterator=iter(micro_batches),
                model=[self.ddp],
                num_microbatches=len(micro_batches),
                seq_length=self._cp.seq_length(max(mb.tokens.shape[1] for mb in micro_batches)),
                micro_batch_size=max(mb.size for mb in micro_batches),
                forward_only=forward_only,
            )

    def _reduce_step_metrics(self, outputs: list[dict[str, torch.Tensor]],
                             denominator: float) -> dict[str, float]:
        """miles' aggregation: sum over micro-batches, all-reduce over DP, divide by the step's
        sample count (the global batch), or its token count under per-token loss."""
        keys = sorted(outputs[0])
        sums = torch.stack([sum(out[k].double() for out in outputs) for k in keys])
        sums = sums.to(device())
        if self._dp_size * self._cp.cp > 1:  # CP ranks hold parts of every sample's sums
            from megatron.core import parallel_state as ps

            dist.all_reduce(sums, group=ps.get_data_parallel_group(with_context_parallel=True))
        totals = (sums / denominator).tolist()
        return dict(zip(keys, totals, strict=True))

    def _sample_means(self, series: dict[str, torch.Tensor],
                      mask: torch.Tensor) -> dict[str, float]:
        """Token-masked mean per sample, averaged over every sample of every DP rank."""
        per_sample = mask.sum(dim=-1).clamp(min=1)
        sums = [((x * mask).sum(dim=-1) / per_sample).sum() for x in series.values()]
        stats = torch.stack([*sums, torch.tensor(float(mask.shape[0]))]).double().to(device())
        if self._dp_size > 1:
            dist.all_reduce(stats, group=self._dp_group())
        count = stats[-1].item()
        return {k: (stats[i] / count).item() for i, k in enumerate(series)}

    # ----------------------------------------------------------------------------------------
    # offload, the full state, memory
    # ----------------------------------------------------------------------------------------
    def sleep(self) -> dict:
        """Params, master weights and optimizer state to host memory; grads freed."""
        from ..model.offload import (
            StorageOffloader,
            adam_state_bytes,
            noop_report,
            train_state_tensors,
        )

        keep, drop = train_state_tensors(self.ddp, self.optimizer)
        if not has_cuda():
            held = StorageOffloader.for_tensors(keep, drop, "cpu")
            return noop_report(held.bytes_to_copy, held.bytes_to_free, where="cpu")
        first = self._offloader is None
        if first:
            self._offloader = StorageOffloader()
        if not self._offloader.asleep:
            self._offloader.track(keep, drop, "cuda")
        report = self._offloader.offload()
        if first:  # asleep after init: pin the Adam moments' host buffers while idle
            self._offloader.reserve_host(adam_state_bytes(self.optimizer))
        if "pinned_bytes" in report:
            report["pinned_bytes"] += self._pinned_copies_bytes()
        return report

    def _pinned_copies_bytes(self) -> int:
        """Host copies a role pins beside its train state (the actor's KL reference)."""
        return 0

    def wake_up(self) -> dict:
        from ..model.offload import StorageOffloader, noop_report, train_state_tensors

        if not has_cuda():
            held = StorageOffloader.for_tensors(*train_state_tensors(self.ddp, self.optimizer),
                                                "cpu")
            return noop_report(held.bytes_to_copy, held.bytes_to_free, where="cpu")
        if self._offloader is None:
            return {"noop": True, "bytes": 0, "freed_bytes": 0, "seconds": 0.0, "gbps": None,
                    "where": "gpu"}
        return self._offloader.onload()

    def _require_awake(self, what: str) -> None:
        """The driver wakes a trainer before it trains or saves (engine/driver/offload.py)."""
        if self._offloader is not None and self._offloader.asleep:
            raise RuntimeError(f"the {self.role} was asked to {what} while asleep: the driver "
                               "wakes it first under --offload-train")

    @contextlib.contextmanager
    def _awake(self) -> Iterator[None]:
        """On the device for the block; asleep again afterwards if it was asleep before."""
        asleep = self._offloader is not None and self._offloader.asleep
        if asleep:
            self.wake_up()
        try:
            yield
        finally:
            if asleep:
                self.sleep()

    def gather_full_state_dict(self, device: str = "cpu") -> dict[str, torch.Tensor] | None:
        """The TP=1/PP=1 Megatron state dict (global layer numbers) on global rank 0."""
        from megatron.core import parallel_state as ps

        with self._awake(), device_scope():
            stage = weights.gather_tp(self.model, ps.get_tensor_model_parallel_group(),
                                      self.settings.tp, device)
        if self._dp_rank != 0 or self._tp_rank != 0 or self._cp.rank != 0:
            return None
        return weights.gather_pp_to_first(stage, ps.get_pipeline_model_parallel_group(),
                                          self.settings.pp, ps.is_pipeline_first_stage())

    def memory(self) -> dict:
        import psutil

        cuda = None
        if has_cuda():
            device = torch.cuda.current_device()
            # NVML names GPUs by UUID; Ray renumbers them inside every actor
            cuda = {"device": device,
                    "uuid": f"GPU-{torch.cuda.get_device_properties(device).uuid}",
                    "allocated_bytes": torch.cuda.memory_allocated(),
                    "reserved_bytes": torch.cuda.memory_reserved(),
                    "max_allocated_bytes": torch.cuda.max_memory_allocated()}
        return {"rss_bytes": psutil.Process().memory_info().rss, "cuda": cuda}

    # ----------------------------------------------------------------------------------------
    # parallel coordinates
    # ----------------------------------------------------------------------------------------
    @property
    def _tp_rank(self) -> int:
        from megatron.core import parallel_state as ps

        return ps.get_tensor_model_parallel_rank()

    @property
    def _dp_rank(self) -> int:
        from megatron.core import parallel_state as ps

        return ps.get_data_parallel_rank()

    @property
    def _dp_size(self) -> int:
        from megatron.core import parallel_state as ps

        return ps.get_data_parallel_world_size()

    def _dp_group(self):  # noqa: ANN202
        from megatron.core import parallel_state as ps

        return ps.get_data_parallel_group()

    def _dp_group_or_none(self):  # noqa: ANN202
        return self._dp_group() if self._dp_size > 1 else None

    def _is_last_stage(self) -> bool:
        from megatron.core import parallel_state as ps

        return ps.is_pipeline_last_stage()

    def _overrides(self) -> list[str]:
        """What replaced what the run asked for since the last train call (a compile that fell
        back to eager), for the driver to announce; said by the logging rank only."""
        from .layer_compile import new_fallback

        line = new_fallback(self.model) if self._is_logging_rank() else None
        return [f"{self.role} {line}"] if line else []

    def _is_logging_rank(self) -> bool:
        """miles' first-replica main rank: DP rank 0, TP rank 0, last PP stage."""
        return (self._dp_rank == 0 and self._tp_rank == 0 and self._cp.rank == 0
                and self._is_last_stage())



def per_sample_arrays(samples: list[TrainSample], **series: Sequence[torch.Tensor]
                ) -> dict[str, Any]:
    """For the driver's samples files: the samples' indices and lengths, and per series one
    flat float32 numpy array of their rows end to end (one device-to-host copy each): a few
    buffers cross Ray, not one per sample and series (Ray's cost per object adds up)."""
    flat = {name: torch.cat([row.detach().float().reshape(-1) for row in rows]).cpu().numpy()
            for name, rows in series.items()}
    return {"index": [x.index for x in samples], "lengths": [x.response_len for x in samples],
            **flat}


