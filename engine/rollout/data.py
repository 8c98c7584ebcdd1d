"""Prompt data for rollouts, read the way miles reads it (spec section 8).

- `--prompt-data`: a local .jsonl/.json/.parquet file (or a directory of them), else a Hub
  dataset id (needs a network; offline it fails with a message saying so).
  Local files are read as miles' `read_file` reads them, without importing `datasets` (about a
  second of CPU in every run's rollout worker): .jsonl one JSON object per line (blank lines
  skipped), .parquet with pyarrow. A .json file (PPO Deck; miles takes none) is one JSON array
  of objects, else JSON lines, as `datasets`' json builder reads it. The rows are the file's own
  objects, fields and types as written. Unlike miles, a line that is not valid JSON is refused
  (named by file and line), not printed and skipped. Only a Hub id goes through `datasets`.
- `--input-key` / `--label-key` / `--metadata-key` pick the fields; metadata may be a JSON string.
- `--apply-chat-template`: a string prompt becomes [{"role": "user", "content": ...}], a list
  prompt is the message list; the template is applied once, at load, with
  add_generation_prompt=True and `--apply-chat-template-kwargs`.
- `--max-prompt-len` (PPO Deck; miles' --rollout-max-prompt-len too): longer prompts are
  dropped and counted.
- `--rollout-shuffle` reshuffles every epoch with random.Random(rollout_seed + epoch), as miles'
  Dataset.shuffle does; a rollout that runs past the end continues into the next epoch.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from .types import Prompt, Sample

# a directory holds files of one kind: JSON (.jsonl and .json) or parquet
LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
JSONL_LAYOUT = "a .jsonl file holds one JSON object per line"
JSON_LAYOUT = "a .json file is one array of objects, or one object per line"
JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number",
              bool: "a boolean", type(None): "null"}


@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """No progress bars in driver.log or test output when a Hub dataset is loaded."""
    from datasets.utils import logging as ds_logging

    was_enabled = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            ds_logging.enable_progress_bar()


# --------------------------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------------------------
def load_tokenizer(path: str | Path):  # noqa: ANN201
    """AutoTokenizer from an HF directory, a .gguf file (or a dir with one), or a Hub id."""
    from transformers import AutoTokenizer

    from ..model.convert import gguf_file_of

    local = Path(path).expanduser()
    if local.exists():
        gguf = gguf_file_of(local)
        if gguf is not None:
            return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        return AutoTokenizer.from_pretrained(str(local))
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as err:  # noqa: BLE001 - hub/network errors come in many types
        raise FileNotFoundError(f"could not load a tokenizer from {path!r}: not a local path, "
                                f"and the Hub lookup failed ({type(err).__name__}: {err})") from err


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------
class Place(NamedTuple):
    """Where a row was read (1-based), so that a message can send the user to it."""

    source: str
    unit: str  # "line" for JSON lines; "row" for parquet, a JSON array, a Hub dataset
    number: int

    def __str__(self) -> str:
        return f"{self.source} {self.unit} {self.number}"


@dataclass(frozen=True)
class Records(Sequence[dict[str, Any]]):
    """The rows of the prompt data as plain dicts, each with the place it was read from."""

    name: str
    rows: list[dict[str, Any]]
    places: list[Place]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: Any) -> Any:  # noqa: ANN401 - an int or a slice
        return self.rows[index]


def load_records(prompt_data: str | Path) -> Records:
    """The rows of a local file/dir (read without `datasets`), else of a Hub id's train split."""
    local = Path(prompt_data).expanduser()
    if local.exists():
        return _read_local(local)
    return _load_hub(str(prompt_data))


def _load_hub(name: str) -> Records:
    from datasets import load_dataset

    with quiet_datasets():
        try:
            dataset = load_dataset(name, split="train")
        except Exception as err:  # noqa: BLE001 - offline errors come in many types
            raise FileNotFoundError(
                f"--prompt-data {name!r} is not a local file, and loading it as a Hub "
                f"dataset failed (offline?): {type(err).__name__}: {err}") from err
    rows = dataset.to_list()
    return Records(name, rows, [Place(name, "row", n) for n in range(1, len(rows) + 1)])


def _read_local(path: Path) -> Records:
    rows: list[dict[str, Any]] = []
    places: list[Place] = []
    for file in _local_files(path):
        for place, value in READERS[file.suffix](file):
            rows.append(_as_object(value, place))
            places.append(place)
    return Records(str(path), rows, places)


