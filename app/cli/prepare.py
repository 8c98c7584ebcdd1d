"""`ppodeck prepare PRESET`: download the preset's model and data, convert to torch_dist.

Exit codes: 0 ready (or nothing to do), 1 something is missing or failed (offline, download,
conversion), 2 usage (unknown preset, bad --set). Light: engine.launch.prepare plans and runs the
work (downloads in this process through huggingface_hub, the conversion in a subprocess).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .common import EXIT_INVALID, SetOption, preset_config
from .common import fail as _fail

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from ...engine.launch.prepare import Plan, Step

EXIT_PREPARE_FAILED = EXIT_INVALID  # README: 1 (a failed prepare), not a failed run's 3


def register(app: typer.Typer) -> None:
    """Add `prepare` to the ppodeck app."""
    app.command("prepare")(prepare)


def prepare(
    preset: Annotated[str, typer.Argument(help="Preset name or .toml path.")],
    sets: SetOption = None,
    offline: Annotated[bool, typer.Option(
        "--offline", help="Never contact the hub: only check and convert local files.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before downloading.")
                   ] = False,
) -> None:
    """Download the preset's HF checkpoint and dataset, convert the checkpoint to torch_dist.

    Hub repos come from the preset's [provenance.sources] table; files go to the paths the
    flags name (--hf-checkpoint, --prompt-data; ${PPODECK_HOME} defaults to ~/.cache/ppodeck).
    The torch_dist conversion (--ref-load) is skipped when its
    latest_checkpointed_iteration.txt already says "release". Offline (--offline,
    HF_HUB_OFFLINE=1 or no network), it stops at once and says which files to put where.

    Example:

    \b
        ppodeck prepare qwen3-4b-ppo --yes
        ppodeck prepare qwen3-4b-ppo --set hf-checkpoint=/data/Qwen3-4B --offline
    """
    from rich.console import Console

    from ...engine.config.resolve import resolve
    from ...engine.host.machine import environment
    from ...engine.launch.prepare import PrepareError, offline_message, offline_reason, plan_prepare

    console = Console(stderr=True)
    config, loaded = _load(preset, sets)
    args = resolve(config, environment())
    try:
        plan = plan_prepare(args, _sources(loaded))
    except PrepareError as exc:
        _fail(str(exc), EXIT_PREPARE_FAILED)
    _show_plan(console, loaded.name, plan)
    if plan.problems:
        _fail("\n".join(plan.problems), EXIT_PREPARE_FAILED)
    if not plan.todo:
        console.print("Everything is in place; nothing to do.")
        return
    reason = offline_reason(offline) if plan.downloads else None
    if reason:
        _fail(offline_message(plan, reason), EXIT_PREPARE_FAILED)
    _confirm(plan, yes)
    try:
        _run(console, plan, args)
    except PrepareError as exc:
        _fail(str(exc), EXIT_PREPARE_FAILED)
    console.print(f"[green]Ready:[/green] ppodeck run {preset}")


# --------------------------------------------------------------------------------- helpers
def _load(preset: str, sets: list[str] | None) -> tuple[Any, Any]:
    """(RunConfig with --set applied, the Preset), read exactly as `run` reads them."""
    return preset_config(preset, sets)


def _sources(loaded: Any) -> dict[str, Any]:  # noqa: ANN401
    from ...engine.launch.prepare import PrepareError, preset_sources
    from ...engine.presets import PresetError

    try:
        return preset_sources(loaded)
    except (PrepareError, PresetError) as exc:
        _fail(str(exc), EXIT_PREPARE_FAILED)


def _show_plan(console: Console, name: str, plan: Plan) -> None:
    """One line per input: status, flag, source -> destination (paths never wrapped)."""
    from rich.markup import escape

    from ...engine.launch.prepare import describe

    console.print(f"prepare {name}:")
    for (what, source, into, status), step in zip(describe(plan.steps), plan.steps,
                                                  strict=True):
        style = "green" if step.done else "yellow"
        console.print(f"  [{style}]{escape(status):<28}[/{style}] {escape(what)}  "
                      f"{escape(source)} -> {escape(into)}", soft_wrap=True, highlight=False)


def _confirm(plan: Plan, yes: bool) -> None:
    downloads = plan.downloads
    if yes or not downloads:
        return
    what = ", ".join(step.source for step in downloads)
    if not sys.stdin.isatty():
        _fail(f"this downloads {what}; pass --yes to allow it.", EXIT_PREPARE_FAILED)
    if not typer.confirm(f"Download {what}?", default=True, err=True):
        raise typer.Exit(EXIT_PREPARE_FAILED)


def _run(console: Console, plan: Plan, args: dict[str, Any]) -> None:
    """Downloads first (the conversion may read what they fetched), each with progress bars."""
    from ...engine.launch.prepare import download

    for step in plan.downloads:
        console.print(f"Downloading {step.repo_type} {step.source} -> {step.into}")
        with _progress(console) as progress:
            download(step, tqdm_class=rich_tqdm(progress))
    for step in plan.todo:
        if step.kind == "convert":
            _convert(console, step, args)


def _convert(console: Console, step: Step, args: dict[str, Any]) -> None:
    from ...engine.launch.prepare import convert

    console.print(f"Converting {step.source} -> {step.into} (torch_dist)")
    with _progress(console) as progress:
        # the worker reports: read HF, build model, write torch_dist, converted
        task = progress.add_task("starting the converter", total=4, unit="step")

        def on_message(message: str) -> None:
            progress.update(task, advance=1, description=message)

        convert(step, args, on_message=on_message)
        progress.update(task, completed=4)


# --------------------------------------------------------------------- rich progress bars
def _progress(console: Console) -> Progress:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), _amount_column_class()(),
                    TimeElapsedColumn(), console=console, transient=False)


def _amount_column_class() -> type:
    # a class built on first use: rich.progress stays out of the CLI's import time
    from rich.filesize import decimal
    from rich.progress import ProgressColumn
    from rich.text import Text

    class AmountColumn(ProgressColumn):
        """Bytes for byte bars (downloads), counts for the others (files, steps)."""

        def render(self, task: Any) -> Text:  # noqa: ANN401
            total = task.total
            if task.fields.get("unit") == "B":
                done = decimal(int(task.completed))
                return Text(f"{done}/{decimal(int(total))}" if total else done)
            return Text(f"{int(task.completed)}/{int(total)}" if total else
                        f"{int(task.completed)}")

    return AmountColumn


def rich_tqdm(progress: Progress) -> type:
    """A tqdm class whose bars are tasks of `progress` (huggingface_hub takes `tqdm_class`)."""
    from tqdm.std import tqdm

    class RichTqdm(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401
            kwargs["gui"] = True  # tqdm itself prints nothing; display() feeds rich
            kwargs.pop("name", None)
            super().__init__(*args, **kwargs)
            self._task = None if self.disable else progress.add_task(
                self.desc or "", total=self.total or None, unit=self.unit)

        def display(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401
            if getattr(self, "_task", None) is not None:
                progress.update(self._task, completed=self.n, total=self.total or None,
                                description=self.desc)

        def clear(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401
            pass

        def close(self) -> None:
            if self.disable:
                return
            self.display()
            super().close()

    return RichTqdm
