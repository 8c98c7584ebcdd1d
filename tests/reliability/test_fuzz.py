"""Property tests over everything a user or a crashed writer can hand PPO Deck.

tests/config/test_properties.py already fuzzes the config layer (check, presets, --set,
command lines) in-process; this module extends it end to end through the CLI (`ppodeck
validate` on a preset file, with --set items, and `presets from-command` on pasted text,
reusing its strategies) and adds event lines (the reader, `ppodeck tail`'s formatter, the
attached view and the TUI's state). Every input must give an answer, never an uncaught
exception, and every error message names the file, line or flag.

Default: QUICK examples per property; `pytest -m slow`: 10,000 each.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ppodeck.app.cli import app as ppodeck
from ppodeck.app.cli.progress import RunProgress
from ppodeck.app.cli.tail import format_event
from ppodeck.engine.run.events import follow, read_events
from ppodeck.engine.run.state import RunState
from tests.config.test_properties import command_tokens, preset_texts, set_items
from tests.reliability.fuzz_counts import COUNTS

QUICK = settings(max_examples=100, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=10_000, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
RUNNER = CliRunner()


@pytest.fixture(autouse=True)
def _isolated(isolated_config: Path) -> None:
    """No user/team presets; PPODECK_HOME and the crash log under tmp."""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory for all examples: a fresh numbered dir per example is O(n^2) in pytest."""
    return tmp_path_factory.mktemp("fuzz")


# ---------------------------------------------------------------------------- event lines

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                         st.text(max_size=8))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
KINDS = ["metrics", "phase", "offload", "gpu", "status", "log", "nope", ""]
FIELDS = ["v", "ts", "kind", "step_key", "step", "rollout_id", "metrics", "name", "state",
          "seconds", "model", "direction", "where", "bytes", "gbps", "noop", "label",
          "devices", "rss_bytes", "detail", "level", "source", "msg", "role"]


@st.composite
def event_objects(draw: st.DrawFn) -> dict:
    event = {"v": draw(st.one_of(st.just(1), json_scalars)), "ts": draw(json_scalars),
             "kind": draw(st.one_of(st.sampled_from(KINDS), json_scalars))}
    for key in draw(st.lists(st.sampled_from(FIELDS), max_size=8)):
        event[key] = draw(json_values)
    return event


event_lines = st.one_of(
    event_objects().map(lambda e: json.dumps(e).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    event_objects().map(lambda e: json.dumps(e).encode()).flatmap(  # torn anywhere
        lambda line: st.integers(0, len(line)).map(lambda cut: line[:cut])),
    st.sampled_from([b"NaN", b'{"kind": "log", "msg": NaN}', b"\xff\xfe", b"{}", b"[]",
                     b'{"v": 99, "kind": "metrics"}', b'{"kind": "metrics", "metrics": [1]}',
                     b'{"kind": "phase", "seconds": "x"}', b" ", b"\r"]),
)


def _check_event_lines(lines: list[bytes], tmp: Path) -> None:
    COUNTS["event lines"] += 1
    path = tmp / "events.jsonl"
    path.write_bytes(b"\n".join(lines))
    events, warnings = read_events(path)
    for warning in warnings:
        assert warning.startswith("events.jsonl line ") or "more bad lines" in warning, warning
    progress, state = RunProgress("run", None), RunState()
    for event in events:
        format_event(event)  # `ppodeck tail`
        progress.apply(event)  # the attached `ppodeck run` view
    state.apply(events)  # the TUI
    # the tailer agrees with the reader on every complete line
    stop = threading.Event()
    stop.set()
    followed = [e for batch in follow(path, stop) for e in batch]
    complete = read_events_of(b"\n".join(lines[:-1]) + b"\n" if len(lines) > 1 else b"", tmp)
    assert followed == complete


def read_events_of(data: bytes, tmp: Path) -> list[dict]:
    path = tmp / "complete.jsonl"
    path.write_bytes(data)
    return read_events(path)[0]


@QUICK
@given(st.lists(event_lines, max_size=12))
def test_event_lines(scratch: Path, lines: list[bytes]) -> None:
    _check_event_lines(lines, scratch)


@pytest.mark.slow
@SLOW
@given(st.lists(event_lines, max_size=12))
def test_event_lines_slow(scratch: Path, lines: list[bytes]) -> None:
    _check_event_lines(lines, scratch)


# ------------------------------------------------------------- the CLI on generated input

def _answered(result, *needles: str) -> None:  # noqa: ANN001 - click Result
    """Handled (an exit code, no exception escaping) and, on failure, naming the culprit."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        repr(result.exception), result.output)
    assert "Traceback" not in result.output
    if result.exit_code not in (0, 1):  # 1: a valid answer "INVALID" with its issues listed
        assert any(n in result.output for n in needles), (needles, result.output[-800:])


def _validate_preset_file(text: str, tmp: Path) -> None:
    COUNTS["preset TOML (CLI)"] += 1
    path = tmp / "fuzzed.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass") if _encodable(text) \
        else path.write_bytes(text.encode("utf-8", "replace"))
    result = RUNNER.invoke(ppodeck, ["validate", str(path)])
    _answered(result, "fuzzed.toml")
    if result.exit_code == 1 and "INVALID" not in result.output:
        assert "fuzzed.toml" in result.output, result.output[-800:]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@QUICK
@given(preset_texts())
def test_preset_files_through_the_cli(scratch: Path, text: str) -> None:
    _validate_preset_file(text, scratch)


@pytest.mark.slow
@SLOW
@given(preset_texts())
def test_preset_files_through_the_cli_slow(scratch: Path, text: str) -> None:
    _validate_preset_file(text, scratch)


def _validate_sets(items: list[str]) -> None:
    COUNTS["--set values (CLI)"] += 1
    args = ["validate", "tiny-cpu"]
    for item in items:
        args += ["--set", item]
    result = RUNNER.invoke(ppodeck, args)
    _answered(result, "--set", "--")


@QUICK
@given(st.lists(set_items, max_size=4))
def test_set_values_through_the_cli(items: list[str]) -> None:
    _validate_sets(items)


@pytest.mark.slow
@SLOW
@given(st.lists(set_items, max_size=4))
def test_set_values_through_the_cli_slow(items: list[str]) -> None:
    _validate_sets(items)


def _pasted_command(tokens: list[str]) -> None:
    COUNTS["pasted command lines (CLI)"] += 1
    result = RUNNER.invoke(ppodeck, ["presets", "from-command", "-"], input=" ".join(tokens))
    _answered(result, "--")
    result = RUNNER.invoke(ppodeck, ["validate", "--from-command", "-"], input=" ".join(tokens))
    _answered(result, "--")


@QUICK
@given(st.lists(command_tokens, max_size=25))
def test_pasted_command_lines_through_the_cli(tokens: list[str]) -> None:
    _pasted_command(tokens)


@pytest.mark.slow
@SLOW
@given(st.lists(command_tokens, max_size=25))
def test_pasted_command_lines_through_the_cli_slow(tokens: list[str]) -> None:
    _pasted_command(tokens)
