"""PPO Deck's check() against miles' own parse_args() on the oracle's corpus (issue #46).

verdicts.json is miles' verdict per case (bench/miles_oracle.py, run against the pinned miles
and Megatron commits); no miles is needed here. A case PPO Deck passes and miles refuses is a
disagreement: PPO Deck would launch a config miles stops at startup. disagreements.json lists
today's; it may only shrink, so a new one fails and so does a listed one that is gone."""
from __future__ import annotations

import pytest

from tests.miles_oracle.agreement import (
    ENGINES,
    disagreements,
    listed,
    own_label,
    ppodeck_errors,
    recorded,
    stricter,
)


@pytest.fixture(scope="module")
def errors() -> dict:
    return ppodeck_errors(recorded()["cases"])


@pytest.fixture(scope="module")
def judged(errors) -> tuple[list[dict], dict[tuple[str, str], dict]]:
    cases = recorded()["cases"]
    codes = {key: [issue.code for issue in found] for key, found in errors.items()}
    return cases, disagreements(cases, codes)


def test_every_stricter_verdict_says_it_is_ours(errors) -> None:
    """Where PPO Deck refuses what miles accepts, each error names itself as PPO Deck's own:
    "our engine cannot ..." or "this check runs later in miles: FILE:LINE"."""
    found = stricter(recorded()["cases"], errors)
    assert found  # the corpus has stricter cases (optimizer sgd on our engine, small batches)
    unlabelled = [f"{engine} {ident} {issue.code}: {issue.message}"
                  for (engine, ident), issues in sorted(found.items()) for issue in issues
                  if own_label(issue.message) is None]
    assert not unlabelled, "stricter than miles without saying so: " + "; ".join(unlabelled)


def test_the_label_is_read_from_the_message() -> None:
    assert own_label("our engine cannot run --indep-dp: not implemented.") == "our engine cannot"
    assert own_label("x (this check runs later in miles: miles/a.py:4)").startswith("this check")
    assert own_label("--optimizer expects one of adam, sgd, got 'muon'") is None


def test_verdicts_are_miles_judging_flags() -> None:
    """An oracle environment that fails (no module, no GPU) refuses every case alike; the
    record must show accepts and refusals from several raise sites."""
    data = recorded()
    verdicts = [case["miles"] for case in data["cases"]]
    assert data["miles_commit"] and data["megatron_commit"] and data["corpus_seed"] is not None
    assert sum(v["verdict"] == "accept" for v in verdicts) >= 10
    assert len({v["site"] for v in verdicts if v["verdict"] == "refuse"}) >= 3
    assert not [v for v in verdicts if v["verdict"] not in ("accept", "refuse")]


def test_no_new_disagreement(judged) -> None:
    _, found = judged
    new = sorted(set(found) - set(listed()))
    assert not new, "PPO Deck passes what miles refuses: " + "; ".join(
        f"{engine} {ident}: miles {found[engine, ident]['site']} "
        f"{found[engine, ident]['error']}" for engine, ident in new)


def test_listed_disagreements_still_disagree(judged) -> None:
    _, found = judged
    gone = sorted(set(listed()) - set(found))
    assert not gone, f"fixed or gone, drop from disagreements.json: {gone}"


def test_listed_rows_are_true() -> None:
    """Each listed row names a recorded case miles refuses, at the site it records."""
    cases = {case["id"]: case for case in recorded()["cases"]}
    for (engine, ident), row in listed().items():
        assert engine in ENGINES and ident in cases, (engine, ident)
        assert cases[ident]["miles"]["verdict"] == "refuse", ident
        assert row["site"] == cases[ident]["miles"]["site"], ident
        assert row["why"].strip(), ident
