"""Samples: every rollout's responses with their per-token numbers, kept in the run directory.

PURE (stdlib only): the driver writes through it, the CLI, the TUI and the miles adapter read
and write through it; nothing here imports torch.

Layout: `<run>/samples/rollout_<id>.jsonl`, one file per rollout, one JSON object per line,
one line per sample, in sample-index order. A rollout's file is written under a temporary name
and renamed into place, so a run killed mid-write loses at most the rollout being written;
readers also tolerate a torn last line (a writer that appends line by line, or a crash), which
they skip with a warning.

A line (`SampleRecord`; every key present, null where the run did not compute it):

    rollout_id         int    the rollout the sample belongs to
    index              int    the sample's index within the rollout (before trimming)
    group_index        int    which prompt of the rollout (its n samples share it), or null
    prompt             str    the prompt as sent to the model (after any chat template)
    response           str    the response text (special tokens skipped)
    label              any    the dataset's label (JSON value; non-JSON labels as text)
    reward             float  the reward as trained (PPO: raw; GRPO: group-normalized)
    raw_reward         float  the reward function's score
    status             str    completed | truncated (max length, no EOS) | aborted
                              (| failed | pending: miles' other Sample.Status values)
    response_length    int    response tokens
  per response token (lists of response_length entries, or null):
    tokens             str    each token's text (decoded alone)
    token_ids          int
    log_probs          float  the trainer's log-prob under the pre-update policy (pi_old)
    rollout_log_probs  float  the rollout engine's log-prob of the same token
    values             float  the critic's pre-update value (null for GRPO)
    returns            float  the GAE return (null for GRPO)
    advantages         float  the raw advantage, before normalization (GAE for PPO, the
                              group-normalized reward for GRPO)
    entropy            float  the policy's entropy where the engine computed it (PPO Deck: in
                              the sample's optimizer step, with --entropy-coef or
                              --observe-training-entropy), else null
    loss_mask          int    1 = trained on

PPO Deck's engine writes every rollout after it trained; a critic-only warmup rollout
(--num-critic-only-steps) has values and returns but no advantages or trainer log-probs.
Floats are rounded to 6 decimals (the file stays compact; differences below 1e-6 read as 0),
NaN and inf are written as null. Keys are written in the order above: `read_rows` relies on it
to skip the per-token lists (a line in any other order is parsed whole).

Write (another engine's data too, e.g. the miles adapter): build `SampleRecord`s (token series
may be lists or numpy rows), then `write_rollout(run_dir, rollout_id, records)`, or hand a
builder to `SamplesWriter(run_dir, limit).submit(rollout_id, build)` to do it off a thread;
`cap(records, limit)` is --samples-per-rollout's rule.
Read: `list_rollouts(run_dir) -> [ids]`, `read_samples(run_dir, id, warnings) ->
[SampleRecord]`, `read_rows(run_dir, id, warnings) -> [SampleRow]` (scalars and the mean
advantage, fast; `row.record()` parses the rest), `disk_bytes(run_dir)`, `sort_samples(...)`.
A missing run or rollout raises `SamplesNotFound`, whose message names what exists.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

SAMPLES_DIR = "samples"
STATUSES = ("completed", "truncated", "aborted", "failed", "pending")  # miles' Sample.Status
TOKEN_FIELDS = ("tokens", "token_ids", "log_probs", "rollout_log_probs", "values", "returns",
                "advantages", "entropy", "loss_mask")
FLOAT_TOKEN_FIELDS = ("log_probs", "rollout_log_probs", "values", "returns", "advantages",
                      "entropy")
DECIMALS = 6
YIELD_EVERY = 8  # samples between the writer thread's GIL yields (~0.3 ms of work on a CPU)
_FILE = re.compile(r"^rollout_(\d+)\.jsonl$")


class SamplesNotFound(Exception):
    """str() is the user-facing message, with a fix."""


@dataclass(frozen=True)
class SampleRecord:
    rollout_id: int
    index: int
    group_index: int | None
    prompt: str
    response: str
    label: Any
    reward: float | None
    raw_reward: float | None
    status: str
    response_length: int
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    log_probs: list[float] | None = None
    rollout_log_probs: list[float] | None = None
    values: list[float] | None = None
    returns: list[float] | None = None
    advantages: list[float] | None = None
    entropy: list[float] | None = None
    loss_mask: list[int] | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"sample {self.index}: status {self.status!r} is not one of "
                             f"{', '.join(STATUSES)}")
        for name in TOKEN_FIELDS:
            series = getattr(self, name)
            if series is not None and len(series) != self.response_length:
                raise ValueError(f"sample {self.index}: {len(series)} {name} for "
                                 f"{self.response_length} response tokens")

    def to_json(self) -> str:
        """One line: keys in field order, scalars first (read_rows relies on it)."""
        data = {name: getattr(self, name) for name in FIELD_NAMES}
        for name in FLOAT_TOKEN_FIELDS:
            if data[name] is not None:
                data[name] = _rounded(data[name])
        try:
            return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str,
                              allow_nan=False)
        except ValueError:  # NaN or inf somewhere: JSON has neither, they are written as null
            for name in FLOAT_TOKEN_FIELDS:
                if data[name] is not None:
                    data[name] = [_round(x) for x in data[name]]
            return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SampleRecord:
        """Missing keys read as null; unknown keys (a newer writer) are ignored."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("rollout_id", "index", "response_length"):
            if not isinstance(values.get(name), int):
                raise ValueError(f"{name} is {values.get(name)!r}, expected an integer")
        values.setdefault("group_index", None)
        for name in ("prompt", "response"):
            values[name] = str(values.get(name) or "")
        values.setdefault("label", None)
        values.setdefault("reward", None)
        values.setdefault("raw_reward", None)
        values.setdefault("status", "completed")
        return cls(**values)

    @property
    def mean_advantage(self) -> float | None:
        return _masked_mean(self.advantages, self.loss_mask)

    @property
    def max_gap(self) -> float | None:
        """The largest |trainer - rollout| log-prob gap over the sample's trained tokens."""
        if self.log_probs is None or self.rollout_log_probs is None:
            return None
        gaps = [abs(a - b) for i, (a, b) in enumerate(zip(self.log_probs, self.rollout_log_probs,
                                                          strict=True))
                if a is not None and b is not None
                and (self.loss_mask is None or self.loss_mask[i])]
        return max(gaps, default=None)


