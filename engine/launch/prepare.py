"""`ppodeck prepare`: fetch a preset's HF checkpoint and dataset, convert to torch_dist.

What miles' example (examples/ppo/run_qwen3_4b_ppo.py) does in `prepare()`, driven by the
preset instead of a script:

1. download the HF checkpoint and the prompt dataset from the Hugging Face Hub into the local
   paths the flags name (--hf-checkpoint, --prompt-data);
2. convert --hf-checkpoint to Megatron torch_dist at --ref-load (skipped when its
   latest_checkpointed_iteration.txt already says "release", like miles' converter).

Hub ids live in the preset, next to the paths they fill, as `[provenance.sources]`:

    [provenance.sources]                  # flag name = hub repo id (or a table)
    hf-checkpoint = "Qwen/Qwen3-4B"       # a model repo
    prompt-data = "zhuzilin/dapo-math-17k"  # a dataset repo (the flag's default type)
    # prompt-data = { repo = "zhuzilin/dapo-math-17k", type = "dataset", revision = "main" }

Flags keep local paths (so the argv stays a valid miles command line); a flag whose path
already holds the files never needs the hub. LIGHT module: stdlib and engine.config only;
huggingface_hub is imported when a download really runs, torch/megatron only in the
conversion subprocess (`python -m ppodeck.engine.train.prepare_worker`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from ..config.pypi_files import is_pypi_path, missing_message
from ..config.resolve import TRACKER

RELEASE = "release"
SOURCES_KEY = "sources"  # the sub-table of [provenance]
RepoType = Literal["model", "dataset"]
# flags `prepare` can fill from the hub, with the repo type a bare id means
SOURCE_FLAGS: dict[str, RepoType] = {"hf_checkpoint": "model", "ref_load": "model",
                                     "prompt_data": "dataset"}
_OFFLINE_VALUES = {"1", "on", "yes", "true"}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
_MODEL_FLAGS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                "kv_channels", "vocab_size")


class PrepareError(Exception):
    """A prepare problem; str() is the user-facing message (what, where, how to fix)."""


@dataclass(frozen=True)
class HubSource:
    dest: str  # the flag's dest, e.g. "hf_checkpoint"
    repo_id: str  # "Qwen/Qwen3-4B"
    repo_type: RepoType
    revision: str | None = None

    @property
    def flag(self) -> str:
        return _flag_name(self.dest)


@dataclass(frozen=True)
class Step:
    """One thing `prepare` does (or found already done)."""

    kind: Literal["download", "convert"]
    dest: str  # the flag whose path this step fills
    target: Path  # that path
    into: Path  # download directory, or the torch_dist directory
    source: str  # hub repo id, or the HF checkpoint directory for a conversion
    repo_type: RepoType | None = None
    revision: str | None = None
    done: bool = False
    detail: str = ""

    @property
    def flag(self) -> str:
        return _flag_name(self.dest)


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    problems: tuple[str, ...]  # inputs that are missing and that prepare cannot produce

    @property
    def todo(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if not s.done)

    @property
    def downloads(self) -> tuple[Step, ...]:
        return tuple(s for s in self.todo if s.kind == "download")


# --------------------------------------------------------------------------------------------
# sources (from the preset)
# --------------------------------------------------------------------------------------------
def sources_from_provenance(provenance: Mapping[str, Any], where: str = "the preset"
                            ) -> dict[str, HubSource]:
    """dest -> HubSource from a preset's `[provenance.sources]`; PrepareError when malformed."""
    table = provenance.get(SOURCES_KEY) if isinstance(provenance, Mapping) else None
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise PrepareError(f"{where}: [provenance.{SOURCES_KEY}] must be a table of "
                           'flag = "hub/repo-id". Fix: e.g. hf-checkpoint = "Qwen/Qwen3-4B".')
    return dict(_source(key, value, where) for key, value in table.items())


