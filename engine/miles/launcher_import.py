"""A miles Python launcher -> RunConfig, with the same import report as a bash script.

engine.miles.py_launcher reads the launcher (nothing runs); here its `U.execute_train` call
becomes miles argv as miles builds it (the model args of `megatron_model_type`, then
`train_args`), its prepare() steps become what `ppodeck prepare` does (the preset's
`[provenance.sources]`), and what stayed unknown is reported with its line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.argv import parse_argv
from ..config.issues import Issue
from ..config.model import RunConfig
from .import_report import ImportReport, note_issues, word_origins
from .py_launcher import (
    Args,
    LauncherReader,
    LauncherRun,
    Piece,
    PrepareStep,
    Text,
    TrainCall,
    Unknown,
    hf_download,
    split_words,
)
from .shell import Origin, Unresolved, Word

# the flags `ppodeck prepare` fills from the hub, by the kind of download
_SOURCE_FLAG = {"model": "hf_checkpoint", "dataset": "prompt_data"}


def import_launcher(text: str, script: str, *, env: Mapping[str, str] | None = None,
                    miles_root: Path | None = None, overrides: list[str] | None = None
                    ) -> ImportReport:
    """Read a Python launcher into a RunConfig and its import report.
    Raises py_launcher.LauncherError for overrides that do not fit the launcher's fields."""
    reader = LauncherReader(script, env=env or {}, overrides=overrides)
    return _report(reader.read(text), script, text.splitlines(), env, miles_root, overrides)


def import_recorded(record: Mapping[str, Any], script: str, *,
                    env: Mapping[str, str] | None = None, miles_root: Path | None = None,
                    overrides: list[str] | None = None) -> ImportReport:
    """The same report from what engine.miles.launcher_recorder saw when the launcher ran with
    miles' helpers replaced by recorders (the values are the ones it really computed; the
    lines are those of the helper calls)."""
    run = LauncherRun(script, entry="the launcher, run with recorders (consented)")
    for call in record.get("train", []):
        origin = Origin("script", "", script, int(call.get("line", 0)))
        model = call.get("megatron_model_type")
        run.train.append(TrainCall(
            Text((Piece(str(call.get("train_args", "")), origin),)),
            call.get("num_gpus_per_node"),
            None if model is None else Text((Piece(str(model), origin),)),
            origin.line, str(call.get("train_script", "train.py"))))
    for step in record.get("steps", []):
        line = int(step.get("line", 0))
        if step.get("kind") != "command":
            run.prepare.append(PrepareStep(str(step.get("kind")), str(step.get("what")),
                                           str(step.get("local", "")), line,
                                           str(step.get("source", ""))))
            continue
        for part in str(step.get("what", "")).split("&&"):
            words = part.split()
            download = hf_download(words)
            if download is not None:
                run.prepare.append(PrepareStep(*download, line))
            elif words and words[0] != "mkdir":
                run.prepare.append(PrepareStep("command", " ".join(words)[:100], "", line))
    if record.get("error"):
        run.problems.append(f"running it stopped: {record['error']}")
    report = _report(run, script, [], env, miles_root, overrides, ran=True)
    report.notes.append(Unresolved("--run-launcher", script, 0, "the launcher ran (with "
                                   "consent), its miles helpers replaced by recorders"))
    return report


def _report(run: LauncherRun, script: str, lines: list[str], env: Mapping[str, str] | None,
            miles_root: Path | None, overrides: list[str] | None, *, ran: bool = False
            ) -> ImportReport:
    issues: list[Issue] = []
    problems = list(run.problems)
    words: list[Word] = []
    train: list[Word] | None = None
    call = run.train[0] if run.train else None
    if call is None:
        if run.stops and not problems:
            stop = run.stops[0]
            problems.append(f"it stops at line {stop.line} ({stop.what}) before any "
                            f"U.execute_train call: {stop.why}")
        elif not problems:
            entry = run.entry or "the launcher"
            problems.append(f"no U.execute_train(...) call is reached from {entry}")
    else:
        if len(run.train) > 1:
            others = ", ".join(f"{script}:{c.line}" for c in run.train[1:])
            issues.append(Issue("info", "command.several_train_commands", (others,),
                                f"{len(run.train)} U.execute_train calls; imported the first "
                                f"({script}:{call.line}), not {others}.",
                                "pass the launcher arguments that pick the run you want"))
        train = _train_words(call, problems, lines)
        words = _model_words(call, run, script, env or {}, miles_root, problems) + (train or [])
    # nothing of the train args was read: the config is empty, and what check() finds missing
    # in it is a knock-on of the first problem (engine.config.knock_on groups it)
    unreadable = problems[0] if problems and (call is None or train is None) else None
    words, dropped = _drop_loose_unknowns(words)
    config, argv_issues = parse_argv([w.text for w in words])
    unresolved = list(dict.fromkeys([*(u for w in words for u in w.unresolved), *dropped,
                                     *run.unresolved]))
    fix = ("pass --miles-root MILES_CHECKOUT for the miles modules it imports, or launcher "
           "args that lead to U.execute_train" if ran else
           "set the value in the launcher or with --launcher-args; or pass --run-launcher to "
           "run it with miles' helpers replaced by recorders (its own code runs: needs "
           "--trust or a yes)")
    if unreadable:  # one refusal: the first problem, the others said inside it
        more = "; ".join(problems[1:])
        issues.append(Issue("error", "launcher.not_static", (script,),
                            f"{script}: {problems[0]}." + (f" Also: {more}." if more else ""),
                            fix))
    else:
        issues += [Issue("warning", "launcher.not_static", (script,), f"{script}: {problem}.",
                         fix) for problem in problems]
    issues += _unresolved_issues(unresolved) + note_issues(run.notes) + argv_issues
    external_ray = (env or {}).get("MILES_SCRIPT_EXTERNAL_RAY", "").lower() in ("1", "true")
    if call is not None and not unreadable and not external_ray:
        issues += _ray_gpus_issues(call, config, script)
    prepare, sources = _prepare(run.prepare, config, script)
    return ImportReport(
        config, issues, script, word_origins(words), unresolved, run.notes,
        call.line if call else None, language="python", flag_lines=_flag_lines(words),
        prepare=prepare, sources=sources, launcher=_launcher_lines(run, call, overrides),
        problems=problems, ran=ran, unreadable=unreadable)


