"""check() on the run-loop flags, beyond the trip/pass cases in test_rules.py: what the eval
fallback note says, and a tracking flag whose library is missing."""

from __future__ import annotations

import pytest

from ppodeck.engine.config import check
from tests.config.test_rules import codes, config

EVAL = {"eval_interval": 5, "eval_prompt_data": ("held-out", "/data/eval.jsonl")}


def test_eval_fallbacks_to_the_rollout_values_are_shown() -> None:
    issue = next(i for i in check(config(**EVAL)).issues if i.code == "eval.rollout_fallbacks")
    assert "eval-temperature 1.0" in issue.message
    assert "eval-max-response-len 6" in issue.message
    explicit = config(eval_temperature=0.0, eval_top_p=1.0, eval_top_k=-1,
                      eval_max_response_len=8, **EVAL)
    assert "eval.rollout_fallbacks" not in codes(explicit)


def test_tracking_without_its_extra_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import ppodeck.engine.host.tracking_support as support

    assert "tracking.extra_missing" not in codes(config(use_wandb=True))
    monkeypatch.setattr(support, "module_installed", lambda name: False)
    issue = next(i for i in check(config(use_tensorboard=True)).issues
                 if i.code == "tracking.extra_missing")
    assert issue.level == "error" and "pip install 'ppodeck[tracking]'" in issue.fix
