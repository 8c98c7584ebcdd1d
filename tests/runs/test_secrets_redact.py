"""Secret flag values are masked in every command line PPO Deck logs."""

from __future__ import annotations

import pytest

from ppodeck.engine.run.secrets import REDACTED, redact_argv, scrub_secrets

KEY = "wk-secret-value"


@pytest.mark.parametrize("words", [
    ["--wandb-key", KEY],
    [f"--wandb-key={KEY}"],
    ["--set", f"wandb-key={KEY}"],
    ["-s", f"wandb_key={KEY}"],
    [f"--set=wandb-key={KEY}"],
])
def test_every_spelling_of_a_secret_is_masked(words: list[str]) -> None:
    shown = redact_argv(["run", "tiny-cpu", *words, "--set", "kl-coef=0.1"])
    assert KEY not in " ".join(shown)
    assert REDACTED in " ".join(shown)
    assert shown[-2:] == ["--set", "kl-coef=0.1"]  # other values stay readable


def test_scrub_masks_the_typed_value_inside_a_traceback() -> None:
    text = f"ValueError: bad key {KEY}\n"
    assert KEY not in scrub_secrets(text, ["--wandb-key", KEY])
    assert scrub_secrets(text, ["--set", "kl-coef=0.1"]) == text