FIELD_NAMES = tuple(f.name for f in fields(SampleRecord))


def _rounded(series: Sequence[float | None]) -> list[float | None]:
    if hasattr(series, "astype"):  # a numpy row (the driver's): rounded at C speed
        return (series.astype("float64").round(DECIMALS) + 0.0).tolist()
    try:
        return [round(x, DECIMALS) + 0.0 for x in series]  # + 0.0: no "-0.0" in the file
    except TypeError:  # a null among them
        return [_round(x) for x in series]


def _round(x: float | None) -> float | None:
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return None  # JSON has no NaN/inf; a null token reads as "not computed"
    return round(float(x), DECIMALS) + 0.0  # + 0.0: no "-0.0" in the file


def _masked_mean(series: Sequence[float | None] | None,
                 mask: Sequence[int] | None) -> float | None:
    if not series:
        return None
    if mask is None or all(mask):
        try:
            return sum(series) / len(series)  # the common case, at C speed
        except TypeError:  # a null among them
            pass
    picked = [x for i, x in enumerate(series)
              if x is not None and (mask is None or mask[i])]
    return sum(picked) / len(picked) if picked else None


SORTS = ("index", "reward", "advantage", "length", "gap")


def sort_samples(samples: Sequence[Any], sort: str) -> list[Any]:
    """SampleRecords or SampleRows by one of SORTS: index ascending, every other key largest
    first (advantage: the mean raw advantage over trained tokens; gap: the largest trainer /
    rollout log-prob gap, which parses each row whole); without the number, last."""
    if sort == "index":
        return sorted(samples, key=lambda r: r.index)
    key = {"reward": lambda r: r.reward, "advantage": lambda r: r.mean_advantage,
           "length": lambda r: r.response_length, "gap": lambda r: r.max_gap}[sort]
    present = [r for r in samples if key(r) is not None]
    return sorted(present, key=key, reverse=True) + [r for r in samples if key(r) is None]


