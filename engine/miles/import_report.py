"""The import report of a launch script or a Python launcher: what was resolved and from
where, what stayed unresolved (with its line), and each flag's source line for the preset.

Shared by engine.miles.script_import (bash) and engine.miles.launcher_import (Python).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.issues import Issue
from ..config.model import RunConfig
from .shell import Origin, Unresolved, Word


@dataclass
class ImportReport:
    config: RunConfig
    issues: list[Issue]
    script: str
    origins: dict[str, Origin] = field(default_factory=dict)  # flag name -> where it came from
    unresolved: list[Unresolved] = field(default_factory=list)
    notes: list[Unresolved] = field(default_factory=list)
    train_line: int | None = None
    language: str = "bash"  # "python": a miles Python launcher (engine.miles.py_launcher)
    flag_lines: dict[str, Origin] = field(default_factory=dict)  # python: the flag's own text
    prepare: list[str] = field(default_factory=list)  # python: prepare() as ppodeck prepare
    sources: dict[str, str] = field(default_factory=dict)  # flag key -> hub repo (prepare)
    launcher: list[str] = field(default_factory=list)  # python: entry, overrides, cluster
    problems: list[str] = field(default_factory=list)  # why static reading fell short
    ran: bool = False  # python: run (with consent) with miles' helpers replaced by recorders
    # why nothing of the command could be read (a refused launcher): check()'s findings on the
    # empty config are knock-ons (engine.config.knock_on)
    unreadable: str | None = None

    def judged(self, checked: list[Issue]) -> list[Issue]:
        """This report's issues, then check()'s on its config, knock-ons grouped."""
        return [issue for issue, _ in self.judged_tree(checked)]

    def judged_tree(self, checked: list[Issue], *, config_edited: bool = False
                    ) -> list[tuple[Issue, tuple[Issue, ...]]]:
        """judged(), each issue with the knock-ons grouped under it. `config_edited`: checked
        is about a config edited since the import (the editor), so it is judged as it is."""
        from ..config.knock_on import knock_on_tree

        unread = self.unreadable and not config_edited
        return knock_on_tree(self.issues, checked,
                             unreadable=f"{self.script}, which could not be read"
                             if unread else None)

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
            label = {"model": f"model {detail}", "env": f"${detail} (environment)",
                     "field": detail, "override": f"{detail} (launcher args)"}.get(
                kind, f"${detail}")
            out.append((f"{label} ({where})" if kind not in ("env", "override") else label,
                        [name for _, name in items]))
        return out

    def engine_classes(self) -> tuple[list[str], list[str], list[str]]:
        """(command-only, refused, not modelled) flags of the imported config."""
        from ..config.schema import BY_DEST, DEFAULTS

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
        own = self.flag_lines.get(name)
        if own is not None:  # a Python launcher: the flag's own line, then its value's source
            text = describe_origin(own)
            return text if origin == own or origin.kind == "script" else (
                f"{text} via {describe_origin(origin)}")
        if origin.kind == "script":
            return f"{origin.file}:{origin.line}"
        return f"{origin.file}:{origin.line} via {origin.describe()}".replace(
            f" ({origin.where()})", "")

    def lines(self) -> list[str]:
        """The report as text, section by section (CLI stderr and the TUI dialog)."""
        if self.language == "python":
            how = ("run with miles' helpers replaced by recorders" if self.ran
                   else "nothing in it ran")
            out = [f"import report: {self.script} (read as a Python launcher, {how}"
                   + (f"; U.execute_train at line {self.train_line})"
                      if self.train_line else ")")]
            out += [f"  {line}" for line in self.launcher]
            if self.problems:
                reading = "running it" if self.ran else "static reading"
                out.append(f"  {reading} is not enough ({len(self.problems)}):")
                out += [f"    {p}" for p in self.problems]
            out.append(f"  prepare ({len(self.prepare)}), as `ppodeck prepare` does it:"
                       if self.prepare else "  prepare: no download or conversion steps")
            out += [f"    {line}" for line in self.prepare]
        else:
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


def describe_origin(origin: Origin) -> str:
    """Where a Python launcher's text came from, in the report's words."""
    if origin.kind == "field":
        return f"{origin.detail} ({origin.where()})"
    if origin.kind == "override":
        return f"{origin.detail} (launcher args)"
    return origin.describe()


def _short(names: list[str], limit: int = 12) -> str:
    shown = " ".join(names[:limit])
    return shown + (f" ... (+{len(names) - limit})" if len(names) > limit else "")


def word_origins(words: list[Word]) -> dict[str, Origin]:
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


def note_issues(notes: list[Unresolved]) -> list[Issue]:
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
