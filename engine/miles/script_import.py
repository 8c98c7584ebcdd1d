"""A miles launch script -> RunConfig, with the import report.

The script is read by `engine.miles.shell` (nothing runs); the train command is the one that
calls `train.py` (directly or after `ray job submit ... --`); its words become miles argv. The
report says, in one place, what was resolved and from where (a variable, a sourced file, a
model name), what stayed unresolved (with its line), which flags the engine keeps as
command-only and which it would refuse. Each flag keeps the file and line it came from, which
`presets from-command` writes as a comment next to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..config.argv import parse_argv
from ..config.issues import Issue
from ..config.model import RunConfig
from .import_report import (
    ImportReport,
    describe_origin,
    note_issues,
    word_origins,
)
from .reader_bounds import MAX_SCRIPT_CHARS
from .shell import Command, ScriptReader, ShellRun, Unresolved, Word

__all__ = ["ImportReport", "describe_origin", "import_script", "parse_command_line"]

_TRAIN_SCRIPTS = ("train.py", "train_async.py")


def parse_command_line(text: str, env: Mapping[str, str] | None = None, *,
                       path: Path | None = None, miles_root: Path | None = None,
                       overrides: list[str] | None = None) -> tuple[RunConfig, list[Issue]]:
    """Turn a pasted miles launch (a command line or a whole launch script) into a RunConfig.

    The text is read as bash reads it (import_script below; nothing runs): `python3
    train.py ...`, `ray job submit ... -- python3 train.py ...`, arrays, `${VARS}`, `read -ra`,
    miles' model args by name, and `source` of files next to `path`. Variables come from the
    script, then `env` (the CLI passes os.environ). Anything unresolved is kept verbatim and
    named in a warning with its line.
    """
    report = import_script(text, env=env, path=path, miles_root=miles_root, overrides=overrides)
    return report.config, report.issues


def import_script(text: str, *, env: Mapping[str, str] | None = None,
                  path: Path | None = None, miles_root: Path | None = None,
                  name: str | None = None, overrides: list[str] | None = None) -> ImportReport:
    """Read a launch script (pasted text, or a file when `path` is given) into a RunConfig.
    `name`: what the report and the flags' origins call pasted text (default <pasted>).
    A miles Python launcher (a .py file, a python shebang, Python text) goes to
    import_launcher; `overrides` are its own options (`--model-name Qwen3-0.6B`)."""
    from .models import checkout_beside, lookup
    from .py_launcher import LauncherError, is_python_launcher

    script = path.name if path else (name or "<pasted>")
    if len(text) > MAX_SCRIPT_CHARS:
        return _too_long(text, script)
    found_root = None if miles_root is not None else checkout_beside(path)
    if is_python_launcher(text, path or (Path(name) if name else None)):
        from .launcher_import import import_launcher

        report = import_launcher(text, script, env=env, miles_root=miles_root or found_root,
                                 overrides=overrides)
        if found_root is not None:
            report.launcher.append(f"miles checkout: {found_root} (the launcher sits in it; "
                                   "--miles-root picks another)")
        return report
    miles_root = miles_root or found_root
    if overrides:
        raise LauncherError(f"launcher arguments ({' '.join(overrides)}) apply to miles' Python "
                            f"launchers; {script} is read as a bash script. Fix: set those "
                            "values in the script, or drop the launcher arguments.")

    def model_args(name: str, exported: Mapping[str, str]) -> tuple[str | None, str]:
        return lookup(name, exported, miles_root)

    reader = ScriptReader(env=env, model_args=model_args, sourced_model=model_args)
    run = reader.read(text, script, path.resolve() if path else None)
    issues = _syntax_issues(run)
    command, words = _train_words(run, issues)
    if run.refused is None and command is None and not any(_is_flag(w) for w in words):
        return _no_train_command(run, script, issues)
    argv = [w.text for w in words]
    config, argv_issues = parse_argv(argv)
    unresolved = list(dict.fromkeys(u for w in words for u in w.unresolved))
    issues += _unresolved_issues(unresolved, miles_root) + note_issues(run.notes) + argv_issues
    refused = run.refused
    if refused is not None:  # one refusal, naming the line; check()'s findings are knock-ons
        issues.insert(0, Issue("error", "command.not_read", (script,),
                               f"{script} line {refused.line}: {refused.why}.",
                               "trim the script to the commands that launch training"))
    return ImportReport(config, issues, script, word_origins(words), unresolved, run.notes,
                        command.line if command else None,
                        unreadable=refused.why if refused is not None else None)


def _too_long(text: str, script: str) -> ImportReport:
    """A refusal before any parsing: parsing is what a huge paste would cost."""
    why = (f"{script} is {len(text):,} characters; scripts and launchers are read up to "
           f"{MAX_SCRIPT_CHARS:,} (miles' largest launcher is about 26,000)")
    issue = Issue("error", "command.not_read", (script,), why + ".",
                  "paste the command that launches training, or the launcher itself")
    return ImportReport(RunConfig(), [issue], script, unreadable=why)


def _no_train_command(run: ShellRun, script: str, issues: list[Issue]) -> ImportReport:
    """Text with no train command and no flag (`echo hi`): one refusal, not the dozen issues
    check() would find in the empty config it gives."""
    programs = list(dict.fromkeys(c.words[0].text for c in run.commands if c.words))
    seen = (f"its commands: {', '.join(programs[:4])}" + (" ..." if len(programs) > 4 else "")
            if programs else "it holds no command")
    why = f"{script} has no train command: no `python3 train.py ...` and no --flag ({seen})"
    kept = [i for i in issues if i.code == "command.syntax_error"]
    refusal = Issue("error", "command.no_train_command", (script,), why + ".",
                    "paste the `python3 train.py ...` command, or the script that runs it")
    return ImportReport(RunConfig(), [refusal, *kept], script, unreadable=why)


def _is_flag(word: Word) -> bool:
    return word.text.startswith("--") and len(word.text) > 2


def _train_words(run: ShellRun, issues: list[Issue]) -> tuple[Command | None, list[Word]]:
    """The words after train.py (or after any `python X.py`); else every word from the first
    flag on, for text that is only flags."""
    found = [(c, i) for c in run.commands for i in [_train_index(c.words)] if i is not None]
    if not found:
        found = [(c, i) for c in run.commands for i in [_python_index(c.words)] if i is not None]
        if found:
            command, index = found[0]
            issues.append(Issue("warning", "command.not_train_py",
                                (command.words[index].text[:60],),
                                f"no train.py command; imported the flags of `python "
                                f"{command.words[index].text}` ({command.file}:"
                                f"{command.line}) as miles flags.",
                                "paste the `python3 train.py ...` command it runs"))
    if found:
        command, index = found[0]
        if len(found) > 1:
            ignored = tuple(f"{c.file}:{c.line}" for c, _ in found[1:])
            others = ", ".join(ignored)
            issues.append(Issue("info", "command.several_train_commands", ignored,
                                f"{len(found)} train commands found; imported the first "
                                f"({command.file}:{command.line}), not {others}.",
                                "keep the one you run in the pasted text"))
        return command, command.words[index + 1:]
    flat = _words_of_train_candidates(run.commands, issues)
    first_flag = next((k for k, w in enumerate(flat) if w.text.startswith("--")), None)
    if first_flag:
        skipped = " ".join(w.text for w in flat[:first_flag])
        issues.append(Issue("warning", "command.no_train_script", (flat[0].text[:40],),
                            f"no train.py found; ignoring {skipped[:80]!r} before the first "
                            "flag.", "paste the full `python3 train.py ...` command"))
    return None, flat[first_flag:] if first_flag is not None else flat


# programs whose flags are never train flags, and wrappers whose own flags come before python
_OTHER_PROGRAMS = {"hf", "huggingface-cli", "mkdir", "pip", "pip3", "git", "wget", "curl", "cp",
                   "mv", "rm", "ln", "echo", "ray", "pkill", "sleep", "nvidia-smi", "export"}
_WRAPPERS = {"srun", "mpirun", "torchrun", "numactl", "nohup", "env", "timeout", "taskset"}


def _words_of_train_candidates(commands: list[Command], issues: list[Issue]) -> list[Word]:
    """Without a train.py command: the words of the commands that may be it. The flags of
    other programs (`hf download --local-dir`, `srun --nodes`) are left out, and named."""
    words: list[Word] = []
    left_out: list[str] = []
    for command in commands:
        texts = [w.text for w in command.words]
        program = texts[0].rsplit("/", 1)[-1] if texts else ""
        if program in _OTHER_PROGRAMS and any(t.startswith("--") for t in texts):
            left_out.append(f"{' '.join(texts[:2])} ({command.file}:{command.line})")
            continue
        if program in _WRAPPERS:
            python = next((k for k, t in enumerate(texts)
                           if t.rsplit("/", 1)[-1].startswith("python")), None)
            start = len(texts) if python is None else python
            if any(t.startswith("--") for t in texts[1:start]):
                left_out.append(f"{program}'s own flags ({command.file}:{command.line})")
            words += command.words[start:]
            continue
        words += command.words
    if left_out:
        issues.append(Issue("info", "command.other_programs", tuple(left_out[:3]),
                            "not read as train flags: the flags of " + ", ".join(left_out)
                            + ".", "nothing to do, unless one of them is the train command"))
    return words


def _command_start(texts: list[str]) -> int:
    """Past `ray job submit ... --`."""
    return texts.index("--") + 1 if "--" in texts and texts[:1] == ["ray"] else 0


def _train_index(words: list[Word]) -> int | None:
    texts = [w.text for w in words]
    for index in range(_command_start(texts), len(texts)):
        if texts[index].endswith(_TRAIN_SCRIPTS):
            return index
    return None


def _python_index(words: list[Word]) -> int | None:
    texts = [w.text for w in words]
    start = _command_start(texts)
    if start >= len(texts) or "python" not in texts[start]:
        return None
    for index in range(start + 1, len(texts)):
        if texts[index].endswith(".py"):
            return index
    return None


def _syntax_issues(run: ShellRun) -> list[Issue]:
    return [Issue("warning", "command.syntax_error", (f"{p.file}:{p.line}",),
                  f"bash would not parse {p.file} line {p.line} ({p.text!r}); the rest was "
                  "read as far as it goes.",
                  "check the quotes and brackets on that line (`bash -n` shows the same)")
            for p in run.syntax]


def _unresolved_issues(unresolved: list[Unresolved], miles_root: Path | None) -> list[Issue]:
    issues = []
    for item in unresolved:
        if item.variable:
            issues.append(Issue(
                "warning", "command.unresolved_variable", (f"${item.variable}",),
                f"${{{item.variable}}} is not defined in the pasted text ({item.file}:"
                f"{item.line}); kept verbatim.",
                f"define {item.variable}=... above the command, or edit the value"))
        elif "model_args_utils" in item.what:
            fix = ("check the model name" if miles_root else
                   "pass --miles-root MILES_CHECKOUT to read its scripts/models, or paste the "
                   "model flags")
            issues.append(Issue("warning", "command.model_args_unresolved", (item.what[:60],),
                                f"{item.what} ({item.file}:{item.line}): {item.why}.", fix))
        else:
            issues.append(Issue("warning", "command.unresolved", (item.what[:60],),
                                f"{item.what} ({item.file}:{item.line}) is kept verbatim: "
                                f"{item.why}.", "replace it with its value in the script"))
    return issues