def one_line(text: str, width: int | None = None) -> str:
    """A response on one line: newlines and tabs shown as ⏎ and →, cut with … past `width`."""
    flat = text.replace("\r", "").replace("\n", "⏎").replace("\t", "→")
    return flat if width is None or len(flat) <= width else flat[:width - 1] + "…"


def status_of(truncated: bool, aborted: bool = False) -> str:
    return "aborted" if aborted else "truncated" if truncated else "completed"


# --- paths ------------------------------------------------------------------------------------

def samples_dir(run_dir: str | os.PathLike[str]) -> Path:
    """RunDir(run_dir).samples (engine/run/rundir.py names the same place)."""
    return Path(run_dir) / SAMPLES_DIR


def rollout_path(run_dir: str | os.PathLike[str], rollout_id: int) -> Path:
    return samples_dir(run_dir) / f"rollout_{int(rollout_id)}.jsonl"


def list_rollouts(run_dir: str | os.PathLike[str]) -> list[int]:
    """Rollout ids with a samples file, ascending; [] without a samples directory."""
    try:
        names = os.listdir(samples_dir(run_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for name in names if (m := _FILE.match(name)))


def disk_bytes(run_dir: str | os.PathLike[str]) -> int:
    """Bytes the samples directory holds (its rollout files)."""
    total = 0
    for rollout_id in list_rollouts(run_dir):
        try:
            total += rollout_path(run_dir, rollout_id).stat().st_size
        except OSError:
            continue  # removed between the listing and the stat
    return total


# --- write ------------------------------------------------------------------------------------

def cap(records: Sequence[SampleRecord], limit: int | None) -> list[SampleRecord]:
    """The first `limit` samples in index order (whole prompt groups first, as generated);
    None keeps all, 0 none."""
    ordered = sorted(records, key=lambda r: r.index)
    return ordered if limit is None else ordered[:max(0, int(limit))]


def write_rollout(run_dir: str | os.PathLike[str], rollout_id: int,
                  records: Iterable[SampleRecord]) -> Path:
    """The rollout's file, complete or not at all: written to a temporary name, then renamed
    (a file already there for this rollout, e.g. from before a resume, is replaced)."""
    path = rollout_path(run_dir, rollout_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for count, record in enumerate(records, start=1):
                if record.rollout_id != rollout_id:
                    raise ValueError(f"a sample of rollout {record.rollout_id} written into "
                                     f"rollout {rollout_id}'s file")
                handle.write(record.to_json() + "\n")
                if count % YIELD_EVERY == 0:
                    yield_gil()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def yield_gil() -> None:
    """Let a waiting thread run now: a busy writer thread otherwise keeps the GIL for up to
    the 5 ms switch interval each time the training loop's thread wants it back. Called after
    every YIELD_EVERY samples (bench/samples_overhead.py: a thread waking from 2 ms waits beside
    the writer was late by 0.6-0.9 ms on average without, 0.1-0.2 ms with)."""
    time.sleep(0)


class SamplesWriter:
    """Writes rollouts on a background thread, so the training loop never waits for it.

    `submit(rollout_id, build)` queues a call of `build()` (which returns the records: the
    decoding and joining happen on the thread too) and returns at once. A failure is handed to
    `on_error(message)` once per rollout and never raised into the loop; `close()` waits for
    what was queued (up to `timeout` seconds) and says what was left unwritten.
    """

    def __init__(self, run_dir: str | os.PathLike[str], limit: int | None = None,
                 on_error: Callable[[str], None] | None = None,
                 on_written: Callable[[int, int, float, float], None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.limit = limit
        self.on_error = on_error or (lambda message: None)
        self.on_written = on_written  # (rollout_id, samples, wall seconds, CPU seconds)
        self.errors: list[str] = []
        self.written: list[int] = []
        self._queue: queue.Queue[tuple[int, Callable[[], Iterable[SampleRecord]]] | None] = (
            queue.Queue())
        self._thread = threading.Thread(target=self._run, name="samples-writer", daemon=True)
        self._thread.start()

    def submit(self, rollout_id: int, build: Callable[[], Iterable[SampleRecord]]) -> None:
        self._queue.put((rollout_id, build))

    def close(self, timeout: float = 60.0) -> list[int]:
        """Wait for the queued rollouts; returns the ids still unwritten after `timeout`."""
        self._queue.put(None)
        self._thread.join(timeout)
        left = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                left.append(item[0])
        return left

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            rollout_id, build = item
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                records = cap(list(build()), self.limit)
                write_rollout(self.run_dir, rollout_id, records)
            except Exception as exc:  # noqa: BLE001 - reported, never raised into training
                message = (f"samples of rollout {rollout_id} not written: "
                           f"{type(exc).__name__}: {exc}")
                self.errors.append(message)
                self.on_error(message)
                continue
            self.written.append(rollout_id)
            if self.on_written is not None:
                self.on_written(rollout_id, len(records), time.perf_counter() - start,
                                time.thread_time() - cpu)


# --- read -------------------------------------------------------------------------------------

def read_samples(run_dir: str | os.PathLike[str], rollout_id: int,
                 warnings: list[str] | None = None) -> list[SampleRecord]:
    """The rollout's samples in file order. A torn last line (being written, or cut by a
    crash) and bad lines are skipped with a warning naming the file and line, appended to
    `warnings`. SamplesNotFound when the run has no samples for this rollout."""
    path = rollout_path(run_dir, rollout_id)
    return parse_lines(_read_text(run_dir, rollout_id), path, warnings)


def read_rows(run_dir: str | os.PathLike[str], rollout_id: int,
              warnings: list[str] | None = None) -> list[SampleRow]:
    """read_samples' samples as SampleRows: the scalars and the mean advantage, without
    parsing the other per-token lists (a 512-sample rollout opens in tens of ms, not
    hundreds); `row.record()` parses one sample whole when it is needed."""
    path = rollout_path(run_dir, rollout_id)
    return _parse(_read_text(run_dir, rollout_id), path, warnings, _row)


def parse_lines(text: str, path: Path | str,
                warnings: list[str] | None = None) -> list[SampleRecord]:
    return _parse(text, path, warnings, lambda line: SampleRecord.from_dict(_object(line)))


@dataclass(frozen=True)
class SampleRow:
    """A sample's scalars, for tables and sorting; record() parses the whole line."""

    rollout_id: int
    index: int
    group_index: int | None
    prompt: str
    response: str
    label: Any
    reward: float | None
    raw_reward: float | None
    status: str
    response_length: int
    mean_advantage: float | None
    line: str = field(repr=False, compare=False)

    def record(self) -> SampleRecord:
        return SampleRecord.from_dict(_object(self.line))

    @functools.cached_property
    def max_gap(self) -> float | None:
        return self.record().max_gap  # parsed on demand (once): only the gap order asks


# Where a health finding (engine/run/health.py) points in a rollout's samples: the order and the
# colour strip that put the samples behind it first, and the sentence the view shows.
FINDING_VIEWS: dict[str, tuple[str, str, str]] = {
    "health.kl_jump": ("gap", "gap", "the largest trainer/rollout log-prob gap first"),
    "health.logprob_gap_climbing": ("gap", "gap",
                                    "the largest trainer/rollout log-prob gap first"),
    "health.clipfrac_high": ("gap", "advantage", "the largest log-prob gap first"),
    "health.truncation": ("length", "advantage", "the longest (truncated) responses first"),
    "health.entropy_collapse": ("index", "entropy", "each token's entropy in the strip"),
    "health.explained_variance_negative": ("advantage", "value",
                                           "the largest mean advantage first, values in the "
                                           "strip"),
    "health.value_loss_diverging": ("advantage", "value",
                                    "the largest mean advantage first, values in the strip"),
    "health.reward_flat": ("reward", "advantage", "by reward"),
    "health.grad_norm_at_clip": ("advantage", "advantage", "the largest mean advantage first"),
    "health.nonfinite_loss": ("advantage", "advantage", "the largest mean advantage first"),
}


def _read_text(run_dir: str | os.PathLike[str], rollout_id: int) -> str:
    path = rollout_path(run_dir, rollout_id)
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise SamplesNotFound(_missing_message(run_dir, rollout_id)) from None
    except OSError as exc:
        raise SamplesNotFound(f"{path}: cannot read the samples ({exc})") from None


def _parse(text: str, path: Path | str, warnings: list[str] | None,
           parse: Callable[[str], Any]) -> list[Any]:
    out: list[Any] = []
    lines = text.split("\n")
    torn_possible = not text.endswith("\n")  # a last line without its newline may be torn
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = number == len(lines) and torn_possible
        try:
            # a torn last line may still hold whole scalars: it is checked whole
            out.append(_row(line, whole=True) if last and parse is _row else parse(line))
        except (ValueError, TypeError) as exc:
            why = ("incomplete last line (being written, or cut by a crash)" if last
                   else f"not a sample ({exc})")
            if warnings is not None:
                warnings.append(f"{path}:{number}: {why}: skipped")
    return out


def _object(line: str) -> dict[str, Any]:
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


# After `"tokens":` a line holds only lists of token texts, numbers and nulls: its last
# `,"name":` is the key itself (inside a JSON string a quote is escaped), so rfind finds it.
_SCALARS_END = ',"tokens":'


def _row(line: str, whole: bool = False) -> SampleRow:
    cut = line.rfind(_SCALARS_END)
    record = None
    if not whole and cut >= 0:
        try:
            head = _object(line[:cut] + "}")
            head.update(_lists(line, cut))
            record = SampleRecord.from_dict(head)
        except (ValueError, TypeError):  # another key order: a wrong cut never parses
            record = None
    if record is None:
        record = SampleRecord.from_dict(_object(line))
    return _row_of(record, record.mean_advantage, line)


def _lists(line: str, cut: int) -> dict[str, Any]:
    """advantages and loss_mask, sliced out of the line's tail (what the mean needs): the
    writer's order is advantages, entropy, loss_mask last; another order is parsed whole."""
    mask_at = line.rfind(',"loss_mask":', cut)
    entropy_at = line.rfind(',"entropy":', cut, mask_at)
    adv_at = line.rfind(',"advantages":', cut, entropy_at)
    if min(mask_at, entropy_at, adv_at) < 0:
        return {name: v for name, v in _object(line).items() if name in TOKEN_FIELDS}
    return {"advantages": json.loads(line[adv_at + len(',"advantages":'):entropy_at]),
            "loss_mask": json.loads(line[mask_at + len(',"loss_mask":'):line.rindex("}")])}


def _row_of(record: SampleRecord, mean_advantage: float | None, line: str) -> SampleRow:
    return SampleRow(record.rollout_id, record.index, record.group_index, record.prompt,
                     record.response, record.label, record.reward, record.raw_reward,
                     record.status, record.response_length, mean_advantage, line)


def _missing_message(run_dir: str | os.PathLike[str], rollout_id: int) -> str:
    have = list_rollouts(run_dir)
    if not have:
        return (f"{Path(run_dir).name} has no samples ({samples_dir(run_dir)} is missing or "
                "empty). Samples are kept from the first trained rollout on; a run started "
                "before PPO Deck kept them, or with --samples-per-rollout 0, has none.")
    return (f"{Path(run_dir).name} has no samples for rollout {rollout_id}; it has rollouts "
            f"{describe_ids(have)}. Fix: pick one of those with --rollout.")


def describe_ids(ids: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    parts: list[str] = []
    start = prev = None
    for i in ids:
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


def format_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
