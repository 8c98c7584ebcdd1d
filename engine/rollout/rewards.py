"""Rule-based rewards, selected by --rm-type (or a sample's metadata "rm_type"), as in miles.

Every reward function has the signature fn(response, label, metadata) -> float:
- copy-digit: the tiny-cpu synthetic task (partial credit over the first K response tokens).
- deepscaler: 1.0 if the boxed answer after the last `</think>` (or after `###Response`) matches
  the label, else 0.0; no think tag or no box gives 0.0.
- math: 1.0 if the last boxed answer anywhere in the response matches the label, else 0.0.
A `boxed_` prefix (e.g. `boxed_copy-digit`) first reduces the response to its boxed answer.

Matching is the deepscaler/mathd grader: equal after Hendrycks' mathd normalization, or equal
under sympy after a small LaTeX-to-sympy conversion (no antlr/pylatexenc needed). sympy is
imported lazily and only sees short, whitelisted expressions; any failure means "not equal".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..config.reward_types import BOXED_PREFIX  # one home; imported from here too

RewardFn = Callable[[str, Any, dict[str, Any] | None], float]

DEFAULT_TARGET_LEN = 4


# --------------------------------------------------------------------------- registry


def flag_rm_type(args: Any) -> str | None:  # noqa: ANN401 - the run's args mapping
    """--rm-type, else the synthetic task's own reward (engine/config/reward_types.py)."""
    from ..config.reward_types import default_rm_type

    return default_rm_type(args.get("rm_type"), args.get("synthetic_task"))


def resolve_rm_type(metadata: dict[str, Any] | None, flag_value: str | None) -> str:
    """The sample's metadata "rm_type" wins over --rm-type (miles' order); "" when neither."""
    from_metadata = metadata.get("rm_type") if isinstance(metadata, dict) else None
    return (from_metadata or flag_value or "").strip()


def get_reward_fn(rm_type: str) -> RewardFn:
    """The reward function for an rm type, honouring the `boxed_` prefix.

    Raises ValueError naming --rm-type and listing the known types for an empty/unknown type.
    """
    base = rm_type[len(BOXED_PREFIX) :] if rm_type.startswith(BOXED_PREFIX) else rm_type
    if base not in REWARDS:
        known = ", ".join(sorted(REWARDS))
        what = f"Unknown --rm-type {rm_type!r}" if rm_type else "No --rm-type set"
        raise ValueError(
            f"{what}; known types: {known} (each also with a '{BOXED_PREFIX}' prefix). "
            "Set --rm-type, or put an 'rm_type' in the sample metadata."
        )
    fn = REWARDS[base]
    if base == rm_type:
        return fn

    def boxed_fn(response: str, label: Any, metadata: dict[str, Any] | None = None) -> float:
        return fn(extract_boxed(response) or "", label, metadata)

    return boxed_fn


# --------------------------------------------------------------------------- rewards


def copy_digit_reward(response: str, label: Any, metadata: dict[str, Any] | None = None) -> float:
    """Fraction of the first K response tokens that equal the label digit.

    K = metadata["target_len"] (default 4); tokens = response.split(), so the tokens are the
    space-separated pieces of the decoded text. Missing tokens count as wrong and tokens past K
    are ignored: "7 7 3" with label "7" and K = 4 scores 2/4 = 0.5. The reward depends on every
    one of the K positions, so per-token credit assignment (the critic) matters.
    """
    target_len = int((metadata or {}).get("target_len", DEFAULT_TARGET_LEN))
    if target_len < 1:
        raise ValueError(f"copy-digit needs metadata target_len >= 1, got {target_len}")
    digit = str(label).strip()
    tokens = response.split()[:target_len]
    return sum(token == digit for token in tokens) / target_len


def deepscaler_reward(response: str, label: Any, metadata: dict[str, Any] | None = None) -> float:
    """1.0/0.0: grade the boxed answer of the solution after the last `</think>`, or after the
    first `###Response` (up to a second one, as miles splits); neither marker gives 0.0."""
    if "</think>" in response:
        solution = response.split("</think>")[-1]
    elif "###Response" in response:
        solution = response.split("###Response")[1]
    else:
        return 0.0
    return _grade_boxed(solution, label)


def math_reward(response: str, label: Any, metadata: dict[str, Any] | None = None) -> float:
    """1.0/0.0: grade the last boxed answer anywhere in the response (no think tag needed)."""
    return _grade_boxed(response, label)


REWARDS: dict[str, RewardFn] = {
    "copy-digit": copy_digit_reward,
    "deepscaler": deepscaler_reward,
    "math": math_reward,
}


