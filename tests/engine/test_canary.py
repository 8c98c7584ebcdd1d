"""`ppodeck canary` for real: the tiny-cpu recipe passes against the versioned corridor on this
install, and fails, naming the metric and the rollout, when the actor trains on negated
advantages (PPODECK_TEST_FLIP_ADVANTAGES, the test seam in engine/train/worker.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli.root import app

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def canary_env(runs_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("megatron.core")
    for name, value in {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                        "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}.items():
        monkeypatch.setenv(name, value)


# The nightly bench's (`slow`): the corridor kept in engine/run/corridors/ still fits this
# engine's numbers. The default suite holds the rest of it: the same command, recipe and run
# path in test_the_canary_fails_on_a_flipped_advantage below, and the corridor's judge and
# file in tests/runs/test_corridor.py.
@pytest.mark.slow
def test_the_canary_passes_on_this_install(canary_env) -> None:
    result = CliRunner().invoke(app, ["canary"])
    assert result.exit_code == 0, result.output
    assert "canary tiny-cpu: inside the corridor of 2 trusted runs" in result.output


def test_the_canary_fails_on_a_flipped_advantage(canary_env, monkeypatch) -> None:
    monkeypatch.setenv("PPODECK_TEST_FLIP_ADVANTAGES", "1")
    result = CliRunner().invoke(app, ["canary", "--preset", "tiny-cpu"])
    assert result.exit_code == 3, result.output
    assert "canary tiny-cpu: REGRESSION" in result.output
    first = result.output.split("\n  ")[1]
    assert " at rollout " in first and "outside the trusted corridor" in first
    assert any(name in first for name in ("train/ppo_kl", "train/pg_clipfrac",
                                          "rollout/raw_reward"))
