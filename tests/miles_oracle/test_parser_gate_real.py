"""The parser gate (engine/miles/parser_gate.py) on the REAL pinned miles: the oracle's cached
environment (bench/miles_oracle.py builds it) holds miles and Megatron at the pinned commits
and a Python with miles' parse-time dependencies, so it is a real miles checkout to gate with.
Skipped where that environment was never built; about 30 s a verdict on a loaded CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.miles_oracle import CACHE, MEGATRON_COMMIT, MILES_COMMIT
from bench.miles_oracle_corpus import case_config, make_fixtures
from ppodeck.engine.miles.parser_gate import gate_setup, judge
from tests.miles_oracle.agreement import recorded

ENV = CACHE / f"env-{MILES_COMMIT[:9]}-{MEGATRON_COMMIT[:9]}"

pytestmark = pytest.mark.skipif(
    not (ENV / "ready").exists(), reason=f"no oracle environment at {ENV} (bench/miles_oracle.py)"
)


def test_the_real_miles_parser_accepts_and_refuses_through_the_gate(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PPODECK_MEGATRON_PATH", str(ENV / "src" / "megatron"))
    cases = {c["id"]: c for c in recorded()["cases"]}
    accepted, refused = cases["target:hf-matches"], cases["target:tito-without-session"]
    assert accepted["miles"]["verdict"] == "accept" and refused["miles"]["verdict"] == "refuse"
    make_fixtures(tmp_path, [accepted, refused])
    setup = gate_setup(ENV / "src" / "miles", str(ENV / "venv" / "bin" / "python"), 240)
    verdicts = {}
    for case in (accepted, refused):
        config, _ = case_config(case, Path(tmp_path))
        with monkeypatch.context() as env:
            for name, value in case["env"].items():
                env.setenv(name, value)
            verdicts[case["id"]] = judge(config, setup)
    assert verdicts[accepted["id"]].outcome == "accept", verdicts[accepted["id"]]
    refusal = verdicts[refused["id"]]
    assert refusal.outcome == "refuse", refusal
    assert refusal.error == refused["miles"]["error"]  # what the oracle recorded, word for word
    assert refusal.site == "miles/utils/arguments.py:2912"  # relative to the checkout
