"""A pytest plugin (`-p tests.checkout_root` in pyproject.toml): the checkout's root is no package.

The root holds an `__init__.py` so that a static reader resolves app/'s relative imports of
engine/ (`from ...engine.config import ...`) inside one package. pytest names a test module by
walking up through `__init__.py` files, which would name it after the clone's directory
(`main.tests...`, or `ppodeck.tests...` in a clone called ppodeck, shadowing the real package).
This stops that walk at the root, so test modules stay `tests.*` whatever the clone is called.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import _pytest.pathlib

CHECKOUT_ROOT = Path(__file__).resolve().parents[1]


def _package_path_below_the_root(path: Path) -> Path | None:
    """pytest's resolve_package_path, with the walk ending at the checkout's root."""
    result = None
    for parent in itertools.chain((path,), path.parents):
        if parent == CHECKOUT_ROOT:
            break
        if parent.is_dir():
            if not (parent / "__init__.py").is_file() or not parent.name.isidentifier():
                break
            result = parent
    return result


_pytest.pathlib.resolve_package_path = _package_path_below_the_root