def _ray_gpus_issues(call: TrainCall, config: RunConfig, script: str) -> list[Issue]:
    """miles' execute_train starts Ray with `--num-gpus num_gpus_per_node` (unless
    $MILES_SCRIPT_EXTERNAL_RAY); a command that asks a node for more waits for GPUs that Ray
    was never given."""
    from ..config.schema import DEFAULTS

    gpus = call.num_gpus_per_node
    asked = config.values.get("actor_num_gpus_per_node", DEFAULTS["actor_num_gpus_per_node"])
    if call.num_gpus_per_node is None:
        return [Issue("warning", "launcher.num_gpus_per_node_missing", (script,),
                      f"U.execute_train ({script}:{call.line}) is given no num_gpus_per_node, "
                      "which miles' execute_train requires: the launcher stops there.",
                      "pass num_gpus_per_node=N to U.execute_train")]
    if type(gpus) is not int or type(asked) is not int or asked <= gpus:
        return []
    return [Issue("warning", "launcher.ray_gpus_short", ("--actor-num-gpus-per-node",),
                  f"U.execute_train ({script}:{call.line}) starts Ray with {gpus} GPU"
                  f"{'s' if gpus != 1 else ''} per node, but the command asks each node for "
                  f"{asked} (--actor-num-gpus-per-node"
                  + (", miles' default" if "actor_num_gpus_per_node" not in config.values
                     else "") + "): its placement group would wait for GPUs Ray does not have.",
                  f"set --actor-num-gpus-per-node {gpus} in train_args, or num_gpus_per_node="
                  f"{asked}")]


def _unresolved_issues(unresolved: list[Unresolved]) -> list[Issue]:
    return [Issue("warning", "command.unresolved", (item.what[:60],),
                  f"{item.what} ({item.file}:{item.line}) is not known without running the "
                  f"launcher: {item.why}.",
                  "set the value in the launcher or with --launcher-args (and check the flags "
                  "it would have added), or pass --run-launcher to run it with miles' helpers "
                  "replaced by recorders (its own code runs: needs --trust or a yes)")
            for item in unresolved]


# --- argv ------------------------------------------------------------------------------------

def _model_words(call: TrainCall, run: LauncherRun, script: str, env: Mapping[str, str],
                 miles_root: Path | None, problems: list[str]) -> list[Word]:
    """miles puts `shell_safe_model_args(megatron_model_type)` before train_args."""
    from .models import lookup

    model_type = call.megatron_model_type
    if model_type is None:
        return []  # the FSDP backend: no Megatron model args
    line = call.line
    if isinstance(model_type, Unknown) or (isinstance(model_type, Text) and
                                           model_type.unknown()):
        cause = model_type.why if isinstance(model_type, Unknown) else model_type.unknown()
        guess = _guess_model_type(run.args, env, miles_root)
        if guess is None:
            problems.append(f"megatron_model_type depends on {cause.what if cause else '?'} "
                            f"(line {cause.line if cause else line}), so the model shape is "
                            "not known")
            return []
        name, source = guess
        run.notes.append(Unresolved(
            f"megatron_model_type = {name}", script, line,
            f"the launcher takes it from {cause.what if cause else '?'} (line "
            f"{cause.line if cause else line}), not read; assumed from model_name "
            f"{_plain_name(run.args)}, which the model table names ({source})"))
        model_type = name
    name = str(model_type)
    found, source = lookup(name, env, miles_root)
    if found is None:
        problems.append(f"model args of megatron_model_type {name!r}: {source}")
        return []
    run.model_source = f"model args of {name} (line {line}): {source}"
    origin = Origin("model", name, script, line)
    return [Word(token, origin) for token in found.split()]