def _grade_boxed(solution: str, label: Any) -> float:
    given = extract_boxed(solution)
    truth = _label_answer(label)
    if given is None or truth is None:
        return 0.0
    return 1.0 if answers_match(given, truth) else 0.0


def _label_answer(label: Any) -> str | None:
    """The label as an answer string: a boxed label is unboxed; an empty label grades nothing."""
    if label is None:
        return None
    text = str(label)
    if text == "":
        return None
    return extract_boxed(text) if "\\boxed" in text else text


# --------------------------------------------------------------------------- boxed extraction


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (else the last `\\fbox{...}`), braces balanced.

    None when there is no box, the box has no opening brace, or its braces never close.
    """
    for command in ("\\boxed", "\\fbox"):
        start = text.rfind(command)
        if start >= 0:
            return _braced_group(text, start + len(command))
    return None


def _braced_group(text: str, open_at: int) -> str | None:
    """Content of the brace group opening at text[open_at], or None."""
    if open_at >= len(text) or text[open_at] != "{":
        return None
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    return None


# --------------------------------------------------------------------------- grading


def answers_match(given: str, truth: str) -> bool:
    """mathd-normalized string equality, else the sympy-based check."""
    if mathd_normalize(given) == mathd_normalize(truth):
        return True
    return _sympy_grade(given, truth)


def mathd_normalize(answer: str) -> str:
    """Hendrycks' MATH normalization: strips formatting so equal answers compare equal as text.

    Drops spaces, \\left/\\right, \\!, degrees, dollars, percent, a "\\text{ unit}" suffix and an
    enclosing \\text{}; dfrac/tfrac -> frac; \\frac12 -> \\frac{1}{2}; \\sqrt3 -> \\sqrt{3};
    "x = 3" -> "3"; "0.5" and "1/2" -> \\frac{1}{2}; "3.0" -> "3".
    """
    s = answer.strip()
    enclosing_text = re.fullmatch(r"\\text\{(.+?)\}", s)
    if enclosing_text:
        s = enclosing_text.group(1).strip()
    for old, new in _MATHD_REPLACEMENTS:
        s = s.replace(old, new)
    s = s.split("\\text{ ")[0]  # "\text{ " only ever introduces units on the right
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    s = _drop_short_lhs(s)
    s = re.sub(r"\\sqrt([^{\s])", r"\\sqrt{\1}", s)
    s = _fix_fracs(s.replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    s = _int_slash_int_to_frac(s)
    return _integral_float_to_int(s)


_MATHD_REPLACEMENTS = (
    ("\n", ""),
    ("\\!", ""),
    ("\\\\", "\\"),
    ("tfrac", "frac"),
    ("dfrac", "frac"),
    ("\\left", ""),
    ("\\right", ""),
    ("^{\\circ}", ""),
    ("^\\circ", ""),
    ("\\$", ""),
)


def _drop_short_lhs(s: str) -> str:
    """An equation whose left side has at most 2 characters names the answer: "x = 3" -> " 3"."""
    parts = s.split("=")
    return parts[1] if len(parts) == 2 and len(parts[0]) <= 2 else s


def _fix_fracs(s: str) -> str:
    """\\frac12 -> \\frac{1}{2}, \\frac1{72} -> \\frac{1}{72}; malformed input is left as is."""
    head, *rest = s.split("\\frac")
    out = [head]
    for piece in rest:
        if piece.startswith("{"):
            out.append("\\frac" + piece)
        elif len(piece) < 2:
            return s
        elif piece[1] == "{":
            out.append("\\frac{" + piece[0] + "}" + piece[1:])
        else:
            out.append("\\frac{" + piece[0] + "}{" + piece[1] + "}" + piece[2:])
    return "".join(out)


def _int_slash_int_to_frac(s: str) -> str:
    match = re.fullmatch(r"(-?\d+)/(-?\d+)", s)
    if not match or s != f"{int(match.group(1))}/{int(match.group(2))}":
        return s
    return "\\frac{" + match.group(1) + "}{" + match.group(2) + "}"


def _integral_float_to_int(s: str) -> str:
    """Integral plain decimals drop their fraction: "3.0" -> "3", "-2.00" -> "-2" ("1e3" stays)."""
    if re.fullmatch(r"-?\d+\.0*", s):
        return s.split(".")[0]
    return s


# --------------------------------------------------------------------------- sympy path

_UNITS = (
    "degree|cm|centimeter|meter|mile|second|minute|hour|day|week|month|year|foot|feet|inch|yard"
)
_LATEX_SYMBOLS = (
    ("\\left", ""),
    ("\\right", ""),
    ("\\!", ""),
    ("\\,", ""),
    ("\\;", ""),
    ("\\:", ""),
    ("\\cdot", "*"),
    ("\\times", "*"),
    ("\\pi", "pi"),
    ("\\tfrac", "\\frac"),
    ("\\dfrac", "\\frac"),
)
_MAX_SYMPY_CHARS = 100
_MAX_EXPONENT = 1000


def _sympy_grade(given: str, truth: str) -> bool:
    """deepscaler's grade_answer_sympy: normalize, split tuples, compare element-wise."""
    truth_n, given_n = _sympy_normalize(truth), _sympy_normalize(given)
    if truth_n is None or given_n is None:
        return False
    if truth_n == given_n:
        return True
    if not given_n:
        return False
    truth_elems, given_elems = _split_tuple(truth_n), _split_tuple(given_n)
    if len(truth_elems) != len(given_elems):
        return False
    if len(truth_elems) > 1 and (truth_n[0], truth_n[-1]) != (given_n[0], given_n[-1]):
        return False  # (a, b) is not [a, b]
    return all(_elements_match(t, g) for t, g in zip(truth_elems, given_elems, strict=True))


