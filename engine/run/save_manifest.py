"""Verified saves: a manifest of each checkpoint's files, and the check that reads it back.

A save (`<save>/iter_XXXXXXX/`, torch_dist) gets `ppodeck_manifest.json` when it is written:
every file's size and sha256. `verify_save` re-reads it before a resume, so a file cut, truncated
or deleted after the save is named (directory and file) instead of failing deep inside a
worker's loader. A save without a manifest (a miles run's, or one written before manifests) is
still checked: its torch_dist index (`.metadata`, a pickle) names each shard file and the byte
range of every tensor in it, so a missing or short shard file is found without torch. Stdlib
only: `ppodeck run --resume` calls it before anything starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "ppodeck_manifest.json"
MANIFEST_VERSION = 1
DCP_INDEX = ".metadata"  # torch.distributed.checkpoint's index of the shard files
COMPLETE_MARK = "metadata.json"  # Megatron writes it last
_HASH_CHUNK = 1 << 22


@dataclass(frozen=True)
class Damage:
    """One thing wrong with a save: the file (relative to the save directory) and what."""

    save_dir: Path
    file: str
    what: str

    def text(self) -> str:
        return f"{self.save_dir / self.file}: {self.what}"


# ------------------------------------------------------------------------------------ writing
def write_manifest(save_dir: Path) -> Path:
    """Hash every file of `save_dir` into its manifest (the last file written, atomically)."""
    files = {name: {"bytes": (save_dir / name).stat().st_size, "sha256": file_sha256(
        save_dir / name)} for name in _payload_files(save_dir)}
    path = save_dir / MANIFEST
    tmp = path.with_name(f"{MANIFEST}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"version": MANIFEST_VERSION, "files": files}, indent=1,
                              sort_keys=True))
    os.replace(tmp, path)
    return path


def _payload_files(save_dir: Path) -> list[str]:
    return sorted(p.name for p in save_dir.iterdir()
                  if p.is_file() and not p.name.startswith(MANIFEST))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------ checking
def verify_save(save_dir: Path, checksums: bool = True) -> list[Damage]:
    """What is wrong with the save at `save_dir` (empty: nothing). `checksums=False` compares
    sizes only (cheap enough for listings); a resume always hashes."""
    if not save_dir.is_dir():
        return [Damage(save_dir, ".", "the save directory does not exist")]
    if not (save_dir / COMPLETE_MARK).is_file():
        return [Damage(save_dir, COMPLETE_MARK, "missing: the save was cut before it finished")]
    manifest = save_dir / MANIFEST
    if manifest.is_file():
        return _against_manifest(save_dir, manifest, checksums)
    return _against_dcp_index(save_dir)


def has_manifest(save_dir: Path) -> bool:
    return (save_dir / MANIFEST).is_file()


def _against_manifest(save_dir: Path, manifest: Path, checksums: bool) -> list[Damage]:
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [Damage(save_dir, MANIFEST, f"unreadable ({exc})")]
    damage = []
    for name, expected in sorted(files.items()):
        path = save_dir / name
        if not path.is_file():
            damage.append(Damage(save_dir, name, "deleted (the manifest lists it)"))
            continue
        size = path.stat().st_size
        if size != expected["bytes"]:
            damage.append(Damage(save_dir, name, f"{size} bytes, the save wrote "
                                                 f"{expected['bytes']} (cut or truncated)"))
        elif checksums and file_sha256(path) != expected["sha256"]:
            damage.append(Damage(save_dir, name, "its sha256 differs from the one written at "
                                                 "save time (the bytes changed)"))
    return damage


def _against_dcp_index(save_dir: Path) -> list[Damage]:
    """No manifest: every shard file the torch_dist index names exists and holds its ranges."""
    index = save_dir / DCP_INDEX
    if not index.is_file():
        return [Damage(save_dir, DCP_INDEX, "missing: the torch_dist index of the shards")]
    try:
        ends = shard_extents(index)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a damaged index
        return [Damage(save_dir, DCP_INDEX, f"unreadable ({type(exc).__name__}: {exc})")]
    damage = []
    for name, end in sorted(ends.items()):
        path = save_dir / name
        if not path.is_file():
            damage.append(Damage(save_dir, name, "deleted (the torch_dist index names it)"))
        elif path.stat().st_size < end:
            damage.append(Damage(save_dir, name, f"{path.stat().st_size} bytes, but the index "
                                                 f"places data up to byte {end} (truncated)"))
    if not (save_dir / "common.pt").is_file():
        damage.append(Damage(save_dir, "common.pt", "missing (Megatron's non-tensor state)"))
    return damage


class _Opaque:
    """Stands in for every torch class in the index: keeps the pickled state as attributes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401
        self.args = args

    def __setstate__(self, state: Any) -> None:  # noqa: ANN401
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots) of a slotted class
            for part in state:
                self.__dict__.update(part or {})
        elif isinstance(state, dict):
            self.__dict__.update(state)


