"""Resume integrity: the checkpoints a run will load are checked before Ray starts.

The engine loads, in miles' order, --load (the actor) and --critic-load (the critic) when they
hold a checkpoint, else --ref-load's weights (engine/train/worker.py `_checkpoint_sources`).
Before anything starts, for each directory it will load:

- the tracker names an iteration (a number or "release") whose directory exists and is a
  complete torch_dist checkpoint (its metadata.json is written last) whose files match the
  manifest written at save time, or, without one, its torch_dist index
  (engine/run/save_manifest.py): a damaged save is named, file by file, and never loaded;
- actor and critic resume from the same iteration (the critic alone during the warmup);
- a resumed checkpoint holds optimizer state (the engine always loads it: --no-load-optim is
  refused), and a resumed critic's checkpoint holds a value head (else the critic would restart
  from scratch under a trained actor, silently).

`light_problems(args)` reads only small files (stdlib), for `ppodeck run --resume` before it
touches the run; `preflight_problems(args)` adds the two tensor checks, reading each
checkpoint's sharded metadata (Megatron's loader, so the driver runs it, before Ray). Each
problem names the directory and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.resolve import TRACKER
from ..run.save_manifest import Damage, SaveCheck, iteration_of, newest_good, verify_save

RELEASE = "release"


class CheckpointIntegrityError(ValueError):
    """A checkpoint the run would load is missing, incomplete or inconsistent."""


@dataclass(frozen=True)
class Source:
    """One checkpoint directory the run will load."""

    role: str  # actor | critic | ref
    flag: str
    root: Path
    resume: bool  # optimizer, scheduler and RNG are loaded too (not weights only)


def load_sources(args: Mapping[str, Any]) -> list[Source]:
    """The directories init loads, as the trainers pick them (a tracker file present)."""
    ref = args["ref_load"]
    sources = []
    for role, flag, key in (("actor", "--load", "load"), ("critic", "--critic-load",
                                                          "critic_load")):
        if role == "critic" and not args["use_critic"]:
            continue
        chosen = next((d for d in (args[key], ref) if d and _has_tracker(d)), None)
        if chosen is not None:
            from_ref = chosen == ref
            sources.append(Source(role, "--ref-load" if from_ref else flag, Path(chosen),
                                  resume=not from_ref))
    if ref and args["use_kl_loss"] and _has_tracker(ref):
        sources.append(Source("ref", "--ref-load", Path(ref), resume=False))
    return sources


def _has_tracker(path: str) -> bool:
    return (Path(path) / TRACKER).is_file()


def tracker_iteration(root: Path) -> tuple[str | None, str | None]:
    """(the tracker's tag, a problem): tag is "release" or the iteration number as text."""
    try:
        tag = (root / TRACKER).read_text().strip()
    except OSError as exc:
        return None, f"{root / TRACKER} cannot be read ({exc.strerror or exc})"
    if tag == RELEASE or tag.isdigit():
        return tag, None
    return None, (f"{root / TRACKER} says {tag!r}, not an iteration number or {RELEASE!r}. "
                  f"Fix: write the number of an iter_* directory of {root} into it")


def checkpoint_dir(root: Path, tag: str) -> Path:
    return root / (RELEASE if tag == RELEASE else f"iter_{int(tag):07d}")


def light_problems(args: Mapping[str, Any]) -> list[str]:
    """Tracker -> iteration directory -> complete checkpoint, and actor/critic agreement."""
    problems: list[str] = []
    iterations: dict[str, int] = {}
    for source in load_sources(args):
        tag, problem = tracker_iteration(source.root)
        if problem:
            problems.append(f"{source.flag} {source.root}: {problem}")
            continue
        assert tag is not None
        path = checkpoint_dir(source.root, tag)
        if not path.is_dir():
            problems.append(f"{source.flag} {source.root}: the tracker names iteration {tag} but "
                            f"{path.name}/ does not exist{_others(source.root)}. Fix: write an "
                            f"existing iteration into {source.root / TRACKER}, or point "
                            f"{source.flag} elsewhere")
        elif not (path / "metadata.json").is_file():
            problems.append(f"{source.flag} {path} is incomplete (no metadata.json: the save "
                            f"was cut). Fix: write the previous iteration into "
                            f"{source.root / TRACKER}{_others(source.root)}")
        elif damage := verify_save(path):
            problems.append(_damage_problem(args, source, damage))
        elif source.resume and tag != RELEASE:
            iterations[source.role] = int(tag)
    return problems or _agreement(args, iterations)  # agreement means little past a broken one


def _damage_problem(args: Mapping[str, Any], source: Source, damage: list[Damage]) -> str:
    named = "; ".join(d.text() for d in damage)
    text = f"{source.flag}: the save {damage[0].save_dir} is damaged and is not loaded: {named}"
    if not source.resume:
        return f"{text}. Fix: convert or copy the checkpoint again"
    good = fallback(args, iteration_of(damage[0].save_dir))
    if good is None:
        return f"{text}. No older save of this run is whole: start a new run"
    return (f"{text}. Fix: resume from iteration {good.iteration}, the newest whole save "
            f"(`ppodeck run --resume RUN --yes` takes it), or write {good.iteration} into "
            f"both {TRACKER} files")


def resume_roots(args: Mapping[str, Any]) -> tuple[Path | None, Path | None]:
    """The actor's and the critic's save roots a resume loads from (None: not a resume root)."""
    roots = {s.role: s.root for s in load_sources(args) if s.resume}
    return roots.get("actor"), roots.get("critic")


def damaged_saves(args: Mapping[str, Any]) -> list[Damage]:
    """Every damaged file of the saves a resume would load (the trackers' iterations)."""
    damage: list[Damage] = []
    for source in load_sources(args):
        tag, problem = tracker_iteration(source.root)
        if problem is None and tag is not None:
            path = checkpoint_dir(source.root, tag)
            damage += verify_save(path) if path.is_dir() else []
    return damage


def fallback(args: Mapping[str, Any], below: int | None) -> SaveCheck | None:
    """The newest iteration under `below` whose actor and critic saves are both whole."""
    actor, critic = resume_roots(args)
    if actor is None and critic is None:
        return None
    return newest_good(actor, critic, int(args["num_critic_only_steps"] or 0), below)


def take_save(args: Mapping[str, Any], iteration: int) -> list[Path]:
    """Point the actor's and the critic's trackers at `iteration`; the trackers rewritten.
    The damaged saves stay on disk (the user may want them), but nothing loads them."""
    written = []
    for root in resume_roots(args):
        if root is not None and (checkpoint_dir(root, str(iteration))).is_dir():
            tmp = root / f"{TRACKER}.tmp"
            tmp.write_text(str(iteration))
            tmp.replace(root / TRACKER)
            written.append(root / TRACKER)
    return written


def _others(root: Path) -> str:
    found = sorted(p.name for p in root.glob("iter_*") if p.is_dir() and ".tmp-" not in p.name)
    return f" (it holds {', '.join(found[-3:])})" if found else " (it holds no iter_* directory)"


def _agreement(args: Mapping[str, Any], iterations: dict[str, int]) -> list[str]:
    actor, critic = iterations.get("actor"), iterations.get("critic")
    if critic is None:
        return []
    if actor is None:
        # the actor is saved with the critic from the first rollout it trains in
        if critic < args["num_critic_only_steps"]:
            return []
        return [f"the critic resumes from iteration {critic} ({args['critic_load']}), past the "
                f"critic-only warmup, but the actor has no checkpoint at --load "
                f"{args['load_requested']}, so it would restart from its initial weights. "
                "Fix: --load the actor's checkpoints (the run's --save)"]
    if actor == critic:
        return []
    return [f"the actor resumes from iteration {actor} ({args['load']}) but the critic from "
            f"iteration {critic} ({args['critic_load']}): a save was cut between the two "
            f"models. Fix: write {min(actor, critic)} into the {TRACKER} of the one ahead, so "
            "both resume from the same rollout"]


def preflight_problems(args: Mapping[str, Any]) -> list[str]:
    """light_problems plus optimizer state and the critic's value head (reads tensor metadata)."""
    problems = light_problems(args)
    if problems:
        return problems
    for source in load_sources(args):
        tag, _ = tracker_iteration(source.root)
        if not source.resume or tag == RELEASE:
            continue
        path = checkpoint_dir(source.root, tag or "0")
        keys = _tensor_keys(path)
        if not any(key.startswith("optimizer.") for key in keys):
            problems.append(f"{source.flag} {path} holds no optimizer state, and a resumed run "
                            "loads it. Fix: point --ref-load at it to start from its weights "
                            "only (a fresh optimizer), or resume from a checkpoint with state")
        if source.role == "critic" and not _has_value_head(keys):
            problems.append(f"{source.flag} {path} holds no value head: it is a policy "
                            "checkpoint, so the critic would restart from scratch under a "
                            "trained actor. Fix: --critic-load the critic's own checkpoints "
                            f"(--critic-save, by default {args['save']}_critic); to retrain "
                            "the critic on purpose, start a run with --ref-load instead")
    return problems


def _tensor_keys(path: Path) -> dict[str, tuple[int, ...]]:
    from ..train.checkpoint import _checkpoint_keys

    return _checkpoint_keys(path)[0]


def _has_value_head(keys: Mapping[str, tuple[int, ...]]) -> bool:
    from ..train.checkpoint import _has_value_head as has_head

    return has_head(keys)


def check_or_raise(args: Mapping[str, Any], heavy: bool = True) -> None:
    problems = preflight_problems(args) if heavy else light_problems(args)
    if problems:
        raise CheckpointIntegrityError("; ".join(problems))
