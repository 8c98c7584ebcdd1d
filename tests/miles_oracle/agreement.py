"""PPO Deck's verdict beside miles' on the oracle's corpus (issue #46).

tests/miles_oracle/verdicts.json holds, per case, what miles' own parse_args() said
(bench/miles_oracle.py records it). This module rebuilds each case's config as the oracle
did and asks check() for PPO Deck's verdict; test_agreement.py holds the two together.

    python -m tests.miles_oracle.agreement        # the agreement table, both engines
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from bench.miles_oracle_corpus import case_config, make_fixtures
from ppodeck.engine.config import check
from ppodeck.engine.config.issues import Issue
from ppodeck.engine.config.machine import Machine
from ppodeck.engine.host.machine import miles_ft_trainer

HERE = Path(__file__).resolve().parent
VERDICTS = HERE / "verdicts.json"
DISAGREEMENTS = HERE / "disagreements.json"
ENGINES = ("miles", "ppodeck")
# miles parsed as if on a Hopper cluster (the oracle's GPU stand-in); PPO Deck judges against
# a machine that lacks nothing either, so only the flags decide both verdicts
CLUSTER = Machine(gpus=1 << 20, transformer_engine=True, sglang=True, megatron_bridge=True,
                  env=os.environ)
# the words a stricter verdict (PPO Deck refuses, miles accepts) names itself by: a limit of
# PPO Deck's engine, or a miles check that runs after start-up, where miles' parser cannot see
OWN_LABELS = ("our engine cannot", "this check runs later in miles: ")


def recorded() -> dict:
    return json.loads(VERDICTS.read_text())


def listed() -> dict[tuple[str, str], dict]:
    """The known disagreements, keyed by (engine, case id)."""
    rows = json.loads(DISAGREEMENTS.read_text())
    return {(row["engine"], row["id"]): row for row in rows}


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def ppodeck_errors(cases: list[dict]) -> dict[tuple[str, str], list[Issue]]:
    """check()'s errors per (engine, case id): an empty list is a pass. The machine's launch
    environment is the one the oracle gave miles' job."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_fixtures(root, cases)
        for case in cases:
            config, _ = case_config(case, root)
            machine = replace(CLUSTER, miles_ft_trainer=miles_ft_trainer(case["env"]))
            with _environ(case["env"]):
                for engine in ENGINES:
                    report = check(config, machine=machine, engine=engine)
                    out[engine, case["id"]] = list(report.errors)
    return out


def ppodeck_verdicts(cases: list[dict]) -> dict[tuple[str, str], list[str]]:
    """check()'s error codes per (engine, case id): an empty list is a pass."""
    return {key: [issue.code for issue in errors]
            for key, errors in ppodeck_errors(cases).items()}


def own_label(message: str) -> str | None:
    """The label by which an error names itself as PPO Deck's own, or None."""
    return next((label for label in OWN_LABELS if label in message), None)


def labelled(message: str) -> str:
    """The message from its label to the end of that clause (for the table), or UNLABELLED."""
    label = own_label(message)
    if label is None:
        return "UNLABELLED"
    return re.split(r"[,)]|\.$", message[message.index(label):], maxsplit=1)[0]


def stricter(cases: list[dict], errors: dict[tuple[str, str], list[Issue]]
             ) -> dict[tuple[str, str], list[Issue]]:
    """PPO Deck refuses, miles accepts: the errors PPO Deck raised, per (engine, case id)."""
    return {(engine, case["id"]): errors[engine, case["id"]]
            for case in cases for engine in ENGINES
            if errors[engine, case["id"]] and case["miles"]["verdict"] == "accept"}


def disagreements(cases: list[dict], verdicts: dict[tuple[str, str], list[str]]
                  ) -> dict[tuple[str, str], dict]:
    """PPO Deck passes, miles refuses: a config PPO Deck would launch that miles stops."""
    return {(engine, case["id"]): {"engine": engine, "id": case["id"],
                                   "site": case["miles"]["site"],
                                   "error": case["miles"]["error"]}
            for case in cases for engine in ENGINES
            if not verdicts[engine, case["id"]] and case["miles"]["verdict"] == "refuse"}


def table(cases: list[dict], verdicts: dict[tuple[str, str], list[str]]
          ) -> dict[str, Counter]:
    """Per engine: counts of (PPO Deck pass|refuse, miles accept|refuse)."""
    out: dict[str, Counter] = {engine: Counter() for engine in ENGINES}
    for case in cases:
        for engine in ENGINES:
            ours = "refuse" if verdicts[engine, case["id"]] else "pass"
            out[engine][ours, case["miles"]["verdict"]] += 1
    return out


def main() -> None:
    data = recorded()
    cases = data["cases"]
    errors = ppodeck_errors(cases)
    verdicts = {key: [issue.code for issue in found] for key, found in errors.items()}
    print(f"miles {data['miles_commit'][:9]}, Megatron {data['megatron_commit'][:9]}, "
          f"corpus seed {data['corpus_seed']}, {len(cases)} cases")
    for engine, counts in table(cases, verdicts).items():
        print(f"\nengine={engine:8}  miles accept  miles refuse")
        for ours in ("pass", "refuse"):
            print(f"PPO Deck {ours:7}  {counts[ours, 'accept']:12}  {counts[ours, 'refuse']:12}")
    sites = Counter(row["site"] for row in disagreements(cases, verdicts).values())
    print("\ndisagreements (PPO Deck passes, miles refuses) by miles' raise site:")
    for site, count in sites.most_common():
        print(f"  {count:4}  {site}")

    print("\nstricter (PPO Deck refuses, miles accepts), each error with its label:")
    for (engine, ident), found in sorted(stricter(cases, errors).items()):
        for issue in found:
            print(f"  {engine:8} {ident:34} {issue.code:26} {labelled(issue.message)}")


if __name__ == "__main__":
    main()
