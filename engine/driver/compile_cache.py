"""Compile caches kept between runs under PPODECK_HOME, so a second launch of a preset skips
the compiles the first one paid for (torch.compile/Inductor, Triton kernels, FlashInfer's JIT).

The driver sets the variables in its own environment before Ray starts (a private local Ray's
workers inherit it) and hands the same values to ray.init's runtime_env (workers on a joined
cluster get them from there). A variable the user already set is kept, and the log line says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from ..config.resolve import ppodeck_home
from ..host.machine import environment

# variable -> folder under <PPODECK_HOME>/compile-cache; FlashInfer appends .cache/flashinfer/
# to FLASHINFER_WORKSPACE_BASE itself (flashinfer/jit/env.py)
CACHE_VARS: dict[str, str] = {
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
}


@dataclass(frozen=True)
class CompileCaches:
    env: dict[str, str]  # every cache variable, ours or the user's: what the workers get
    users: tuple[str, ...]  # the variables the user had set (kept as they were)
    unwritable: tuple[str, ...] = ()  # ours that could not be created: left to the library

    def message(self) -> str:
        shown = ", ".join(f"{var}={path}" + (" (yours)" if var in self.users else "")
                          for var, path in self.env.items())
        text = f"compile caches kept between runs: {shown}"
        if self.unwritable:
            text += (f"; could not create the folder for {', '.join(self.unwritable)}: "
                     "those use the library's default")
        return text


def cache_root(home: str | None = None) -> Path:
    return Path(home or ppodeck_home(environment())) / "compile-cache"


def compile_caches(environ: Mapping[str, str], home: str | None = None) -> CompileCaches:
    """Ours under PPODECK_HOME for each variable the user left unset; theirs otherwise."""
    root = cache_root(home)
    env, users = {}, []
    for var, folder in CACHE_VARS.items():
        if environ.get(var):
            env[var] = environ[var]
            users.append(var)
        else:
            env[var] = str(root / folder)
    return CompileCaches(env, tuple(users))


def apply_compile_caches(environ: MutableMapping[str, str] | None = None,
                         home: str | None = None) -> CompileCaches:
    """Create our folders and export the variables into this process's environment."""
    environ = os.environ if environ is None else environ
    caches = compile_caches(environ, home)
    unwritable = []
    for var, path in caches.env.items():
        if var not in caches.users:
            try:
                Path(path).mkdir(parents=True, exist_ok=True)
            except OSError:
                unwritable.append(var)
                continue
        environ[var] = path
    env = {var: path for var, path in caches.env.items() if var not in unwritable}
    return CompileCaches(env, caches.users, tuple(unwritable))
