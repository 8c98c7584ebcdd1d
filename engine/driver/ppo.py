"""The PPO driver: `python -m ppodeck.engine.driver --run-dir D`.

`train()` is the algorithm, in miles' per-rollout order (its train.py):
generate -> release rollout memory -> critic (values, GAE returns, value steps) -> critic sleeps
-> actor (ref/old log-probs, GAE advantages, PPO steps; skipped during critic-only warmup)
-> actor exports its weights while awake, then sleeps -> save when due -> rollout memory back
-> weights pushed to the rollout side.
Everything around it (Ray, placement, events, signals, status) lives in the helpers below.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..run.events import EventWriter
from ..run.rundir import RunDir, write_status
from ..vocabulary import Phase, State, StepKey
from .ci_checks import CIChecks
from .compile_cache import apply_compile_caches
from .offload import Moves, sleep, wake
from .samples_keeper import SamplesKeeper
from .telemetry import Telemetry

if TYPE_CHECKING:
    from ..host.probe import Probe
    from .roles import Roles


class StopRequested(Exception):
    """Raised between phases after a graceful stop (first SIGINT/SIGTERM)."""


class EventsNotWritten(RuntimeError):
    """The event stream failed (disk full, ...): the run stops instead of training blind."""


@dataclass
class StopFlag:
    requested: bool = False
    signals: int = 0

    def handle(self, signum: int, frame: object) -> None:
        self.signals += 1
        self.requested = True
        if self.signals > 1:  # second Ctrl-C: stop at once
            raise KeyboardInterrupt

    def check(self) -> None:
        if self.requested:
            raise StopRequested


def train(args: dict[str, Any], roles: Roles, tm: Telemetry, stop: StopFlag,
          start_rollout_id: int, rundir: RunDir, keeper: SamplesKeeper | None = None) -> None:
    offload = bool(args["offload_train"])
    own_keeper = keeper is None  # run() closes its keeper also when the loop raises
    keeper = keeper or SamplesKeeper.for_run(args, rundir, tm, roles)
    moves = Moves(tm, offload, roles.move_plan)
    together, with_rollout = roles.move_plan.trainers_together, roles.move_plan.with_rollout
    announce_run_modes(args, tm)
    ci = CIChecks(args, tm.log) if args["ci_test"] else None
    if ci is not None:
        ci.weight_push(roles.initial_sync or {}, actor_trained=False)
    for rollout_id in range(start_rollout_id, args["num_rollout"]):
        if eval_before_training(args, rollout_id, start_rollout_id):
            evaluate(roles, tm, rollout_id)
        actor_will_train = roles.actor is not None and actor_trains(args, rollout_id)
        if with_rollout:  # the first to train onloads while the rollout generates
            moves.prefetch(first_to_train(roles, actor_will_train))
        with tm.phase(Phase.GENERATE, rollout_id):
            batch = roles.rollout.generate(rollout_id)
        details = keeper.take_details(batch)  # texts for the samples files, not for training
        moves.poll()
        with tm.phase(Phase.ROLLOUT_OFFLOAD, rollout_id):
            tm.offload("rollout", "offload", roles.rollout.offload())

        critic_out = None  # grpo: no critic, advantages from the group-normalized rewards
        spent: dict[str, float] = {}  # train phase -> seconds, for its MFU
        if roles.critic is not None:
            with tm.phase(Phase.CRITIC_TRAIN, rollout_id), timed(spent, "critic"):
                moves.wake(roles.critic)
                if together and actor_will_train:  # the actor onloads while the critic trains
                    moves.prefetch(roles.actor)
                critic_out = roles.critic.train_critic(rollout_id, batch)
                moves.sleep(roles.critic, later=together and actor_will_train)

        if actor_will_train:
            values = None if critic_out is None else critic_out["values"]
            with tm.phase(Phase.ACTOR_TRAIN, rollout_id), timed(spent, "actor"):
                moves.wake(roles.actor)
                actor_out = roles.actor.train_actor(rollout_id, batch, values)
                exported = export_while_awake(args, roles, rollout_id)
                moves.sleep(roles.actor, later=with_rollout)
        else:
            actor_out = None  # value-function warmup: the actor is not woken, trained or logged
            exported = None

        if not with_rollout:  # the rollout's memory comes back only once both have left
            moves.settle()
        if save_due(args, rollout_id):
            with tm.phase(Phase.SAVE, rollout_id):
                moves.settle()
                save(args, roles, tm, rollout_id, offload)

        with tm.phase(Phase.ROLLOUT_ONLOAD, rollout_id):
            tm.offload("rollout", "onload", roles.rollout.onload())
        if push_due(args, rollout_id):
            with tm.phase(Phase.UPDATE_WEIGHTS, rollout_id):
                if exported is None:  # critic-only warmup
                    moves.settle(roles.actor)
                    exported = export_woken(roles, tm, offload)
                sync_start = time.perf_counter()
                loaded = roles.rollout.update_weights(exported.ref)
                if loaded["path"] == "cuda_ipc":  # copied: the actor's device buffer can go
                    moves.after(roles.actor, roles.actor.start_release_export)
                log_weight_sync(tm, loaded, exported, time.perf_counter() - sync_start)
            if ci is not None:
                ci.weight_push(loaded, actor_trained=actor_out is not None)
        elif roles.actor is not None and not args["debug_train_only"]:
            log_push_skipped(args, tm, rollout_id)

        rollout_metrics = report_rollout(args, tm, rollout_id, batch, critic_out, actor_out,
                                         perf=train_mfu(args, batch, spent))
        keeper.keep(rollout_id, batch, details, critic_out, actor_out)  # written off-thread
        if ci is not None:
            ci.after_rollout(rollout_id, critic_out, actor_out, rollout_metrics,
                             pushed=push_due(args, rollout_id))
        if eval_after_rollout(args, rollout_id):
            evaluate(roles, tm, rollout_id)
        if tm.writer.error:  # fail at this rollout, not silently at the end of the run
            raise EventsNotWritten(tm.writer.error)
        write_status(rundir, state=State.RUNNING, rollout_id=rollout_id,
                     num_rollout=args["num_rollout"])
        if stop.requested:
            moves.settle()
        if stop.requested and args.get("save") and not save_due(args, rollout_id):
            with tm.phase(Phase.SAVE, rollout_id):  # a graceful stop keeps this rollout's training
                save(args, roles, tm, rollout_id, offload)
        stop.check()
    moves.settle()
    if own_keeper:
        keeper.close()


def first_to_train(roles: Roles, actor_will_train: bool) -> Any:  # noqa: ANN401 - a TrainGroup
    """The trainer to onload during generate: the critic, else the actor. A critic's actor
    onloads while the critic trains, done before the critic is: two onloads beside the decode
    share the host link and slow it more than one (docs/performance.md)."""
    if roles.critic is not None:
        return roles.critic
    return roles.actor if actor_will_train else None


def actor_trains(args: dict[str, Any], rollout_id: int) -> bool:
    """False during --num-critic-only-steps, which only applies with a critic (miles)."""
    return not args["use_critic"] or rollout_id >= args["num_critic_only_steps"]


def push_due(args: dict[str, Any], rollout_id: int) -> bool:
    """miles: weights go to the rollout side when (rollout_id + 1) % --update-weights-interval
    is 0; never in the debug modes (no trainer, or no rollout engine, to push between)."""
    if args["debug_rollout_only"] or args["debug_train_only"]:
        return False
    return (rollout_id + 1) % args["update_weights_interval"] == 0


def log_push_skipped(args: dict[str, Any], tm: Telemetry, rollout_id: int) -> None:
    interval = args["update_weights_interval"]
    next_push = (rollout_id // interval + 1) * interval - 1
    then = (f"next push after rollout {next_push}" if next_push < args["num_rollout"]
            else "no further push in this run")
    tm.log("info", f"weights not pushed after rollout {rollout_id} (--update-weights-interval "
                   f"{interval}): the next rollout samples from older weights; {then}")


def eval_before_training(args: dict[str, Any], rollout_id: int, start_rollout_id: int) -> bool:
    """miles: with --eval-interval, once before the first rollout (also on resume) unless
    --skip-eval-before-train; never under --debug-train-only."""
    return (args["eval_interval"] is not None and rollout_id == start_rollout_id
            and not args["skip_eval_before_train"] and not args["debug_train_only"])


def eval_after_rollout(args: dict[str, Any], rollout_id: int) -> bool:
    """miles' train.py: after every --eval-interval-th rollout (should_run_periodic_action)."""
    interval = args["eval_interval"]
    return (interval is not None and not args["debug_train_only"]
            and (rollout_id + 1) % interval == 0)