def _elements_match(truth: str, given: str) -> bool:
    if _is_simple_fraction(truth) and _is_simple_fraction(given):
        return truth == given  # an unreduced fraction is not accepted for a reduced one
    if _is_int_text(truth) != _is_int_text(given):
        return False  # an integer answer needs an integer, not an expression equal to it
    return _sympy_equal(truth, given)


def _sympy_normalize(expr: str) -> str | None:
    """Plain-text form of an answer for sympy: units/markup removed, LaTeX converted, lowercased.

    None when the LaTeX cannot be converted (an unsupported command).
    """
    s = expr.strip()
    enclosing_text = re.fullmatch(r"\\text\{(.+?)\}", s)
    if enclosing_text:
        s = enclosing_text.group(1)
    for old in ("\\%", "\\$", "$", "%"):
        s = s.replace(old, "")
    s = s.replace(" or ", " , ").replace(" and ", " , ")
    s = re.sub(rf"({_UNITS})(es)?(s)? *(\^[0-9]+)?", "", s)
    s = re.sub(r"\^ *\{? *\\circ *\}?", "", s)
    if len(s) > 1 and s[0] == "{" and s[-1] == "}":
        s = s[1:-1]
    s = re.sub(r",\\! *", "", s)
    if "\\" in s:
        converted = latex_to_plain(s)
        if converted is None:
            return None
        s = converted
    s = re.sub(r"- *", "-", s)
    s = re.sub(r"([0-9]) +([0-9])", r"\1+\2", s)  # mixed number: "7 3/4" -> "7+3/4"
    s = s.replace(" ", "").replace("{", "(").replace("}", ")").lower()
    return str(_text_to_int(s)) if _is_int_text(s) else s


def latex_to_plain(latex: str) -> str | None:
    """Simple LaTeX to sympy syntax: \\frac, \\sqrt (and \\sqrt[n]), \\text, ^{...}, \\cdot,
    \\times, \\pi. Returns None if any other command remains."""
    s = latex
    for old, new in _LATEX_SYMBOLS:
        s = s.replace(old, new)
    s = _replace_command(s, "\\text", lambda args: args[0], 1)
    s = _replace_command(s, "\\mathrm", lambda args: args[0], 1)
    s = _replace_command(s, "\\frac", _frac_text, 2)
    s = _replace_sqrt(s)
    if s is None or "\\" in s:
        return None
    return s.replace("{", "(").replace("}", ")")


def _frac_text(args: list[str]) -> str:
    numerator, denominator = args
    if re.fullmatch(r"\d+", numerator) and re.fullmatch(r"\d+", denominator):
        return f" {numerator}/{denominator}"  # keep "1/2" recognizable as a simple fraction
    return f" ({numerator})/({denominator})"  # leading space: "7\frac{3}{4}" is a mixed number


def _replace_command(s: str, command: str, render: Callable[[list[str]], str], arity: int) -> str:
    """Replace every `command{a}{b}` (innermost arguments converted first) with render([a, b]).

    A one-character argument without braces (\\frac12) is accepted, like LaTeX does.
    """
    while (start := s.find(command)) >= 0:
        args, end = _read_args(s, start + len(command), arity)
        if args is None:
            return s  # malformed: leave it, the leftover backslash rejects the expression
        inner = [_replace_command(a, command, render, arity) for a in args]
        s = s[:start] + render(inner) + s[end:]
    return s


