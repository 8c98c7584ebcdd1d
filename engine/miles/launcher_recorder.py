"""Run a miles Python launcher with miles' helpers replaced by recorders (consent required).

When static reading (engine.miles.py_launcher) is not enough, `--run-launcher` runs the
launcher in a subprocess, with explicit consent only (the launcher's own code runs). miles'
helper module (`miles.utils.external_utils.command_utils`, and `exec_command`) is replaced by
recorders before the launcher is loaded: `execute_train` records its arguments instead of
starting Ray, `exec_command_*`, `hf_download_dataset`, `convert_checkpoint` and the other steps
record their command instead of running it, so nothing is downloaded, converted or launched by
them. Other miles modules come from `--miles-root` when given (else importing one fails and is
reported). The launcher's own ScriptArgs gets the launcher args; typer is not involved.

    python -m ppodeck.engine.miles.launcher_recorder LAUNCHER OUT.json
    (PPODECK_LAUNCHER_ARGS: a JSON list)

LIGHT: stdlib only.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import runpy
import subprocess
import sys
import traceback
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ARGS_ENV = "PPODECK_LAUNCHER_ARGS"
HELPERS = "miles.utils.external_utils.command_utils"


class RecorderError(RuntimeError):
    """The launcher could not be run to its U.execute_train call; the message says why."""


# --- parent side -----------------------------------------------------------------------------

def run_launcher(path: Path, overrides: list[str] | None = None, *,
                 env: Mapping[str, str] | None = None, miles_root: Path | None = None,
                 timeout: float = 60.0) -> dict[str, Any]:
    """The launcher's record: {"train": [...], "steps": [...], "error": str | None}."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ppodeck-launcher-") as tmp:
        out = Path(tmp) / "record.json"
        child_env = {**(env if env is not None else os.environ),
                     ARGS_ENV: json.dumps(overrides or [])}
        roots = [str(Path(__file__).resolve().parents[2])]  # this package, for -m
        roots += [str(miles_root)] if miles_root is not None else []
        child_env["PYTHONPATH"] = os.pathsep.join(
            [*roots, child_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        command = [sys.executable, "-m", "ppodeck.engine.miles.launcher_recorder",
                   str(path.resolve()),
                   str(out)]
        try:
            done = subprocess.run(command, env=child_env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise RecorderError(f"{path.name} did not reach U.execute_train within "
                                f"{timeout:.0f} s; nothing was imported") from exc
        if not out.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise RecorderError(f"{path.name} exited with {done.returncode} before recording "
                                f"anything: {' | '.join(tail) or 'no output'}")
        return json.loads(out.read_text())


# --- child side: the recorders ---------------------------------------------------------------

class _Record:
    def __init__(self, launcher: Path) -> None:
        self.launcher = launcher
        self.train: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []

    def line(self) -> int:
        """The launcher's line that called the helper."""
        for frame in reversed(traceback.extract_stack()):
            if Path(frame.filename).resolve() == self.launcher:
                return frame.lineno or 0
        return 0


@dataclasses.dataclass
class ExecuteTrainConfig:  # the same fields and defaults as miles'
    cuda_core_dump: bool = False
    num_nodes: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("SLURM_JOB_NUM_NODES", "1")))
    extra_env_vars: str = ""
    output_dir: str = "/root/shared_data"


def _helpers(record: _Record, entries: list[Callable[..., Any]]) -> types.ModuleType:
    module = types.ModuleType(HELPERS)

    def step(kind: str, what: str, local: str = "", source: str = "") -> None:
        record.steps.append({"kind": kind, "what": what, "local": local, "source": source,
                             "line": record.line()})

    def exec_command(cmd: str, capture_output: bool = False, **_: Any) -> str | None:
        step("command", str(cmd))
        return "" if capture_output else None

    def execute_train(train_args: str, num_gpus_per_node: int, megatron_model_type: str | None,
                      train_script: str = "train.py", before_ray_job_submit: Any = None,
                      **_: Any) -> None:
        if before_ray_job_submit is not None:
            before_ray_job_submit()
        record.train.append({"train_args": str(train_args),
                             "num_gpus_per_node": num_gpus_per_node,
                             "megatron_model_type": megatron_model_type,
                             "train_script": str(train_script), "line": record.line()})

    def hf_download_dataset(full_name: str, data_dir: str = "/root/datasets") -> None:
        step("dataset", full_name, f"{data_dir}/{full_name.split('/')[-1]}")

    def convert_checkpoint(model_name: str, megatron_model_type: str, num_gpus_per_node: int,
                           multinode: bool = False, num_nodes: int | None = None,
                           extra_args: str = "", dir_dst: str = "/root",
                           hf_checkpoint: str | None = None, **_: Any) -> None:
        step("convert", model_name, f"{dir_dst}/{model_name}_torch_dist",
             hf_checkpoint or f"/root/models/{model_name}")

    def get_default_wandb_args(test_file: str, run_name_prefix: str | None = None,
                               run_id: str | None = None) -> str:
        if not os.environ.get("WANDB_API_KEY"):
            return ""
        group = run_id or create_run_id()
        group = f"{run_name_prefix}_{group}" if run_name_prefix else group
        return (f"--use-wandb --wandb-project miles-{Path(test_file).stem} --wandb-group "
                f"{group} --disable-wandb-random-suffix ")

    def create_run_id() -> str:
        return datetime.datetime.now(datetime.UTC).strftime("%y%m%d-%H%M%S")

    def get_bool_env_var(name: str, default: str = "false") -> bool:
        return os.getenv(name, default).lower() in ("true", "1")

    def dataclass_cli(func: Any = None, **_: Any) -> Any:
        if func is None:
            return lambda f: dataclass_cli(f)
        entries.append(func)
        return func

    values: dict[str, Any] = {
        "ExecuteTrainConfig": ExecuteTrainConfig, "execute_train": execute_train,
        "execute_train_npu": execute_train, "exec_command_cpu": exec_command,
        "exec_command_gpu": exec_command, "exec_command_multi_node": exec_command,
        "hf_download_dataset": hf_download_dataset, "convert_checkpoint": convert_checkpoint,
        "fp8_cast_bf16": lambda src, dst: step("command", f"fp8_cast_bf16 {src} -> {dst}"),
        "rsync_simple": lambda src, dst, num_nodes=None: step("command", f"rsync {src} {dst}"),
        "ssh_start_ray_workers": lambda *a, **k: step("command", "ssh_start_ray_workers"),
        "start_mooncake_master": lambda *a, **k: step("command", "start_mooncake_master"),
        "get_default_wandb_args": get_default_wandb_args, "create_run_id": create_run_id,
        "get_bool_env_var": get_bool_env_var, "dataclass_cli": dataclass_cli,
        "get_env_enable_infinite_run": lambda: get_bool_env_var(
            "MILES_TEST_ENABLE_INFINITE_RUN"),
        "check_has_nvlink": lambda: False,
        "encode_pseudo_file": lambda text: text,
        "repo_base_dir": Path("/root/miles"),
        "NUM_GPUS_OF_HARDWARE": {"H100": 8, "H200": 8, "B200": 8, "B300": 8, "GB200": 4,
                                 "GB300": 4, "MI350X": 8, "MI355X": 8},
        "GENERATION_HARDWARE": {"H100": "Hopper", "GB200": "Blackwell", "GB300": "Blackwell"},
    }
    module.__dict__.update(values)
    return module


def _install(record: _Record, entries: list[Callable[..., Any]]) -> None:
    """miles' helper modules -> the recorders; parent packages from the checkout if any."""
    helpers = _helpers(record, entries)
    for name in ("miles", "miles.utils", "miles.utils.external_utils"):
        try:
            __import__(name)
        except ImportError:
            package = types.ModuleType(name)
            package.__path__ = []  # a namespace with nothing else in it
            sys.modules[name] = package
    sys.modules[HELPERS] = helpers
    sys.modules["miles.utils.external_utils.exec_command"] = helpers
    sys.modules["miles.utils.external_utils"].command_utils = helpers  # type: ignore[attr-defined]


def _instance(entry: Callable[..., Any], overrides: list[str]) -> list[Any]:
    import inspect
    import typing

    params = list(inspect.signature(entry).parameters.values())
    if not params:
        return []
    cls = typing.get_type_hints(entry).get(params[0].name)
    if cls is None or not dataclasses.is_dataclass(cls):
        return []
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    index = 0
    while index < len(overrides):
        name, eq, value = overrides[index][2:].partition("=")
        index += 1
        dest = name.replace("-", "_")
        if dest.startswith("no_") and dest[3:] in fields:
            kwargs[dest[3:]] = False
            continue
        if dest not in fields:
            raise RecorderError(f"--{name} is not a field of {cls.__name__}")
        if hints.get(dest) is bool and not eq:
            kwargs[dest] = True
            continue
        if not eq:
            value = overrides[index]
            index += 1
        kind = hints.get(dest)
        kwargs[dest] = int(value) if kind in (int, int | None) else float(value) if kind in (
            float, float | None) else value
    return [cls(**kwargs)]


def _main(launcher: str, out: str) -> int:
    path = Path(launcher).resolve()
    record = _Record(path)
    entries: list[Callable[..., Any]] = []
    error = None
    try:
        _install(record, entries)
        overrides = json.loads(os.environ.get(ARGS_ENV, "[]"))
        sys.argv = [str(path)]
        sys.path.insert(0, str(path.parent))
        namespace = runpy.run_path(str(path), run_name="__ppodeck_launcher__")
        if not entries:
            main = namespace.get("main")
            if not callable(main):
                raise RecorderError("no @U.dataclass_cli command and no main() to call")
            entries.append(main)
        entry = next((e for e in entries if e.__name__ in ("main", "train")), entries[0])
        entry(*_instance(entry, overrides))
    except BaseException as exc:  # noqa: BLE001 - the launcher's failure is the report's
        error = f"{type(exc).__name__}: {exc}"[:300]
    Path(out).write_text(json.dumps({"train": record.train, "steps": record.steps,
                                     "error": error}, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1], sys.argv[2]))
