"""A miles launch script -> RunConfig, with the import report.

The script is read by `engine.config.shell` (nothing runs); the train command is the one that
calls `train.py` (directly or after `ray job submit ... --`); its words become miles argv. The
report says, in one place, what was resolved and from where (a variable, a sourced file, a
model name), what stayed unresolved (with its line), which flags the engine keeps as
command-only and which it would refuse. Each flag keeps the file and line it came from, which
`presets from-command` writes as a comment next to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engine.config.argv import parse_argv
from engine.config.issues import Issue
from engine.config.model import RunConfig
from engine.config.shell import Command, Origin, ScriptReader, ShellRun, Unresolved, Word

_TRAIN_SCRIPTS = ("train.py", "train_async.py")


@dataclass
class ImportReport:
    config: RunConfig
    issues: list[Issue]
    script: str
    origins: dict[str, Origin] = field(default_factory=dict)  # flag name -> where it came from
    unresolved: list[Unresolved] = field(default_factory=list)
    notes: list[Unresolved] = field(default_factory=list)
    train_line: int | None = None

    def resolved(self) -> list[tuple[str, list[str]]]:
        """(from where, flags) for every flag whose value did not sit in the command itself."""
        groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for name, origin in self.origins.items():
            if origin.kind == "script":
                continue
            groups.setdefault((origin.kind, origin.detail), []).append((origin.line, name))
        out = []
        for (kind, detail), items in groups.items():
            lines = sorted({line for line, _ in items})
            file = next(o.file for o in self.origins.values() if o.detail == detail)
            where = f"{file}:{lines[0]}" + (f"-{lines[-1]}" if len(lines) > 1 else "")
            label = {"model": f"model {detail}", "env": f"${detail} (environment)"}.get(
                kind, f"${detail}")
            out.append((f"{label} ({where})" if kind != "env" else label,
                        [name for _, name in items]))
        return out

    def engine_classes(self) -> tuple[list[str], list[str], list[str]]:
        """(command-only, refused, not modelled) flags of the imported config."""
        from engine.config.schema import BY_DEST, DEFAULTS

        command_only, refused = [], []
        for dest, value in self.config.values.items():
            flag = BY_DEST.get(dest)
            if flag is None or value == DEFAULTS.get(dest):
                continue
            if flag.engine.cls == "command-only":
                command_only.append(flag.name)
            elif flag.engine.cls == "refused":
                refused.append(f"{flag.name}: {flag.engine.reason}")
        unknown = [t.split("=", 1)[0] for t in self.config.passthrough if t.startswith("--")]
        return command_only, refused, unknown

    def flag_comment(self, name: str) -> str | None:
        origin = self.origins.get(name)
        if origin is None:
            return None
        if origin.kind == "script":
            return f"{origin.file}:{origin.line}"
        return f"{origin.file}:{origin.line} via {origin.describe()}".replace(
            f" ({origin.where()})", "")

    def lines(self) -> list[str]:
        """The report as text, section by section (CLI stderr and the TUI dialog)."""
        out = [f"import report: {self.script}"
               + (f" (train command at line {self.train_line})" if self.train_line else "")]
        resolved = self.resolved()
        out.append(f"  resolved ({sum(len(f) for _, f in resolved)} flags):"
                   if resolved else "  resolved: nothing came from variables or model names")
        for where, names in resolved:
            out.append(f"    {where}: {_short(names)}")
        out.append(f"  unresolved ({len(self.unresolved)}):" if self.unresolved
                   else "  unresolved: none")
        out += [f"    {u.describe()}" for u in self.unresolved]
        command_only, refused, unknown = self.engine_classes()
        out.append(f"  command-only ({len(command_only)}): {_short(command_only) or '-'}")
        out.append(f"  refused by PPO Deck's engine ({len(refused)}):"
                   + ("" if refused else " -"))
        out += [f"    {r}" for r in refused]
        out.append(f"  not modelled, passed through ({len(unknown)}): {_short(unknown) or '-'}")
        if self.notes:
            out.append(f"  assumed ({len(self.notes)}):")
            out += [f"    {n.describe()}" for n in self.notes]
        return out


def _short(names: list[str], limit: int = 12) -> str:
    shown = " ".join(names[:limit])
    return shown + (f" ... (+{len(names) - limit})" if len(names) > limit else "")


def parse_command_line(text: str, env: Mapping[str, str] | None = None, *,
                       path: Path | None = None, miles_root: Path | None = None
                       ) -> tuple[RunConfig, list[Issue]]:
    """Turn a pasted miles launch (a command line or a whole launch script) into a RunConfig.

    The text is read as bash reads it (import_script below; nothing runs): `python3
    train.py ...`, `ray job submit ... -- python3 train.py ...`, arrays, `${VARS}`, `read -ra`,
    miles' model args by name, and `source` of files next to `path`. Variables come from the
    script, then `env` (the CLI passes os.environ). Anything unresolved is kept verbatim and
    named in a warning with its line.
    """
    report = import_script(text, env=env, path=path, miles_root=miles_root)
    return report.config, report.issues


def import_script(text: str, *, env: Mapping[str, str] | None = None,
                  path: Path | None = None, miles_root: Path | None = None,
                  name: str | None = None) -> ImportReport:
    """Read a launch script (pasted text, or a file when `path` is given) into a RunConfig.
    `name`: what the report and the flags' origins call pasted text (default <pasted>)."""
    from engine.config.miles_models import lookup

    script = path.name if path else (name or "<pasted>")

    def model_args(name: str, exported: Mapping[str, str]) -> tuple[str | None, str]:
        return lookup(name, exported, miles_root)

    reader = ScriptReader(env=env, model_args=model_args, sourced_model=model_args)
    run = reader.read(text, script, path.resolve() if path else None)
    issues = _syntax_issues(run)
    command, words = _train_words(run, issues)
    argv = [w.text for w in words]
    config, argv_issues = parse_argv(argv)
    unresolved = list(dict.fromkeys(u for w in words for u in w.unresolved))
    issues += _unresolved_issues(unresolved, miles_root) + _note_issues(run.notes) + argv_issues
    return ImportReport(config, issues, script, _origins(words), unresolved, run.notes,
                        command.line if command else None)


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
    flat = [w for c in run.commands for w in c.words]
    first_flag = next((k for k, w in enumerate(flat) if w.text.startswith("--")), None)
    if first_flag:
        skipped = " ".join(w.text for w in flat[:first_flag])
        issues.append(Issue("warning", "command.no_train_script", (flat[0].text[:40],),
                            f"no train.py found; ignoring {skipped[:80]!r} before the first "
                            "flag.", "paste the full `python3 train.py ...` command"))
    return None, flat[first_flag:] if first_flag is not None else flat


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


def _origins(words: list[Word]) -> dict[str, Origin]:
    origins: dict[str, Origin] = {}
    for index, word in enumerate(words):
        if not word.text.startswith("--") or len(word.text) < 3:
            continue
        name = word.text.split("=", 1)[0]
        origin = word.origin
        following = words[index + 1] if index + 1 < len(words) else None
        if following is not None and not following.text.startswith("--") \
                and following.origin.kind != "script" and origin.kind == "script":
            origin = following.origin
        origins[name] = origin
    return origins


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


def _note_issues(notes: list[Unresolved]) -> list[Issue]:
    issues = []
    for note in notes:
        if note.what.startswith("source ") or note.what.startswith(". "):
            issues.append(Issue("warning", "command.source_not_read", (note.what[:60],),
                                f"{note.what} ({note.file}:{note.line}) was not read: "
                                f"{note.why}; what it defines stays unresolved.",
                                "give the script as a path with the file next to it, or paste "
                                "its content"))
        else:
            issues.append(Issue("info", "command.assumed", (note.what[:60],),
                                f"{note.file}:{note.line}: {note.what}: {note.why}.",
                                "check the imported values that depend on it"))
    return issues
