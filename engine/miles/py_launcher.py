"""miles' Python launchers read without running them.

miles' launchers (`scripts/run_*.py`, `examples/**/run*.py`) share one shape, built on miles'
helper module `miles/utils/external_utils/command_utils.py` (imported as `U`): a `ScriptArgs`
dataclass (subclassing `U.ExecuteTrainConfig`) whose fields pick the model, GPUs and paths, often
derived further in `__post_init__`; `prepare()` with `hf download`, `U.hf_download_dataset` and
`U.convert_checkpoint`; `execute()` that builds the argument string from f-strings, `+=` and
conditionals on the fields, then calls `U.execute_train(train_args=..., num_gpus_per_node=...,
megatron_model_type=...)`; and typer on top, so each field is a `--field-name` option.

This module walks the launcher's syntax tree (stdlib `ast`) as the interpreter would, over
plain data only: literals, f-strings, `+`/`+=`, arithmetic, comparisons, `if`/`match` and
conditional expressions on values already known, the launcher's own functions, and miles'
helpers by name (our own small models of what each one computes, written from their documented
behaviour). Nothing in the file runs and nothing is imported from it. A value that depends on
anything else (a name imported from miles, an environment variable that is not set, a file, an
unknown call) becomes `Unknown` and is reported with its line as an `Unresolved` piece, as the
shell reader does for bash scripts.

Strings are `Text`: pieces that each remember where they came from (the line of the literal, a
`ScriptArgs` field, an override, the environment), so each train flag keeps its source line.
"""

from __future__ import annotations

import ast
import datetime
import difflib
import functools
import itertools
import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import reader_bounds as bounds
from .shell import Origin, Unresolved, Word

HELPER_MODULE = "miles.utils.external_utils.command_utils"
# exec_command holds the exec_command_* helpers command_utils re-exports
HELPER_MODULES = (HELPER_MODULE, "miles.utils.external_utils.exec_command")
MAX_CALL_DEPTH = 24
MAX_LOOP_ITEMS = 256
MAX_TEXT = bounds.MAX_TEXT
MAX_RANGE = bounds.MAX_ITEMS  # items of a range() the reader builds

# miles' ExecuteTrainConfig (the base of every ScriptArgs): field -> (default, env var read).
EXECUTE_TRAIN_CONFIG: dict[str, tuple[Any, str | None]] = {
    "cuda_core_dump": (False, None),
    "num_nodes": (1, "SLURM_JOB_NUM_NODES"),
    "extra_env_vars": ("", None),
    "output_dir": ("/root/shared_data", None),
}
# U.NUM_GPUS_OF_HARDWARE and U.GENERATION_HARDWARE, the values miles' helper module publishes.
NUM_GPUS_OF_HARDWARE = {"H100": 8, "H200": 8, "B200": 8, "B300": 8, "GB200": 4, "GB300": 4,
                        "MI350X": 8, "MI355X": 8}
GENERATION_HARDWARE = {"H100": "Hopper", "GB200": "Blackwell", "GB300": "Blackwell"}


_UNKNOWN_REST = "**"  # a helper's keyword arguments spread from a value not known


class LauncherError(ValueError):
    """A launcher override that cannot apply (unknown field, bad value); the message says why."""


# --- values ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Piece:
    text: str
    origin: Origin
    unresolved: Unresolved | None = None  # set: `text` stands for a value not known
    # the statement's lines: implicitly joined literals share one node (and, before Python
    # 3.12, one line), so a word's own line is found in the source within these
    span: tuple[int, int] | None = None


@dataclass(frozen=True, eq=False)
class Text:
    """A string the launcher builds, piece by piece, each with its origin."""

    pieces: tuple[Piece, ...]

    @functools.cached_property
    def text(self) -> str:  # cached: a hostile launcher reads one long text many times
        return "".join(p.text for p in self.pieces)

    def unknown(self) -> Unresolved | None:
        return next((p.unresolved for p in self.pieces if p.unresolved), None)

    def retag(self, origin: Origin) -> Text:
        return Text(tuple(Piece(p.text, origin, p.unresolved) for p in self.pieces))

    def written(self, span: tuple[int, int]) -> Text:
        return Text(tuple(Piece(p.text, p.origin, p.unresolved, span) for p in self.pieces))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Text):
            return self.text == other.text
        return isinstance(other, str) and self.text == other

    def __hash__(self) -> int:
        return hash(self.text)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Unknown:
    """A value that cannot be known without running code."""

    why: Unresolved


@dataclass
class Args:
    """A ScriptArgs instance: field values and where each got its value."""

    values: dict[str, Any]
    origins: dict[str, Origin]
    cls: ClassInfo


@dataclass
class ClassInfo:
    name: str
    line: int
    fields: dict[str, FieldInfo]
    methods: dict[str, ast.FunctionDef]


@dataclass
class FieldInfo:
    name: str
    annotation: str
    default: ast.expr | None
    line: int
    factory: bool = False
    inherited: Any = None  # a default from our ExecuteTrainConfig table
    env: str | None = None


@dataclass(frozen=True)
class Helper:
    """One of miles' helpers, by name (U.execute_train, U.hf_download_dataset, ...)."""

    name: str


@dataclass(frozen=True)
class Module:
    name: str  # "U" (miles' helpers), "os", "os.environ", "os.path", "functools"


@dataclass(frozen=True)
class Function:
    node: ast.FunctionDef | ast.Lambda
    bound: Any = None  # `self` for a method


@dataclass(frozen=True)
class Partial:
    function: Any
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Builtin:
    function: Callable[..., Any]
    name: str


# --- what reading gave -----------------------------------------------------------------------

@dataclass
class TrainCall:
    """`U.execute_train(...)` as the launcher calls it."""

    train_args: Any
    num_gpus_per_node: Any
    megatron_model_type: Any
    line: int
    train_script: str = "train.py"


@dataclass
class PrepareStep:
    """A step of the launcher's prepare(): a download, a conversion, or another command."""

    kind: str  # "model", "dataset", "convert", "command"
    what: str  # repo id, or the command
    local: str  # the local directory it fills ("" for a command)
    line: int
    source: str = ""  # convert: the HF checkpoint it reads


@dataclass
class LauncherRun:
    file: str
    train: list[TrainCall] = field(default_factory=list)
    prepare: list[PrepareStep] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    notes: list[Unresolved] = field(default_factory=list)
    args: Args | None = None
    entry: str = ""
    problems: list[str] = field(default_factory=list)  # why static reading was not enough
    stops: list[Unresolved] = field(default_factory=list)  # a raise/assert/exit reached
    model_source: str = ""  # where megatron_model_type's args came from (file or table)


class _Return(Exception):  # noqa: N818 - control flow, not an error
    def __init__(self, value: Any) -> None:
        self.value = value


class _Stop(Exception):  # noqa: N818 - the launcher raises (or exits) here
    def __init__(self, what: Unresolved) -> None:
        self.what = what


# --- detection -------------------------------------------------------------------------------

def is_python_launcher(text: str, path: Path | None = None) -> bool:
    """A `.py` file, a python shebang, or text that parses as Python with definitions."""
    if path is not None and path.suffix == ".py":
        return True
    first = text.lstrip().split("\n", 1)[0]
    if first.startswith("#!"):
        return "python" in first
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
               for n in tree.body)


# --- the reader ------------------------------------------------------------------------------

