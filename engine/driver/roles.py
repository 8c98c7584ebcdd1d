"""The three roles as the driver sees them: the rollout handle and one group per trainer.

`train()` in engine/driver/ppo.py calls plain methods on these; each one waits for every rank and
turns a dead worker into an error that names the role and rank.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import ray

from ..config.memory import count_params, init_peak_gib
from ..host.workers import (
    CALL_TIMEOUT_S,
    WorkerFailure,
    death_cause,
    first_line,
    wait_ready,
)
from ..vocabulary import INIT_PHASE, InitStep, Kind
from . import cluster
from .offload import MovePlan, plan_moves, sleep, wake
from .telemetry import Telemetry

# a trainer's memory() runs on its own thread: Ray runs an actor's other calls in order, so the
# driver's memory sample at a phase's end would otherwise wait behind an overlapped move
TELEMETRY = "telemetry"


@dataclass
class Roles:
    rollout: Any
    critic: Any
    actor: Any
    placement: Any = None
    initial_sync: dict[str, Any] | None = None  # the rollout's report of the first weight push
    move_plan: MovePlan = MovePlan()  # which train-state moves overlap (engine/driver/offload.py)


class RolloutHandle:
    role = "rollout"

    def __init__(self, args: dict[str, Any], placement: cluster.Placement, use_gpu: bool,
                 sglang: bool, env_vars: dict[str, str] | None = None) -> None:
        from ..rollout.manager import RolloutManager

        # SGLang engines take the rollout share of each bundle themselves (miles: 0.2 each), so
        # the manager then asks nothing of bundle 0 (0.4 + 0.4 + 0.2 stays within 1); the hf
        # generator runs inside the manager, which then holds that share.
        share = 0 if sglang else cluster.ROLLOUT_SHARE
        gpus = share if use_gpu else 0
        remote_cls = ray.remote(RolloutManager)
        # the engines are placed from the manager's process: it gets the bundle order
        self.actor = remote_cls.options(
            num_cpus=share, num_gpus=gpus, scheduling_strategy=placement.on(0), max_restarts=0,
            runtime_env=placement.runtime_env(env_vars),
        ).remote(args)
        self.asks = f"{share} CPU and {gpus} GPU of bundle 0"
        self.started = False  # checked at the first call, while the trainers start too
        self.info: dict[str, Any] = {}  # init's report

    def _get(self, ref: ray.ObjectRef, what: str) -> Any:
        if not self.started:
            wait_ready("rollout", [self.actor], self.asks)
            self.started = True
        try:
            return ray.get(ref, timeout=CALL_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as err:
            raise WorkerFailure("rollout", 0, f"{what} did not return within "
                                f"{CALL_TIMEOUT_S:.0f} s") from err
        except ray.exceptions.RayActorError as err:
            raise WorkerFailure("rollout", 0, death_cause(err, self.actor)) from err
        except ray.exceptions.RayTaskError as err:
            raise WorkerFailure("rollout", 0, first_line(err)) from err

    def init(self, warm_up: bool = False) -> dict[str, Any]:
        self.info = self._get(self.actor.init.remote(warm_up), "init")  # its tokenizer path
        return self.info

    def generate(self, rollout_id: int) -> Any:
        return self._get(self.actor.generate.remote(rollout_id), "generate")

    def offload(self) -> dict[str, Any]:
        return self._get(self.actor.offload.remote(), "offload")

    def onload(self) -> dict[str, Any]:
        return self._get(self.actor.onload.remote(), "onload")

    def update_weights(self, weights_ref: ray.ObjectRef) -> dict[str, Any]:
        return self._get(self.actor.update_weights.remote(weights_ref), "update_weights")

    def eval(self, rollout_id: int) -> dict[str, float]:
        return self._get(self.actor.eval.remote(rollout_id), "eval")

    def kill(self) -> None:
        ray.kill(self.actor, no_restart=True)


class TrainGroup:
    """Actor or critic: one Ray actor per rank, every rank in the role's own
    torch.distributed world. One method per worker call; each calls every rank and waits."""

    def __init__(self, role: str, args: dict[str, Any], placement: cluster.Placement,
                 share: float, use_gpu: bool, private: bool = True,
                 worker_cls: type | None = None) -> None:
        from ..train.worker import worker_class

        self.role = role
        world_size = args["actor_num_nodes"] * args["actor_num_gpus_per_node"]
        master_addr, port = cluster.rendezvous(placement, private)
        remote_cls = ray.remote(concurrency_groups={TELEMETRY: 1})(worker_cls or worker_class(role))
        gpus = share if use_gpu else 0
        self.workers = [
            remote_cls.options(
                num_cpus=share, num_gpus=gpus, scheduling_strategy=placement.on(rank),
                name=None, max_restarts=0,
            ).remote(role, rank, world_size, master_addr, port, args)
            for rank in range(world_size)
        ]
        self.master = (master_addr, port)
        self.asks = f"{share} CPU and {gpus} GPU of its bundle"
        self.started = False  # checked at the first call, so all roles' processes start at once
        self.warmed: list[ray.ObjectRef] = []

    def warm_imports(self) -> None:
        """Queue the host-only imports of init now (no wait): they run while the rollout engine
        starts. A Ray actor runs its calls in order, so init() follows them."""
        self.warmed = [w.warm_imports.remote() for w in self.workers]

    def init(self) -> list[dict[str, Any]]:
        self.ensure_started()
        infos = self.wait([w.init.remote() for w in self.workers], "init")
        if self.warmed:  # done by now: init ran after them
            for info, warm in zip(infos, self.wait(self.warmed, "warm_imports"), strict=True):
                info["warm_imports"] = warm
        return infos

    def wake_up(self) -> dict[str, Any]:
        return self.start_wake_up().result()

    def sleep(self) -> dict[str, Any]:
        return self.start_sleep().result()

    def start_wake_up(self) -> PendingMove:
        """Every rank starts its onload now; result() waits and merges (a hand-over overlaps)."""
        self.ensure_started()
        return PendingMove(self, [w.wake_up.remote() for w in self.workers], "wake_up")

    def start_sleep(self) -> PendingMove:
        self.ensure_started()
        return PendingMove(self, [w.sleep.remote() for w in self.workers], "sleep")

    def train_critic(self, rollout_id: int, batch: Any) -> dict[str, Any]:  # noqa: ANN401
        self.ensure_started()
        batch_ref = ray.put(batch)
        outs = self.wait([w.train_critic.remote(rollout_id, batch_ref) for w in self.workers],
                         "train_critic")
        values: dict[int, list[float]] = {}
        for out in outs:
            values.update(out.get("values") or {})
        return {**logging_rank(outs), "values": values, "samples": merged_samples(outs)}

    def train_actor(self, rollout_id: int, batch: Any,  # noqa: ANN401
                    values: dict[int, list[float]]) -> dict:
        self.ensure_started()
        batch_ref, values_ref = ray.put(batch), ray.put(values)
        outs = self.wait([w.train_actor.remote(rollout_id, batch_ref, values_ref)
                          for w in self.workers], "train_actor")
        return {**logging_rank(outs), "samples": merged_samples(outs)}

    def export_hf_weights(self) -> ray.ObjectRef:
        """Rank 0's full HF state dict, left in the object store for the rollout side."""
        refs = [w.export_hf_weights_packed.remote() for w in self.workers]
        self.wait(refs, "export_hf_weights_packed")
        return refs[0]

    def release_export(self) -> None:
        """The rollout has copied the CUDA IPC push: the actor frees the buffer behind it."""
        self.start_release_export().result()

    def start_release_export(self) -> PendingCall:
        self.ensure_started()
        return PendingCall(self, [w.release_export.remote() for w in self.workers],
                           "release_export")

    def save(self, rollout_id: int) -> None:
        self.ensure_started()
        self.wait([w.save.remote(rollout_id) for w in self.workers], "save")

    def memory(self) -> list[dict[str, Any]]:
        self.ensure_started()
        return self.wait([w.memory.options(concurrency_group=TELEMETRY).remote()
                          for w in self.workers], "memory")

    def ensure_started(self) -> None:
        if not self.started:
            wait_ready(self.role, self.workers, self.asks)
            self.started = True

    def wait(self, refs: list[ray.ObjectRef], what: str = "a call",
             timeout: float | None = None) -> list[Any]:
        """Every rank's result, in rank order; a dead or late rank is named in the error."""
        timeout = CALL_TIMEOUT_S if timeout is None else timeout
        results: list[Any] = [None] * len(refs)
        pending = {ref: rank for rank, ref in enumerate(refs)}
        deadline = time.monotonic() + timeout
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1,
                               timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                self.kill()
                rank = min(pending.values())
                raise WorkerFailure(self.role, rank, f"{what} did not return within "
                                    f"{timeout:.0f} s (ranks still busy: "
                                    f"{sorted(pending.values())})")
            rank = pending.pop(done[0])
            try:
                results[rank] = ray.get(done[0])
            except ray.exceptions.RayActorError as err:
                cause = death_cause(err, self.workers[rank])  # before kill() marks it dead
                self.kill()
                raise WorkerFailure(self.role, rank, cause) from err
            except ray.exceptions.RayTaskError as err:
                self.kill()
                raise WorkerFailure(self.role, rank, first_line(err)) from err
        return results

    def kill(self) -> None:
        for worker in self.workers:
            ray.kill(worker, no_restart=True)


