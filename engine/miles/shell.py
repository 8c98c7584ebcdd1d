"""Launch scripts read as bash reads them, without running anything.

A miles launch script is bash: arrays of flags, `"$(python3 model_args_utils.py qwen3-4B)"`,
`read -ra MODEL_ARGS <<< ...`, multi-line quoted JSON, `source`d model files. The text is parsed
by tree-sitter-bash (a real bash grammar), then walked in order like a shell would: assignments,
`export`, arrays, `${VAR:-default}`, `${ARR[@]}`, `$((...))`, `read -ra`, `source`/`.`, `if` and
`case` on values it knows. Nothing is executed: a command substitution is resolved only when it is
one of the few forms a launch script uses (the model-args helper, `dirname`, `cd DIR && pwd`);
anything else is kept verbatim and named, with its file and line, in `Unresolved`.

Every word produced carries its `Origin` (written in the command, a variable's assignment, a
sourced file, a model name), so that the import report can say where each flag came from.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .reader_bounds import MAX_ITEMS, MAX_TEXT, Budget, BudgetSpent

MAX_SOURCE_DEPTH = 8  # `source` nesting; a cycle stops here
MAX_FUNCTION_DEPTH = 8
_IFS = re.compile(r"[ \t\n]+")


@dataclass(frozen=True)
class Origin:
    """Where a word's text came from: written in the command (`script`), a variable
    (`variable`, name in detail), an environment variable (`env`), or a model name (`model`)."""

    kind: str
    detail: str
    file: str
    line: int  # 1-based

    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def describe(self) -> str:
        if self.kind == "script":
            return self.where()
        if self.kind == "env":
            return f"${self.detail} from the environment"
        if self.kind == "model":
            return f"{self.detail} ({self.where()})"
        return f"${self.detail} ({self.where()})"


@dataclass(frozen=True)
class Unresolved:
    """A piece of the script that cannot be known without running code."""

    what: str  # "$(nvidia-smi ...)", "${GPUS}", "source ./env.sh"
    file: str
    line: int
    why: str
    variable: str = ""  # set when the cause is an undefined variable

    def describe(self) -> str:
        return f"{self.what} ({self.file}:{self.line}): {self.why}"


@dataclass(frozen=True)
class Word:
    """One shell word after expansion and field splitting."""

    text: str
    origin: Origin
    unresolved: tuple[Unresolved, ...] = ()


@dataclass(frozen=True)
class Var:
    items: tuple[Word, ...]
    array: bool = False


@dataclass
class Command:
    words: list[Word]
    file: str
    line: int


@dataclass
class SyntaxProblem:
    file: str
    line: int
    text: str


@dataclass
class ShellRun:
    """What reading a script gave: every simple command in order, with expanded words."""

    commands: list[Command] = field(default_factory=list)
    syntax: list[SyntaxProblem] = field(default_factory=list)
    notes: list[Unresolved] = field(default_factory=list)  # assumptions and unread sources
    sourced: list[str] = field(default_factory=list)
    refused: Unresolved | None = None  # the reader stopped here (a bound): nothing after it


# A resolver for `$(python3 .../model_args_utils.py NAME)`: (name, exported variables) -> the
# one-line args and where they came from, or None with the reason.
ModelArgsLookup = Callable[[str, Mapping[str, str]], tuple[str | None, str]]
# A resolver for `source .../models/NAME.sh` that is not on disk: name -> args, or None.
SourcedModelLookup = Callable[[str, Mapping[str, str]], tuple[str | None, str]]


@functools.cache
def _parser() -> Any:
    import tree_sitter_bash
    from tree_sitter import Language, Parser  # light: a C grammar, no heavy deps

    return Parser(Language(tree_sitter_bash.language()))


# tree-sitter-bash 0.25.1's scanner can crash the process (SIGSEGV) on some non-ASCII code
# points after `{` (seen: `6{` + U+C34C3, from a property test's random command line). The
# parser reads a copy with every non-ASCII byte as `.`: a word byte, as those characters are in
# bash, never a name character (`$é` stays literal) and never a lone `.` (each character is at
# least two bytes). Every node keeps its byte range, so the text is read from the original.
_ASCII_FOR_PARSING = bytes(range(128)) + b"." * 128


def parse_bash(src: bytes) -> Any:  # noqa: ANN401 - a tree_sitter.Tree
    """The syntax tree of `src`; node byte ranges index `src` (its text is not the tree's)."""
    return _parser().parse(src.translate(_ASCII_FOR_PARSING))


def syntax_problems(tree: Any, file: str, src: bytes) -> list[SyntaxProblem]:
    problems: list[SyntaxProblem] = []

    def visit(node: Any) -> None:
        if node.type == "ERROR" or node.is_missing:
            text = src[node.start_byte:node.end_byte].decode("utf-8", "replace").splitlines()
            first = text[0][:60] if text else node.type
            problems.append(SyntaxProblem(file, node.start_point.row + 1, first))
            return
        if node.has_error:
            for child in node.children:
                visit(child)

    visit(tree.root_node)
    return problems


class _Fields:
    """Builds the words of one shell word: quoted text joins, unquoted expansions split."""

    def __init__(self, origin: Origin) -> None:
        self.default_origin = origin
        self.done: list[Word] = []
        self.text: list[str] = []
        self.origin: Origin | None = None
        self.unresolved: list[Unresolved] = []
        self.open = False  # something (even "") was added to the current field

    def add(self, text: str, origin: Origin | None = None,
            unresolved: tuple[Unresolved, ...] = (), *, split: bool = False) -> None:
        if not split:
            self._append(text, origin, unresolved)
            return
        pieces = _IFS.split(text)
        starts_blank, ends_blank = text[:1].isspace(), text[-1:].isspace()
        pieces = [p for p in pieces if p]
        if not pieces:
            if text and self.open:
                self.close()
            self.unresolved.extend(unresolved)
            return
        if starts_blank and self.open:
            self.close()
        for index, piece in enumerate(pieces):
            if index:
                self.close()
            self._append(piece, origin, unresolved)
        if ends_blank:
            self.close()

    def add_items(self, items: tuple[Word, ...], *, split: bool) -> None:
        for index, item in enumerate(items):
            if index:
                self.close()
            self.add(item.text, item.origin, item.unresolved, split=split)

    def _append(self, text: str, origin: Origin | None, unresolved: tuple[Unresolved, ...]) -> None:
        self.text.append(text)
        self.unresolved.extend(unresolved)
        if origin is not None and self.origin is None:
            self.origin = origin
        self.open = True

    def close(self) -> None:
        if self.open:
            self.done.append(Word("".join(self.text), self.origin or self.default_origin,
                                  tuple(dict.fromkeys(self.unresolved))))
        self.text, self.origin, self.unresolved, self.open = [], None, [], False

    def words(self) -> list[Word]:
        self.close()
        return self.done


class ScriptReader:
    """Walks a parsed script in order, keeping variables, and never runs anything."""

    def __init__(self, *, env: Mapping[str, str] | None = None,
                 model_args: ModelArgsLookup | None = None,
                 sourced_model: SourcedModelLookup | None = None) -> None:
        self.vars: dict[str, Var] = {}
        self.exported: set[str] = set()
        self.functions: dict[str, Any] = {}
        for name, value in (env or {}).items():
            self.vars[name] = Var((Word(value, Origin("env", name, "environment", 0)),))
            self.exported.add(name)
        self.model_args = model_args
        self.sourced_model = sourced_model
        self.run = ShellRun()
        self._file = "<pasted>"
        self._src = b""
        self._dir: Path | None = None
        self._depth = 0
        self._calls = 0
        self._budget = Budget()

    # --- entry -----------------------------------------------------------------------------

    def read(self, text: str, file: str = "<pasted>", path: Path | None = None) -> ShellRun:
        self._budget = Budget()
        try:
            self._read_source(text, file, path)
        except BudgetSpent as spent:
            self.run.notes.append(Unresolved(file, file, spent.line, spent.why))
            self.run.refused = self.run.notes[-1]
        return self.run

    def _read_source(self, text: str, file: str, path: Path | None) -> None:
        saved = (self._file, self._src, self._dir)
        self._file, self._src = file, text.encode("utf-8", "surrogateescape")
        self._dir = path.parent if path else None
        if path is not None:
            self.vars.setdefault("BASH_SOURCE", Var((Word(str(path), self._o(0)),), array=True))
            self.vars.setdefault("0", Var((Word(str(path), self._o(0)),)))
        tree = parse_bash(self._src)
        self.run.syntax += syntax_problems(tree, file, self._src)
        self._statements(tree.root_node.children)
        self._file, self._src, self._dir = saved

    # --- statements ------------------------------------------------------------------------

    def _statements(self, nodes: Any) -> None:
        for node in nodes:
            try:
                self._statement(node)
            except (ValueError, TypeError, KeyError, IndexError, RecursionError,
                    ZeroDivisionError, OverflowError, UnicodeError) as exc:
                self.run.notes.append(Unresolved(self._line_text(node), self._file,
                                                 self._line(node), f"not read ({exc})"))

    def _statement(self, node: Any) -> None:
        self._budget.step(self._line(node))
        kind = node.type
        if kind in ("comment", ";", ";;", "&", "&&", "||", "|", "|&", "{", "}", "(", ")",
                    "do", "done", "then", "fi", "else", "elif", "!", "\n"):
            return
        if kind == "variable_assignment":
            self._assign(node)
        elif kind == "variable_assignments":
            for child in node.named_children:
                self._statement(child)
        elif kind == "declaration_command":
            self._declare(node)
        elif kind == "command":
            self._command(node, redirects=())
        elif kind == "redirected_statement":
            body = node.child_by_field_name("body")
            redirects = [c for c in node.children if c.type.endswith("redirect")]
            if body is not None and body.type == "command":
                self._command(body, redirects=redirects)
            elif body is not None:
                self._statement(body)
        elif kind in ("list", "pipeline", "program", "compound_statement", "subshell",
                      "negated_command", "ERROR", "do_group"):
            self._statements(node.children)
        elif kind == "if_statement":
            self._if(node)
        elif kind == "case_statement":
            self._case(node)
        elif kind == "function_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name is not None and body is not None:
                self.functions[self._text(name)] = body
        elif kind in ("for_statement", "c_style_for_statement", "while_statement"):
            self._loop(node)
        # test_command, arithmetic at top level, heredocs, etc. change no variable we read.

    def _assign(self, node: Any, *, export: bool = False) -> None:
        name_node = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name_node is None:
            return
        name = self._text(name_node)
        if name_node.type == "subscript":  # ARR[3]=x: rarely in launch scripts
            base = name_node.child_by_field_name("name")
            name = self._text(base) if base is not None else name
            self._mark_unknown(name, node, "an array element assignment is not followed")
            return
        appending = any(c.type == "+=" for c in node.children)
        origin = Origin("variable", name, self._file, self._line(node))
        if value is None:
            items: tuple[Word, ...] = (Word("", origin),)
            array = False
        elif value.type == "array":
            items = tuple(self._array_items(value, name))
            array = True
        else:
            words = self._expand(value, origin, split=False)
            text = "".join(w.text for w in words)
            unresolved = tuple(u for w in words for u in w.unresolved)
            found = next((w.origin for w in words if w.origin.kind != "script"), None)
            items = (Word(text, found or origin, unresolved),)
            array = False
        if appending and name in self.vars:
            old = self.vars[name]
            if array or old.array:
                items = old.items + items
                array = True
            else:
                items = (Word(old.items[0].text + items[0].text, old.items[0].origin,
                              old.items[0].unresolved + items[0].unresolved),)
        why = _too_big(items)
        if why:  # `A="$A$A"` in a loop: the reader stops here, one refusal naming the line
            raise BudgetSpent(self._line(node), f"{name} {why}")
        self.vars[name] = Var(items, array)
        if export:
            self.exported.add(name)

    def _array_items(self, node: Any, name: str) -> list[Word]:
        items: list[Word] = []
        for group in _glued([c for c in node.named_children if c.type != "comment"]):
            origin = Origin("variable", name, self._file, self._line(group[0]))
            items += self._expand_group(group, origin)
        return items

    def _expand_group(self, group: list[Any], origin: Origin) -> list[Word]:
        """Adjacent nodes are one shell word. tree-sitter-bash splits `http://$IP:$PORT/x`
        after the second `$`; the bare `$` and the word after it are joined back here."""
        if len(group) == 1:
            return self._expand(group[0], origin, split=True)
        pieces: list[Any] = []
        for node in group:
            pieces += node.children if node.type == "concatenation" else [node]
        fields = _Fields(origin)
        index = 0
        while index < len(pieces):
            piece = pieces[index]
            following = pieces[index + 1] if index + 1 < len(pieces) else None
            name = re.match(r"[A-Za-z_]\w*", self._text(following)) if (
                piece.type == "$" and following is not None and following.type == "word"
            ) else None
            if name is not None:
                self._variable(name.group(0), None, piece, fields, quoted=False)
                fields.add(_unescape_word(self._text(following)[name.end():]))
                index += 2
                continue
            self._expand_into(piece, fields, quoted=False)
            index += 1
        return fields.words()

    def _declare(self, node: Any) -> None:
        export = self._text(node.children[0]) == "export" if node.children else False
        for child in node.named_children:
            if child.type == "variable_assignment":
                self._assign(child, export=export)
            elif child.type == "variable_name" and export:
                self.exported.add(self._text(child))

    def _mark_unknown(self, name: str, node: Any, why: str) -> None:
        what = self._line_text(node)
        unresolved = Unresolved(what, self._file, self._line(node), why)
        origin = Origin("variable", name, self._file, self._line(node))
        self.vars[name] = Var((Word("${" + name + "}", origin, (unresolved,)),))

    # --- commands --------------------------------------------------------------------------

    def _command(self, node: Any, redirects: Any) -> None:
        words = self._command_words(node)
        if not words:
            return
        redirects = list(redirects) + [c for c in node.children if c.type.endswith("redirect")]
        name = words[0].text if words else ""
        if name in ("source", "."):
            self._source(words[1:], node)
        elif name == "read":
            self._read_builtin(words[1:], redirects, node)
        elif name == "printf" and len(words) > 2 and words[1].text == "-v":
            self._mark_unknown(words[2].text, node, "printf -v is not evaluated")
        elif name == "unset":
            for word in words[1:]:
                self.vars.pop(word.text, None)
        elif name in self.functions and self._calls < MAX_FUNCTION_DEPTH:
            self._calls += 1
            try:
                self._statement(self.functions[name])
            finally:
                self._calls -= 1
        else:
            self.run.commands.append(Command(words, self._file, self._line(node)))

    def _command_words(self, node: Any) -> list[Word]:
        name_node = node.child_by_field_name("name")
        if name_node is None:
            return []
        words = self._expand(name_node, self._o(self._line(node)), split=True)
        arguments = [c for c in node.children
                     if c.type not in ("command_name", "variable_assignment", "comment")
                     and not c.type.endswith("redirect")]
        for group in _glued(arguments):
            words += self._expand_group(group, self._o(self._line(group[0])))
        return words

    def _read_builtin(self, args: list[Word], redirects: list[Any], node: Any) -> None:
        """`read -ra NAME <<< "$LINE"`: split the here-string into NAME."""
        as_array = any(a.text.startswith("-") and "a" in a.text for a in args)
        names = [a.text for a in args if not a.text.startswith("-")]
        here = next((r for r in redirects if r.type == "herestring_redirect"), None)
        if not names:
            return
        if here is None:
            for name in names:
                self._mark_unknown(name, node, "read from standard input")
            return
        value = next((c for c in here.named_children), None)
        origin = Origin("variable", names[0], self._file, self._line(node))
        words = self._expand(value, origin, split=False) if value is not None else []
        text = "".join(w.text for w in words)
        first = words[0] if words else Word("", origin)
        pieces = [p for p in _IFS.split(text) if p]
        if first.unresolved:  # one placeholder, not the unrun command's words
            pieces = ["${" + names[0] + ("[@]}" if as_array else "}")]
        items = tuple(Word(p, first.origin, first.unresolved) for p in pieces)
        if as_array:
            self.vars[names[0]] = Var(items, array=True)
            return
        for index, name in enumerate(names):
            rest = pieces[index:] if index == len(names) - 1 else pieces[index:index + 1]
            self.vars[name] = Var((Word(" ".join(rest), first.origin, first.unresolved),))

    def _source(self, args: list[Word], node: Any) -> None:
        if not args:
            return
        target = args[0]
        line = self._line(node)
        what = f"source {target.text}"
        stem = Path(target.text).name
        if stem.endswith(".sh") and self.sourced_model is not None:
            exported = self._exported_values()
            args_line, source = self.sourced_model(stem[:-3], exported)
            if args_line is not None and not self._sourced_file(target.text):
                origin = Origin("model", f"{stem[:-3]}: {source}", self._file, line)
                self.vars["MODEL_ARGS"] = Var(tuple(
                    Word(t, origin) for t in args_line.split()), array=True)
                return
        path = self._sourced_file(target.text)
        if target.unresolved or path is None:
            why = ("its path is not known without running the script" if target.unresolved
                   else "the file is not next to the script" if self._dir
                   else "a pasted script's sourced files cannot be read: give the script as a "
                        "path")
            self.run.notes.append(Unresolved(what, self._file, line, why))
            return
        if self._depth >= MAX_SOURCE_DEPTH:
            self.run.notes.append(Unresolved(what, self._file, line, "sourced too deeply"))
            return
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            self.run.notes.append(Unresolved(what, self._file, line, f"not readable: {exc}"))
            return
        self.run.sourced.append(str(path))
        self._depth += 1
        try:
            self._read_source(text, path.name, path)
        finally:
            self._depth -= 1

    def _sourced_file(self, text: str) -> Path | None:
        if "$" in text or not text:
            return None
        path = Path(text).expanduser()
        if not path.is_absolute():
            if self._dir is None:
                return None
            path = self._dir / path
        return path if path.is_file() else None

    # --- control flow ----------------------------------------------------------------------

    def _if(self, node: Any) -> None:
        """Take the branch whose test is known; when none is, the first, and say so."""
        branches: list[tuple[Any, list[Any]]] = []  # (condition or None, body)
        condition, body = None, []
        seen_then = False
        for child in node.children:
            if child.type in ("elif_clause", "else_clause"):
                break
            if child.type == "then":
                seen_then = True
            elif not seen_then and child.type not in ("if", ";"):
                condition = child
            elif seen_then and child.type != "fi":
                body.append(child)
        branches.append((condition, body))
        for clause in node.children:
            if clause.type == "elif_clause":
                cond, stmts, after = None, [], False
                for child in clause.children:
                    if child.type == "then":
                        after = True
                    elif not after and child.type not in ("elif", ";"):
                        cond = child
                    elif after:
                        stmts.append(child)
                branches.append((cond, stmts))
            elif clause.type == "else_clause":
                branches.append((None, [c for c in clause.children if c.type != "else"]))
        for cond, stmts in branches:
            verdict = True if cond is None else self._test(cond)
            if verdict is True:
                self._statements(stmts)
                return
            if verdict is None:
                self.run.notes.append(Unresolved(
                    self._line_text(cond), self._file, self._line(cond),
                    "the test is not known without running the script; its `then` branch "
                    "is assumed"))
                self._statements(stmts)
                return

    def _test(self, node: Any) -> bool | None:
        """[ A = B ], [[ -z X ]], -eq/-gt... on known values; None when not known."""
        if node.type == "test_command":
            inner = node.named_children
            return self._test(inner[0]) if len(inner) == 1 else None
        if node.type == "binary_expression":
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            op_node = node.child_by_field_name("operator")
            if left is None or right is None or op_node is None:
                return None
            a, b = self._known_text(left), self._known_text(right)
            if a is None or b is None:
                return None
            return _compare(self._text(op_node), a, b)
        if node.type == "unary_expression":
            op_node = node.children[0]
            operand = node.children[-1]
            value = self._known_text(operand)
            op = self._text(op_node)
            if value is None or op not in ("-z", "-n"):
                return None
            return (value == "") == (op == "-z")
        return None

    def _known_text(self, node: Any) -> str | None:
        words = self._expand(node, self._o(self._line(node)), split=False)
        if any(w.unresolved for w in words):
            return None
        return "".join(w.text for w in words)

    def _case(self, node: Any) -> None:
        subject = node.child_by_field_name("value")
        value = self._known_text(subject) if subject is not None else None
        for item in (c for c in node.children if c.type == "case_item"):
            patterns = [c for c in item.children if c.type in (
                "word", "extglob_pattern", "string", "raw_string", "concatenation", "number")]
            patterns = [p for p in patterns if p.start_byte < _close_paren(item)]
            body = [c for c in item.children if c.start_byte > _close_paren(item)]
            texts = [self._text(p).strip("\"'") for p in patterns]
            if value is None:
                self.run.notes.append(Unresolved(
                    self._line_text(node), self._file, self._line(node),
                    "the case value is not known without running the script; its first "
                    "branch is assumed"))
                self._statements(body)
                return
            import fnmatch

            if any(fnmatch.fnmatchcase(value, t) for t in texts):
                self._statements(body)
                return

    def _loop(self, node: Any) -> None:
        """Loops are not run: what they assign is named as unresolved."""
        for name in sorted(_assigned_names(node, self._text)):
            self._mark_unknown(name, node, f"assigned in a loop (line {self._line(node)}), "
                                           "which is not run")

    # --- expansions ------------------------------------------------------------------------

    def _expand(self, node: Any, origin: Origin, *, split: bool) -> list[Word]:
        fields = _Fields(origin)
        self._expand_into(node, fields, quoted=not split)
        return fields.words()

    def _expand_into(self, node: Any, out: _Fields, *, quoted: bool) -> None:
        kind = node.type
        if kind in ("word", "number", "extglob_pattern", "special_variable_name",
                    "variable_name", "test_operator", "file_descriptor", "brace_expression"):
            out.add(_unescape_word(self._text(node)))
        elif kind == "raw_string":
            out.add(self._text(node)[1:-1])
        elif kind == "ansi_c_string":
            out.add(_ansi_c(self._text(node)[2:-1]))
        elif kind in ("string", "translated_string"):
            self._string(node, out)
        elif kind in ("concatenation", "command_name"):
            for child in node.children:
                self._expand_into(child, out, quoted=quoted)
        elif kind == "simple_expansion":
            name = self._text(node)[1:]
            self._variable(name, None, node, out, quoted=quoted)
        elif kind == "expansion":
            self._braced(node, out, quoted=quoted)
        elif kind == "command_substitution":
            text, origin, unresolved = self._substitution(node)
            out.add(text, origin, unresolved, split=not quoted)
        elif kind == "arithmetic_expansion":
            text, unresolved = self._arithmetic(node)
            out.add(text, None, unresolved, split=not quoted)
        else:  # process substitution and the like: verbatim, named
            text = self._text(node)
            out.add(text, None, (Unresolved(text, self._file, self._line(node),
                                            f"a {kind.replace('_', ' ')} is not evaluated"),))

    def _string(self, node: Any, out: _Fields) -> None:
        """"..." : literal bytes between the expansions, with bash's four escapes."""
        start, end = node.start_byte, node.end_byte
        if self._src[start:start + 1] == b"$":
            start += 1
        cursor = start + 1
        out.add("")  # "" is a word even when empty
        for child in node.children:
            if child.type in ("simple_expansion", "expansion", "command_substitution",
                              "arithmetic_expansion"):
                out.add(_unescape_dq(self._src[cursor:child.start_byte].decode(
                    "utf-8", "surrogateescape")))
                self._expand_into(child, out, quoted=True)
                cursor = child.end_byte
        # an unclosed quote (a cut paste) has no closing byte to drop: keep the last character
        closed = end - start >= 2 and self._src[end - 1:end] == b'"'
        out.add(_unescape_dq(self._src[cursor:end - 1 if closed else end].decode(
            "utf-8", "surrogateescape")))

    def _variable(self, name: str, index: str | None, node: Any, out: _Fields, *,
                  quoted: bool, default: Any = None, operator: str = "") -> None:
        var = self.vars.get(name)
        is_set = var is not None and (operator.startswith(":") is False or any(
            w.text for w in var.items))
        if operator in (":-", "-", ":=", "="):
            if not is_set:
                if default is not None:
                    self._expand_into(default, out, quoted=quoted)
                if operator in (":=", "=") and default is not None:
                    value = self._expand(default, Origin("variable", name, self._file,
                                                         self._line(node)), split=False)
                    self.vars[name] = Var(tuple(value[:1]))
                return
        elif operator in (":+", "+"):
            if is_set and default is not None:
                self._expand_into(default, out, quoted=quoted)
            return
        if var is None:
            text = self._text(node)
            why = (f"the script's argument ${name} is not known without running it"
                   if name.isdigit() or name in ("@", "*", "#") else f"{name} is not defined")
            out.add(text, None, (Unresolved(text, self._file, self._line(node), why,
                                            "" if name.isdigit() else name),))
            return
        if index in ("@", "*"):
            if quoted and index == "*":
                first = var.items[0] if var.items else Word("", out.default_origin)
                out.add(" ".join(w.text for w in var.items), first.origin, tuple(
                    u for w in var.items for u in w.unresolved))
            else:
                out.add_items(var.items, split=not quoted)
            return
        position = int(index) if index and index.isdigit() else 0
        if position >= len(var.items):
            out.add("")
            return
        item = var.items[position]
        out.add(item.text, item.origin, item.unresolved, split=not quoted)

    def _braced(self, node: Any, out: _Fields, *, quoted: bool) -> None:
        children = node.children[1:-1]  # inside ${ }
        if children and children[0].type == "#":  # ${#X} / ${#ARR[@]}
            name, index = self._name_index(children[1]) if len(children) > 1 else ("", None)
            var = self.vars.get(name)
            if var is None:
                out.add("0")
            elif index in ("@", "*"):
                out.add(str(len(var.items)))
            else:
                out.add(str(len(var.items[0].text)) if var.items else "0")
            return
        if not children or children[0].type not in ("variable_name", "subscript",
                                                    "special_variable_name"):
            text = self._text(node)
            out.add(text, None, (Unresolved(text, self._file, self._line(node),
                                            "this expansion is not evaluated"),))
            return
        name, index = self._name_index(children[0])
        operator = self._text(children[1]) if len(children) > 1 else ""
        default = children[2] if len(children) > 2 else None
        if operator in (":?", "?"):  # fails when unset: read as a plain reference
            operator, default = "", None
        if operator and operator not in (":-", "-", ":=", "=", ":+", "+"):
            var = self.vars.get(name)
            if var is None or any(w.unresolved for w in var.items):
                text = self._text(node)
                out.add(text, None, (Unresolved(text, self._file, self._line(node),
                                                f"the {operator} expansion is not evaluated"),))
                return
            out.add(_string_op(var.items[0].text if var.items else "", operator,
                               self._text(default) if default is not None else ""),
                    var.items[0].origin if var.items else None, split=not quoted)
            return
        self._variable(name, index, node, out, quoted=quoted, default=default,
                       operator=operator)

    def _name_index(self, node: Any) -> tuple[str, str | None]:
        if node.type == "subscript":
            base = node.child_by_field_name("name")
            index = node.child_by_field_name("index")
            return (self._text(base) if base is not None else "",
                    self._text(index) if index is not None else None)
        return self._text(node), None

    def _substitution(self, node: Any) -> tuple[str, Origin | None, tuple[Unresolved, ...]]:
        """$(...): the model-args helper, dirname and `cd DIR && pwd`; nothing else is run."""
        text = self._text(node)
        inner = [c for c in node.named_children if c.type != "comment"]
        commands = _simple_commands(inner)
        words = [self._command_words(c) for c in commands]
        known = [[w.text for w in ws] for ws in words]
        unknown = any(w.unresolved for ws in words for w in ws)
        line = self._line(node)

        def unresolved(why: str) -> tuple[str, None, tuple[Unresolved, ...]]:
            return text, None, (Unresolved(text, self._file, line, why),)

        helper = _model_args_call(known)
        if helper is not None:
            name_word = next(w for w in words[0] if w.text == helper)
            if name_word.unresolved:
                return unresolved(f"the model name is not known ({name_word.unresolved[0].why})")
            if self.model_args is None:
                return unresolved("model args helpers are not read here")
            env = {**self._exported_values(), **self._prefix_assignments(commands[0])}
            args_line, source = self.model_args(helper, env)
            if args_line is None:
                return unresolved(source)
            return args_line, Origin("model", f"{helper}: {source}", self._file, line), ()
        if unknown:
            return unresolved("it uses a value that is not known")
        if text.startswith("$((") and text.endswith("))"):  # tree-sitter reads some $((..))
            value, problems = self._arithmetic_text(text, line)  # as $( (..) )
            return value, None, problems
        pure = _pure_command(known[0]) if len(known) == 1 else None
        if pure is not None:
            return pure, None, ()
        if len(known) == 1 and known[0][:1] == ["dirname"]:
            args = [a for a in known[0][1:] if a != "--"]
            return (os.path.dirname(args[0]) or ".", None, ()) if args else unresolved(
                "dirname without a path")
        if len(known) == 2 and known[0][:1] == ["cd"] and known[1] == ["pwd"]:
            args = [a for a in known[0][1:] if a not in ("--", "-P", "-L")]
            if args and os.path.isabs(args[0]):
                return os.path.normpath(args[0]), None, ()
            return unresolved("the directory is relative to where the script runs")
        return unresolved("a command substitution is not run")

    def _prefix_assignments(self, command: Any) -> dict[str, str]:
        """`NAME=value cmd`: the environment cmd alone gets."""
        values: dict[str, str] = {}
        for child in command.children:
            if child.type == "variable_assignment":
                name, value = child.child_by_field_name("name"), child.child_by_field_name(
                    "value")
                if name is not None and value is not None:
                    text = self._known_text(value)
                    if text is not None:
                        values[self._text(name)] = text
        return values

    def _arithmetic(self, node: Any) -> tuple[str, tuple[Unresolved, ...]]:
        return self._arithmetic_text(self._text(node), self._line(node))

    def _arithmetic_text(self, text: str, line: int) -> tuple[str, tuple[Unresolved, ...]]:
        body = text[3:-2]
        missing: list[str] = []

        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2) or match.group(3)
            var = self.vars.get(name)
            if var is None or not var.items or var.items[0].unresolved:
                missing.append(name)
                return "0"
            return var.items[0].text or "0"

        expression = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)|\b([A-Za-z_]\w*)\b",
                            value, body)
        if missing:
            return text, (Unresolved(text, self._file, line,
                                     f"{', '.join(dict.fromkeys(missing))} not known"),)
        try:
            return str(_integer_eval(expression)), ()
        except (ValueError, SyntaxError, ZeroDivisionError):
            return text, (Unresolved(text, self._file, line, "arithmetic not evaluated"),)

    # --- helpers ---------------------------------------------------------------------------

    def _exported_values(self) -> dict[str, str]:
        return {name: self.vars[name].items[0].text for name in self.exported
                if name in self.vars and self.vars[name].items
                and not self.vars[name].items[0].unresolved}

    def _text(self, node: Any) -> str:
        return self._src[node.start_byte:node.end_byte].decode("utf-8", "surrogateescape")

    def _line_text(self, node: Any) -> str:
        text = self._text(node).splitlines()
        return text[0][:80] if text else node.type

    @staticmethod
    def _line(node: Any) -> int:
        return node.start_point.row + 1

    def _o(self, line: int) -> Origin:
        return Origin("script", "", self._file, line)


