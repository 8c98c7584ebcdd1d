"""Knock-on issues are grouped under the refusal that caused them, and named, not dropped."""

from __future__ import annotations

from ppodeck.engine.config import check
from ppodeck.engine.config.issues import Issue
from ppodeck.engine.config.knock_on import KNOCK_ON, group_knock_on
from ppodeck.engine.miles.script_import import import_script
from ppodeck.engine.presets import load_preset, resolve_preset


def test_a_refused_set_value_is_one_error_and_its_knock_ons_are_named() -> None:
    from ppodeck.app.cli.common import parse_set

    config = resolve_preset(load_preset("tiny-cpu")).with_values(**parse_set("num-rollout=4.5"))
    checked = list(check(config).issues)
    assert {"value.bad_type", "data.num_rollout_required"} <= {i.code for i in checked}
    grouped = group_knock_on([], checked)
    errors = [i for i in grouped if i.level == "error"]
    assert [i.code for i in errors] == ["value.bad_type"]
    summary = next(i for i in grouped if i.code == KNOCK_ON)
    assert "data.num_rollout_required" in summary.message
    assert "--num-rollout" in summary.message


def test_nothing_is_grouped_without_a_refusal() -> None:
    checked = [Issue("error", "data.num_rollout_required", ("--num-rollout",), "not set")]
    assert group_knock_on([], checked) == checked


def test_an_unreadable_launcher_gives_one_error_and_one_summary() -> None:
    text = ("import miles.utils.external_utils.command_utils as U\n"
            "from miles.launch import build\n\n"
            "def main():\n    U.execute_train(**build())\n\n"
            "if __name__ == '__main__':\n    main()\n")
    report = import_script(text, env={}, name="run_custom.py")
    assert report.unreadable
    judged = report.judged(list(check(report.config).issues))
    errors = [i for i in judged if i.level == "error"]
    assert [i.code for i in errors] == ["launcher.not_static"]
    assert "line 5" in errors[0].message
    summary = [i for i in judged if i.code == KNOCK_ON]
    assert len(summary) == 1 and "run_custom.py, which could not be read" in summary[0].message
