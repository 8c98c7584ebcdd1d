"""Prompt data: jsonl/parquet through datasets, keys, chat template, length filter, epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppodeck.engine.rollout.data import (
    PromptOptions,
    PromptSource,
    build_prompts,
    expand_samples,
    load_records,
    load_tokenizer,
)
from ppodeck.engine.rollout.synthetic import prepare_synthetic_task
from ppodeck.engine.rollout.types import Prompt

ROWS = [
    {"question": "3 7 1 :", "answer": "3", "info": {"rm_type": "copy-digit", "target_len": 2}},
    {"question": "5 5 :", "answer": "5", "info": {"rm_type": "copy-digit", "target_len": 2}},
    {"question": "1 2 3 4 5 6 7 8 :", "answer": "1", "info": {"rm_type": "copy-digit",
                                                              "target_len": 2}},
]
OPTIONS = PromptOptions(input_key="question", label_key="answer", metadata_key="info")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    task = prepare_synthetic_task("copy-digit", tmp_path_factory.mktemp("tok"), 4, seed=0)
    return load_tokenizer(task)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    from datasets import Dataset

    Dataset.from_list(rows).to_parquet(str(path))
    return path


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_jsonl_and_parquet_give_the_same_prompts(tmp_path: Path, tokenizer, writer) -> None:
    suffix = ".jsonl" if writer is write_jsonl else ".parquet"
    records = load_records(writer(tmp_path / f"p{suffix}", ROWS))
    prompts, dropped = build_prompts(records, tokenizer, OPTIONS)
    assert dropped == 0
    assert [p.text for p in prompts] == [r["question"] for r in ROWS]
    assert [p.label for p in prompts] == ["3", "5", "1"]
    assert prompts[0].metadata == {"rm_type": "copy-digit", "target_len": 2}
    assert tokenizer.decode(prompts[0].token_ids) == "3 7 1 :"
    assert [p.index for p in prompts] == [0, 1, 2]


def test_metadata_as_json_string_and_missing_label_key(tmp_path: Path, tokenizer) -> None:
    rows = [{"input": "1 :", "metadata": json.dumps({"rm_type": "copy-digit"})}]
    prompts, _ = build_prompts(load_records(write_jsonl(tmp_path / "p.jsonl", rows)),
                               tokenizer, PromptOptions())
    assert prompts[0].metadata == {"rm_type": "copy-digit"} and prompts[0].label is None


def test_max_prompt_len_drops_and_counts(tmp_path: Path, tokenizer) -> None:
    records = load_records(write_jsonl(tmp_path / "p.jsonl", ROWS))
    options = PromptOptions(**{**OPTIONS.__dict__, "max_prompt_len": 5})
    prompts, dropped = build_prompts(records, tokenizer, options)
    assert dropped == 1 and [p.label for p in prompts] == ["3", "5"]
    assert [p.index for p in prompts] == [0, 1]
    tight = PromptOptions(**{**OPTIONS.__dict__, "max_prompt_len": 1})
    with pytest.raises(ValueError, match="--max-prompt-len"):
        build_prompts(records, tokenizer, tight)


def test_chat_template_wraps_string_prompts_and_takes_message_lists(tmp_path: Path,
                                                                     tokenizer) -> None:
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant {% endif %}")
    rows = [{"input": "3 7 :"},
            {"input": [{"role": "user", "content": "5 :"}, {"role": "assistant", "content": "5"},
                       {"role": "user", "content": "1 :"}]}]
    path = tmp_path / "p.jsonl"
    write_jsonl(path, rows[:1])
    options = PromptOptions(apply_chat_template=True)
    prompts, _ = build_prompts(load_records(path), tokenizer, options)
    assert prompts[0].text == "user 3 7 : assistant "
    assert tokenizer.decode(prompts[0].token_ids) == "user 3 7 : assistant"
    write_jsonl(path, rows[1:])
    prompts, _ = build_prompts(load_records(path), tokenizer, options)
    assert prompts[0].text == "user 5 : assistant 5 user 1 : assistant "
    with pytest.raises(ValueError, match="--apply-chat-template"):
        build_prompts(load_records(path), tokenizer, PromptOptions())


def test_missing_input_key_lists_the_fields(tmp_path: Path, tokenizer) -> None:
    records = load_records(write_jsonl(tmp_path / "p.jsonl", ROWS))
    with pytest.raises(KeyError, match="--input-key 'prompt'.*question"):
        build_prompts(records, tokenizer, PromptOptions(input_key="prompt"))


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no .jsonl"):
        load_records(tmp_path)
    (tmp_path / "x.csv").write_text("a\n1\n")
    with pytest.raises(FileNotFoundError):
        load_records(tmp_path)


def make_prompts(count: int) -> list[Prompt]:
    return [Prompt(index=i, text=str(i), token_ids=[i]) for i in range(count)]


def test_shuffle_per_epoch_is_reproducible() -> None:
    source = PromptSource(make_prompts(10), shuffle=True, seed=42)
    epoch0 = [p.index for p in source.prompts_at(0, 10)]
    epoch1 = [p.index for p in source.prompts_at(10, 10)]
    assert sorted(epoch0) == sorted(epoch1) == list(range(10))
    assert epoch0 != epoch1 and epoch0 != list(range(10))
    again = PromptSource(make_prompts(10), shuffle=True, seed=42)
    # rollouts of 4 cross the epoch boundary and read the same stream
    stream = [p.index for r in range(5) for p in again.prompts_at(4 * r, 4)]
    assert stream == epoch0 + epoch1
    other = PromptSource(make_prompts(10), shuffle=True, seed=43)
    assert [p.index for p in other.prompts_at(0, 10)] != epoch0


def test_no_shuffle_keeps_file_order_and_wraps() -> None:
    source = PromptSource(make_prompts(3), shuffle=False, seed=42)
    assert [p.index for p in source.prompts_at(2, 5)] == [2, 0, 1, 2, 0]


def test_expand_samples_groups_prompts() -> None:
    samples = expand_samples(make_prompts(2), 3)
    assert [(s.group_index, s.sample_index, s.prompt.index) for s in samples] == [
        (0, 0, 0), (0, 1, 0), (0, 2, 0), (1, 3, 1), (1, 4, 1), (1, 5, 1)]