# --- small pure helpers ----------------------------------------------------------------------

def _too_big(items: tuple[Word, ...]) -> str | None:
    if len(items) > MAX_ITEMS:
        return f"builds {len(items):,} items, over the reader's cap of {MAX_ITEMS:,}"
    chars = sum(len(w.text) for w in items)
    if chars > MAX_TEXT:
        return f"builds {chars:,} characters, over the reader's cap of {MAX_TEXT:,}"
    return None


def _glued(nodes: list[Any]) -> list[list[Any]]:
    """Sibling nodes with no blank between them, grouped (bash reads them as one word)."""
    groups: list[list[Any]] = []
    for node in nodes:
        if groups and groups[-1][-1].end_byte == node.start_byte:
            groups[-1].append(node)
        else:
            groups.append([node])
    return groups


def _close_paren(item: Any) -> int:
    for child in item.children:
        if child.type == ")":
            return child.start_byte
    return item.start_byte


def _simple_commands(nodes: list[Any]) -> list[Any]:
    """The simple commands of a substitution, in order (`cd X &>/dev/null && pwd` -> 2)."""
    found: list[Any] = []
    for node in nodes:
        if node.type == "command":
            found.append(node)
        elif node.type in ("list", "pipeline", "redirected_statement"):
            found += _simple_commands(node.named_children)
    return found


