"""--use-wandb and --use-tensorboard: the run's metrics, under miles' names and step axes.

Fed from Telemetry.metrics (the same dicts the `metrics` events carry), so wandb, TensorBoard
and events.jsonl always agree. Imported by the driver only when one of the flags is on.

Step axes, as miles' tracking does (spec §7): `train/*` against `train/step`; `rollout/*`,
`perf/*` and `critic/*` against `rollout/step`; `eval/*` against `eval/step`. rollout/step and
eval/step are the rollout id, or with --wandb-always-use-train-step the train step reached at
that rollout (rollout_id * rollout_batch_size * n_samples_per_prompt // global_batch_size).

wandb: offline (files under the run directory, `wandb sync` uploads them later) unless a key
is given (--wandb-key or WANDB_API_KEY) or --wandb-mode online; an online start that fails
(no network) falls back to offline, and says so. The key is never written into the config.
TensorBoard: event files under $TENSORBOARD_DIR (miles' variable) or
<run_dir>/tensorboard/<tb-project-name>/<tb-experiment-name>.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..vocabulary import StepKey

Log = Callable[[str, str], None]  # (level, message): Telemetry.log
STEP_GROUPS = (("train/*", StepKey.TRAIN), ("rollout/*", StepKey.ROLLOUT),
               ("perf/*", StepKey.ROLLOUT), ("critic/*", StepKey.ROLLOUT),
               ("eval/*", StepKey.EVAL))
ONLINE_TIMEOUT_S = 90.0


class Backend(Protocol):
    name: str

    def log(self, step_key: str, step: int, metrics: dict[str, float]) -> None: ...

    def finish(self) -> None: ...


def axis_step(args: Mapping[str, Any], step_key: str, step: int) -> int:
    """miles' compute_rollout_step for rollout/step and eval/step; train/step as given."""
    if step_key == StepKey.TRAIN or not args["wandb_always_use_train_step"]:
        return step
    samples = args["rollout_batch_size"] * args["n_samples_per_prompt"]
    return step * samples // args["global_batch_size"]


def numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Finite numbers only: an undefined metric (null) is left out, not plotted as 0."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class Tracking:
    """Fans each metrics call out to the backends; a backend that fails is dropped, loudly."""

    def __init__(self, args: Mapping[str, Any], backends: list[Backend], log: Log) -> None:
        self.args = args
        self.backends = backends
        self._log = log

    def log(self, step_key: str, step: int, metrics: Mapping[str, Any]) -> None:
        values = numbers(metrics)
        if not values:
            return
        step = axis_step(self.args, step_key, step)
        for backend in list(self.backends):
            try:
                backend.log(step_key, step, values)
            except Exception as err:  # noqa: BLE001 - tracking must never cost a training step
                self.backends.remove(backend)
                self._log("warning", f"{backend.name} logging stopped: {type(err).__name__}: "
                          f"{err}; training continues, events.jsonl still has every metric")

    def finish(self) -> None:
        for backend in self.backends:
            try:
                backend.finish()
            except Exception as err:  # noqa: BLE001
                self._log("warning", f"{backend.name} did not finish cleanly: {err}")
        self.backends = []


def start_tracking(args: Mapping[str, Any], log: Log) -> Tracking:
    backends: list[Backend] = []
    if args["use_wandb"]:
        backends.append(WandbBackend.start(args, log))
    if args["use_tensorboard"]:
        backends.append(TensorBoardBackend.start(args, log))
    return Tracking(args, backends, log)


def run_name(args: Mapping[str, Any]) -> str:
    return Path(args["run_dir"]).name if args["run_dir"] else "ppodeck"


# --------------------------------------------------------------------------------------------
# wandb
# --------------------------------------------------------------------------------------------
def public_config(args: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved config for wandb's run config, secrets (--wandb-key) left out."""
    from ..config.schema import BY_DEST

    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in args.items()
            if not (k in BY_DEST and BY_DEST[k].secret)}


def wandb_mode(args: Mapping[str, Any]) -> str:
    """--wandb-mode, else WANDB_MODE (miles' order), else online only when a key exists."""
    if args["wandb_mode"]:
        return str(args["wandb_mode"])
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    has_key = bool(args["wandb_key"] or os.environ.get("WANDB_API_KEY"))
    return "online" if has_key else "offline"


def wandb_names(args: Mapping[str, Any]) -> tuple[str, str]:
    """(group, run name) as miles names them: group + "_" + a random id unless
    --disable-wandb-random-suffix; the group defaults to the run directory's name."""
    group = args["wandb_group"] or run_name(args)
    if args["disable_wandb_random_suffix"]:
        return group, group
    from wandb.sdk.lib.runid import generate_id

    group = f"{group}_{generate_id()}"
    return group, f"{group}-RANK_0"