def evaluate(roles: Roles, tm: Telemetry, rollout_id: int) -> None:
    """Eval rollouts with the rollout side's current weights; nothing trains on them."""
    with tm.phase(Phase.EVAL, rollout_id):
        metrics = roles.rollout.eval(rollout_id)
    tm.metrics(StepKey.EVAL, rollout_id, rollout_id, metrics)


def announce_run_modes(args: dict[str, Any], tm: Telemetry) -> None:
    """Say what the debug modes and a sparse weight push change in the loop below."""
    if args["debug_rollout_only"]:
        tm.log("info", "--debug-rollout-only: rollouts only; no actor or critic was built, and "
                       "nothing is trained, saved or pushed")
    if args["debug_train_only"]:
        tm.log("warning", "--debug-train-only: PPO Deck has no --load-debug-rollout-data, so "
                          "the first rollout's batch is generated once (initial weights) and "
                          "every rollout trains on that same batch; the generator is then "
                          "released, no weights are pushed and no eval runs")
    if args["update_weights_interval"] > 1 and not args["debug_rollout_only"]:
        interval = args["update_weights_interval"]
        tm.log("info", f"--update-weights-interval {interval}: the rollout side gets the "
                       f"actor's weights once every {interval} rollouts, not after each one")


@dataclass(frozen=True)
class ExportedWeights:
    """The actor's HF weights for one push (an object-store ref: host bytes or CUDA IPC
    handles) and how long the export took."""

    ref: Any
    seconds: float
    while_awake: bool