def _local_files(path: Path) -> list[Path]:
    files = [path] if path.is_file() else sorted(
        p for p in path.iterdir() if p.suffix in LOCAL_FORMATS)
    if not files:
        raise FileNotFoundError(f"--prompt-data {path} holds no .jsonl/.json/.parquet files")
    kinds = {LOCAL_FORMATS.get(p.suffix) for p in files}
    if None in kinds or len(kinds) > 1:
        raise ValueError(f"--prompt-data {path}: expected .jsonl, .json or .parquet files of "
                         f"one kind, got {sorted(p.name for p in files)[:5]}")
    return files


Located = Iterator[tuple[Place, Any]]


def _jsonl_rows(path: Path) -> Located:
    # utf-8-sig: a leading byte-order mark is dropped rather than spoiling line 1
    with path.open(encoding="utf-8-sig") as lines:
        yield from _json_lines(path, lines, JSONL_LAYOUT)


def _json_lines(path: Path, lines: Iterable[str], layout: str) -> Located:
    """One JSON value per line, blank lines skipped (miles' read_file); a bad line is refused,
    where miles prints it and goes on: a silently smaller dataset is worse than a clear stop."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise _not_json(path, number, err, f"fix or delete that line ({layout})") from err
        yield Place(str(path), "line", number), value


def _not_json(path: Path, line: int, err: json.JSONDecodeError, fix: str) -> ValueError:
    return ValueError(f"{path} line {line} is not valid JSON: {err.msg} (column {err.colno}); "
                      f"{fix}")


def _json_rows(path: Path) -> Located:
    """A .json file: one top-level array of objects, else JSON lines (as `datasets` reads it)."""
    text = path.read_text(encoding="utf-8-sig")
    if not text.lstrip().startswith("["):
        yield from _json_lines(path, io.StringIO(text), JSON_LAYOUT)
        return
    try:
        values = json.loads(text)
    except json.JSONDecodeError as err:
        raise _not_json(path, err.lineno, err, JSON_LAYOUT) from err
    for number, value in enumerate(values, 1):
        yield Place(str(path), "row", number), value


def _parquet_rows(path: Path) -> Located:
    """Batch by batch, as miles' read_file reads parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches()
        rows = (row for batch in batches for row in batch.to_pylist())
        yield from ((Place(str(path), "row", n), row) for n, row in enumerate(rows, 1))
    except pa.ArrowException as err:
        raise ValueError(f"{path} is not a readable parquet file: {err}") from err


READERS: dict[str, Callable[[Path], Located]] = {
    ".jsonl": _jsonl_rows, ".json": _json_rows, ".parquet": _parquet_rows}


def _as_object(value: Any, place: Place) -> Any:  # noqa: ANN401
    if not isinstance(value, Mapping):
        kind = JSON_KINDS.get(type(value), type(value).__name__)
        raise ValueError(f"{place} is not a JSON object but {kind}: each row is one object, "
                         f"with the --input-key field")
    return value


@dataclass(frozen=True)
class PromptOptions:
    """The data flags, read once from the resolved args."""

    input_key: str = "input"
    label_key: str | None = None
    metadata_key: str = "metadata"
    apply_chat_template: bool = False
    chat_template_kwargs: Mapping[str, Any] | None = None
    max_prompt_len: int | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> PromptOptions:
        return cls(
            input_key=args["input_key"],
            label_key=args["label_key"],
            metadata_key=args["metadata_key"],
            apply_chat_template=bool(args.get("apply_chat_template")),
            chat_template_kwargs=_parse_kwargs(args.get("apply_chat_template_kwargs")),
            max_prompt_len=args["max_prompt_len"],
        )


def _parse_kwargs(raw: Any) -> dict[str, Any]:  # noqa: ANN401
    if raw in (None, ""):
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        parsed = json.loads(raw)
    except ValueError as err:
        raise ValueError(f"--apply-chat-template-kwargs must be a JSON object, got {raw!r}") \
            from err
    if not isinstance(parsed, dict):
        raise ValueError(f"--apply-chat-template-kwargs must be a JSON object, got {raw!r}")
    return parsed


