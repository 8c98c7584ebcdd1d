"""What validates is what runs: the schema's engine classes against the engine's code.

A flag classed *honoured* must be read by the engine's run-time code (directly, or through the
keys resolve() turns it into); a key the engine reads must be a flag classed honoured or a key
resolve() derives. A new flag that nothing reads, or a read of a refused flag, fails here.
"""

from __future__ import annotations

import os

import pytest

from ppodeck.engine.config import RunConfig, resolve
from ppodeck.engine.config.resolve import RESOLVED_INTO
from ppodeck.engine.config.schema import BY_DEST, DEFAULTS, FLAGS, Flag, refused
from tests.contracts import engine_reads as scan


@pytest.fixture(scope="module")
def reads() -> dict[str, set[str]]:
    return scan.engine_reads()


def _derived_keys() -> set[str]:
    return set(resolve(RunConfig(), os.environ)) - set(DEFAULTS)


def unread_honoured(flags: tuple[Flag, ...], reads: dict[str, set[str]]) -> list[str]:
    def read(dest: str) -> bool:
        return dest in reads or any(key in reads for key in RESOLVED_INTO.get(dest, ()))
    return [f.name for f in flags if f.engine.cls == "honoured" and not read(f.dest)]


def test_every_honoured_flag_is_read_by_the_engine(reads: dict[str, set[str]]) -> None:
    assert unread_honoured(FLAGS, reads) == [], (
        "flags classed honoured that no engine code reads: make the engine act on them, or "
        "class them refused / command-only in engine/config/schema.py")


def test_the_engine_reads_only_honoured_flags_and_derived_keys(
        reads: dict[str, set[str]]) -> None:
    derived = _derived_keys()
    wrong = {key: sorted(files) for key, files in reads.items()
             if key not in derived and (key not in BY_DEST
                                        or BY_DEST[key].engine.cls != "honoured")}
    assert wrong == {}, (
        "the engine reads keys that are not honoured flags nor keys resolve() derives: declare "
        "them (schema flag classed honoured, or computed in engine/config/resolve.py)")


def test_resolved_into_names_real_keys() -> None:
    derived = _derived_keys() | set(DEFAULTS)
    for dest, keys in RESOLVED_INTO.items():
        assert dest in BY_DEST
        assert set(keys) <= derived, dest


def test_the_contract_fails_on_a_newly_added_ignored_flag(
        reads: dict[str, set[str]]) -> None:
    """Seen to fail: a flag added as honoured that the engine never reads is caught."""
    before = unread_honoured(FLAGS, reads)
    ignored = Flag("--brand-new-knob", "int", 1, "ppo", "Nothing reads this.")
    assert unread_honoured((*FLAGS, ignored), reads) == [*before, "--brand-new-knob"]
    as_refused = Flag("--brand-new-knob", "int", 1, "ppo", "x", engine=refused("not run"))
    assert unread_honoured((*FLAGS, as_refused), reads) == before


def test_the_scan_sees_the_ways_the_engine_reads_args() -> None:
    import ast

    source = '''
def f(args, self):
    a = args["direct"]
    b = args.get("got")
    get = args.get
    c = get("via_getter")
    d = self.args["on_self"]
    e = args["x" if a else "y"]
    other = {}["not_args"]
    loop = {k: args.get(k) for k in KEYS}
KEYS = ("in_tuple_1", "in_tuple_2")
'''
    keys = scan._keys_read(ast.parse(source))
    assert sorted(keys) == ["direct", "got", "in_tuple_1", "in_tuple_2", "on_self", "via_getter",
                            "x", "y"]


def test_the_flags_page_table_is_generated_from_the_schema() -> None:
    from ppodeck.engine.config.reference import README_BEGIN, README_END, markdown_table

    readme = (scan.ROOT / "docs" / "flags.md").read_text()
    start, end = readme.index(README_BEGIN), readme.index(README_END) + len(README_END)
    assert readme[start:end] == markdown_table(), "regenerate: ppodeck flags --markdown"
