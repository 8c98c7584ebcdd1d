"""The bounds of the launcher reader: what it may build, how long it may walk, how it quotes.

A launcher is hostile input: `s = s + s` sixty times, a five-megabyte literal, loops inside
loops, recursion that branches. The reader evaluates launchers over plain data, so without
bounds it would build what they describe. Each bound here turns "too big" into an answer that
names the line: a value over a cap becomes unknown (so what depends on it is reported where it
was built), and a walk over the step or time budget stops the reader with one refusal.

The caps are far above what miles' own launchers use (their longest train_args string is a few
thousand characters and their longest walk under 2,000 steps) and far below what could
hold the machine: every value the reader keeps is at most MAX_TEXT characters or MAX_ITEMS
items, and every operation that could multiply sizes is checked before it runs.
"""

from __future__ import annotations

import ast
import re
import time
from typing import Any

MAX_SCRIPT_CHARS = 256 << 10  # a script or launcher read at all (miles' largest: 26 KB);
# parsing costs memory per statement (Python's ast about 3 KB each), so size bounds it first
MAX_TEXT = 200_000  # characters in one string the reader builds or quotes from
MAX_PIECES = 20_000  # pieces (each with its origin) in one string
MAX_ITEMS = 100_000  # items in one list, tuple, dict or range
MAX_INT_BITS = 8_192  # an integer larger than this is no GPU count or batch size
MAX_STEPS = 100_000  # statements and expressions walked in one read (miles' largest: ~2,000)
MAX_SECONDS = 3.0  # the same walk by the clock, a backstop for slow steps on a loaded machine
MAX_REGEX_INPUT = 10_000  # characters a regular expression of the launcher is run over
QUOTE = 80  # characters of source quoted in a message


class BudgetSpent(Exception):  # noqa: N818 - a stop, reported as the reader's refusal
    """The walk went past MAX_STEPS or MAX_SECONDS; `line` is where it was."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line = line
        self.why = why


class TooBig(ValueError):
    """An operation of the launcher that would build more than a cap; the message says which."""


class Budget:
    """Counts the reader's steps; raises BudgetSpent past either limit."""

    def __init__(self, steps: int = MAX_STEPS, seconds: float = MAX_SECONDS) -> None:
        self.steps_left = steps
        self.limit_steps = steps
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds

    def step(self, line: int) -> None:
        self.steps_left -= 1
        if self.steps_left < 0:
            raise BudgetSpent(line, f"the reader walked {self.limit_steps:,} steps by here (a "
                                    "loop, recursion or file too large to follow without "
                                    "running it)")
        if self.steps_left % 1024 == 0 and time.monotonic() > self.deadline:
            raise BudgetSpent(line, f"the reader spent {self.seconds:g} s by here (a loop, "
                                    "recursion or file too large to follow without running it)")


class Source:
    """Quotes a node's source in time linear in what is quoted, not in the file's size.

    ast.get_source_segment re-joins and re-encodes the whole source on every call, which is
    quadratic over a file with a large literal; here each line is encoded once, on first use,
    and at most QUOTE characters are cut from it."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self._encoded: dict[int, bytes] = {}

    def quote(self, node: ast.AST, fallback: str = "?") -> str:
        line = getattr(node, "lineno", None)
        col = getattr(node, "col_offset", None)
        if line is None or col is None or not 0 < line <= len(self.lines):
            return fallback
        encoded = self._encoded.get(line)
        if encoded is None:
            encoded = self._encoded[line] = self.lines[line - 1].encode("utf-8")
        end = getattr(node, "end_col_offset", None)
        if getattr(node, "end_lineno", line) != line or end is None:
            end = len(encoded)
        text = encoded[col:min(end, col + 4 * QUOTE)].decode("utf-8", "ignore")
        return text[:QUOTE] or fallback


def too_big(value: Any, text_of: Any = None) -> str | None:
    """Why a value the reader built is over a cap, or None. `text_of(value)` gives the string
    and piece count of the reader's own text type."""
    if text_of is not None:
        measured = text_of(value)
        if measured is not None:
            chars, pieces = measured
            if chars > MAX_TEXT:
                return f"builds a text of {chars:,} characters, over the reader's cap of " \
                       f"{MAX_TEXT:,}"
            if pieces > MAX_PIECES:
                return f"builds a text from {pieces:,} pieces, over the reader's cap of " \
                       f"{MAX_PIECES:,}"
            return None
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return f"builds a text of {len(value):,} characters, over the reader's cap of {MAX_TEXT:,}"
    if isinstance(value, (list, tuple, dict, set)) and len(value) > MAX_ITEMS:
        return f"builds {len(value):,} items, over the reader's cap of {MAX_ITEMS:,}"
    if isinstance(value, int) and not isinstance(value, bool) and \
            value.bit_length() > MAX_INT_BITS:
        return f"builds an integer of {value.bit_length():,} bits, over the reader's cap"
    return None


