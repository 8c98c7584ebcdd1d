"""Every honoured flag is tied to a test that shows its effect (tests/contracts/flag_effects.py).

test_engine_contract.py proves the engine reads an honoured flag's key; this proves a named
test exercises the flag: the entry exists for every honoured flag and for no other, each node id
names a test function defined in that file (checked with ast, nothing imported), and that
test's source (decorators included) mentions the flag, by its name or its config key, so an
entry cannot point at an arbitrary test.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from ppodeck.engine.config.resolve import RESOLVED_INTO
from ppodeck.engine.config.schema import BY_NAME, FLAGS, Flag
from tests.contracts.flag_effects import FLAG_EFFECTS, Effect

ROOT = Path(__file__).resolve().parents[2]


def honoured_names(flags: tuple[Flag, ...] = FLAGS) -> set[str]:
    return {f.name for f in flags if f.engine.cls == "honoured"}


def spellings(flag: Flag) -> set[str]:
    """How a test may name a flag: --eps-clip, eps-clip, eps_clip, or a key resolve() derives
    from it (--disable-rewards-normalization -> rewards_normalization)."""
    return {flag.name, flag.name[2:], flag.dest, *RESOLVED_INTO.get(flag.dest, ())}


def mentions(source: str, words: set[str]) -> bool:
    """A whole-word mention: eps_clip does not count inside eps_clip_high."""
    return any(re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", source) for w in words)


@functools.cache
def _test_sources(path: str) -> dict[str, str]:
    """"func" / "Class::method" -> its source with decorators, for one test file."""
    text = (ROOT / path).read_text()
    lines = text.splitlines()

    def source(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        return "\n".join(lines[first - 1:node.end_lineno])

    found: dict[str, str] = {}
    for node in ast.parse(text, path).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = source(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}::{item.name}"] = source(item)
    return found


def node_problem(node_id: str, flag: Flag) -> str | None:
    """Why a node id does not show `flag`'s effect, or None when it can."""
    path, sep, name = node_id.partition("::")
    name = re.sub(r"\[.*\]$", "", name)
    if not sep or not path.startswith("tests/") or not path.endswith(".py"):
        return f"{node_id}: not a pytest node id (tests/....py::test_name)"
    if not (ROOT / path).is_file():
        return f"{node_id}: no such file"
    source = _test_sources(path).get(name)
    if source is None or not name.rpartition("::")[2].startswith("test"):
        return f"{node_id}: no such test function in {path}"
    if not mentions(source, spellings(flag)):
        return f"{node_id}: the test never mentions {flag.name} (nor {flag.dest})"
    return None


def table_problems(table: dict[str, Effect], flags: tuple[Flag, ...] = FLAGS) -> list[str]:
    honoured = honoured_names(flags)
    by_name = {f.name: f for f in flags}
    problems = [f"{name}: honoured, but no test is named for its effect"
                for name in sorted(honoured - set(table))]
    problems += [f"{name}: not an honoured flag (stale entry)"
                 for name in sorted(set(table) - honoured)]
    for name, effect in table.items():
        if name not in honoured:
            continue
        if not effect.tests:
            problems.append(f"{name}: an entry without tests")
        problems += [p for node in effect.tests
                     if (p := node_problem(node, by_name[name])) is not None]
    return problems


def test_every_honoured_flag_names_tests_that_show_its_effect() -> None:
    problems = table_problems(FLAG_EFFECTS)
    assert problems == [], "\n".join(
        ["tests/contracts/flag_effects.py does not match the schema and the tests:", *problems])


def test_the_check_catches_missing_stale_and_unrelated_entries() -> None:
    """Seen to fail: each way an entry can go wrong is reported."""
    eps = BY_NAME["--eps-clip"]
    table = {k: v for k, v in FLAG_EFFECTS.items() if k != "--eps-clip"}
    assert table_problems(table) == ["--eps-clip: honoured, but no test is named for its effect"]
    stale = {**FLAG_EFFECTS, "--no-such-flag": Effect(("tests/x.py::test_y",))}
    assert table_problems(stale) == ["--no-such-flag: not an honoured flag (stale entry)"]
    here = "tests/contracts/test_flag_effects.py"
    assert "no such file" in node_problem("tests/nowhere.py::test_y", eps)
    assert "no such test" in node_problem(f"{here}::test_not_defined", eps)
    assert "never mentions --eps-clip" in node_problem(
        f"{here}::test_every_honoured_flag_names_tests_that_show_its_effect", eps)
    assert node_problem(
        f"{here}::test_the_check_catches_missing_stale_and_unrelated_entries[x]", eps) is None


def test_mentions_whole_words() -> None:
    assert mentions('args["eps_clip_high"]', {"lr"}) is False
    assert not mentions('args["eps_clip_high"]', {"eps_clip", "--eps-clip"})
    assert mentions('tiny_args(eps_clip=0.1)', {"eps_clip"})
    assert mentions('"--eps-clip", 0.1', {"--eps-clip"})