def build_prompts(records: Sequence[Mapping[str, Any]], tokenizer: Any,  # noqa: ANN401
                  options: PromptOptions) -> tuple[list[Prompt], int]:
    """(prompts, number dropped for --max-prompt-len); rows keep their dataset order.

    `records`: load_records' rows, or any sequence of dicts (a message then names row N)."""
    rows = _located_rows(records)
    if not rows:
        raise ValueError(_empty(records))
    for place, row in rows:
        _check_fields(row, place, options)
    texts = [prompt_text(row[options.input_key], tokenizer, options) for _, row in rows]
    # chat templates already hold the special tokens; raw text gets the tokenizer's own
    encoded = tokenizer(texts, add_special_tokens=not options.apply_chat_template)["input_ids"]
    prompts, dropped = [], 0
    for (_, row), text, ids in zip(rows, texts, encoded, strict=True):
        if options.max_prompt_len and len(ids) > options.max_prompt_len:
            dropped += 1
            continue
        label = row[options.label_key] if options.label_key else None
        prompts.append(Prompt(index=len(prompts), text=text, token_ids=list(ids), label=label,
                              metadata=_metadata(row.get(options.metadata_key))))
    if not prompts:
        raise ValueError(f"no prompts left: all {dropped} are longer than --max-prompt-len "
                         f"{options.max_prompt_len}")
    return prompts, dropped


def _located_rows(records: Sequence[Mapping[str, Any]]) -> list[tuple[Place, Mapping[str, Any]]]:
    if isinstance(records, Records):
        return list(zip(records.places, records.rows, strict=True))
    located = [(Place("the prompt data", "row", n), row) for n, row in enumerate(records, 1)]
    return [(place, _as_object(row, place)) for place, row in located]


def _check_fields(row: Mapping[str, Any], place: Place, options: PromptOptions) -> None:
    for flag, key in (("--input-key", options.input_key), ("--label-key", options.label_key)):
        if key and key not in row:
            raise KeyError(f"{flag} {key!r} is not a field of {place} "
                           f"(its fields: {', '.join(map(str, row)) or 'none'})")


def _empty(records: Sequence[Mapping[str, Any]]) -> str:
    where = f": {records.name} holds no rows" if isinstance(records, Records) else ""
    return f"the prompt data is empty{where}"


def prompt_text(prompt: Any, tokenizer: Any, options: PromptOptions) -> str:  # noqa: ANN401
    if not options.apply_chat_template:
        if not isinstance(prompt, str):
            raise ValueError("a prompt is a message list, not a string: set "
                             "--apply-chat-template to format it")
        return prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         **(options.chat_template_kwargs or {}))


def _metadata(raw: Any) -> dict[str, Any]:  # noqa: ANN401
    if raw is None:
        return {}
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.strip() else {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"--metadata-key values must be objects (or JSON strings), got {raw!r}")
    # parquet/arrow structs fill absent keys with None; drop them so defaults apply
    return {k: v for k, v in raw.items() if v is not None}


# --------------------------------------------------------------------------------------------
# epochs
# --------------------------------------------------------------------------------------------
class PromptSource:
    """Prompts for rollout after rollout, epoch after epoch (miles' RolloutDataSource order).

    Stateless by position: the prompts at stream position p are the same whether reached by
    rolling forward or by resuming at rollout r (p = r * rollout_batch_size), so a resumed run
    needs no saved data-loader state.
    """

    def __init__(self, prompts: Sequence[Prompt], *, shuffle: bool, seed: int) -> None:
        if not prompts:
            raise ValueError("no prompts to sample from")
        self.prompts = list(prompts)
        self.shuffle = shuffle
        self.seed = seed
        self._orders: dict[int, list[int]] = {}

    def epoch_order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.prompts)))
            if self.shuffle:
                random.Random(self.seed + epoch).shuffle(order)
            self._orders = {epoch: order}  # rollouts move forward: one epoch cached is enough
        return self._orders[epoch]

    def prompts_at(self, position: int, count: int) -> list[Prompt]:
        """`count` prompts from stream position `position` (crossing epochs as needed)."""
        size = len(self.prompts)
        return [self.prompts[self.epoch_order(p // size)[p % size]]
                for p in range(position, position + count)]


def expand_samples(prompts: Sequence[Prompt], n_samples: int) -> list[Sample]:
    """Each prompt becomes n consecutive samples (a group), numbered within the rollout."""
    return [Sample(prompt=p, group_index=g, sample_index=g * n_samples + k)
            for g, p in enumerate(prompts) for k in range(n_samples)]