class LauncherReader:
    """Evaluates a launcher's syntax tree over plain data; see the module docstring."""

    def __init__(self, file: str, *, env: Mapping[str, str] | None = None,
                 overrides: list[str] | None = None) -> None:
        self.file = file
        self.env = dict(env or {})
        self.overrides = list(overrides or [])
        self.run = LauncherRun(file)
        self.globals: dict[str, Any] = {"__name__": self._text("__main__", 0),
                                        "__file__": self._text(file, 0)}
        self.classes: dict[str, ClassInfo] = {}
        self.depth = 0
        self.in_prepare = 0
        self.lines: list[str] = []
        self.source = bounds.Source("")
        self.budget = bounds.Budget()
        self.span: tuple[int, int] | None = None  # the statement being read
        self.last_line = 0  # the statement the reader entered last: where a limit stopped it

    # -- entry --

    def read(self, text: str) -> LauncherRun:
        self.source = bounds.Source(text)
        self.lines = self.source.lines
        try:
            tree = ast.parse(text, filename=self.file)
        except SyntaxError as exc:
            self.run.problems.append(f"Python would not parse {self.file} line {exc.lineno} "
                                     f"({exc.msg})")
            return self.run
        except (RecursionError, MemoryError, ValueError) as exc:
            self.run.problems.append(f"Python would not parse {self.file} "
                                     f"({type(exc).__name__})")
            return self.run
        main_block: list[ast.stmt] = []
        self.budget = bounds.Budget()  # after parsing: the budget is the walk's, not Python's
        try:
            for node in tree.body:
                if _is_main_guard(node):
                    main_block = node.body  # type: ignore[attr-defined]
                    continue
                self._safe_statement(node, self.globals)
            self._enter(main_block)
        except LauncherError:
            raise
        except bounds.BudgetSpent as spent:
            self.run.problems.append(f"line {spent.line}: {spent.why}")
        except (RecursionError, MemoryError) as exc:
            kind = "nests too deeply" if isinstance(exc, RecursionError) else \
                "needs too much memory"
            self.run.problems.append(f"line {self.last_line}: {self._line_quote()} {kind} for "
                                     "this reader to follow without running it")
        except (_Return, Exception) as exc:  # noqa: BLE001 - a construct this reader lacks
            self.run.problems.append(f"line {self.last_line} is beyond what this reader follows "
                                     f"({type(exc).__name__}: {str(exc)[:80]})")
        return self.run

    def _line_quote(self) -> str:
        if 0 < self.last_line <= len(self.lines):
            return f"`{self.lines[self.last_line - 1].strip()[:bounds.QUOTE]}`"
        return "the launcher"

    def _enter(self, main_block: list[ast.stmt]) -> None:
        commands = [v for v in self.globals.values()
                    if isinstance(v, Function) and _is_cli(v.node)]
        if commands:
            chosen = next((c for c in commands if _def_name(c) in ("main", "train")), commands[0])
            self.run.entry = f"{_def_name(chosen)}() (line {chosen.node.lineno})"
            if len(commands) > 1:
                others = ", ".join(_def_name(c) for c in commands if c is not chosen)
                self._note(f"several commands ({others})", chosen.node.lineno,
                           f"read {_def_name(chosen)}(), the launcher's training command")
            self._call_entry(chosen)
            return
        if main_block:
            self.run.entry = "the `if __name__ == \"__main__\":` block"
            try:
                self._block(main_block, self.globals)
            except _Stop as stop:
                self._stopped(stop)
            return
        self.run.problems.append("no entry point: no @U.dataclass_cli command and no "
                                 "`if __name__ == \"__main__\":` block")

    def _call_entry(self, function: Function) -> None:
        node = function.node
        assert isinstance(node, ast.FunctionDef)
        call_args: list[Any] = []
        params = node.args.args
        if params:
            cls_name = _annotation_name(params[0].annotation)
            cls = self.classes.get(cls_name or "")
            if cls is None:
                self.run.problems.append(f"{node.name}() takes {params[0].arg}: "
                                         f"{cls_name or '?'}, which is not a dataclass of "
                                         "this file")
                return
            args = self.instance(cls, node.lineno)
            if args is None:
                return
            call_args.append(args)
        try:
            self.call(function, call_args, {}, node.lineno)
        except _Stop as stop:
            self._stopped(stop)

    # -- ScriptArgs --

    def instance(self, cls: ClassInfo, line: int) -> Args | None:
        """Defaults, then the overrides (typer's --field-name), then __post_init__."""
        args = Args({}, {}, cls)
        self.run.args = args
        for info in cls.fields.values():
            args.values[info.name], args.origins[info.name] = self._default(info)
        for name, raw in parse_overrides(self.overrides, cls):
            args.values[name] = _convert_override(cls.fields[name], raw)
            args.origins[name] = Origin("override", f"--{name.replace('_', '-')}",
                                        "launcher args", 0)
            if isinstance(args.values[name], str):
                args.values[name] = Text((Piece(raw, args.origins[name]),))
        post = cls.methods.get("__post_init__")
        if post is not None:
            try:
                self.call(Function(post, args), [], {}, post.lineno)
            except _Stop as stop:
                self._stopped(stop)
                self.run.problems.append(f"{cls.name}.__post_init__ stops at line "
                                         f"{stop.what.line}: {stop.what.why}")
                return None
        return args

    def _construct(self, cls: ClassInfo, args: list[Any], kwargs: dict[str, Any],
                   line: int) -> Any:
        """A dataclass of the launcher built in the launcher (a recipe table, say)."""
        instance = Args({}, {}, cls)
        names = list(cls.fields)
        for index, name in enumerate(names):
            origin = Origin("field", f"{cls.name}.{name}", self.file, line)
            if index < len(args) or name in kwargs:
                value = args[index] if index < len(args) else kwargs[name]
            else:
                value, origin = self._default(cls.fields[name])
            instance.values[name] = value.retag(origin) if isinstance(value, Text) else value
            instance.origins[name] = origin
        post = cls.methods.get("__post_init__")
        if post is not None:
            self.call(Function(post, instance), [], {}, line)
        return instance

    def _default(self, info: FieldInfo) -> tuple[Any, Origin]:
        origin = Origin("field", f"args.{info.name}", self.file, info.line)
        if info.default is None and info.inherited is None and info.env is None:
            return Unknown(Unresolved(f"args.{info.name}", self.file, info.line,
                                      "a field with no default")), origin
        if info.default is None:  # inherited from our ExecuteTrainConfig table
            value = info.inherited
            if info.env:
                if info.env in self.env and self.env[info.env].strip().isdigit():
                    env_origin = Origin("env", info.env, self.file, info.line)
                    return int(self.env[info.env]), env_origin
                self._note(f"args.{info.name}", info.line,
                           f"U.ExecuteTrainConfig reads ${info.env}, not set here: "
                           f"{value} (its default)")
            return value, origin
        if info.factory:
            value = self.value(info.default, self.globals)
            value = self.call(value, [], {}, info.line) if not isinstance(value, Unknown) \
                else value
        else:
            value = self.value(info.default, self.globals)
        return (value.retag(origin) if isinstance(value, Text) else value), origin

    # -- statements --

    def _safe_statement(self, node: ast.stmt, scope: dict[str, Any]) -> None:
        try:
            self.statement(node, scope)
        except _Stop as stop:
            self._stopped(stop)

    def _block(self, body: list[ast.stmt], scope: dict[str, Any]) -> None:
        for node in body:
            self.statement(node, scope)

    def statement(self, node: ast.stmt, scope: dict[str, Any]) -> None:
        method = getattr(self, f"_stmt_{type(node).__name__}", None)
        if method is None:
            self._unresolved(node, f"a {type(node).__name__} statement is not read")
            return
        self.budget.step(node.lineno)
        self.last_line = node.lineno
        outer, self.span = self.span, (node.lineno, node.end_lineno or node.lineno)
        try:
            method(node, scope)
        finally:
            self.span = outer

    def _stmt_Import(self, node: ast.Import, scope: dict[str, Any]) -> None:
        for alias in node.names:
            name = alias.asname or alias.name.split(".")[0]
            if alias.name in HELPER_MODULES:
                scope[name] = Module("U")
            elif alias.name in ("os", "functools", "os.path", "sys") \
                    or alias.name in _PURE_MODULES:
                scope[name] = Module(alias.name if alias.asname else name)
            else:
                scope[name] = self._imported(alias.name, node.lineno)

    def _stmt_ImportFrom(self, node: ast.ImportFrom, scope: dict[str, Any]) -> None:
        module = node.module or ""
        for alias in node.names:
            name = alias.asname or alias.name
            if module in HELPER_MODULES:
                scope[name] = Helper(alias.name) if alias.name not in (
                    "NUM_GPUS_OF_HARDWARE", "GENERATION_HARDWARE") else self._helper_constant(
                    alias.name, node.lineno)
            elif module == "miles.utils.external_utils" and alias.name in (
                    "command_utils", "exec_command"):
                scope[name] = Module("U")
            elif module == "functools" and alias.name == "partial":
                scope[name] = Builtin(_partial, "partial")
            elif module == "dataclasses" or module == "typing" or module == "__future__":
                scope[name] = Builtin(_identity, alias.name)
            elif module == "os" and alias.name == "environ":
                scope[name] = Module("os.environ")
            elif alias.name in _PURE_MODULES.get(module, {}):
                scope[name] = Builtin(_builtin(_PURE_MODULES[module][alias.name]), alias.name)
            else:
                scope[name] = self._imported(f"{module}.{alias.name}", node.lineno)

    def _imported(self, dotted: str, line: int) -> Unknown:
        source = "miles" if dotted.startswith("miles") else "another module"
        return Unknown(Unresolved(dotted, self.file, line,
                                  f"imported from {source}; its code is not read"))

    def _stmt_ClassDef(self, node: ast.ClassDef, scope: dict[str, Any]) -> None:
        fields: dict[str, FieldInfo] = {}
        methods: dict[str, ast.FunctionDef] = {}
        for base in node.bases:
            base_name = _dotted(base)
            if base_name.endswith("ExecuteTrainConfig"):
                for name, (default, env) in EXECUTE_TRAIN_CONFIG.items():
                    fields[name] = FieldInfo(name, type(default).__name__, None, node.lineno,
                                             inherited=default, env=env)
            elif base_name in self.classes:
                fields.update(self.classes[base_name].fields)
                methods.update(self.classes[base_name].methods)
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                fields[item.target.id] = self._field(item)
            elif isinstance(item, ast.FunctionDef):
                methods[item.name] = item
        info = ClassInfo(node.name, node.lineno, fields, methods)
        self.classes[node.name] = info
        scope[node.name] = info

    def _field(self, item: ast.AnnAssign) -> FieldInfo:
        assert isinstance(item.target, ast.Name)
        annotation = ast.unparse(item.annotation)
        default = item.value
        factory = False
        if isinstance(default, ast.Call) and _dotted(default.func).endswith("field"):
            keywords = {k.arg: k.value for k in default.keywords}
            if "default" in keywords:
                default = keywords["default"]
            elif "default_factory" in keywords:
                default, factory = keywords["default_factory"], True
            else:
                default = None
        return FieldInfo(item.target.id, annotation, default, item.lineno, factory)

    def _stmt_FunctionDef(self, node: ast.FunctionDef, scope: dict[str, Any]) -> None:
        scope[node.name] = Function(node)

    def _stmt_Assign(self, node: ast.Assign, scope: dict[str, Any]) -> None:
        value = self.value(node.value, scope)
        for target in node.targets:
            self._store(target, value, scope, node.lineno)

    def _stmt_AnnAssign(self, node: ast.AnnAssign, scope: dict[str, Any]) -> None:
        if node.value is not None:
            self._store(node.target, self.value(node.value, scope), scope, node.lineno)

    def _stmt_AugAssign(self, node: ast.AugAssign, scope: dict[str, Any]) -> None:
        current = self.value(node.target, scope)
        value = _binop(node.op, current, self.value(node.value, scope), node, self)
        self._store(node.target, value, scope, node.lineno)

    def _store(self, target: ast.expr, value: Any, scope: dict[str, Any], line: int) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = value
        elif isinstance(target, ast.Attribute):
            owner = self.value(target.value, scope)
            if isinstance(owner, Args):
                origin = Origin("field", f"args.{target.attr}", self.file, line)
                owner.values[target.attr] = value.retag(origin) if isinstance(value, Text) \
                    else value
                owner.origins[target.attr] = origin
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value if isinstance(value, (tuple, list)) else None
            for index, element in enumerate(target.elts):
                part = items[index] if items is not None and index < len(items) else (
                    value if isinstance(value, Unknown) else self._unknown(
                        target, "unpacking a value that is not a known sequence"))
                self._store(element, part, scope, line)
        elif isinstance(target, ast.Subscript):
            owner = self.value(target.value, scope)
            key = self.value(target.slice, scope)
            if isinstance(owner, (dict, list)) and not isinstance(key, Unknown):
                owner[_plain(key)] = value

    def _stmt_Expr(self, node: ast.Expr, scope: dict[str, Any]) -> None:
        if isinstance(node.value, ast.Constant):
            return  # a docstring
        if isinstance(node.value, ast.Call) and _dotted(node.value.func) == "typer.run" \
                and node.value.args:
            entry = self.value(node.value.args[0], scope)
            if isinstance(entry, Function):
                self._call_entry(entry)
                return
        result = self.value(node.value, scope)
        if isinstance(result, Unknown) and result.why not in self.run.unresolved:
            self.run.unresolved.append(result.why)  # a call whose effect is not known

    def _stmt_If(self, node: ast.If, scope: dict[str, Any]) -> None:
        test = self.value(node.test, scope)
        if isinstance(test, Unknown):
            self._note(self.source.quote(node.test, "") or "if",
                       node.lineno, f"the condition depends on {test.why.what} (line "
                       f"{test.why.line}); read as false, the else branch taken")
            try:
                self._block(node.orelse, scope)
            except _Stop as stop:
                self._note(stop.what.what, stop.what.line, "not taken: the else branch of "
                           "a condition not known, and it stops the launcher")
            return
        self._block(node.body if _truth(test) else node.orelse, scope)

    def _stmt_Match(self, node: ast.Match, scope: dict[str, Any]) -> None:
        subject = self.value(node.subject, scope)
        if isinstance(subject, Unknown):
            self._unresolved(node, f"match on {subject.why.what}, not known: no case taken")
            return
        for case in node.cases:
            if self._matches(case.pattern, subject, scope) and (
                    case.guard is None or _truth(self.value(case.guard, scope))):
                self._block(case.body, scope)
                return

    def _matches(self, pattern: ast.pattern, subject: Any, scope: dict[str, Any]) -> bool:
        if isinstance(pattern, ast.MatchValue):
            return self.value(pattern.value, scope) == subject
        if isinstance(pattern, ast.MatchAs) and pattern.pattern is None:
            if pattern.name:
                scope[pattern.name] = subject
            return True
        if isinstance(pattern, ast.MatchOr):
            return any(self._matches(p, subject, scope) for p in pattern.patterns)
        if isinstance(pattern, ast.MatchSingleton):
            return subject is pattern.value
        if isinstance(pattern, ast.MatchSequence):
            items = subject if isinstance(subject, (tuple, list)) else None
            return items is not None and len(items) == len(pattern.patterns) and all(
                self._matches(p, item, scope) for p, item in zip(pattern.patterns, items,
                                                                  strict=True))
        return False

    def _stmt_For(self, node: ast.For, scope: dict[str, Any]) -> None:
        items = self.value(node.iter, scope)
        if isinstance(items, Unknown) or not isinstance(items, (list, tuple, dict, range)):
            why = items.why.what if isinstance(items, Unknown) else "a value not known"
            self._unresolved(node, f"a loop over {why}: its body is not read")
            return
        for item in itertools.islice(items, MAX_LOOP_ITEMS):
            self._store(node.target, item, scope, node.lineno)
            self._block(node.body, scope)
        self._block(node.orelse, scope)

    def _stmt_Return(self, node: ast.Return, scope: dict[str, Any]) -> None:
        raise _Return(self.value(node.value, scope) if node.value else None)

    def _stmt_Raise(self, node: ast.Raise, scope: dict[str, Any]) -> None:
        message = None
        if isinstance(node.exc, ast.Call) and node.exc.args:
            message = self.value(node.exc.args[0], scope)
        self._stop(node, "raises", message)

    def _stmt_Assert(self, node: ast.Assert, scope: dict[str, Any]) -> None:
        test = self.value(node.test, scope)
        if not isinstance(test, Unknown) and not _truth(test):
            self._stop(node, "asserts something false", self.value(node.msg, scope))

    def _stop(self, node: ast.stmt, verb: str, message: Any) -> None:
        text = (self.source.quote(node, "") or "raise").split("\n")[0]
        said = f": {str(message)[:160]!r}" if isinstance(message, Text) and \
            not message.unknown() else ""
        raise _Stop(Unresolved(text[:80], self.file, node.lineno,
                               f"with these values the launcher {verb} here and would stop"
                               f"{said}; change the launcher args that lead here"))

    def _stmt_Pass(self, node: ast.Pass, scope: dict[str, Any]) -> None:
        return

    def _stmt_Delete(self, node: ast.Delete, scope: dict[str, Any]) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                scope.pop(target.id, None)

    def _stmt_With(self, node: ast.With, scope: dict[str, Any]) -> None:
        self._note("with", node.lineno, "the context manager is not entered; its body is read")
        self._block(node.body, scope)

    def _stmt_Try(self, node: ast.Try, scope: dict[str, Any]) -> None:
        self._block(node.body, scope)
        self._block(node.orelse, scope)
        self._block(node.finalbody, scope)

    # -- expressions --

    def value(self, node: ast.expr | None, scope: dict[str, Any]) -> Any:
        if node is None:
            return None
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            return self._unknown(node, f"a {type(node).__name__} expression is not read")
        self.budget.step(getattr(node, "lineno", self.last_line))
        result = method(node, scope)
        why = bounds.too_big(result, _text_size)
        return self._unknown(node, why) if why else result

    def _Constant(self, node: ast.Constant, scope: dict[str, Any]) -> Any:
        if not isinstance(node.value, str):
            return node.value
        text = self._text(node.value, node.lineno)
        return text.written(self.span) if self.span else text

    def _Name(self, node: ast.Name, scope: dict[str, Any]) -> Any:
        for table in (scope, self.globals):
            if node.id in table:
                return table[node.id]
        known = _BUILTINS.get(node.id)
        if known is not None:
            return Builtin(known, node.id)
        return self._unknown(node, f"{node.id} is not defined in the launcher")

    def _Attribute(self, node: ast.Attribute, scope: dict[str, Any]) -> Any:
        owner = self.value(node.value, scope)
        if isinstance(owner, Unknown):
            return owner
        if isinstance(owner, Args):
            if node.attr in owner.values:
                return owner.values[node.attr]
            method = owner.cls.methods.get(node.attr)
            if method is not None and any(_dotted(d) == "property"
                                          for d in method.decorator_list):
                return self._call_function(Function(method, owner), [], {})
            if method is not None:
                return Function(method, owner)
            return self._unknown(node, f"{owner.cls.name} has no field {node.attr}")
        if isinstance(owner, Module):
            return self._module_attribute(owner, node)
        if isinstance(owner, re.Match):
            return Builtin(_builtin(getattr(owner, node.attr)), node.attr)
        if isinstance(owner, Text) and owner.unknown():
            if node.attr in ("strip", "rstrip", "lstrip"):
                return Builtin(lambda *a: owner, node.attr)  # blanks do not change the words
            return Unknown(owner.unknown())  # type: ignore[arg-type]
        if isinstance(owner, (Text, dict, list)):
            try:
                return Builtin(_method(owner, node.attr), node.attr)
            except AttributeError:
                return self._unknown(node, f"no .{node.attr} on this value")
        return self._unknown(node, f".{node.attr} of {type(owner).__name__} is not read")

    def _module_attribute(self, module: Module, node: ast.Attribute) -> Any:
        name = node.attr
        if module.name == "U":
            if name in ("NUM_GPUS_OF_HARDWARE", "GENERATION_HARDWARE"):
                return self._helper_constant(name, node.lineno)
            if name == "repo_base_dir":
                return self._text("<miles checkout>", node.lineno)
            return Helper(name)
        if module.name == "os" and name == "environ":
            return Module("os.environ")
        if module.name == "sys" and name == "exit":
            return Helper("sys.exit")
        if module.name == "os" and name == "path":
            return Module("os.path")
        if module.name == "os" and name == "getenv":
            return Helper("os.getenv")
        if module.name == "os.environ" and name == "get":
            return Helper("os.getenv")
        if module.name == "os.environ" and name == "setdefault":
            return Helper("os.environ.setdefault")
        if module.name == "os.path" and name == "join":
            return Builtin(_path_join, "os.path.join")
        if module.name == "functools" and name == "partial":
            return Builtin(_partial, "partial")
        pure = _PURE_MODULES.get(module.name, {}).get(name)
        if pure is not None:
            return Builtin(_builtin(pure), f"{module.name}.{name}")
        return self._unknown(node, f"{module.name}.{name} is not read")

    def _helper_constant(self, name: str, line: int) -> dict[Any, Any]:
        table = NUM_GPUS_OF_HARDWARE if name == "NUM_GPUS_OF_HARDWARE" else GENERATION_HARDWARE
        return {self._text(k, line): (self._text(v, line) if isinstance(v, str) else v)
                for k, v in table.items()}

    def _JoinedStr(self, node: ast.JoinedStr, scope: dict[str, Any]) -> Any:
        pieces: list[Piece] = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                pieces.append(Piece(str(part.value), self._origin(node.lineno), None,
                                    self.span))
            else:
                pieces += self._formatted(part, scope).pieces  # type: ignore[arg-type]
        return Text(tuple(pieces))

    def _FormattedValue(self, node: ast.FormattedValue, scope: dict[str, Any]) -> Text:
        return self._formatted(node, scope)

    def _formatted(self, node: ast.FormattedValue, scope: dict[str, Any]) -> Text:
        value = self.value(node.value, scope)
        origin = self._value_origin(node.value, scope) or self._origin(node.lineno)
        if isinstance(value, Unknown):
            source = self.source.quote(node.value, "") or "?"
            return Text((Piece("{" + source + "}", origin, value.why),))
        if isinstance(value, Text):
            return value.retag(origin) if _is_field(node.value) else value
        spec = self.value(node.format_spec, scope) if node.format_spec else ""
        if bounds.format_spec_too_big(str(spec)):
            return Text((Piece("{?}", origin, Unresolved(
                "{...}", self.file, node.lineno, "a format width over the reader's cap")),))
        try:
            shown = format(_plain(value), str(spec)) if node.conversion == -1 else (
                repr(_plain(value)) if node.conversion == ord("r") else str(_plain(value)))
        except (TypeError, ValueError):
            return Text((Piece("{?}", origin, Unresolved(
                "{...}", self.file, node.lineno, "a value that cannot be formatted")),))
        return Text((Piece(shown, origin),))

    def _value_origin(self, node: ast.expr, scope: dict[str, Any]) -> Origin | None:
        if _is_field(node):
            assert isinstance(node, ast.Attribute)
            owner = self.value(node.value, scope)
            if isinstance(owner, Args):
                return owner.origins.get(node.attr)
        return None

    def _BinOp(self, node: ast.BinOp, scope: dict[str, Any]) -> Any:
        return _binop(node.op, self.value(node.left, scope), self.value(node.right, scope),
                      node, self)

    def _UnaryOp(self, node: ast.UnaryOp, scope: dict[str, Any]) -> Any:
        operand = self.value(node.operand, scope)
        if isinstance(operand, Unknown):
            return operand
        if isinstance(node.op, ast.Not):
            return not _truth(operand)
        if isinstance(node.op, ast.USub):
            return -operand
        return operand

    def _BoolOp(self, node: ast.BoolOp, scope: dict[str, Any]) -> Any:
        result: Any = None
        for item in node.values:
            result = self.value(item, scope)
            if isinstance(result, Unknown):
                return result
            if isinstance(node.op, ast.And) and not _truth(result):
                return result
            if isinstance(node.op, ast.Or) and _truth(result):
                return result
        return result

    def _Compare(self, node: ast.Compare, scope: dict[str, Any]) -> Any:
        left = self.value(node.left, scope)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.value(right_node, scope)
            for side in (left, right):
                if isinstance(side, Unknown):
                    return side
                if isinstance(side, Text) and side.unknown():
                    return Unknown(side.unknown())  # type: ignore[arg-type]
            if not _compare(op, _plain(left), _plain(right)):
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp, scope: dict[str, Any]) -> Any:
        test = self.value(node.test, scope)
        if isinstance(test, Unknown):
            self._note(self.source.quote(node.test, "") or "if",
                       node.lineno, f"the condition depends on {test.why.what} (line "
                       f"{test.why.line}); read as false, the else value taken")
            test = False
        return self.value(node.body if _truth(test) else node.orelse, scope)

    def _NamedExpr(self, node: ast.NamedExpr, scope: dict[str, Any]) -> Any:
        value = self.value(node.value, scope)
        scope[node.target.id] = value
        return value

    def _List(self, node: ast.List, scope: dict[str, Any]) -> Any:
        items: list[Any] = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                spread = self.value(element.value, scope)
                if not isinstance(spread, (list, tuple, range)):
                    return spread if isinstance(spread, Unknown) else self._unknown(
                        element, "* of a value that is not a known sequence")
                items += list(spread)
            else:
                items.append(self.value(element, scope))
        return items

    def _Tuple(self, node: ast.Tuple, scope: dict[str, Any]) -> Any:
        items = self._List(node, scope)  # type: ignore[arg-type]
        return tuple(items) if isinstance(items, list) else items

    def _Dict(self, node: ast.Dict, scope: dict[str, Any]) -> Any:
        out: dict[Any, Any] = {}
        for key, item in zip(node.keys, node.values, strict=True):
            value = self.value(item, scope)
            if key is None:
                if isinstance(value, dict):
                    out.update(value)
                continue
            key_value = self.value(key, scope)
            if isinstance(key_value, Unknown):
                return key_value
            out[key_value] = value
        return out

    def _Subscript(self, node: ast.Subscript, scope: dict[str, Any]) -> Any:
        owner = self.value(node.value, scope)
        key = self.value(node.slice, scope)
        for side in (owner, key):
            if isinstance(side, Unknown):
                return side
        if isinstance(owner, Module) and owner.name == "os.environ":
            return self._env(_plain(key), None, node.lineno, required=True)
        try:
            if isinstance(owner, Text):
                return self._text(owner.text[_plain(key)], node.lineno)
            return owner[key if isinstance(owner, dict) else _plain(key)]
        except (KeyError, IndexError, TypeError):
            return self._unknown(node, f"{self.source.quote(node)}: no such item "
                                       f"({_plain(key)!r})")

    def _Slice(self, node: ast.Slice, scope: dict[str, Any]) -> Any:
        parts = [self.value(p, scope) if p else None for p in (node.lower, node.upper, node.step)]
        return slice(*(_plain(p) for p in parts))

    def _ListComp(self, node: ast.ListComp, scope: dict[str, Any]) -> Any:
        local = dict(scope)
        out: list[Any] = []
        if self._generate(node.generators, 0, local, lambda: out.append(
                self.value(node.elt, local))) is not None:
            return self._unknown(node, "a comprehension over values not known")
        return out

    def _generate(self, generators: list[ast.comprehension], index: int,
                  local: dict[str, Any], emit: Callable[[], None]) -> Unknown | None:
        if index == len(generators):
            emit()
            return None
        generator = generators[index]
        items = self.value(generator.iter, local)
        if isinstance(items, dict):
            items = list(items)
        if not isinstance(items, (list, tuple, range)):
            return Unknown(Unresolved("comprehension", self.file, 0, "not known"))
        for item in itertools.islice(items, MAX_LOOP_ITEMS):
            self._store(generator.target, item, local, 0)
            if all(_truth(self.value(cond, local)) for cond in generator.ifs):
                failed = self._generate(generators, index + 1, local, emit)
                if failed is not None:
                    return failed
        return None

    def _GeneratorExp(self, node: ast.GeneratorExp, scope: dict[str, Any]) -> Any:
        return self._ListComp(node, scope)  # type: ignore[arg-type]

    def _Lambda(self, node: ast.Lambda, scope: dict[str, Any]) -> Function:
        return Function(node)

    def _Call(self, node: ast.Call, scope: dict[str, Any]) -> Any:
        function = self.value(node.func, scope)
        args: list[Any] = []
        for item in node.args:
            if isinstance(item, ast.Starred):
                spread = self.value(item.value, scope)
                args += list(spread) if isinstance(spread, (list, tuple)) else [spread]
            else:
                args.append(self.value(item, scope))
        kwargs: dict[str, Any] = {}
        for keyword in node.keywords:
            value = self.value(keyword.value, scope)
            if keyword.arg is None:
                if isinstance(value, dict):
                    kwargs.update({_plain(k): v for k, v in value.items()})
                elif isinstance(function, Helper):
                    kwargs[_UNKNOWN_REST] = value  # what the helper is given is not known
                else:
                    return value if isinstance(value, Unknown) else self._unknown(
                        node, "** of a value that is not a dict")
                continue
            kwargs[keyword.arg] = value
        return self.call(function, args, kwargs, node.lineno, node)

    # -- calls --

    def call(self, function: Any, args: list[Any], kwargs: dict[str, Any], line: int,
             node: ast.Call | None = None) -> Any:
        if isinstance(function, Unknown):
            what = self.source.quote(node) if node is not None else function.why.what
            return Unknown(Unresolved(what, self.file, line,
                                      f"calls {function.why.what}, {function.why.why}"))
        if isinstance(function, Function):
            return self._call_function(function, args, kwargs)
        if isinstance(function, Partial):
            return self.call(function.function, [*function.args, *args],
                             {**dict(function.kwargs), **kwargs}, line, node)
        if isinstance(function, Helper):
            return self._helper(function.name, args, kwargs, line)
        if isinstance(function, ClassInfo):
            return self._construct(function, args, kwargs, line)
        if isinstance(function, Builtin) and function.name == "map" and args and isinstance(
                args[0], (Builtin, Function)) and all(isinstance(a, (list, tuple, range))
                                                      for a in args[1:]):
            rows = zip(*args[1:], strict=False)
            return [self.call(args[0], list(items), {}, line) for items in rows]
        if isinstance(function, Builtin):
            if any(isinstance(a, Unknown) for a in [*args, *kwargs.values()]):
                return next(a for a in [*args, *kwargs.values()] if isinstance(a, Unknown))
            try:
                result = function.function(*args, **kwargs)
            except bounds.TooBig as refused:
                return self._unknown_at(line, self.source.quote(node) if node else
                                        f"{function.name}(...)", str(refused))
            except Exception as exc:  # noqa: BLE001 - the launcher's own error, reported
                return self._unknown_at(line, f"{function.name}(...)",
                                        f"fails on these values ({type(exc).__name__})")
            return _as_text(result, self._origin(line))
        return self._unknown_at(line, self.source.quote(node) if node else "a call",
                                f"calls a {type(function).__name__}, which is not read")

    def _call_function(self, function: Function, args: list[Any],
                       kwargs: dict[str, Any]) -> Any:
        node = function.node
        if self.depth >= MAX_CALL_DEPTH:
            return self._unknown_at(node.lineno, "a call", "calls nest too deeply")
        if function.bound is not None:
            args = [function.bound, *args]
        local = self._bind(node, args, kwargs)
        if isinstance(node, ast.Lambda):
            return self.value(node.body, local)
        is_prepare = "prepare" in node.name
        self.depth += 1
        self.in_prepare += is_prepare
        try:
            self._block(node.body, local)
        except _Return as returned:
            return returned.value
        finally:
            self.depth -= 1
            self.in_prepare -= is_prepare
        return None

    def _bind(self, node: ast.FunctionDef | ast.Lambda, args: list[Any],
              kwargs: dict[str, Any]) -> dict[str, Any]:
        spec = node.args
        positional = [*spec.posonlyargs, *spec.args]
        defaults: list[Any] = [None] * (len(positional) - len(spec.defaults)) + [
            self.value(d, self.globals) for d in spec.defaults]
        local: dict[str, Any] = {}
        for index, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
            local[arg.arg] = args[index] if index < len(args) else kwargs.pop(arg.arg, default)
        for arg, default_node in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            local[arg.arg] = kwargs.pop(arg.arg, self.value(default_node, self.globals))
        if spec.vararg:
            local[spec.vararg.arg] = tuple(args[len(positional):])
        if spec.kwarg:
            local[spec.kwarg.arg] = dict(kwargs)
        return local

    # -- miles' helpers --

    def _helper(self, name: str, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
        handler = getattr(self, f"_h_{name.replace('.', '_')}", None)
        if handler is None:
            return self._unknown_at(line, f"U.{name}(...)",
                                    "a miles helper this reader does not model")
        return handler(_CallArgs(args, kwargs), line)

    def _h_execute_train(self, call: _CallArgs, line: int) -> None:
        before = call.get(4, "before_ray_job_submit")
        if before is not None and not isinstance(before, Unknown):
            self.in_prepare += 1  # miles calls it before submitting: prepare work
            try:
                self.call(before, [], {}, line)
            finally:
                self.in_prepare -= 1
        script = call.get(3, "train_script")
        self.run.train.append(TrainCall(
            call.get(0, "train_args"), call.get(1, "num_gpus_per_node"),
            call.get(2, "megatron_model_type"), line,
            str(script) if isinstance(script, Text) else "train.py"))

    _h_execute_train_npu = _h_execute_train  # the NPU launcher's entry, same arguments

    def _h_get_default_wandb_args(self, call: _CallArgs, line: int) -> Text:
        test_file = call.get(0, "test_file")
        if "WANDB_API_KEY" not in self.env:
            self._note("U.get_default_wandb_args(...)", line,
                       "$WANDB_API_KEY is not set here, so miles' helper adds no wandb flags")
            return self._text("", line)
        stem = Path(str(test_file)).stem if isinstance(test_file, Text) else "run"
        run_id = call.get(2, "run_id")
        group = str(run_id) if isinstance(run_id, Text) else _run_id()
        prefix = call.get(1, "run_name_prefix")
        if isinstance(prefix, Text):
            group = f"{prefix}_{group}"
        self._note("U.get_default_wandb_args(...)", line,
                   "$WANDB_API_KEY is set: wandb flags added; the key itself is not written "
                   "(wandb reads $WANDB_API_KEY)")
        origin = Origin("env", "WANDB_API_KEY", self.file, line)
        return Text((Piece(f"--use-wandb --wandb-project miles-{stem} --wandb-group {group} "
                           "--disable-wandb-random-suffix ", origin),))

    def _h_create_run_id(self, call: _CallArgs, line: int) -> Text:
        value = _run_id()
        self._note("U.create_run_id()", line, f"the time of the import: {value}")
        return self._text(value, line)

    def _h_exec_command_cpu(self, call: _CallArgs, line: int) -> None:
        command = call.get(0, "cmd")
        if isinstance(command, Unknown) or (isinstance(command, Text) and command.unknown()):
            why = command.why if isinstance(command, Unknown) else command.unknown()
            self.run.unresolved.append(Unresolved(f"U.exec_command(...) at line {line}",
                                                  self.file, line, f"its command depends on "
                                                  f"{why.what if why else '?'}"))
            return
        self._command_step(str(command), line)

    _h_exec_command_gpu = _h_exec_command_cpu

    def _command_step(self, command: str, line: int) -> None:
        for part in command.split("&&"):
            try:
                words = shlex.split(part)
            except ValueError:
                words = part.split()
            download = hf_download(words)
            if download is not None:
                kind, repo, local = download
                self.run.prepare.append(PrepareStep(kind, repo, local, line))
            elif words and words[0] != "mkdir":
                self.run.prepare.append(PrepareStep("command", " ".join(words)[:100], "", line))

    def _h_hf_download_dataset(self, call: _CallArgs, line: int) -> None:
        name, data_dir = call.get(0, "full_name"), call.get(1, "data_dir")
        data_dir = data_dir if data_dir is not None else "/root/datasets"
        if isinstance(name, Unknown) or isinstance(data_dir, Unknown):
            self.run.unresolved.append(Unresolved("U.hf_download_dataset(...)", self.file, line,
                                                  "its dataset or directory is not known"))
            return
        repo = str(name)
        self.run.prepare.append(PrepareStep("dataset", repo,
                                            f"{data_dir}/{repo.split('/')[-1]}", line))

    def _h_convert_checkpoint(self, call: _CallArgs, line: int) -> None:
        model = call.get(0, "model_name")
        dir_dst = call.get(6, "dir_dst") or "/root"
        hf = call.get(7, "hf_checkpoint") or f"/root/models/{model}"
        if any(isinstance(v, Unknown) for v in (model, dir_dst, hf)):
            self.run.unresolved.append(Unresolved("U.convert_checkpoint(...)", self.file, line,
                                                  "its model or directories are not known"))
            return
        self.run.prepare.append(PrepareStep("convert", str(model),
                                            f"{dir_dst}/{model}_torch_dist", line, str(hf)))

    def _h_fp8_cast_bf16(self, call: _CallArgs, line: int) -> None:
        source, dest = call.get(0, "path_src"), call.get(1, "path_dst")
        self.run.prepare.append(PrepareStep("command", f"fp8_cast_bf16 {source} -> {dest}", "",
                                            line))

    def _h_rsync_simple(self, call: _CallArgs, line: int) -> None:
        self.run.prepare.append(PrepareStep("command", "rsync to every node", "", line))

    def _h_sys_exit(self, call: _CallArgs, line: int) -> None:
        code = call.get(0, "status")
        said = f" ({code})" if isinstance(code, (Text, int)) else ""
        raise _Stop(Unresolved(f"sys.exit{said}", self.file, line,
                               "with these values the launcher exits here"))

    def _h_dataclass_cli(self, call: _CallArgs, line: int) -> Any:
        return call.get(0, "func")

    def _h_get_bool_env_var(self, call: _CallArgs, line: int) -> Any:
        name, default = call.get(0, "name"), call.get(1, "default")
        value = self._env(str(name), default if default is not None else "false", line)
        if isinstance(value, Unknown):
            return value
        return str(value).lower() in ("true", "1")

    def _h_get_env_enable_infinite_run(self, call: _CallArgs, line: int) -> Any:
        return self._h_get_bool_env_var(_CallArgs([self._text(
            "MILES_TEST_ENABLE_INFINITE_RUN", line)], {}), line)

    def _h_os_getenv(self, call: _CallArgs, line: int) -> Any:
        name = call.get(0, "key")
        if isinstance(name, Unknown):
            return name
        return self._env(str(name), call.get(1, "default"), line)

    def _h_os_environ_setdefault(self, call: _CallArgs, line: int) -> Any:
        name, value = call.get(0, "key"), call.get(1, "default")
        if isinstance(name, Unknown) or isinstance(value, Unknown):
            return name if isinstance(name, Unknown) else value
        if str(name) not in self.env:
            self.env[str(name)] = str(value)  # what the launcher's own process would see
        return self._env(str(name), None, line)

    def _env(self, name: str, default: Any, line: int, required: bool = False) -> Any:
        if name in self.env:
            return Text((Piece(self.env[name], Origin("env", name, self.file, line)),))
        if required or isinstance(default, Unknown):
            return Unknown(Unresolved(f"${name}", self.file, line,
                                      "an environment variable that is not set here"))
        self._note(f"${name}", line, f"not set here: the launcher's default "
                   f"{_plain(default)!r} is used")
        return default

    # -- small helpers --

    def _text(self, value: str, line: int) -> Text:
        return Text((Piece(value, self._origin(line)),))

    def _origin(self, line: int) -> Origin:
        return Origin("script", "", self.file, line)

    def _unknown(self, node: ast.AST, why: str) -> Unknown:
        source = self.source.quote(node, "") or type(node).__name__
        return self._unknown_at(getattr(node, "lineno", 0), source[:80], why)

    def _unknown_at(self, line: int, what: str, why: str) -> Unknown:
        return Unknown(Unresolved(what, self.file, line, why))

    def _unresolved(self, node: ast.AST, why: str) -> None:
        source = self.source.quote(node, "") or type(node).__name__
        self.run.unresolved.append(Unresolved(source.split("\n")[0][:80], self.file,
                                              getattr(node, "lineno", 0), why))

    def _stopped(self, stop: _Stop) -> None:
        self.run.unresolved.append(stop.what)
        self.run.stops.append(stop.what)

    def _note(self, what: str, line: int, why: str) -> None:
        note = Unresolved(what[:80], self.file, line, why)
        if note not in self.run.notes:
            self.run.notes.append(note)


@dataclass
class _CallArgs:
    args: list[Any]
    kwargs: dict[str, Any]

    def get(self, index: int, name: str) -> Any:
        if name in self.kwargs:
            return self.kwargs[name]
        return self.args[index] if index < len(self.args) else self.kwargs.get(_UNKNOWN_REST)


# --- overrides -------------------------------------------------------------------------------

def parse_overrides(tokens: list[str], cls: ClassInfo) -> Iterator[tuple[str, str]]:
    """(field, raw value) for typer-style `--field-name VALUE`, `--flag`, `--no-flag`."""
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("--"):
            raise LauncherError(f"launcher argument {token!r} is not an option. Fix: pass "
                                "options as the launcher takes them, e.g. --model-name "
                                "Qwen3-0.6B.")
        name, eq, inline = token[2:].partition("=")
        dest = name.replace("-", "_")
        negative = dest.startswith("no_") and dest[3:] in cls.fields \
            and _is_bool(cls.fields[dest[3:]])
        if negative:
            yield dest[3:], "false"
            continue
        if dest not in cls.fields:
            close = difflib.get_close_matches(dest, list(cls.fields), n=1)
            hint = f" Did you mean --{close[0].replace('_', '-')}?" if close else ""
            raise LauncherError(f"--{name} is not a field of the launcher's {cls.name} "
                                f"(line {cls.line}).{hint} Fields: "
                                + ", ".join(f"--{f.replace('_', '-')}" for f in cls.fields))
        if _is_bool(cls.fields[dest]) and not eq:
            yield dest, "true"
            continue
        if not eq:
            if index >= len(tokens):
                raise LauncherError(f"--{name} needs a value. Fix: --{name} VALUE.")
            inline = tokens[index]
            index += 1
        yield dest, inline


def _is_bool(info: FieldInfo) -> bool:
    return info.annotation.split("|")[0].strip() == "bool"


def _convert_override(info: FieldInfo, raw: str) -> Any:
    kinds = [k.strip() for k in info.annotation.split("|")]
    flag = f"--{info.name.replace('_', '-')}"
    if "None" in kinds and raw.lower() in ("none", ""):
        return None
    if kinds[0].startswith("Literal["):
        choices = [c.strip().strip("'\"") for c in kinds[0][8:-1].split(",")]
        if raw not in choices:
            raise LauncherError(f"{flag} {raw!r}: not one of {', '.join(choices)} (the field's "
                                f"type, line {info.line}).")
        return raw
    try:
        if kinds[0] == "bool":
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1", "yes")
        if kinds[0] == "int":
            return int(raw)
        if kinds[0] == "float":
            return float(raw)
    except ValueError:
        raise LauncherError(f"{flag} {raw!r}: expected {kinds[0]} (the field's type, line "
                            f"{info.line}).") from None
    return raw


# --- pure helpers ----------------------------------------------------------------------------

def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and (
        ast.unparse(node.test).replace("'", '"') == '__name__ == "__main__"')


def _is_cli(node: ast.FunctionDef | ast.Lambda) -> bool:
    return isinstance(node, ast.FunctionDef) and any(
        _dotted(d.func if isinstance(d, ast.Call) else d).endswith("dataclass_cli")
        for d in node.decorator_list)


def _annotation_name(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return _dotted(node).split(".")[-1] or None


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_field(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
        node.value.id in ("args", "self", "config", "script_args"))


def _plain(value: Any) -> Any:
    if isinstance(value, Text):
        return value.text
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def _truth(value: Any) -> bool:
    return bool(_plain(value))


def _as_text(value: Any, origin: Origin) -> Any:
    if isinstance(value, str):
        return Text((Piece(value, origin),))
    if isinstance(value, list):
        return [_as_text(v, origin) for v in value]
    return value


def _binop(op: ast.operator, left: Any, right: Any, node: ast.AST,
           reader: LauncherReader) -> Any:
    for side in (left, right):
        if isinstance(side, Unknown):
            return side
    if isinstance(op, ast.Add) and isinstance(left, Text) and isinstance(right, Text):
        return Text(left.pieces + right.pieces)
    if isinstance(op, ast.BitOr) and isinstance(left, dict) and isinstance(right, dict):
        return {**left, **right}
    if isinstance(left, Text) or isinstance(right, Text):
        if isinstance(op, ast.Mod) and isinstance(left, Text):
            return reader._unknown(node, "%-formatting is not read")
        if isinstance(op, ast.Mult):
            if len(str(_plain(left))) * abs(int(_plain(right) if isinstance(right, int)
                                                else _plain(left) if isinstance(left, int)
                                                else 1)) > MAX_TEXT:
                return reader._unknown(node, "a text too long to build")
            text = _plain(left) * _plain(right)
            first = left if isinstance(left, Text) else right
            return Text((Piece(text, first.pieces[0].origin if first.pieces else
                               reader._origin(getattr(node, "lineno", 0))),))
        return reader._unknown(node, "an operation on text that is not read")
    if isinstance(op, (ast.Pow, ast.LShift)) and isinstance(right, int) and abs(right) > 4096:
        return reader._unknown(node, "a power too large to compute")
    if isinstance(op, ast.Mult) and any(isinstance(v, (list, tuple)) for v in (left, right)) \
            and isinstance(left, int) + isinstance(right, int) and max(
                v for v in (left, right) if isinstance(v, int)) > MAX_LOOP_ITEMS:
        return reader._unknown(node, "a sequence too long to build")
    try:
        return _ARITHMETIC[type(op)](_plain(left), _plain(right))
    except (KeyError, TypeError, ZeroDivisionError, ValueError):
        return reader._unknown(node, "arithmetic on these values is not read")


_ARITHMETIC: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b, ast.BitOr: lambda a, b: a | b, ast.BitAnd: lambda a, b: a & b,
}


def _compare(op: ast.cmpop, left: Any, right: Any) -> bool:
    table: dict[type, Callable[[Any, Any], bool]] = {
        ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
        ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
        ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
        ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
        ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
    try:
        return table[type(op)](left, right)
    except TypeError:
        return False


def _method(owner: Any, name: str) -> Callable[..., Any]:
    plain = _plain(owner)
    if isinstance(owner, dict) and name == "get":
        return lambda key, default=None: owner.get(key, default)
    attribute = getattr(owner if isinstance(owner, (list, dict)) and name in (
        "append", "extend", "update") else plain, name)

    def bounded(*a: Any, **k: Any) -> Any:
        why = bounds.method_too_big(plain, name, [_plain(x) for x in a])
        if why:
            raise bounds.TooBig(why)
        if attribute.__self__ is owner:  # list.append and friends keep the items' origins
            return attribute(*a, **k)
        return attribute(*[_plain(x) for x in a], **{key: _plain(v) for key, v in k.items()})
    return bounded


def _text_size(value: Any) -> tuple[int, int] | None:
    """(characters, pieces) of a Text, for the reader's caps; None for other values."""
    if not isinstance(value, Text):
        return None
    return sum(len(p.text) for p in value.pieces), len(value.pieces)


def _bounded_range(*args: int) -> range:
    bounded = range(*args)
    if len(bounded) > MAX_RANGE:
        raise ValueError(f"range of {len(bounded)} items")
    return bounded


def _partial(function: Any, *args: Any, **kwargs: Any) -> Partial:
    return Partial(function, args, tuple(kwargs.items()))


def _identity(*args: Any, **kwargs: Any) -> Any:
    return args[0] if args else None


def _path_join(*parts: Any) -> str:
    import posixpath

    return posixpath.join(*[_plain(p) for p in parts])


def _def_name(function: Function) -> str:
    return function.node.name if isinstance(function.node, ast.FunctionDef) else "<lambda>"


def _builtin(function: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *a, **k: function(*[_plain(x) for x in a],
                                    **{key: _plain(v) for key, v in k.items()})


_PLAIN_BUILTINS: dict[str, Callable[..., Any]] = {
        "int": int, "str": str, "float": float, "bool": bool, "len": len, "max": max,
        "min": min, "abs": abs, "round": round, "sum": sum, "range": range, "sorted": sorted,
        "any": any, "all": all, "list": list, "tuple": tuple, "dict": dict}
_BUILTINS: dict[str, Callable[..., Any]] = {
    name: _builtin(function) for name, function in _PLAIN_BUILTINS.items()}
_BUILTINS["print"] = lambda *a, **k: None
_BUILTINS["range"] = _builtin(_bounded_range)
_BUILTINS["map"] = _builtin(map)  # over plain data; a function of the launcher: LauncherReader
# stdlib functions that are plain data in, plain data out
def _bounded_regex(function: Callable[..., Any]) -> Callable[..., Any]:
    def run(pattern: Any, subject: Any = None, *rest: Any, **kwargs: Any) -> Any:
        # re.sub's subject is its third argument; its second (the replacement) is short
        text = rest[0] if function is re.sub and rest else subject
        why = bounds.regex_refusal(pattern, text)
        if why:
            raise bounds.TooBig(why)
        return function(pattern, subject, *rest, **kwargs)
    return run


_PURE_MODULES: dict[str, dict[str, Callable[..., Any]]] = {
    "re": {name: _bounded_regex(getattr(re, name))
           for name in ("search", "match", "fullmatch", "sub", "findall", "split")},
    "json": {"dumps": json.dumps, "loads": json.loads},
    "shlex": {"quote": shlex.quote, "join": shlex.join, "split": shlex.split},
}


def hf_download(words: list[str]) -> tuple[str, str, str] | None:
    """(kind, repo, local dir) of `hf download REPO --local-dir D [--repo-type dataset]`."""
    if len(words) < 3 or words[0] not in ("hf", "huggingface-cli") or words[1] != "download":
        return None
    repo, local, kind = "", "", "model"
    index = 2
    while index < len(words):
        word = words[index]
        if word in ("--local-dir", "--repo-type") and index + 1 < len(words):
            if word == "--local-dir":
                local = words[index + 1]
            else:
                kind = "dataset" if words[index + 1] == "dataset" else "model"
            index += 2
            continue
        if not word.startswith("-") and not repo:
            repo = word
        index += 1
    return (kind, repo, local) if repo else None


def _run_id() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%y%m%d-%H%M%S")


# --- train args -> words ---------------------------------------------------------------------

def split_words(text: Text, lines: list[str] | None = None) -> list[Word]:
    """The train-args string as bash splits it (`ray job submit ... -- python3 train.py
    {train_args}`): blanks separate words, quotes group and are removed. A piece whose value
    is not known stays one verbatim chunk. With the source `lines`, a flag written in the
    launcher gets the line it is written on."""
    words: list[Word] = []
    chars: list[str] = []
    first: Origin | None = None
    span: tuple[int, int] | None = None
    unresolved: list[Unresolved] = []
    quote = ""
    finder = _LineFinder(lines or [])

    def close() -> None:
        nonlocal first, chars, unresolved, span
        if first is not None:
            word = "".join(chars)
            if span is not None and word.startswith("--") and first.kind == "script":
                first = Origin(first.kind, first.detail, first.file,
                               finder.find(word.split("=", 1)[0], span, first.line))
            words.append(Word(word, first, tuple(dict.fromkeys(unresolved))))
        chars, first, unresolved, span = [], None, [], None

    for piece in text.pieces:
        if piece.unresolved is not None:
            first = first or piece.origin
            chars.append(piece.text)
            unresolved.append(piece.unresolved)
            continue
        if first is None:
            span = piece.span
        escaped = False
        for char in piece.text:
            if escaped:
                chars.append(char)
                escaped = False
            elif char == "\\" and quote != "'":
                escaped = True
            elif quote:
                if char == quote:
                    quote = ""
                else:
                    chars.append(char)
            elif char in "'\"":
                quote = char
                if first is None:
                    first, span = piece.origin, piece.span
            elif char in " \t\n":
                close()
            else:
                if first is None:
                    first, span = piece.origin, piece.span
                chars.append(char)
    close()
    return words


class _LineFinder:
    """The line a flag is written on, within its statement's lines; a flag written twice in
    one statement is found in order."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.cursor: dict[tuple[int, int], int] = {}

    def find(self, flag: str, span: tuple[int, int], fallback: int) -> int:
        pattern = re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")
        start = self.cursor.get(span, span[0])
        for first in (start, span[0]):
            for line in range(first, min(span[1], len(self.lines)) + 1):
                if pattern.search(self.lines[line - 1]):
                    self.cursor[span] = line
                    return line
        return fallback
