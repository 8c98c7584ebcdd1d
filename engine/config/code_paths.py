"""Where the user code a flag names (`--custom-rm-path my_rm.score`) lives, found WITHOUT running
it: the module is located with importlib's path finder (no package `__init__` is executed) and
its source is read with `ast` for the function name. PURE: stdlib only.

The engine looks a module up as miles' `load_function` does (`importlib.import_module` on the
dotted path before the last dot), over the driver's `sys.path` (so `PYTHONPATH`), then the
directory `ppodeck run` was started from (engine/launch/local.py passes it as
PPODECK_CODE_DIR, which the callers hand in with their environment), placed after
site-packages so a local file never shadows a library.

miles' own built-in filters (`miles.rollout.filter_hub...`) run as PPO Deck's equivalents in
engine/rollout/filters.py, under the same names (`MILES_BUILTINS`); check() says so.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

CODE_DIR_ENV = "PPODECK_CODE_DIR"

_MILES_FILTERS = "miles.rollout.filter_hub.dynamic_sampling_filters"
MILES_BUILTINS = {
    f"{_MILES_FILTERS}.check_reward_nonzero_std":
        "ppodeck.engine.rollout.filters.check_reward_nonzero_std",
    f"{_MILES_FILTERS}.check_no_aborted": "ppodeck.engine.rollout.filters.check_no_aborted",
}


def engine_path(path: str) -> str:
    """The dotted path the engine imports: a miles built-in becomes PPO Deck's equivalent."""
    return MILES_BUILTINS.get(path, path)


def split_dotted(path: str) -> tuple[str, str] | None:
    """("pkg.module", "fn") for "pkg.module.fn"; None when it is not a dotted Python path."""
    module, _, attr = path.rpartition(".")
    parts = path.split(".")
    if not module or not all(p.isidentifier() for p in parts):
        return None
    return module, attr


def search_path(env: Mapping[str, str], code_dir: str | None = None) -> list[str]:
    """Where the engine looks: sys.path ("" is the current directory), then the launch
    directory (`code_dir`, else `env`'s PPODECK_CODE_DIR, else the current one)."""
    here = os.getcwd()
    entries = [entry or here for entry in sys.path]
    last = code_dir or env.get(CODE_DIR_ENV) or here
    return entries if last in entries else [*entries, last]


@dataclass(frozen=True)
class Located:
    """A module found on disk: its source file (None for an extension or a namespace package)."""

    module: str
    origin: str | None


def locate_module(module: str, path: list[str]) -> Located | None:
    """The module's spec, walked package by package with PathFinder: nothing is imported."""
    parts = module.split(".")
    spec: ModuleSpec | None = None
    where: list[str] | None = path
    for i, part in enumerate(parts):
        if where is None:
            return None  # a plain module has no submodules
        spec = PathFinder.find_spec(part, where)
        if spec is None:
            return _already_imported(".".join(parts[: i + 1]), module)
        where = list(spec.submodule_search_locations or []) or None
    origin = spec.origin if spec is not None and spec.has_location else None
    return Located(module, origin)


def _already_imported(prefix: str, module: str) -> Located | None:
    """Modules with no file on the path (built-ins, frozen) only count when already loaded."""
    return Located(module, None) if prefix in sys.modules else None


@dataclass(frozen=True)
class Defined:
    """What a source file defines at its top level, as far as `ast` can tell."""

    names: frozenset[str]
    is_async: frozenset[str]  # names defined with `async def`
    open_ended: bool  # a star import or a module __getattr__: any name may exist
    syntax_error: str | None  # "line 3: invalid syntax"


def top_level_names(origin: str) -> Defined | None:
    """The file's top-level names; cached by (path, mtime, size) since check() runs per
    keystroke. None when the file cannot be read."""
    try:
        stat = os.stat(origin)
    except OSError:
        return None
    return _scan(origin, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _scan(origin: str, _mtime_ns: int, _size: int) -> Defined | None:
    try:
        tree = ast.parse(Path(origin).read_bytes(), filename=origin)
    except SyntaxError as err:
        return Defined(frozenset(), frozenset(), True, f"line {err.lineno}: {err.msg}")
    except (OSError, ValueError):
        return None
    names: set[str] = set()
    is_async: set[str] = set()
    open_ended = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            if isinstance(node, ast.AsyncFunctionDef):
                is_async.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    open_ended = True
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.If | ast.Try | ast.With):
            open_ended = True  # conditional definitions: do not claim a name is missing
    open_ended = open_ended or "__getattr__" in names
    return Defined(frozenset(names), frozenset(is_async), open_ended, None)