def _pure_command(words: list[str]) -> str | None:
    """The output of `seq`, `basename` and `echo` on known words: they read nothing else."""
    name, args = (words[0], words[1:]) if words else ("", [])
    if name == "echo" and not any(a.startswith("-") for a in args):
        return " ".join(args)
    if name == "basename" and args:
        base = os.path.basename(args[0].rstrip("/"))
        return base[:-len(args[1])] if len(args) > 1 and base.endswith(args[1]) else base
    if name == "seq" and 1 <= len(args) <= 3 and all(re.fullmatch(r"-?\d+", a) for a in args):
        numbers = [int(a) for a in args]
        first, step, last = (1, 1, numbers[0]) if len(numbers) == 1 else (
            (numbers[0], 1, numbers[1]) if len(numbers) == 2 else tuple(numbers))
        if step == 0 or abs(last - first) // abs(step) > 10_000:
            return None
        return " ".join(str(n) for n in range(first, last + (1 if step > 0 else -1), step))
    return None


def _model_args_call(commands: list[list[str]]) -> str | None:
    """`python3 .../model_args_utils.py NAME` -> NAME."""
    if len(commands) != 1:
        return None
    words = commands[0]
    for index, word in enumerate(words):
        if word.endswith("model_args_utils.py") and index + 1 < len(words):
            return words[index + 1]
        if word in ("-m",) and index + 2 < len(words) and words[index + 1].endswith(
                "model_args_utils"):
            return words[index + 2]
    return None


