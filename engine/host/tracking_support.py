"""Light: which tracking libraries a config needs and whether they are installed.

Found with importlib.util.find_spec only (nothing is imported), so check() can call it on
every keystroke and the light layer never pulls wandb or tensorboardX in.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from typing import Any

EXTRA = "tracking"
INSTALL_FIX = "pip install 'ppodeck[tracking]'"
# flag dest -> (flag name, the top-level module engine/driver/tracking.py imports for it)
TRACKING_MODULES = {
    "use_wandb": ("--use-wandb", "wandb"),
    "use_tensorboard": ("--use-tensorboard", "tensorboardX"),
}


@functools.cache
def module_installed(name: str) -> bool:
    """True when a top-level module can be imported (find_spec does not import it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def missing_extras(resolved: Mapping[str, Any]) -> list[str]:
    """Flags that are on but whose library is not installed, e.g. ["--use-wandb"]."""
    return [flag for dest, (flag, module) in TRACKING_MODULES.items()
            if resolved.get(dest) and not module_installed(module)]


def missing_message(flag: str) -> str:
    module = next(mod for name, mod in TRACKING_MODULES.values() if name == flag)
    return (f"{flag} needs the {module} package, which is not installed "
            f"(the [{EXTRA}] extra): {INSTALL_FIX}")