def _read_args(s: str, pos: int, count: int) -> tuple[list[str] | None, int]:
    args: list[str] = []
    for _ in range(count):
        while pos < len(s) and s[pos] == " ":
            pos += 1
        if pos >= len(s):
            return None, pos
        if s[pos] == "{":
            content = _braced_group(s, pos)
            if content is None:
                return None, pos
            args.append(content)
            pos += len(content) + 2
        else:
            args.append(s[pos])
            pos += 1
    return args, pos


def _replace_sqrt(s: str) -> str | None:
    """\\sqrt{x} -> sqrt(x), \\sqrt[n]{x} -> (x)^(1/(n)), \\sqrt2 -> sqrt(2)."""
    while (start := s.find("\\sqrt")) >= 0:
        pos = start + len("\\sqrt")
        root = None
        if s.startswith("[", pos):
            close = s.find("]", pos)
            if close < 0:
                return None
            root, pos = s[pos + 1 : close], close + 1
        args, end = _read_args(s, pos, 1)
        if args is None:
            return None
        radicand = args[0]
        rendered = f"sqrt({radicand})" if root is None else f"({radicand})^(1/{root})"
        s = s[:start] + rendered + s[end:]
    return s


def _split_tuple(expr: str) -> list[str]:
    """Elements of "(a,b)" / "[a,b]" (no nested brackets), else [expr]."""
    expr = _strip_thousands_commas(expr)
    if (
        len(expr) > 2
        and expr[0] in "(["
        and expr[-1] in ")]"
        and not any(ch in expr[1:-1] for ch in "()[]")
    ):
        return [elem.strip() for elem in expr[1:-1].split(",")]
    return [expr] if expr else []


def _strip_thousands_commas(expr: str) -> str:
    previous = None
    while previous != expr:
        previous, expr = expr, re.sub(r"(\d),(\d\d\d)($|\D)", r"\1\2\3", expr)
    return expr


def _is_simple_fraction(expr: str) -> bool:
    return re.fullmatch(r"-?[0-9]+.?/0*[1-9][0-9]*.?", expr) is not None


def _is_int_text(expr: str) -> bool:
    try:
        value = float(_strip_thousands_commas(expr))
    except ValueError:
        return False
    return abs(value - round(value)) <= 1e-7 if abs(value) < float("inf") else False


def _text_to_int(expr: str) -> int:
    return int(float(expr.replace(",", "")))


def _sympy_equal(truth: str, given: str) -> bool:
    """True when sympy simplifies truth - given to 0. Unsafe or unparsable input -> False."""
    if not (_safe_for_sympy(truth) and _safe_for_sympy(given)):
        return False
    try:
        diff = _parse_sympy(f"({truth})-({given})")
        import sympy

        return bool(sympy.simplify(diff) == 0)
    except Exception:  # noqa: BLE001 - any sympy failure (syntax, recursion, type) is "not equal"
        return False


def _safe_for_sympy(expr: str) -> bool:
    """Only short arithmetic over at most two single-letter unknowns, with small exponents.

    parse_expr evaluates Python and sympy has no timeout, so this whitelist is the safety net:
    at most 2 powers, each exponent one atom (a number, a letter or a simple fraction, maybe in
    parentheses; no towers like 2^9^9 or 2^(1+10^9)), numeric exponents multiplying to <= 1000.
    """
    if len(expr) > _MAX_SYMPY_CHARS or not re.fullmatch(r"[0-9a-z+\-*/^().\s]*", expr):
        return False
    if "**" in expr or len(set(re.sub(r"sqrt|pi", "", expr)) & _LETTERS) > 2:
        return False
    powers = list(re.finditer(_EXPONENT, expr))
    if len(powers) != expr.count("^") or len(powers) > 2:
        return False
    magnitude = 1.0
    for power in powers:
        if expr[power.end() :].lstrip().startswith("^"):
            return False
        magnitude *= _exponent_size(power.group(1) or power.group(2))
    return magnitude <= _MAX_EXPONENT


_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")
_NUMBER = r"\d+(?:\.\d+)?"
_EXPONENT = rf"\^\s*(?:({_NUMBER}|[a-z])|\(\s*(-?\s*{_NUMBER}|-?\s*[a-z]|\d+/\d+)\s*\))"


def _exponent_size(atom: str) -> float:
    digits = atom.replace("-", "").replace(" ", "")
    if not digits[0].isdigit():
        return 1.0  # a letter: symbolic, sympy does not expand it
    numerator, _, denominator = digits.partition("/")
    divisor = float(denominator or 1)
    return float(numerator) / divisor if divisor else float("inf")


def _parse_sympy(expr: str) -> Any:
    from sympy.parsing import sympy_parser

    transformations = sympy_parser.standard_transformations + (
        sympy_parser.implicit_multiplication_application,
    )
    return sympy_parser.parse_expr(expr.replace("^", "**"), transformations=transformations)
