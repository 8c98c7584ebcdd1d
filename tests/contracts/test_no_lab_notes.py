"""What users read carries no lab notes: no GPU model named as where something was measured, no
dated diary. Measured history lives in docs/performance.md with its evidence.

Scanned: every check() message and fix over the built-in presets (and CPU/GPU machines), every
command's --help, the header comments of the built-in presets, and the messages of the engine's
switches that a user sees. The `tested_hardware` field of a preset is provenance data, not
prose, and is not scanned."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli import app
from ppodeck.engine.config import check
from ppodeck.engine.presets import BUILTIN_DIR, load_preset, resolve_preset

GPU_MODELS = re.compile(r"\b(H100|H200|H800|A100|A800|B200|B300|GB200|GB300|MI3\d\dX|L40S?|"
                        r"RTX ?\d{4})\b")
DIARY = re.compile(r"\b20\d\d-\d\d-\d\d\b|\btested on\b|\bmeasured there\b", re.IGNORECASE)


def _lab_notes(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if GPU_MODELS.search(line) or DIARY.search(line)]


@pytest.mark.parametrize("path", sorted(BUILTIN_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_a_builtin_presets_header_has_no_lab_notes(path) -> None:  # noqa: ANN001
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    assert not _lab_notes("\n".join(header)), _lab_notes("\n".join(header))


def test_check_messages_over_the_builtin_presets_have_no_lab_notes() -> None:
    from tests.config.conftest import CPU_MACHINE

    found = []
    for path in sorted(BUILTIN_DIR.glob("*.toml")):
        config = resolve_preset(load_preset(str(path)))
        for engine in ("ppodeck", "miles"):
            for issue in check(config, CPU_MACHINE, engine=engine).issues:
                found += [f"{path.stem}: {issue.code}: {n}"
                          for n in _lab_notes(f"{issue.message}\n{issue.fix}")]
    assert not found, found


def test_no_commands_help_has_lab_notes() -> None:
    import click
    import typer

    command = typer.main.get_command(app)
    found = []

    def visit(cmd: click.Command, path: list[str]) -> None:
        result = CliRunner().invoke(app, [*path, "--help"])
        found.extend(f"{' '.join(path)}: {n}" for n in _lab_notes(result.output))
        for name, sub in getattr(cmd, "commands", {}).items():
            visit(sub, [*path, name])

    visit(command, [])
    assert not found, found


def test_the_engine_switch_messages_have_no_lab_notes() -> None:
    from ppodeck.engine.rollout.decoder.features import REMOVED
    from ppodeck.engine.train.platform import TE_NOT_ASKED

    texts = [TE_NOT_ASKED, *(f"{why} {use}" for why, use in REMOVED.values())]
    assert not [n for t in texts for n in _lab_notes(t)]
