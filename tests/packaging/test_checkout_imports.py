"""A checkout on PYTHONPATH alone (no install: how the GPU machine runs it) imports PPO Deck as
`ppodeck`: ppodeck/app and ppodeck/engine are links to the top-level app/ and engine/, one copy,
and no import hook or search-path change is involved."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
import ppodeck.engine.launch.jobs as jobs
import ppodeck.app.cli.root
print(jobs.__file__)
print(sorted(name for name in sys.modules if name.split('.')[0] in ('app', 'engine')))
"""


def _without_install(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -S`: no site processing, so no editable-install finder; the dependencies'
    directory and the checkout come from PYTHONPATH only."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_checkout_imports_as_ppodeck_without_an_install(tmp_path: Path) -> None:
    done = _without_install("-c", PROBE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    where, bare = done.stdout.splitlines()
    assert Path(where).resolve() == ROOT / "engine" / "launch" / "jobs.py"
    assert bare == "[]"  # nothing loaded under a bare app/engine name: one copy of each module


def test_python_m_ppodeck_validates_from_another_directory(tmp_path: Path) -> None:
    done = _without_install("-m", "ppodeck", "validate", "tiny-cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_package_reaches_the_folders_by_links_not_by_code() -> None:
    """What a static reader sees is what imports: plain links, and no `__path__` edit."""
    for name in ("app", "engine"):
        link = ROOT / "ppodeck" / name
        assert link.is_symlink() and link.resolve() == ROOT / name
    assert "__path__" not in (ROOT / "ppodeck" / "__init__.py").read_text()
