"""Every PPODECK_* variable the code, the tests or the benches name is declared once in
engine/env_vars.py, and docs/environment.md is generated from that declaration. The pure config
layer reads no environment: switches are read at the edges (the CLI, the TUI, the driver and its
workers) and handed in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ppodeck.engine.env_vars import BY_NAME, markdown

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"PPODECK_[A-Z0-9_]*")
# names built at run time from a declared prefix (PPODECK_SECRET_<DEST>)
PREFIXES = tuple(name for name in BY_NAME if name.endswith("_") and name != "PPODECK_")
# tests' stand-in for "any variable with the forwarded prefix"; no code reads it
PLACEHOLDERS = {"PPODECK_X"}


def _names_in(globs: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(p for pattern in globs for p in ROOT.glob(pattern)):
        if path.name in ("env_vars.py", "test_env_vars.py"):
            continue
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def _names_in_code() -> dict[str, str]:
    return _names_in(["engine/**/*.py", "app/**/*.py"])


def _declared(name: str) -> bool:
    return name in BY_NAME or name in PLACEHOLDERS or name.startswith(PREFIXES)


def test_every_variable_the_code_names_is_declared() -> None:
    missing = {name: where for name, where in _names_in_code().items() if not _declared(name)}
    assert not missing, f"declare these in engine/env_vars.py: {missing}"


def test_every_variable_the_tests_and_benches_name_is_declared() -> None:
    """A switch only a test or a bench reads (PPODECK_RELIABILITY_FIGURES) is documented too."""
    found = _names_in(["tests/**/*.py", "bench/**/*.py", "bench/**/*.sh", "Makefile", ".ci/*"])
    missing = {name: where for name, where in found.items() if not _declared(name)}
    assert not missing, f"declare these in engine/env_vars.py: {missing}"


def test_every_declared_variable_is_named_by_the_code() -> None:
    named = set(_names_in_code()) | set(_names_in(["tests/**/*.py", "bench/**/*.py"]))
    stale = set(BY_NAME) - named
    assert not stale, f"nothing reads these any more; drop them from engine/env_vars.py: {stale}"


def test_the_page_is_generated_from_the_declaration() -> None:
    page = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    assert page == markdown(), "regenerate: python -m ppodeck.engine.env_vars > docs/environment.md"


# --------------------------------------------------------------------------------------------
# the pure config layer reads no environment
# --------------------------------------------------------------------------------------------
_READS = {("os", "environ"), ("os", "getenv"), ("path", "expandvars"), ("os", "environb")}


def _reads_environment(source: str) -> list[int]:
    """Lines where the module touches os.environ / os.getenv / os.path.expandvars."""
    tree = ast.parse(source)
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name | ast.Attribute)
                and ((getattr(node.value, "id", None) or getattr(node.value, "attr", None)),
                     node.attr) in _READS):
            lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                alias.name in ("environ", "getenv") for alias in node.names):
            lines.append(node.lineno)
    return lines


def test_the_pure_config_layer_reads_no_environment() -> None:
    readers = {str(p.relative_to(ROOT)): _reads_environment(p.read_text(encoding="utf-8"))
               for p in sorted((ROOT / "engine" / "config").glob("**/*.py"))}
    readers = {path: lines for path, lines in readers.items() if lines}
    assert not readers, (f"engine/config/ is pure: take the value as an argument and read the "
                         f"environment at the edge (the CLI, the TUI, the driver; "
                         f"engine/host/machine.py's environment()): {readers}")


def test_the_environment_scan_sees_each_form_of_read() -> None:
    """The scan above is not blind: each way of reading the environment is found, and a
    function that only takes a mapping is not."""
    reads = ["import os\nos.environ.get('A')", "import os\nos.getenv('A')",
             "import os\nos.path.expandvars('$A')", "from os import environ\nenviron['A']",
             "import os\nx = dict(os.environ)"]
    assert all(_reads_environment(source) for source in reads)
    assert _reads_environment("def f(env):\n    return env.get('A')") == []