class WandbBackend:
    name = "wandb"

    def __init__(self, run: Any, mode: str, directory: str) -> None:  # noqa: ANN401
        self.run = run
        self.mode = mode
        self.directory = directory

    @classmethod
    def start(cls, args: Mapping[str, Any], log: Log) -> WandbBackend:
        import wandb

        mode = wandb_mode(args)
        directory = str(args["wandb_dir"] or args["run_dir"] or ".")
        os.makedirs(directory, exist_ok=True)
        group, name = wandb_names(args)
        kwargs = {"entity": args["wandb_team"], "project": args["wandb_project"] or "ppodeck",
                  "group": group, "name": name, "config": public_config(args), "dir": directory}
        if args["wandb_run_id"]:
            kwargs.update(id=args["wandb_run_id"], resume="allow")
        if mode == "online":
            try:
                if args["wandb_key"]:
                    wandb.login(key=args["wandb_key"], host=args["wandb_host"], verify=False)
                run = wandb.init(settings=cls._settings(wandb, "online", args), **kwargs)
            except Exception as err:  # noqa: BLE001 - no network, bad key, host down...
                log("warning", f"wandb could not start online ({type(err).__name__}: "
                               f"{str(err)[:200]}): logging offline instead")
                mode = "offline"
        if mode != "online":
            run = wandb.init(settings=cls._settings(wandb, mode, args), **kwargs)
        cls._define_step_metrics(run)
        where = "nothing is written (--wandb-mode disabled)" if mode == "disabled" else (
            f"files in {run.dir}" + (f", `wandb sync {Path(run.dir).parent}` uploads them"
                                     if mode == "offline" else f", live at {run.url}"))
        log("info", f"wandb {mode}: project {kwargs['project']}, group {group}, run {run.id}; "
                    f"{where}")
        return cls(run, mode, directory)

    @staticmethod
    def _settings(wandb: Any, mode: str, args: Mapping[str, Any]) -> Any:  # noqa: ANN401
        extra = {"base_url": args["wandb_host"]} if args["wandb_host"] else {}
        # console off: the driver's own stdout is driver.log, not a wandb capture
        return wandb.Settings(mode=mode, init_timeout=ONLINE_TIMEOUT_S, console="off",
                              silent=True, **extra)

    @staticmethod
    def _define_step_metrics(run: Any) -> None:  # noqa: ANN401
        for _, step_key in STEP_GROUPS:
            run.define_metric(step_key)
        for pattern, step_key in STEP_GROUPS:
            run.define_metric(pattern, step_metric=step_key)

    def log(self, step_key: str, step: int, metrics: dict[str, float]) -> None:
        self.run.log({**metrics, step_key: step})

    def finish(self) -> None:
        self.run.finish()


# --------------------------------------------------------------------------------------------
# TensorBoard
# --------------------------------------------------------------------------------------------
def tensorboard_dir(args: Mapping[str, Any]) -> Path:
    """$TENSORBOARD_DIR (miles), else <run_dir>/tensorboard/<project>/<experiment>; miles
    names the experiment by the start time when only the project is given."""
    if os.environ.get("TENSORBOARD_DIR"):
        return Path(os.environ["TENSORBOARD_DIR"])
    project = args["tb_project_name"] or run_name(args)
    experiment = args["tb_experiment_name"] or time.strftime("%Y%m%d_%H%M%S")
    return Path(args["run_dir"] or ".") / "tensorboard" / project / experiment


class TensorBoardBackend:
    name = "tensorboard"

    def __init__(self, writer: Any, logdir: Path) -> None:  # noqa: ANN401
        self.writer = writer
        self.logdir = logdir

    @classmethod
    def start(cls, args: Mapping[str, Any], log: Log) -> TensorBoardBackend:
        from tensorboardX import SummaryWriter

        logdir = tensorboard_dir(args)
        logdir.mkdir(parents=True, exist_ok=True)
        writer = SummaryWriter(logdir=str(logdir), flush_secs=10)
        how = "" if args["tb_project_name"] or os.environ.get("TENSORBOARD_DIR") else (
            " (no --tb-project-name: named after the run)")
        log("info", f"tensorboard: event files in {logdir}{how}; view with "
                    f"`tensorboard --logdir {logdir.parent}`")
        return cls(writer, logdir)

    def log(self, step_key: str, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def finish(self) -> None:
        self.writer.close()
