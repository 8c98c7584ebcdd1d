"""The schema knows every flag miles declares and every Megatron flag miles' launchers pass.

The names live in engine/config/data/miles_flags.txt (its header says where they were read and
how to regenerate them); the file ships inside the package.
"""

from __future__ import annotations

import fnmatch
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from ppodeck.engine.config.schema import BY_NAME, FLAGS

DATA = "data/miles_flags.txt"
ROOT = Path(__file__).resolve().parents[2]


def sections(text: str) -> dict[str, list[str]]:
    """`[section]` headers, then one flag name per line; `#` comments and blanks skipped."""
    out: dict[str, list[str]] = {}
    current: list[str] = []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = out.setdefault(line.strip("[]"), [])
        else:
            current.append(line)
    return out


def uncovered(names: list[str], known: dict) -> list[str]:
    return [name for name in names if name not in known]


@pytest.fixture(scope="module")
def listed() -> dict[str, list[str]]:
    return sections((resources.files("ppodeck.engine.config") / DATA).read_text())


def test_the_list_reads_as_flag_names(listed: dict[str, list[str]]) -> None:
    assert set(listed) == {"miles/utils/arguments.py", "miles/dashboard/args.py",
                           "megatron, passed by miles launchers",
                           "miles/backends/fsdp_utils/arguments.py, passed by miles launchers"}
    names = [n for group in listed.values() for n in group]
    assert all(n.startswith("--") and " " not in n for n in names)
    assert len(names) == len(set(names)), "a name listed twice"
    # The snapshot's sizes: a regeneration that loses a section shows here.
    assert len(listed["miles/utils/arguments.py"]) >= 300
    assert "--use-miles-dashboard" in listed["miles/dashboard/args.py"]
    assert "--no-gradient-accumulation-fusion" in listed["megatron, passed by miles launchers"]


def test_the_schema_covers_every_listed_flag(listed: dict[str, list[str]]) -> None:
    missing = {group: uncovered(names, BY_NAME) for group, names in listed.items()}
    assert missing == {group: [] for group in listed}, (
        "declare them in engine/config/schema.py with type, default, help and engine class")


def test_the_coverage_check_fails_on_an_unknown_name() -> None:
    """Seen to fail: a name the schema lacks is reported."""
    assert uncovered(["--kl-coef", "--surely-not-a-flag"], BY_NAME) == ["--surely-not-a-flag"]


def test_no_declared_name_is_another_flags_negation() -> None:
    """`--no-x` declared on its own (Megatron's store_false flags) must not shadow a tristate."""
    negatives = {f.negative for f in FLAGS if f.negative}
    assert not negatives & {f.name for f in FLAGS}
    assert all(BY_NAME[f.name] is f for f in FLAGS)


def test_flags_naming_code_keep_the_consent_check() -> None:
    """A flag that names code was caught as passthrough by launch's consent check before it was
    declared; declared, it must say runs_code so the check still sees it."""
    from ppodeck.engine.launch.local import _CODE_PASSTHROUGH

    silent = [f.name for f in FLAGS if _CODE_PASSTHROUGH.fullmatch(f.name) and not f.runs_code]
    assert silent == []


def test_the_list_ships_in_the_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["ppodeck.engine.config"]
    assert any(fnmatch.fnmatch(DATA, pattern) for pattern in patterns)
    assert (ROOT / "engine" / "config" / DATA).is_file()
