"""Prompt data for rollouts, read through `datasets` the way miles reads it (spec section 8).

- `--prompt-data`: a local .jsonl/.json/.parquet file (or a directory of them), else a Hub
  dataset id (needs a network; offline it fails with a message saying so).
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
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .types import Prompt, Sample

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """No progress bars in driver.log or test output for the small files PPO Deck makes."""
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
def load_records(prompt_data: str | Path):  # noqa: ANN201
    """A `datasets.Dataset` (the train split) from a local file/dir, else a Hub id."""
    from datasets import load_dataset

    local = Path(prompt_data).expanduser()
    with quiet_datasets():
        if local.exists():
            builder, files = _local_files(local)
            return load_dataset(builder, data_files=files, split="train")
        try:
            return load_dataset(str(prompt_data), split="train")
        except Exception as err:  # noqa: BLE001 - offline errors come in many types
            raise FileNotFoundError(
                f"--prompt-data {prompt_data!r} is not a local file, and loading it as a Hub "
                f"dataset failed (offline?): {type(err).__name__}: {err}") from err


def _local_files(path: Path) -> tuple[str, list[str]]:
    files = [path] if path.is_file() else sorted(
        p for p in path.iterdir() if p.suffix in LOCAL_FORMATS)
    if not files:
        raise FileNotFoundError(f"--prompt-data {path} holds no .jsonl/.json/.parquet files")
    builders = {LOCAL_FORMATS.get(p.suffix) for p in files}
    if None in builders or len(builders) > 1:
        raise ValueError(f"--prompt-data {path}: expected .jsonl, .json or .parquet files of "
                         f"one kind, got {sorted(p.name for p in files)[:5]}")
    return builders.pop(), [str(p) for p in files]


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


def build_prompts(records: Any, tokenizer: Any,  # noqa: ANN401
                  options: PromptOptions) -> tuple[list[Prompt], int]:
    """(prompts, number dropped for --max-prompt-len); rows keep their dataset order."""
    if options.input_key not in records.column_names:
        raise KeyError(f"--input-key {options.input_key!r} is not a field of the prompt data "
                       f"(fields: {', '.join(records.column_names)})")
    if options.label_key and options.label_key not in records.column_names:
        raise KeyError(f"--label-key {options.label_key!r} is not a field of the prompt data "
                       f"(fields: {', '.join(records.column_names)})")
    texts = [prompt_text(row[options.input_key], tokenizer, options) for row in records]
    # chat templates already hold the special tokens; raw text gets the tokenizer's own
    encoded = tokenizer(texts, add_special_tokens=not options.apply_chat_template)["input_ids"]
    has_meta = options.metadata_key in records.column_names
    prompts, dropped = [], 0
    for row, text, ids in zip(records, texts, encoded, strict=True):
        if options.max_prompt_len and len(ids) > options.max_prompt_len:
            dropped += 1
            continue
        label = row[options.label_key] if options.label_key else None
        metadata = _metadata(row[options.metadata_key]) if has_meta else {}
        prompts.append(Prompt(index=len(prompts), text=text, token_ids=list(ids), label=label,
                              metadata=metadata))
    if not prompts:
        raise ValueError(f"no prompts left: all {dropped} are longer than --max-prompt-len "
                         f"{options.max_prompt_len}" if dropped else "the prompt data is empty")
    return prompts, dropped


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