class _IndexReader(pickle.Unpickler):
    _SAFE = ("builtins", "collections", "copyreg", "_codecs")

    def find_class(self, module: str, name: str) -> Any:  # noqa: ANN401
        if module in self._SAFE:
            return super().find_class(module, name)
        return type(name, (_Opaque,), {})  # never imports or runs the named code


def shard_extents(index: Path) -> dict[str, int]:
    """file name -> the end of the last byte range the torch_dist index places in it."""
    with open(index, "rb") as handle:
        metadata = _IndexReader(handle).load()
    ends: dict[str, int] = {}
    for info in getattr(metadata, "storage_data", {}).values():
        name = info.relative_path
        ends[name] = max(ends.get(name, 0), int(info.offset) + int(info.length))
    return ends


# ----------------------------------------------------------------------------------- a run's saves
def iterations(root: Path) -> list[int]:
    """The iteration numbers of `root`'s finished save directories, newest first."""
    found = []
    for path in root.glob("iter_*") if root.is_dir() else ():
        tail = path.name.removeprefix("iter_")
        if path.is_dir() and tail.isdigit():
            found.append(int(tail))
    return sorted(found, reverse=True)


def save_path(root: Path, iteration: int) -> Path:
    return root / f"iter_{iteration:07d}"


def iteration_of(save_dir: Path) -> int | None:
    """The iteration an `iter_XXXXXXX` directory holds (None for `release` and others)."""
    tail = save_dir.name.removeprefix("iter_")
    return int(tail) if tail.isdigit() else None


@dataclass(frozen=True)
class SaveCheck:
    """One iteration of a run: the actor's and the critic's save, checked together."""

    iteration: int
    damage: tuple[Damage, ...]

    @property
    def good(self) -> bool:
        return not self.damage


def check_iteration(iteration: int, roots: Iterable[tuple[Path, bool]],
                    checksums: bool = True) -> SaveCheck:
    """`roots`: (save root, whether this iteration must be there): the actor is not saved
    during the critic-only warmup, the critic (its sibling) always is."""
    damage: list[Damage] = []
    for root, required in roots:
        path = save_path(root, iteration)
        if not path.exists() and not required:
            continue
        if not path.exists():
            damage.append(Damage(path, ".", f"missing: its sibling save of iteration "
                                            f"{iteration} exists, so this one was cut"))
            continue
        damage += verify_save(path, checksums)
    return SaveCheck(iteration, tuple(damage))


def newest_good(actor: Path | None, critic: Path | None, warmup: int,
                below: int | None = None) -> SaveCheck | None:
    """The newest iteration (under `below` when given) whose actor and critic saves are whole."""
    roots = [r for r in (actor, critic) if r is not None]
    candidates = sorted({i for r in roots for i in iterations(r)}, reverse=True)
    for iteration in candidates:
        if below is not None and iteration >= below:
            continue
        check = check_iteration(iteration, required_roots(actor, critic, warmup, iteration))
        if check.good:
            return check
    return None


def required_roots(actor: Path | None, critic: Path | None, warmup: int,
                   iteration: int) -> list[tuple[Path, bool]]:
    """The roots an iteration's save must be in (see check_iteration)."""
    roots = []
    if actor is not None:
        roots.append((actor, critic is None or iteration >= warmup))
    if critic is not None:
        roots.append((critic, True))
    return roots