def export_weights(roles: Roles, while_awake: bool = False) -> ExportedWeights:
    start = time.perf_counter()
    ref = roles.actor.export_hf_weights()
    return ExportedWeights(ref, time.perf_counter() - start, while_awake)


def export_woken(roles: Roles, tm: Telemetry, offload: bool) -> ExportedWeights:
    """The actor did not train this rollout (critic-only warmup): the driver wakes it for the
    export and puts it back to sleep, each move an offload event."""
    wake(roles.actor, tm, offload)
    exported = export_weights(roles)
    sleep(roles.actor, tm, offload)
    return exported


def export_while_awake(args: dict[str, Any], roles: Roles,
                       rollout_id: int) -> ExportedWeights | None:
    """This rollout's push, exported right after training while the actor is on the GPU:
    exporting after its sleep woke it again, which was most of a sync's time."""
    return export_weights(roles, while_awake=True) if push_due(args, rollout_id) else None


def log_weight_sync(tm: Telemetry, loaded: dict | None, exported: ExportedWeights,
                    seconds: float) -> None:
    """Split the weight sync into the actor's export, the transfer and the rollout's load,
    naming the path it took (cuda_ipc or packed_host) in the message and the event."""
    loaded = loaded or {}
    load = float(loaded.get("seconds", 0.0))
    total = exported.seconds + seconds
    path = loaded.get("path", "packed_host")
    when = "after training, awake" if exported.while_awake else "woken for it"
    tm.writer.emit("log", level="info", source="driver",
                   msg=f"weight sync {total:.2f} s via {path}: actor export "
                       f"{exported.seconds:.3f} s ({when}), transfer {seconds - load:.3f} s, "
                       f"rollout load {load:.3f} s ({int(loaded.get('bytes', 0)) / 1e9:.2f} GB, "
                       f"{path})",
                   sync_path=path, sync_seconds=total, sync_bytes=int(loaded.get("bytes", 0)),
                   export_seconds=exported.seconds,
                   export_while_awake=exported.while_awake, transfer_seconds=seconds - load,
                   load_seconds=load)


def save_due(args: dict[str, Any], rollout_id: int) -> bool:
    """miles' should_run_periodic_action: every --save-interval rollouts, and the last one."""
    if not args.get("save"):
        return False
    interval = args.get("save_interval")
    last = rollout_id + 1 == args["num_rollout"]
    return last or bool(interval and (rollout_id + 1) % interval == 0)


def save(args: dict[str, Any], roles: Roles, tm: Telemetry, rollout_id: int,
         offload: bool) -> None:
    """Each model is onloaded, saved, offloaded; the actor is skipped during warmup."""
    groups = [] if roles.critic is None else [roles.critic]
    if roles.actor is not None and actor_trains(args, rollout_id):
        groups.append(roles.actor)
    for group in groups:
        wake(group, tm, offload)
        group.save(rollout_id)
        sleep(group, tm, offload)
    report_save_check(args, tm, rollout_id)


