"""Every `ppodeck` command shown in the README and docs/ exists, with the options shown, and
every `--set FLAG=VALUE` names a flag the schema has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main

from ppodeck.app.cli.root import app
from ppodeck.engine.config.schema import FLAGS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAG_NAMES = {flag.name.removeprefix("--") for flag in FLAGS}


def _shown_commands(text: str) -> list[str]:
    shown = []
    in_block = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
        elif in_block and line.startswith("ppodeck"):
            shown += [part.strip() for part in line.split("#")[0].split("&&")]
    shown += re.findall(r"`(ppodeck [^`]+)`", text)
    return [command for command in shown if command.startswith("ppodeck")]


def _words(command: str) -> list[str]:
    return [word.strip("[]") for word in command.split()[1:] if word.strip("[]")]


def _check(command: str) -> None:
    node: Any = typer.main.get_command(app)
    words = _words(command)
    for index, word in enumerate(words):
        names = word.split("|")
        if _is_group(node) and names[0] in node.commands:
            missing = [name for name in names if name not in node.commands]
            assert not missing, f"`{command}`: {node.name} has no {missing}"
            node = node.commands[names[0]]
        elif word.startswith("-"):
            _check_option(command, node, word, words[index + 1:index + 2])
    assert not _is_group(node) or all(word.startswith("-") for word in words), \
        f"`{command}` names no command of {node.name}"


def _is_group(node: Any) -> bool:  # noqa: ANN401 - typer's click command (vendored click)
    return hasattr(node, "commands")


def _check_option(command: str, node: Any, word: str, following: list[str]) -> None:
    option = word.split("=")[0]
    opts = {opt for param in node.params for opt in param.opts}
    assert option in opts, f"`{command}`: `{node.name}` has no {option}"
    if option in ("--set", "-s") and following:
        flag = following[0].split("=")[0].removeprefix("--")
        assert flag.removeprefix("no-") in FLAG_NAMES, f"`{command}`: no flag --{flag}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_command_shown_exists_with_its_options(page: Path) -> None:
    for command in _shown_commands(page.read_text(encoding="utf-8")):
        _check(command)
