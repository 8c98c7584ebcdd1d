"""One rule for impossible values (#47 item 3): counts that must be positive are errors at 0 and
below, empty path flags are errors naming the flag, and the derived block never shows a figure
computed from a value in error."""

from __future__ import annotations

import pytest

from ppodeck.engine.config import check
from ppodeck.engine.config.derived import INPUTS
from ppodeck.engine.config.rules import _NAMES_A_PATH, _POSITIVE
from ppodeck.engine.presets import load_preset, resolve_preset


def tiny(**values: object):  # noqa: ANN201
    return resolve_preset(load_preset("tiny-cpu")).with_values(**values)


@pytest.mark.parametrize("value", [0, -3])
def test_num_rollout_below_one_is_an_error_and_blanks_what_it_feeds(value: int) -> None:
    report = check(tiny(num_rollout=value))
    [issue] = report.errors
    assert (issue.code, issue.flags) == ("value.not_positive", ("--num-rollout",))
    assert f"got {value}" in issue.message
    d = report.derived
    assert d.total_train_iters is None  # was "total train iters 1" at -3
    assert d.samples_per_rollout == 128 and d.actor_steps_per_rollout == 4  # not from it


@pytest.mark.parametrize("dest", sorted(_POSITIVE))
def test_every_positive_count_is_an_error_at_zero(dest: str) -> None:
    report = check(tiny(**{dest: 0}))
    assert any(i.code == "value.not_positive" and i.flags[0] == "--" + dest.replace("_", "-")
               for i in report.errors), report.errors
    for name, inputs in INPUTS.items():
        if dest in inputs:
            assert getattr(report.derived, name) in (None, {}), name


def test_an_empty_path_is_an_error_naming_the_flag_not_a_missing_file() -> None:
    report = check(tiny(use_kl_loss=True, ref_load=""))
    [issue] = report.errors
    assert (issue.code, issue.flags) == ("value.empty_path", ("--ref-load",))
    assert "--ref-load is empty" in issue.message and "--ref-load" in issue.fix
    assert "kl.ref_load_missing" not in report.codes()  # no "ref_load  does not exist"
    code = check(tiny(custom_rm_path="  "))
    assert [i.flags for i in code.errors] == [("--custom-rm-path",)]
    assert {"ref_load", "save", "custom_rm_path", "prompt_data"} <= _NAMES_A_PATH


def test_a_value_that_cannot_be_read_gives_one_error_not_its_knock_ons() -> None:
    report = check(tiny(num_rollout="4.5"))
    [issue] = report.errors
    assert issue.code == "value.bad_type" and "4.5" in issue.message
    assert "data.num_rollout_required" in issue.message  # counted on the refusal, not lost
    assert report.derived.total_train_iters is None