def report_save_check(args: dict[str, Any], tm: Telemetry, rollout_id: int) -> None:
    """Read the save back against its manifest (sizes) with its critic sibling: the event the
    monitor's and `runs ls`' save badge shows. A damaged save is said at once, not at resume."""
    from ..run.save_manifest import check_iteration, required_roots

    critic = Path(args["critic_save"]) if args["use_critic"] and args["critic_save"] else None
    roots = required_roots(Path(args["save"]), critic, int(args["num_critic_only_steps"] or 0),
                           rollout_id)
    check = check_iteration(rollout_id, roots, checksums=False)
    damage = [d.text() for d in check.damage]
    msg = (f"save of rollout {rollout_id} verified: files and sizes match its manifest"
           + (", critic sibling present" if critic else "") if check.good
           else f"save of rollout {rollout_id} is DAMAGED: {'; '.join(damage)}")
    tm.writer.emit("log", level="info" if check.good else "error", source="driver", msg=msg,
                   save_check={"rollout_id": rollout_id, "ok": check.good, "damage": damage})


@contextlib.contextmanager
def timed(spent: dict[str, float], key: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        spent[key] = time.perf_counter() - start


def train_mfu(args: dict[str, Any], batch: Any, spent: dict[str, float]) -> dict[str, float]:
    """perf/{critic,actor}_train_tflops (and _mfu on a known GPU): engine/driver/mfu.py."""
    from ..config.derived import count_params
    from ..host.kind import machine_kind
    from ..host.probe import read_facts
    from .mfu import mfu_metrics, trained_tokens

    kind = machine_kind()  # the probe's facts may arrive mid-run: read each rollout (small)
    return mfu_metrics(args, count_params(args), trained_tokens(batch), spent, kind,
                       read_facts(kind))


def report_rollout(args: dict[str, Any], tm: Telemetry, rollout_id: int, batch: Any,
                   critic_out: dict[str, Any] | None, actor_out: dict[str, Any] | None,
                   perf: dict[str, float] | None = None) -> dict[str, Any]:
    rollout_metrics = {**batch.metrics, **(perf or {})}
    for out in (critic_out, actor_out):  # e.g. a compile that fell back to eager
        for override in (out or {}).get("overrides", []):
            tm.announce(override, "train")
    if critic_out is not None:
        steps = critic_out["step_metrics"]
        for i, metrics in enumerate(steps):
            tm.metrics(StepKey.TRAIN, rollout_id * len(steps) + i, rollout_id, metrics,
                       role="critic")
        rollout_metrics.update(critic_out.get("rollout_metrics", {}))
    if actor_out is not None:
        for i, metrics in enumerate(actor_out["step_metrics"]):
            step = rollout_id * len(actor_out["step_metrics"]) + i
            tm.metrics(StepKey.TRAIN, step, rollout_id, metrics, role="actor")
        rollout_metrics.update(actor_out.get("rollout_metrics", {}))
    tm.metrics(StepKey.ROLLOUT, rollout_id, rollout_id, rollout_metrics)
    return rollout_metrics


# --- process plumbing -------------------------------------------------------------------------


def load_args(rundir: RunDir) -> dict[str, Any]:
    from ..config import resolve
    from ..presets import config_from_toml
    from ..run.secrets import restore_secrets

    config = config_from_toml(rundir.config_toml.read_text(), rundir.config_toml)
    # run_dir first: resolve() expands ${RUN_DIR} in --save/--load paths from it
    config = restore_secrets(config).with_values(run_dir=str(rundir.path))
    return dict(resolve(config, os.environ))


def announce_overrides(rundir: RunDir, tm: Telemetry) -> None:
    """Each start-up override that applies (engine/config/rules_overrides.py), said once
    (Telemetry.announce: a warning event and a line in driver.log)."""
    from ..config.rules_overrides import start_announcements
    from ..presets import config_from_toml

    config = config_from_toml(rundir.config_toml.read_text(), rundir.config_toml)
    for line in start_announcements(config, os.environ):
        tm.announce(line, "overrides")


def run(rundir: RunDir) -> int:
    stop = StopFlag()
    signal.signal(signal.SIGINT, stop.handle)
    signal.signal(signal.SIGTERM, stop.handle)
    writer = EventWriter(rundir.events_jsonl)
    tm = Telemetry(writer, os.getpid())
    write_status(rundir, state=State.RUNNING, pid=os.getpid(), pgid=os.getpgid(0))
    start_reaper(rundir)
    tm.status(State.RUNNING)
    roles = keeper = None
    try:
        # first: torch sets TORCHINDUCTOR_CACHE_DIR to a temp dir once anything asks for it
        caches = apply_compile_caches()
        tm.log("info", caches.message(), source="driver")
        args = load_args(rundir)
        tm.status(State.RUNNING, num_rollout=args["num_rollout"])  # replays: N without status.json
        announce_overrides(rundir, tm)
        from .preflight import preflight_host, preflight_in_background

        preflight_host(args)  # a config the engine cannot take fails here, before Ray starts
        probe = probe_machine(tm)  # before Ray and the engines take the GPUs
        # Megatron's own config checks (a 4-10 s import) run while Ray starts; start_roles
        # waits for them before any model is built
        model_checks = preflight_in_background(args)
        tm.start_tracking(args)
        from .roles import start_roles

        roles, start_rollout_id = start_roles(args, tm, caches.env, model_checks)
        if probe.process is not None and probe.poll() is not None:  # it finished meanwhile
            tm.log("info", probe.line(), source="driver")
        if start_rollout_id:
            tm.log("info", f"resumed from the checkpoint of rollout {start_rollout_id - 1}: "
                   f"continuing at rollout {start_rollout_id}", source="driver")
        keeper = SamplesKeeper.for_run(args, rundir, tm, roles)
        train(args, roles, tm, stop, start_rollout_id, rundir, keeper)
        return finish(rundir, tm, State.SUCCEEDED, "all rollouts done", 0, keeper)
    except (StopRequested, KeyboardInterrupt):
        how = "at once" if stop.signals > 1 else "after the current rollout"
        return finish(rundir, tm, State.STOPPED, f"stopped by request {how}", 0, keeper)
    except Exception as err:  # noqa: BLE001 - the driver must always leave a status
        traceback.print_exc()
        reason = f"{type(err).__name__}: {err}".splitlines()[0][:500]
        return finish(rundir, tm, State.FAILED, f"{reason} (traceback in driver.log)", 1,
                      keeper)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # cleanup must not be interrupted
        from .roles import stop_roles

        stop_roles(roles)
        tm.close()
        writer.close()
        if writer.error:
            write_status(rundir, state=State.FAILED,
                         detail=f"events could not be written: {writer.error}")


def probe_machine(tm: Telemetry) -> Probe:
    """This machine kind's bounds (engine/host/probe.py): cached, or probed now for at most
    PROBE_WAIT_S; the speed verdict (engine/run/bounds.py) holds each phase against them."""
    from ..host.kind import machine_kind
    from ..host.probe import start_probe

    probe = start_probe(machine_kind())
    tm.log("info", probe.line(), source="driver")
    return probe


def finish(rundir: RunDir, tm: Telemetry, state: str, detail: str, code: int,
           keeper: SamplesKeeper | None = None) -> int:
    import time

    if keeper is not None:  # the last rollout's samples are on disk before the final status
        keeper.close()
    tm.drain()  # the last phase's memory sample before the final status: readers stop there
    tm.status(state, detail)
    try:
        write_status(rundir, state=state, detail=detail, ended=time.time())
    except OSError as exc:  # disk full: readers then see the dead pid and say "lost"
        print(f"could not record the final state {state!r}: {exc}", flush=True)
    print(f"run {state}: {detail}", flush=True)
    return code


# Write end of the reaper's pipe: held (never closed) for the life of this process. os.pipe()
# fds are not inherited, so Ray's children never hold it and the reaper sees EOF exactly
# when this process ends.
_reaper_pipe: list[int] = []


def start_reaper(rundir: RunDir) -> subprocess.Popen[bytes] | None:
    """engine/driver/reaper.py: stops leftover Ray/worker processes once this process is gone, even
    after a SIGKILL, and records why the run ended when this process could not."""
    read_end, write_end = os.pipe()
    try:
        reaper = subprocess.Popen(  # its own group: a stop sent to ours must not reach it
            [sys.executable, "-m", "ppodeck.engine.driver.reaper", "--run-dir", str(rundir.path),
             "--driver-pid", str(os.getpid())],
            stdin=read_end, process_group=0, cwd=Path(__file__).resolve().parents[2],
        )
    except OSError as exc:
        os.close(write_end)
        print(f"warning: no reaper started ({exc}); a killed driver may leave Ray processes",
              flush=True)
        return None
    finally:
        os.close(read_end)
    _reaper_pipe.append(write_end)
    return reaper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppodeck.engine.driver")
    parser.add_argument("--run-dir", required=True, type=Path)
    ns = parser.parse_args(argv)
    return run(RunDir(ns.run_dir))