def _source(key: str, value: Any, where: str) -> tuple[str, HubSource]:  # noqa: ANN401
    dest = key.removeprefix("--").replace("-", "_")
    if dest not in SOURCE_FLAGS:
        allowed = ", ".join(_flag_name(d)[2:] for d in SOURCE_FLAGS)
        raise PrepareError(f"{where}: [provenance.{SOURCES_KEY}] {key!r} is not a flag prepare "
                           f"can fetch. Fix: use one of {allowed}.")
    spec = {"repo": value} if isinstance(value, str) else value
    repo = spec.get("repo") if isinstance(spec, Mapping) else None
    if not isinstance(repo, str) or repo.count("/") != 1:
        raise PrepareError(f"{where}: [provenance.{SOURCES_KEY}] {key} = {value!r}: expected a "
                           'hub id "owner/name" or { repo = "owner/name", type = "dataset" }.')
    repo_type = spec.get("type", SOURCE_FLAGS[dest])
    if repo_type not in ("model", "dataset"):
        raise PrepareError(f"{where}: [provenance.{SOURCES_KEY}] {key}: type must be "
                           f'"model" or "dataset", got {repo_type!r}.')
    revision = spec.get("revision")
    return dest, HubSource(dest, repo, repo_type, str(revision) if revision else None)


def preset_sources(preset: Any) -> dict[str, HubSource]:  # noqa: ANN401
    """The hub sources of a preset and its extends chain (a child overrides its parent)."""
    from ..presets import extends_chain

    sources: dict[str, HubSource] = {}
    for item in extends_chain(preset):
        sources.update(sources_from_provenance(item.provenance, str(item.path)))
    return sources


# --------------------------------------------------------------------------------------------
# what is there, what is missing
# --------------------------------------------------------------------------------------------
def hf_checkpoint_present(path: Path) -> bool:
    """config.json plus weights (every shard of an index), or a .gguf file."""
    if path.is_file():
        return path.suffix == ".gguf"
    if not path.is_dir():
        return False
    if any(path.glob("*.gguf")):
        return True
    if not (path / "config.json").is_file():
        return False
    for index in path.glob("*.index.json"):
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            return False
        return all((path / shard).is_file() for shard in shards)
    return any(p.suffix in _WEIGHT_SUFFIXES for p in path.iterdir())


def tracker_of(path: Path) -> str | None:
    try:
        return (path / TRACKER).read_text().strip() or None
    except OSError:
        return None


def _present(dest: str, path: Path) -> bool:
    if dest == "hf_checkpoint":
        return hf_checkpoint_present(path)
    if dest == "ref_load":
        return tracker_of(path) is not None
    return path.exists()


def _needs_prompt_data(args: Mapping[str, Any]) -> bool:
    return not args.get("synthetic_task")


def _wanted(args: Mapping[str, Any]) -> list[tuple[str, Path]]:
    """(dest, path) of every input the run reads before it starts."""
    wanted = []
    for dest in SOURCE_FLAGS:
        value = args.get(dest)
        if not value or (dest == "prompt_data" and not _needs_prompt_data(args)):
            continue
        wanted.append((dest, Path(value).expanduser()))
    return wanted


def missing_inputs(args: Mapping[str, Any] | Any) -> list[str]:  # noqa: ANN401
    """What the run needs on disk but is not there, one message per input naming the flag.

    `args` is `engine.config.resolve()`'s dict (a RunConfig is resolved first). Empty means
    ready; otherwise `ppodeck run` can offer `ppodeck prepare` first.
    """
    args = _resolved(args)
    out = []
    for dest, path in _wanted(args):
        if _present(dest, path):
            continue
        if is_pypi_path(str(path)):
            out.append(missing_message(str(path), _flag_name(dest)))
            continue
        what = {"hf_checkpoint": "no HF checkpoint (config.json + weights)",
                "ref_load": f"no torch_dist checkpoint ({TRACKER} missing)",
                "prompt_data": "no such file"}[dest]
        out.append(f"{_flag_name(dest)} {path}: {what}")
    return out


