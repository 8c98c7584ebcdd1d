"""Property tests: random configs, preset files, --set items and pasted command lines never
raise an uncaught exception, and every message names the file, line or flag.

The default run uses 200 examples per property; `pytest -m slow` runs 10,000.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ppodeck.app.cli.common import apply_sets
from ppodeck.engine.config import FLAGS, RunConfig, check
from ppodeck.engine.miles.script_import import parse_command_line
from ppodeck.engine.presets import PresetError, parse_preset_text, resolve_preset

QUICK = settings(max_examples=200, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=10_000, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DESTS = [f.dest for f in FLAGS]
NAMES = [f.name for f in FLAGS] + [f.negative for f in FLAGS if f.negative]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10), st.integers(), st.floats(allow_nan=True),
    st.text(max_size=8), st.sampled_from(["ppo", "grpo", "megatron", "fsdp", "bridge", "raw",
                                          "p2p", "disk-delta", "disk", "hf", "bshd", "full"]),
)
values_strategy = st.one_of(scalars, st.lists(scalars, max_size=3), st.tuples(st.text(max_size=4)))
config_values = st.dictionaries(st.one_of(st.sampled_from(DESTS), st.text(max_size=6)),
                                values_strategy, max_size=25)


def assert_named(issues: Any) -> None:
    for issue in issues:
        assert issue.flags, issue
        assert issue.message


def _check_random_config(values: dict, passthrough: list) -> None:
    report = check(RunConfig(MappingProxyType(values), tuple(passthrough)))
    assert all(i.code != "internal.check_failed" for i in report.issues), report.issues
    assert_named(report.issues)


@QUICK
@given(config_values, st.lists(st.text(max_size=6), max_size=3))
def test_check_random_configs(values: dict, passthrough: list) -> None:
    _check_random_config(values, passthrough)


@pytest.mark.slow
@SLOW
@given(config_values, st.lists(st.text(max_size=6), max_size=3))
def test_check_random_configs_slow(values: dict, passthrough: list) -> None:
    _check_random_config(values, passthrough)


toml_keys = st.one_of(st.sampled_from([n[2:] for n in NAMES]),
                      st.text("abcdefghijklmnop-", min_size=1, max_size=12))
toml_values = st.one_of(
    st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=False, allow_infinity=False),
    st.text("abc 0123.e-$/", max_size=10).map(lambda s: '"' + s + '"'),
    st.just("[1, 2]"), st.just('["a", "b"]'), st.just("{ a = 1 }"), st.just("nan"),
    st.just("2024-01-01"),
)


@st.composite
def preset_texts(draw: st.DrawFn) -> str:
    lines = []
    if draw(st.booleans()):
        version = draw(st.sampled_from(["1", "2", '"1"']))
        lines.append(f"schema_version = {version}")
    if draw(st.booleans()):
        lines.append(f'extends = "{draw(st.sampled_from(["tiny-cpu", "nope", "qwen3-4b-ppo"]))}"')
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(['unset = ["lr"]', 'unset = ["nope"]', "unset = 3",
                                           'passthrough = ["--x", "1"]', "passthrough = 1",
                                           "[provenance]\ngpus = 4", "provenance = 3",
                                           "flags = 3", "bogus = 1"])))
    lines.append("[flags]")
    for key, value in draw(st.lists(st.tuples(toml_keys, toml_values), max_size=12)):
        value_text = str(value).lower() if isinstance(value, bool) else str(value)
        lines.append(f"{key} = {value_text}")
    text = "\n".join(lines) + "\n"
    if draw(st.integers(0, 4)) == 0:  # sometimes corrupt the text
        position = draw(st.integers(0, len(text)))
        text = text[:position] + draw(st.text(max_size=4)) + text[position:]
    return text


def _load_random_preset(text: str, tmp: Path) -> None:
    path = tmp / "random.toml"
    try:
        preset = parse_preset_text(text, path)
        config = resolve_preset(preset)
    except PresetError as exc:
        message = str(exc)
        assert str(path) in message or "preset" in message, message
        assert "Fix:" in message, message
        return
    report = check(config)
    assert all(i.code != "internal.check_failed" for i in report.issues)
    assert_named(report.issues)


@QUICK
@given(preset_texts())
def test_random_preset_files(text: str) -> None:
    _load_random_preset(text, Path("/nonexistent-dir"))


@pytest.mark.slow
@SLOW
@given(preset_texts())
def test_random_preset_files_slow(text: str) -> None:
    _load_random_preset(text, Path("/nonexistent-dir"))


set_items = st.one_of(
    st.text(max_size=12),
    st.tuples(st.sampled_from(["", "--"]), st.sampled_from([n[2:] for n in NAMES]),
              st.sampled_from(["", "="]), st.one_of(st.text(max_size=6),
                                                    st.sampled_from(["1", "0.5", "true", "off",
                                                                     "ppo", "-1", "1e-6"])))
    .map("".join),
)


def _apply_random_sets(items: list[str]) -> None:
    try:
        config = apply_sets(RunConfig(), items)
    except typer.BadParameter as exc:
        assert "--" in exc.message or "FLAG=VALUE" in exc.message, exc.message
        return
    report = check(config)
    assert all(i.code != "internal.check_failed" for i in report.issues)
    assert_named(report.issues)


@QUICK
@given(st.lists(set_items, max_size=5))
def test_random_set_items(items: list[str]) -> None:
    _apply_random_sets(items)


@pytest.mark.slow
@SLOW
@given(st.lists(set_items, max_size=5))
def test_random_set_items_slow(items: list[str]) -> None:
    _apply_random_sets(items)


command_tokens = st.one_of(
    st.sampled_from(NAMES), st.sampled_from(["1", "0.2", "ppo", "/root/x", "true", "-1"]),
    st.sampled_from(["$A", "${B}", "${C:-d}", "${ARR[@]}", "'quoted value'", '"dq $A"', "'",
                     '"', "\\\n", "\n", "#", "--", "ray", "job", "submit", "python3",
                     "train.py", "A=1", "ARR=(", ")", "export", "--x=1", "="]),
    st.text(max_size=5),
)


def _parse_random_command(tokens: list[str]) -> None:
    config, issues = parse_command_line(" ".join(tokens))
    assert_named(issues)
    report = check(config)
    assert all(i.code != "internal.check_failed" for i in report.issues)
    assert_named(report.issues)


@QUICK
@given(st.lists(command_tokens, max_size=30))
def test_random_command_lines(tokens: list[str]) -> None:
    _parse_random_command(tokens)


@pytest.mark.slow
@SLOW
@given(st.lists(command_tokens, max_size=30))
def test_random_command_lines_slow(tokens: list[str]) -> None:
    _parse_random_command(tokens)