@dataclass(frozen=True)
class CodeCheck:
    """What check() can say about one flag's code without running it."""

    problem: str | None = None  # why it cannot run (an error)
    fix: str = ""
    is_async: bool | None = None  # None: unknown (not found by ast, or no source)
    mapped_to: str | None = None  # a miles built-in replaced by PPO Deck's equivalent


CACHE_SECONDS = 1.0  # per-keystroke checks reuse a lookup; a file made later is seen in 1 s


def check_code_path(path: str, env: Mapping[str, str], code_dir: str | None = None) -> CodeCheck:
    """Find `path`'s module and function without importing either (cached for a second:
    check() runs per keystroke, and each lookup stats every sys.path entry). The launch
    directory is `code_dir`, else `env`'s PPODECK_CODE_DIR, else the current one."""
    import time

    where = code_dir or env.get(CODE_DIR_ENV) or os.getcwd()
    tick = int(time.monotonic() // CACHE_SECONDS)
    return _check_code_path(path, where, tuple(sys.path), tick)


@functools.lru_cache(maxsize=64)
def _check_code_path(path: str, code_dir: str, _sys_path: tuple[str, ...],
                     _tick: int) -> CodeCheck:
    mapped = MILES_BUILTINS.get(path)
    if mapped:
        return CodeCheck(mapped_to=mapped, is_async=False)
    dotted = split_dotted(path)
    if dotted is None:
        return CodeCheck(f"{path!r} is not a dotted Python path (module.function)",
                         "write it as package.module.function, e.g. my_reward.score")
    module, attr = dotted
    located = locate_module(module, search_path({}, code_dir))  # code_dir: already chosen
    if located is None:
        return CodeCheck(f"module {module!r} is not found in the working directory ({code_dir}) "
                         "nor on PYTHONPATH",
                         f"run from the directory that holds {module.replace('.', '/')}.py, "
                         "add its directory to PYTHONPATH, or fix the module name")
    if located.origin is None or not located.origin.endswith(".py"):
        return CodeCheck()  # compiled or namespace: found, but its names are not readable
    defined = top_level_names(located.origin)
    if defined is None:
        return CodeCheck()
    if defined.syntax_error:
        return CodeCheck(f"{located.origin} does not parse ({defined.syntax_error})",
                         "fix the syntax error")
    if attr not in defined.names and not defined.open_ended:
        return CodeCheck(f"{located.origin} defines no {attr!r} at its top level",
                         f"define {attr} in {located.origin}, or fix the function name")
    return CodeCheck(is_async=attr in defined.is_async if attr in defined.names else None)


# Flags naming user code the engine imports (others that name code are refused by the engine)
ENGINE_CODE_FLAGS = ("custom_rm_path", "custom_reward_post_process_path",
                     "dynamic_sampling_filter_path")


OWN_PACKAGE = "ppodeck"


def files_to_ship(paths: list[str], env: Mapping[str, str],
                  code_dir: str | None = None) -> list[str]:
    """What a Ray Job's runtime_env must carry (py_modules) so the cluster imports these
    dotted paths: each one's top-level package directory, or its single .py file. Modules of
    the installed environment (site-packages, the standard library) and PPO Deck's own stay
    out: the cluster has its own."""
    shipped: list[str] = []
    for path in paths:
        dotted = split_dotted(engine_path(path))
        if dotted is None:
            continue
        top = dotted[0].split(".")[0]
        if top == OWN_PACKAGE:  # the job ships PPO Deck's engine itself (engine/launch/jobs.py)
            continue
        located = _top_level_location(top, search_path(env, code_dir))
        if located and located not in shipped and not _installed(located):
            shipped.append(located)
    return shipped


def _top_level_location(top: str, path: list[str]) -> str | None:
    spec = PathFinder.find_spec(top, path)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return str(list(spec.submodule_search_locations)[0])
    return spec.origin if spec.has_location else None


def _installed(location: str) -> bool:
    import sysconfig

    here = Path(location).resolve()
    roots = {Path(p).resolve() for key in ("purelib", "platlib", "stdlib", "platstdlib")
             if (p := sysconfig.get_paths().get(key))}
    return any(here.is_relative_to(root) for root in roots)