def _resolved(args: Mapping[str, Any] | Any) -> Mapping[str, Any]:  # noqa: ANN401
    if isinstance(args, Mapping):
        return args
    from ..config.resolve import resolve
    from ..host.machine import environment

    return resolve(args, environment())


def plan_prepare(args: Mapping[str, Any] | Any,  # noqa: ANN401
                 sources: Mapping[str, HubSource]) -> Plan:
    """The downloads and conversion the run's inputs need, each marked done when present."""
    args = _resolved(args)
    steps: list[Step] = []
    problems: list[str] = []
    wanted = dict(_wanted(args))
    for dest, path in wanted.items():
        if dest == "ref_load" and dest not in sources:
            continue  # produced by the conversion below
        steps.extend(_download_step(dest, path, sources.get(dest), problems))
    if "ref_load" in wanted and "ref_load" not in sources:
        steps.extend(_convert_step(args, wanted, problems))
    return Plan(tuple(steps), tuple(problems))


def _download_step(dest: str, path: Path, source: HubSource | None,
                   problems: list[str]) -> list[Step]:
    if _present(dest, path):
        return [Step("download", dest, path, path, source.repo_id if source else str(path),
                     source.repo_type if source else None, done=True, detail="present")]
    if source is None and is_pypi_path(str(path)):
        problems.append(missing_message(str(path), _flag_name(dest)))  # pip, not the hub
        return []
    if source is None:
        name = _flag_name(dest)[2:]
        problems.append(f"--{name} {path} is missing and the preset names no hub repo for it. "
                        f"Fix: put the files there, --set {name}=PATH to a local copy, or add "
                        f'{name} = "owner/repo" to the preset\'s [provenance.{SOURCES_KEY}].')
        return []
    return [Step("download", dest, path, download_dir(dest, path), source.repo_id,
                 source.repo_type, source.revision, detail="download")]


def _convert_step(args: Mapping[str, Any], wanted: Mapping[str, Path],
                  problems: list[str]) -> list[Step]:
    target = wanted["ref_load"]
    tag = tracker_of(target)
    hf = wanted.get("hf_checkpoint")
    source = str(hf) if hf else "--hf-checkpoint"
    if tag is not None:
        detail = ("already converted (release)" if tag == RELEASE
                  else f"holds a training checkpoint (iteration {tag})")
        return [Step("convert", "ref_load", target, target, source, done=True, detail=detail)]
    if hf is None:
        problems.append(f"--ref-load {target} holds no checkpoint and --hf-checkpoint is not "
                        "set, so there is nothing to convert. Fix: set --hf-checkpoint.")
        return []
    return [Step("convert", "ref_load", target, target, str(hf), detail="convert to torch_dist")]


def download_dir(dest: str, path: Path) -> Path:
    """Where a repo is downloaded: the flag's directory, or the folder of a data file."""
    if dest == "prompt_data" and path.suffix:
        return path.parent
    return path


# --------------------------------------------------------------------------------------------
# offline
# --------------------------------------------------------------------------------------------
def offline_reason(force: bool = False, *, timeout: float = 2.0) -> str | None:
    """Why the hub cannot be reached (None when it can): --offline, HF_HUB_OFFLINE, no network."""
    if force:
        return "--offline was given"
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _OFFLINE_VALUES:
            return f"{var}={os.environ[var]} is set"
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")):
        return None  # a direct probe says nothing behind a proxy; downloads will tell
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http"
                                                                 else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"cannot reach {host}:{port} ({exc.strerror or exc})"


