"""The wheel's package layout and build hook (the rest of the metadata is in pyproject.toml).

The repository keeps app/ and engine/ at its top level; the wheel installs them as
`ppodeck.app` and `ppodeck.engine` (ppodeck/__init__.py says why)."""

import sys
from pathlib import Path

from setuptools import find_packages, setup

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppodeck.app.build_hook import BuildPy  # noqa: E402  (records the commit a wheel is built from)

setup(
    cmdclass={"build_py": BuildPy},
    package_dir={"ppodeck.app": "app", "ppodeck.engine": "engine"},
    packages=["ppodeck", *(f"ppodeck.{name}" for name in find_packages(include=["app*",
                                                                              "engine*"]))],
)
