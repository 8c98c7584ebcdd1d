"""Every miles rule cites its source (issue #46): engine/config/miles_sources.py maps each error
rule that mirrors miles or Megatron to a file, line and quoted snippet at the pinned commits.
Fast, no miles needed: the table's shape, that every error rule check() can raise is cited or
named as PPO Deck's own, and that the cited lines agree with where the oracle saw miles raise.
(`python -m bench.miles_oracle --check-sources` checks the snippets against the sources.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ppodeck.engine.config.miles_sources import (
    BY_CODE,
    COMMITS,
    OWN_RULES,
    SOURCES,
    own_reason,
)

CONFIG = Path(__file__).resolve().parents[2] / "engine" / "config"
ERROR_CODE = re.compile(r"(?:_issue\(out,|add\(out,|Issue\()\s*\"error\",\s*(f?)\"([a-z_.{}]+)\"")


def error_codes() -> set[tuple[str, bool]]:
    """(code, is a pattern) of every error issue engine/config writes; an f-string code such as
    ckpt.{dest}_needs_save is a pattern."""
    found = set()
    for path in CONFIG.glob("*.py"):
        for prefix, code in ERROR_CODE.findall(path.read_text(encoding="utf-8")):
            found.add((code, bool(prefix) and "{" in code))
    return found


def _pattern(code: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[a-z_]+\\\}", "[a-z_]+", re.escape(code)) + "$")


def test_the_table_has_its_shape() -> None:
    assert len(SOURCES) == len(BY_CODE) >= 40  # one row per code
    for source in SOURCES:
        assert source.repo in COMMITS, source
        assert not source.path.startswith("/") and source.path.endswith(".py"), source
        assert source.path.startswith(f"{source.repo}/"), source  # the package's own tree
        assert source.line > 0 and 8 <= len(source.snippet) <= 100, source
        assert "\n" not in source.snippet, source
        assert own_reason(source.code) is None, f"{source.code} is cited and called own"
    assert all(re.fullmatch(r"[0-9a-f]{40}", commit) for commit in COMMITS.values())
    assert all(why.strip() for why in OWN_RULES.values())


def test_the_scan_finds_the_rules() -> None:
    """The scan this file relies on sees rules of each shape (else the next test is empty)."""
    codes = {code for code, _ in error_codes()}
    assert {"kl.both_coefs", "miles.min_lr_above_lr", "argv.missing_value"} <= codes
    assert "ckpt.{dest}_needs_save" in codes and len(codes) > 60


def test_every_error_rule_cites_miles_or_says_it_is_ours() -> None:
    uncited = []
    for code, is_pattern in sorted(error_codes()):
        if own_reason(code.split("{")[0] if is_pattern else code) is not None:
            continue
        cited = (
            [c for c in BY_CODE if _pattern(code).match(c)]
            if is_pattern
            else [code]
            if code in BY_CODE
            else []
        )
        if not cited:
            uncited.append(code)
    assert not uncited, (
        "error rules that neither cite a miles/Megatron line in "
        f"engine/config/miles_sources.py nor say why they are PPO Deck's own "
        f"(OWN_RULES): {uncited}"
    )


def test_every_cited_code_is_a_rule() -> None:
    written = error_codes()
    stale = [
        source.code
        for source in SOURCES
        if not any(
            _pattern(code).match(source.code) if is_pattern else code == source.code
            for code, is_pattern in written
        )
    ]
    assert not stale, f"cited codes that no rule writes any more: {stale}"


@pytest.fixture(scope="module")
def oracle_sites() -> list[tuple[str, list[str]]]:
    """(miles' raise site, PPO Deck's error codes under --engine miles) per refused case."""
    from tests.miles_oracle.agreement import ppodeck_verdicts, recorded

    cases = [
        c
        for c in recorded()["cases"]
        if c["kind"] in ("targeted", "preset")
        and c["miles"]["verdict"] == "refuse"
        and c["miles"]["site"] not in ("", "argparse")
    ]
    verdicts = ppodeck_verdicts(cases)
    return [(c["miles"]["site"], verdicts["miles", c["id"]]) for c in cases]


def test_cited_lines_are_where_the_oracle_saw_miles_raise(oracle_sites) -> None:
    """Where miles refused a targeted case and PPO Deck's cited rule refused it too, the
    citation is within a few lines of the raise site the oracle recorded ("miles/miles/...":
    the oracle's export directory, then the repository path)."""
    checked = 0
    for site, codes in oracle_sites:
        tree, _, rest = site.partition("/")
        path, _, line = rest.rpartition(":")
        cited = [BY_CODE[c] for c in codes if c in BY_CODE and BY_CODE[c].path == path]
        if not cited:
            continue
        checked += 1
        assert any(abs(s.line - int(line)) <= 3 and s.repo == tree for s in cited), (
            f"{site}: cited {[(s.code, s.path, s.line) for s in cited]}"
        )
    assert checked >= 8  # the table is held to the record, not skipped