def offline_message(plan: Plan, reason: str) -> str:
    """The fail-fast message: what is missing, and where local files must go instead."""
    lines = [f"offline ({reason}): cannot download what this run needs. Put local copies "
             "here (or point the flags elsewhere with --set FLAG=PATH), then rerun:"]
    for step in plan.downloads:
        kind = "dataset" if step.repo_type == "dataset" else "model"
        what = {"hf_checkpoint": "config.json, tokenizer files and *.safetensors",
                "prompt_data": f"the file {step.target.name}",
                "ref_load": f"a torch_dist checkpoint with {TRACKER}"}[step.dest]
        lines.append(f"  {step.flag:<16} {kind} {step.source}: {what} in {step.into}")
        lines.append(f"  {'':<16} e.g. on a machine online: hf download {step.source}"
                     f"{' --repo-type dataset' if kind == 'dataset' else ''} "
                     f"--local-dir {step.into}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# doing it
# --------------------------------------------------------------------------------------------
def download(step: Step, *, tqdm_class: Any = None) -> Path:  # noqa: ANN401
    """snapshot_download the step's repo into its directory; check the flag's path is there."""
    from huggingface_hub import snapshot_download

    step.into.mkdir(parents=True, exist_ok=True)
    try:
        snapshot_download(step.source, repo_type=step.repo_type, revision=step.revision,
                          local_dir=str(step.into), tqdm_class=tqdm_class)
    except Exception as exc:  # network, auth, missing repo: one clear line, not a traceback
        raise PrepareError(f"downloading {step.repo_type} {step.source} into {step.into} "
                           f"failed: {type(exc).__name__}: {exc}") from exc
    if not _present(step.dest, step.target):
        found = sorted(p.name for p in step.into.iterdir())[:8]
        raise PrepareError(f"downloaded {step.source} into {step.into}, but {step.flag} "
                           f"{step.target} is not there (found: {', '.join(found)}). Fix: "
                           f"--set {step.flag[2:]}=<one of those files>.")
    return step.target


def convert(step: Step, args: Mapping[str, Any], *,
            on_message: Callable[[str], None] = lambda _m: None,
            log_path: Path | None = None) -> Path:
    """Run the HF -> torch_dist conversion in `python -m ppodeck.engine.train.prepare_worker`.

    The worker imports torch and megatron (seconds, GBs) so the CLI never does. Its log
    messages reach `on_message`; its stderr (megatron's warnings, a traceback) goes to
    `log_path` (default ${PPODECK_HOME}/logs/prepare-convert.log), quoted when it crashes.
    """
    if log_path is None:
        from ..config.resolve import ppodeck_home
        from ..host.machine import environment

        log_path = Path(ppodeck_home(environment())) / "logs" / "prepare-convert.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    model_flags = {k: args[k] for k in _MODEL_FLAGS if args.get(k) is not None}
    cmd = [sys.executable, "-m", "ppodeck.engine.train.prepare_worker", "convert",
           "--hf-checkpoint", step.source, "--out", str(step.into), "--model-flags",
           json.dumps(model_flags)]
    result: dict[str, Any] = {}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                cwd=_repo_root(), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        for line in proc.stdout:
            result = _worker_line(line, on_message) or result
        code = proc.wait()
    if code != 0 or "done" not in result:
        # a reported error is self-explanatory; a crash needs the end of the log
        reason = result.get("error") or f"the converter crashed (exit status {code}):\n" + _tail(
            log_path)
        raise PrepareError(f"converting {step.source} to torch_dist at {step.into} failed: "
                           f"{reason.rstrip()} (full log: {log_path})")
    return Path(result["done"])


def _worker_line(line: str, on_message: Callable[[str], None]) -> dict[str, Any] | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None  # stray prints of a library
    if not isinstance(event, dict):
        return None
    if "msg" in event:
        on_message(str(event["msg"]))
    return event if ("done" in event or "error" in event) else None


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "".join(f"  | {line}\n" for line in text)


def _repo_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _flag_name(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def describe(steps: Iterable[Step]) -> list[tuple[str, str, str, str]]:
    """(what, source, destination, status) rows for a table."""
    rows = []
    for step in steps:
        what = f"{step.repo_type or 'files'}" if step.kind == "download" else "torch_dist"
        rows.append((f"{step.flag} ({what})", step.source, str(step.into), step.detail))
    return rows