def _guess_model_type(args: Args | None, env: Mapping[str, str], miles_root: Path | None
                      ) -> tuple[str, str] | None:
    from .models import lookup

    name = _plain_name(args)
    if not name:
        return None
    for candidate in dict.fromkeys((name, name[:1].lower() + name[1:], name.lower())):
        found, source = lookup(candidate, env, miles_root)
        if found is not None:
            return candidate, source
    return None


def _plain_name(args: Args | None) -> str:
    value = args.values.get("model_name") if args else None
    return value.text if isinstance(value, Text) and not value.unknown() else ""


def _train_words(call: TrainCall, problems: list[str], lines: list[str]) -> list[Word] | None:
    """The train args' words; None when they are not known at all (the problem says why)."""
    train_args = call.train_args
    if isinstance(train_args, Unknown):
        problems.append(f"train_args depend on {train_args.why.what} (line "
                        f"{train_args.why.line}): {train_args.why.why}")
        return None
    if not isinstance(train_args, Text):
        problems.append(f"train_args at line {call.line} is not a string")
        return None
    return split_words(train_args, lines)


def _drop_loose_unknowns(words: list[Word]) -> tuple[list[Word], list[Unresolved]]:
    """A word that is nothing but an unknown value (`{true_on_policy_args}`) is left out of
    the argv unless it is the value of the flag before it; it stays in the report."""
    from ..config.schema import BY_NAME

    kept: list[Word] = []
    dropped: list[Unresolved] = []
    for word in words:
        loose = word.unresolved and word.text.startswith("{") and word.text.endswith("}")
        previous = kept[-1].text if kept else ""
        flag = BY_NAME.get(previous.split("=", 1)[0]) if previous.startswith("--") else None
        takes_value = flag is not None and "=" not in previous and flag.kind not in (
            "bool", "tristate")
        if loose and not takes_value:
            dropped += [Unresolved(u.what, u.file, u.line, f"{u.why}; left out of the train "
                                   "args") for u in word.unresolved]
            continue
        kept.append(word)
    return kept, dropped


def _flag_lines(words: list[Word]) -> dict[str, Origin]:
    return {w.text.split("=", 1)[0]: w.origin for w in words
            if w.text.startswith("--") and len(w.text) > 2}


# --- the report's extra sections -------------------------------------------------------------

def _launcher_lines(run: LauncherRun, call: TrainCall | None,
                    overrides: list[str] | None) -> list[str]:
    lines = []
    if run.entry:
        lines.append(f"entry: {run.entry}")
    if run.args is not None:
        lines.append(f"{run.args.cls.name} (line {run.args.cls.line}): "
                     f"{len(run.args.cls.fields)} fields"
                     + (f", launcher args {' '.join(overrides)}" if overrides else ""))
    if run.model_source:
        lines.append(run.model_source)
    if call is not None:
        gpus = call.num_gpus_per_node
        shown = "no" if gpus is None else describe_value(gpus)
        lines.append(f"ray cluster: {shown} GPUs per node (U.execute_train num_gpus_per_node, "
                     f"line {call.line})")
    return lines


def describe_value(value: Any) -> str:
    if isinstance(value, Unknown):
        return f"unknown ({value.why.what})"
    if isinstance(value, Text):
        return value.text
    return str(value)


def _prepare(steps: list[PrepareStep], config: RunConfig, script: str
             ) -> tuple[list[str], dict[str, str]]:
    """prepare() as `ppodeck prepare` does it: hub downloads that fill a flag's path become
    the preset's [provenance.sources]; the conversion fills --ref-load."""
    lines: list[str] = []
    sources: dict[str, str] = {}
    for step in steps:
        where = f"({script}:{step.line})"
        if step.kind in _SOURCE_FLAG:
            dest = _SOURCE_FLAG[step.kind]
            key = dest.replace("_", "-")
            if _fills(config.get(dest), step.local):
                sources[key] = step.what
                lines.append(f"download {step.kind} {step.what} -> --{key} "
                             f"{config.get(dest)} {where}")
            else:
                lines.append(f"download {step.kind} {step.what} -> {step.local}: no --{key} "
                             f"reads it, so ppodeck prepare does not fetch it {where}")
        elif step.kind == "convert":
            ref_load = config.get("ref_load")
            if _same(ref_load, step.local):
                lines.append(f"convert {step.source} -> --ref-load {ref_load} (ppodeck prepare "
                             f"converts --hf-checkpoint there) {where}")
            else:
                lines.append(f"convert {step.source} -> {step.local}: no --ref-load reads it; "
                             f"ppodeck prepare converts to --ref-load only {where}")
        else:
            lines.append(f"not done by ppodeck prepare: {step.what} {where}")
    return lines, sources


def _same(value: Any, local: str) -> bool:
    return isinstance(value, str) and value.rstrip("/") == local.rstrip("/")


def _fills(value: Any, local: str) -> bool:
    if not isinstance(value, str) or not local:
        return False
    value, local = value.rstrip("/"), local.rstrip("/")
    return value == local or value.startswith(local + "/")