def size(value: Any) -> int:
    """Characters or items: what an operation on this value may multiply."""
    if isinstance(value, (str, list, tuple, dict, set)):
        return len(value)
    return 1


_WIDTH = re.compile(r"\d{7,}")  # a width or precision of a million or more


def method_too_big(owner: Any, name: str, args: list[Any]) -> str | None:
    """Why calling `owner.name(*args)` (plain values) could build more than the caps, or None,
    checked before the call so that the value is never built."""
    if isinstance(owner, str):
        if any(isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_TEXT
               for a in args):
            return f".{name}() with a size over the reader's cap of {MAX_TEXT:,}"
        if name in ("format", "format_map") and _WIDTH.search(owner):
            return f".{name}() with a width over the reader's cap of {MAX_TEXT:,}"
        if name == "replace" and len(args) >= 2 and \
                size(owner) * max(1, size(args[1])) > MAX_TEXT:
            return f".replace() could build more than the reader's cap of {MAX_TEXT:,} characters"
        if name == "join" and args and isinstance(args[0], (list, tuple)):
            total = sum(size(a) for a in args[0]) + len(owner) * len(args[0])
            if total > MAX_TEXT:
                return f".join() builds {total:,} characters, over the reader's cap"
    if isinstance(owner, list) and name in ("extend", "append", "insert") and \
            len(owner) + sum(size(a) for a in args) > MAX_ITEMS:
        return f".{name}() grows a list past the reader's cap of {MAX_ITEMS:,} items"
    return None


def format_spec_too_big(spec: str) -> bool:
    return bool(_WIDTH.search(spec))


def regex_refusal(pattern: Any, subject: Any) -> str | None:
    """Why running a launcher's regular expression could take unbounded time, or None.

    Python's re backtracks: a repeat inside a repeat (`(a+)+`), or alternatives inside one,
    takes time exponential in the input. Those patterns are not run; nor is any pattern over an
    input longer than MAX_REGEX_INPUT."""
    if not isinstance(pattern, str):
        return None
    if isinstance(subject, str) and len(subject) > MAX_REGEX_INPUT:
        return f"a regular expression over {len(subject):,} characters (the reader runs them " \
               f"over {MAX_REGEX_INPUT:,} at most)"
    try:
        from re import _parser  # the stdlib's own pattern parser: no second grammar here

        parsed = _parser.parse(pattern)
    except Exception:  # noqa: BLE001 - any pattern re would refuse, or one it cannot parse
        return f"the regular expression {pattern[:40]!r} does not parse"
    if _nested_repeat(parsed, inside=False):
        return f"the regular expression {pattern[:40]!r} nests a repeat inside a repeat, " \
               "which can take exponential time"
    return None


def _nested_repeat(parsed: Any, inside: bool) -> bool:
    from re import _constants as c

    for op, av in parsed:
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            _low, high, sub = av
            repeats = high > 1
            if repeats and inside:
                return True
            if _nested_repeat(sub, inside or repeats):
                return True
        elif op is c.SUBPATTERN and _nested_repeat(av[-1], inside):
            return True
        elif op is c.BRANCH:
            if inside:
                return True
            if any(_nested_repeat(branch, inside) for branch in av[1]):
                return True
        elif op in (c.ASSERT, c.ASSERT_NOT) and _nested_repeat(av[1], inside):
            return True
        elif op is c.GROUPREF and inside:
            return True
    return False