def _assigned_names(node: Any, text: Callable[[Any], str]) -> set[str]:
    names: set[str] = set()
    if node.type == "variable_assignment":
        name = node.child_by_field_name("name")
        if name is not None:
            names.add(text(name).split("[", 1)[0])
    for child in node.children:
        names |= _assigned_names(child, text)
    return names


def _compare(op: str, a: str, b: str) -> bool | None:
    if op in ("=", "=="):
        return a == b
    if op == "!=":
        return a != b
    numeric = {"-eq": int.__eq__, "-ne": int.__ne__, "-gt": int.__gt__, "-lt": int.__lt__,
               "-ge": int.__ge__, "-le": int.__le__}
    if op in numeric:
        try:
            return bool(numeric[op](int(a), int(b)))
        except ValueError:
            return None
    return None


def _string_op(value: str, operator: str, argument: str) -> str:
    """${X#p} ${X%p} ${X,,} ${X^^} on plain text (patterns taken literally)."""
    if operator in ("#", "##") and value.startswith(argument):
        return value[len(argument):]
    if operator in ("%", "%%") and argument and value.endswith(argument):
        return value[:-len(argument)]
    if operator == ",,":
        return value.lower()
    if operator == "^^":
        return value.upper()
    return value


def _unescape_word(text: str) -> str:
    """Unquoted word: a backslash quotes the next character; backslash-newline vanishes."""
    if "\\" not in text:
        return text
    return re.sub(r"\\(\n|.)", lambda m: "" if m.group(1) == "\n" else m.group(1), text,
                  flags=re.DOTALL)


def _unescape_dq(text: str) -> str:
    """Inside "...": a backslash escapes only $ ` " \\ and newline."""
    if "\\" not in text:
        return text
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _ansi_c(text: str) -> str:
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeError:
        return text


_ARITH_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: int(a / b) if b else _div0(), ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b, ast.Pow: lambda a, b: a ** b if 0 <= b < 64 else _div0(),
}


def _div0() -> int:
    raise ZeroDivisionError("division by zero")


def _integer_eval(expression: str) -> int:
    """Bash integer arithmetic on numbers only (variables already substituted)."""
    tree = ast.parse(expression.strip() or "0", mode="eval")

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            return _ARITH_OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        raise ValueError("not plain integer arithmetic")

    return value(tree.body)