def choose_backend(requested: str, use_gpu: bool) -> tuple[str, str]:
    """The one place --rollout-backend auto becomes hf or sglang (with the note saying why);
    the rollout manager and the placement then read the concrete choice."""
    from ..rollout.sglang_backend import (
        host_has_gpu,
        select_backend,
        sglang_importable,
    )

    return select_backend(requested, use_gpu or host_has_gpu(), sglang_importable())


def logging_rank(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """The one rank that reports metrics (DP0/TP0/last PP stage), as in miles; the overrides
    only that rank says (a compile fallback), whichever call brought them."""
    overrides = [line for out in outs for line in out.get("overrides", [])]
    for out in outs:
        if out.get("step_metrics"):
            return {"step_metrics": out["step_metrics"],
                    "rollout_metrics": out.get("rollout_metrics", {}), "overrides": overrides}
    return {"step_metrics": [], "rollout_metrics": {}, "overrides": overrides}


def merged_samples(outs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each DP rank's per-token series of its samples (per_sample_arrays in
    engine/train/base_worker.py), one part per rank; the driver's samples writer splits them by
    sample."""
    return [out["samples"] for out in outs if out.get("samples")]


class PendingCall:
    """A call sent to every rank; result() waits as TrainGroup.wait does (a dead or late rank
    named), done() says whether every rank has answered."""

    def __init__(self, group: TrainGroup, refs: list[Any], what: str) -> None:
        self.group, self.refs, self.what = group, refs, what

    def done(self) -> bool:
        ready, _ = ray.wait(list(self.refs), num_returns=len(self.refs), timeout=0)
        return len(ready) == len(self.refs)

    def result(self) -> dict[str, Any]:
        self.group.wait(self.refs, self.what)
        return {}


class PendingMove(PendingCall):
    """A started train-state move of every rank, its ranks' reports merged."""

    def result(self) -> dict[str, Any]:
        return merge_offload_reports(self.group.wait(self.refs, self.what))


def merge_offload_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Ranks move their shards in parallel: bytes add up, the slowest rank sets the time."""
    merged = {
        "bytes": sum(int(r.get("bytes", 0)) for r in reports),
        "seconds": max((float(r.get("seconds", 0.0)) for r in reports), default=0.0),
        "noop": all(r.get("noop", False) for r in reports),
        "where": reports[0].get("where") if reports else None,
    }
    for key in ("copy_seconds", "pin_seconds", "alloc_seconds"):
        if any(r.get(key) is not None for r in reports):
            merged[key] = max(float(r.get(key) or 0.0) for r in reports)
    if any(r.get("prepinned_bytes") for r in reports):
        merged["prepinned_bytes"] = sum(int(r.get("prepinned_bytes") or 0) for r in reports)
    if merged.get("copy_seconds"):
        merged["gbps"] = merged["bytes"] / merged["copy_seconds"] / 1e9
    if any("pinned_bytes" in r for r in reports):  # host memory the ranks hold, together
        merged["pinned_bytes"] = sum(int(r.get("pinned_bytes") or 0) for r in reports)
        merged["pinned_rounded"] = any(r.get("pinned_rounded") for r in reports)
    for key in ("device_allocated_after", "device_reserved_after"):  # the largest rank's
        if any(key in r for r in reports):
            merged[key] = max(int(r.get(key) or 0) for r in reports)
    return merged


def torch_reserved_by_device(groups: list[TrainGroup]) -> dict[str | int, int]:
    """Keyed by GPU UUID where workers report it: Ray renumbers devices inside each actor."""
    totals: dict[str | int, int] = {}
    for group in groups:
        for mem in group.memory():
            cuda = mem.get("cuda") or {}
            index = cuda.get("uuid") or int(cuda.get("device", 0))
            totals[index] = totals.get(index, 0) + int(cuda.get("reserved_bytes", 0))
    return totals


def start_roles(args: dict[str, Any], tm: Telemetry, cache_env: dict[str, str] | None = None,
                model_checks: Future[list[str]] | None = None) -> tuple[Roles, int]:
    """Ray, one placement group, rollout + critic + actor, initial sleep and weight sync; each
    a step of the init phase (InitStep), so the monitor shows where the start goes.
    `model_checks`: the preflight's TransformerConfig checks, running since before Ray; they
    must pass before any model is built."""
    from ..train.platform import has_cuda
    from .preflight import trainer_roles

    # the test-only switch asks Ray for GPUs while the workers compute on CPU (engine/cluster)
    use_gpu = has_cuda() or cluster.declared_test_gpus() > 0
    with tm.phase(INIT_PHASE, None):
        with init_step(tm, InitStep.RAY_START):
            total_bundles, _offset = cluster.bundle_layout(args)
            # cache_env: the compile caches (engine/driver/compile_cache.py), which a private
            # Ray's workers inherit and a joined cluster's get from the job's runtime_env
            joined = cluster.start_ray(args["ray_address"], total_bundles, cache_env)
            tm.log("info", f"Ray: joined the cluster at {joined}" if joined else
                   "Ray: a private local Ray on 127.0.0.1 with every visible GPU",
                   source="cluster")
            cluster.check_capacity(total_bundles, use_gpu, joined)
        with init_step(tm, InitStep.PLACEMENT):
            placement = cluster.create_placement_group(total_bundles, use_gpu)
            log_placement(tm, placement)
        backend, note = choose_backend(args["rollout_backend"], has_cuda())
        tm.log("info", note, source="rollout")
        args = {**args, "rollout_backend": backend}
        # every role's process starts now, at once; each step below waits for its own
        rollout = RolloutHandle(args, placement, use_gpu, backend == "sglang", cache_env)
        private = joined is None
        shares = {"critic": cluster.CRITIC_SHARE, "actor": cluster.ACTOR_SHARE}
        # GRPO builds no critic; --debug-rollout-only no trainer at all (miles)
        groups = {role: TrainGroup(role, args, placement, shares[role], use_gpu, private)
                  for role in trainer_roles(args)}
        for group in groups.values():
            group.warm_imports()
        critic, actor = groups.get("critic"), groups.get("actor")
        on_cuda = has_cuda()
        move_plan = plan_moves(args, on_cuda, _smallest_gpu_bytes() if on_cuda else None)
        roles = Roles(rollout=rollout, critic=critic, actor=actor, placement=placement,
                      move_plan=move_plan)
        tm.writer.emit("log", level="info", source="driver", msg=move_plan.message,
                       move_plan=move_plan.level)  # the monitor's GPU/offload view shows it
        trainers = [g for g in (critic, actor) if g is not None]
        plan = plan_init(args, use_gpu, len(trainers))
        tm.log("info", plan.message, source="driver")
        infos = run_init_steps(plan, rollout, trainers, tm, args,
                               None if model_checks is None else model_checks.result)
        log_worker_pids(tm, rollout, trainers)
        for note in [n for info in infos for n in info[0].get("notes", [])]:
            tm.log("info", note, source="train")
        if args.get("offload_rollout"):
            tm.offload("rollout", "onload", rollout.onload())
        if args["initial_weight_push"]:  # miles: no push in the debug modes
            with init_step(tm, InitStep.INITIAL_PUSH):
                roles.initial_sync = initial_push(actor, rollout, tm, args["offload_train"])
    if use_gpu:
        tm.torch_reserved = lambda: torch_reserved_by_device(trainers)
    # miles takes the start rollout id from the critic (it is saved even during warmup)
    start = int(infos[0][0].get("start_rollout_id", 0)) if infos else 0
    return roles, start


# --- init's steps, one after another or at once -----------------------------------------------
INIT_OVERLAP_ENV = "PPODECK_INIT_OVERLAP"  # 0: always miles' order; 1: at once, also on CPU
INIT_MEMORY_MARGIN = 0.9  # of the smallest GPU: the rest for CUDA contexts, NCCL, fragments


@dataclass(frozen=True)
class InitPlan:
    """Whether the trainers start together, and alongside the rollout engine's start.

    miles starts the roles one after another so that each allocates only once the one before
    it sleeps (SGLang sizes its KV pool from the memory it finds free). The hf generator sizes
    nothing at start (its KV cache comes with the first rollout), and Megatron's init asks for
    what the model needs; where the sum of every role awake at once fits the GPU, the order
    buys nothing and the steps run at once (each still ends asleep before the first rollout).
    """

    trainers_together: bool
    with_rollout: bool
    message: str


def plan_init(args: Mapping[str, Any], use_gpu: bool, num_trainers: int,
              gpu_bytes: int | None = None, env: Mapping[str, str] | None = None) -> InitPlan:
    """The InitPlan for this run and machine (`gpu_bytes`: the smallest visible GPU's total,
    read from NVML when not given), with the message the driver logs."""
    env = os.environ if env is None else env
    forced = env.get(INIT_OVERLAP_ENV)
    if forced == "0" or num_trainers == 0:
        why = f"{INIT_OVERLAP_ENV}=0" if forced == "0" else "no trainer to start"
        return InitPlan(False, False, f"init: the roles start one after another ({why})")
    hf = args["rollout_backend"] == "hf"
    if forced == "1":
        return InitPlan(True, hf, f"init: {_together(hf)} ({INIT_OVERLAP_ENV}=1)")
    if not use_gpu:
        return InitPlan(False, False, "init: the roles start one after another (CPU: they "
                                      f"would share its cores; {INIT_OVERLAP_ENV}=1 overlaps)")
    need = init_peak_gib(args, count_params(args), with_rollout=hf, num_trainers=num_trainers,
                         env=env)
    have = _smallest_gpu_bytes() if gpu_bytes is None else gpu_bytes
    if need is None or have is None:
        what = "the model size" if need is None else "the GPU memory (NVML)"
        return InitPlan(False, False, f"init: the roles start one after another ({what} "
                                      "unknown: miles' order keeps one role allocating at once)")
    sizes = f"{need:.1f} GiB for every role awake at once, of {have / GIB:.0f} GiB"
    if need * GIB > INIT_MEMORY_MARGIN * have:
        return InitPlan(False, False, f"init: the roles start one after another ({sizes}: "
                                      "too much at once)")
    why = "" if hf else "; the SGLang engines first, as they size their memory at start"
    return InitPlan(True, hf, f"init: {_together(hf)} ({sizes}{why})")


def _together(with_rollout: bool) -> str:
    return ("the rollout engine and the trainers start at once" if with_rollout
            else "the trainers start together after the rollout engine")


GIB = float(1 << 30)


def _smallest_gpu_bytes() -> int | None:
    from ..host.machine import nvml_devices

    devices = nvml_devices() or []
    return min((int(d["total_bytes"]) for d in devices), default=None)


def run_init_steps(plan: InitPlan, rollout: RolloutHandle, trainers: list[TrainGroup],
                   tm: Telemetry, args: Mapping[str, Any],
                   model_checks: Callable[[], Any] | None = None) -> list[list[dict[str, Any]]]:
    """The rollout engine's start and each trainer's init, as the plan says; returns each
    trainer's per-rank infos in the order given. `model_checks` (the preflight's Megatron
    config checks, raising what they found) must pass before a trainer is asked to build its
    model; the rollout engine does not wait for them (usually done by then: the workers'
    own imports take as long)."""
    offload = bool(args["offload_train"])

    def trainer_step(group: TrainGroup) -> list[dict[str, Any]]:
        if model_checks is not None:
            model_checks()
        return init_trainer(group, tm, offload)

    steps = [functools.partial(trainer_step, group) for group in trainers]
    # alongside the trainers the decoder's first-use compile is hidden: done in its start
    start = functools.partial(start_rollout, rollout, tm, args, warm_up=plan.with_rollout)
    if plan.with_rollout:
        return at_once([start, *steps])[1:]
    start()
    if plan.trainers_together:
        return at_once(steps)
    return [step() for step in steps]  # miles: each starts asleep, before the next allocates


def at_once(steps: list[Callable[[], Any]]) -> list[Any]:
    """Run the steps in threads (each mostly waits on its Ray calls); their results in order.
    The first error is raised at once: the driver then stops Ray, which ends the other
    steps' waits (daemon threads: none of them can hold the driver's exit)."""
    results: list[Any] = [None] * len(steps)
    finished: queue.Queue[BaseException | None] = queue.Queue()

    def run(index: int, step: Callable[[], Any]) -> None:
        try:
            results[index] = step()
        except BaseException as err:  # noqa: BLE001 - handed to the driver's thread
            finished.put(err)
        else:
            finished.put(None)

    for index, step in enumerate(steps):
        threading.Thread(target=run, args=(index, step), name=f"init-step-{index}",
                         daemon=True).start()
    for _ in steps:
        error = finished.get()
        if error is not None:
            raise error
    return results


def start_rollout(rollout: RolloutHandle, tm: Telemetry, args: Mapping[str, Any],
                  warm_up: bool = False) -> None:
    """The rollout_start step: the engine's init (its parts on the end event and in a log
    line; `warm_up`: with the first rollout's decoder compile), then its memory released
    under --offload-rollout (the step's "sleep" part)."""
    with init_step(tm, InitStep.ROLLOUT_START) as step:
        begin = time.perf_counter()
        info = rollout.init(warm_up)
        started = time.perf_counter()
        for note in info.get("notes", []):
            tm.log("info", note, source="rollout")
        for override in info.get("overrides", []):
            tm.announce(override, "rollout")
        parts = dict(info.get("parts") or {})
        if parts:  # the process start and the manager's own imports before its init
            parts = {"worker ready": round(max(0.0, started - begin - sum(parts.values())), 3),
                     **parts}
        if args.get("offload_rollout"):
            # miles: the generator's memory goes before the trainers allocate theirs
            tm.offload("rollout", "offload", rollout.offload())
            if parts:
                parts["sleep"] = round(time.perf_counter() - started, 3)
        if parts:
            step["parts"] = parts
    if parts:
        shown = ", ".join(f"{part} {seconds:.2f} s" for part, seconds in parts.items())
        tm.log("info", f"rollout start {time.perf_counter() - begin:.2f} s: {shown}",
               source="rollout")


def init_step(tm: Telemetry, step: str) -> contextlib.AbstractContextManager[dict[str, Any]]:
    return tm.phase(step, None, parent=INIT_PHASE)


TRAINER_INIT_STEP = {"critic": InitStep.CRITIC_INIT, "actor": InitStep.ACTOR_INIT}


def init_trainer(group: TrainGroup, tm: Telemetry, offload: bool) -> list[dict[str, Any]]:
    """One trainer's init step: build (rank 0's parts on the end event and in a log line),
    then asleep before the next role allocates."""
    with init_step(tm, TRAINER_INIT_STEP[group.role]) as step:
        start = time.perf_counter()
        infos = group.init()
        built = time.perf_counter()
        parts = dict(infos[0].get("parts") or {})
        # waiting for the worker: its process start and the imports warmed ahead of init
        # (overlapped with the rollout start) where they were not done yet, and the call
        parts = {"worker ready": round(max(0.0, built - start - sum(parts.values())), 3),
                 **parts}
        warm = infos[0].get("warm_imports") or {}
        if warm:
            step["warm_imports_seconds"] = warm["seconds"]  # overlapped with the rollout start
        if warm.get("cuda_initialized"):
            tm.log("warning", f"{group.role}: importing megatron-core initialized CUDA before "
                              "init; the rollout engine's memory sizing may have seen it",
                   source="train")
        sleep(group, tm, offload)
        if offload:
            parts["sleep"] = round(time.perf_counter() - built, 3)
        step["parts"] = parts
    shown = ", ".join(f"{part} {seconds:.2f} s" for part, seconds in parts.items())
    tm.log("info", f"{group.role} init {time.perf_counter() - start:.2f} s: {shown}",
           source="train")
    return infos


def initial_push(actor: TrainGroup, rollout: RolloutHandle, tm: Telemetry,
                 offload: bool) -> dict[str, Any]:
    wake(actor, tm, offload)  # the driver, not the worker, wakes it
    exported = actor.export_hf_weights()
    sleep(actor, tm, offload)
    loaded = rollout.update_weights(exported)
    if loaded["path"] == "cuda_ipc":  # copied: the actor's device buffer can go
        actor.release_export()
    tm.log("info", f"initial weight push via {loaded['path']} "
                   f"({loaded['bytes'] / 1e9:.2f} GB)", source="rollout")
    return loaded


def log_placement(tm: Telemetry, placement: cluster.Placement) -> None:
    """Which node and GPU each bundle got, in the order the roles use them."""
    nodes = {s.node_id for s in placement.slots}
    shown = ", ".join(f"{i}: {s.node_ip}" + ("" if s.gpu_id is None else f" GPU {s.gpu_id}")
                      for i, s in enumerate(placement.slots))
    tm.writer.emit(Kind.LOG, level="info", source="cluster",
                   msg=f"placement: {len(placement.slots)} bundles on {len(nodes)} node(s) "
                       f"({shown})", slots=placement.jsonable())


def _pid(actor_self: Any) -> int:
    return os.getpid()


def log_worker_pids(tm: Telemetry, rollout: RolloutHandle, groups: list[TrainGroup]) -> None:
    """One `log` event naming each worker's PID ("critic/0": 1234): operators and the
    reliability tests find a rank's process from it (Ray gives each its own process group)."""
    named = {"rollout/0": rollout.actor}
    for group in groups:
        named.update({f"{group.role}/{rank}": worker
                      for rank, worker in enumerate(group.workers)})
    try:
        found = ray.get([w.__ray_call__.remote(_pid) for w in named.values()],
                        timeout=cluster.PROBE_TIMEOUT_S)
    except (ray.exceptions.RayError, TimeoutError) as err:  # the next call names the rank
        tm.log("warning", f"could not read the worker pids: {type(err).__name__}", "cluster")
        return
    pids = dict(zip(named, found, strict=True))
    shown = ", ".join(f"{name} {pid}" for name, pid in pids.items())
    tm.writer.emit(Kind.LOG, level="info", source="cluster", msg=f"worker pids: {shown}",
                   pids=pids)


def stop_roles(roles: Any) -> None:
    if not ray.is_initialized():
        return
    if roles is None:
        ray.shutdown()
        return
    groups = [g for g in (roles.critic, roles.actor) if g is not None]
    cluster.shutdown(groups, roles.placement, extra=[roles.rollout.kill])
