"""Prompt data: jsonl/json/parquet read without datasets, keys, chat template, length filter,
epochs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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
    import pyarrow as pa
    import pyarrow.parquet as pq

    # row_group_size 2: three rows come back in two batches, read one after the other
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2)
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


def at(path: Path, where: str, start: bool = True) -> str:
    """A pattern for a message naming `path` and the place in it."""
    return ("^" if start else "") + re.escape(f"{path} {where}")


def test_jsonl_skips_blank_lines_and_keeps_the_files_own_values(tmp_path: Path,
                                                                  tokenizer) -> None:
    path = tmp_path / "p.jsonl"
    lines = [json.dumps(r) for r in ROWS]
    path.write_text(f"{lines[0]}\n\n   \n{lines[1]}\n{lines[2]}")  # no newline at the end
    records = load_records(path)
    assert list(records) == ROWS
    assert [str(p) for p in records.places] == [f"{path} line {n}" for n in (1, 4, 5)]
    # as miles reads them: the file's own values, no column types unified across rows
    write_jsonl(path, [{"input": "1 :", "label": 3}, {"input": "2 :", "label": "x"}])
    assert [r["label"] for r in load_records(path)] == [3, "x"]


def test_json_array_and_json_lines(tmp_path: Path, tokenizer) -> None:
    array = tmp_path / "array.json"
    array.write_text(json.dumps(ROWS, indent=2))
    lines = write_jsonl(tmp_path / "lines.json", ROWS)
    for path in (array, lines):
        prompts, _ = build_prompts(load_records(path), tokenizer, OPTIONS)
        assert [p.label for p in prompts] == ["3", "5", "1"]
    assert str(load_records(array).places[2]) == f"{array} row 3"


def test_a_directory_reads_its_files_in_name_order(tmp_path: Path, tokenizer) -> None:
    write_jsonl(tmp_path / "b.jsonl", ROWS[1:])
    write_jsonl(tmp_path / "a.jsonl", ROWS[:1])
    (tmp_path / "notes.txt").write_text("not prompt data")
    records = load_records(tmp_path)
    assert list(records) == ROWS
    assert [str(p) for p in records.places] == [
        f"{tmp_path / 'a.jsonl'} line 1", f"{tmp_path / 'b.jsonl'} line 1",
        f"{tmp_path / 'b.jsonl'} line 2"]
    write_parquet(tmp_path / "c.parquet", ROWS)
    with pytest.raises(ValueError, match="files of one kind"):
        load_records(tmp_path)


def test_a_bad_json_line_is_named_by_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + '{"question": "1 :", "answer": \n')
    with pytest.raises(ValueError, match=at(path, "line 3") + " is not valid JSON: .*fix or"):
        load_records(path)
    broken = tmp_path / "p.json"
    broken.write_text('[{"question": "1 :"},\n {"question": }]')
    with pytest.raises(ValueError, match=at(broken, "line 2") + " is not valid JSON"):
        load_records(broken)


def test_a_row_that_is_not_an_object_is_named(tmp_path: Path, tokenizer) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(ROWS[0]) + '\n["3 :", "3"]\n')
    with pytest.raises(ValueError, match=at(path, "line 2") + " is not a JSON object but an array"):
        load_records(path)
    array = tmp_path / "p.json"
    array.write_text('["3 :"]')
    with pytest.raises(ValueError, match=at(array, "row 1") + " is not a JSON object but a string"):
        load_records(array)
    with pytest.raises(ValueError, match="^the prompt data row 2 is not a JSON object"):
        build_prompts([ROWS[0], "3 :"], tokenizer, OPTIONS)


def test_a_row_without_the_input_or_label_key_is_named(tmp_path: Path, tokenizer) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n\n" for r in [ROWS[0], {"answer": "5"}]))
    with pytest.raises(KeyError, match="--input-key 'question' is not a field of "
                                       + at(path, "line 3 (its fields: answer)", start=False)):
        build_prompts(load_records(path), tokenizer, OPTIONS)
    write_jsonl(path, [ROWS[0], {"question": "5 :"}])
    with pytest.raises(KeyError, match="--label-key 'answer' is not a field of "
                                       + at(path, "line 2", start=False)):
        build_prompts(load_records(path), tokenizer, OPTIONS)


def test_build_prompts_takes_any_sequence_of_dicts(tokenizer) -> None:
    prompts, _ = build_prompts(ROWS, tokenizer, OPTIONS)
    assert [p.label for p in prompts] == ["3", "5", "1"]
    with pytest.raises(KeyError, match="not a field of the prompt data row 1"):
        build_prompts(ROWS, tokenizer, PromptOptions(input_key="prompt"))
    with pytest.raises(ValueError, match="the prompt data is empty"):
        build_prompts([], tokenizer, OPTIONS)


def test_a_hub_id_still_loads_through_datasets(monkeypatch: pytest.MonkeyPatch,
                                               tokenizer) -> None:
    import datasets

    asked = []

    def fake_load(name: str, split: str) -> datasets.Dataset:
        asked.append((name, split))
        return datasets.Dataset.from_list(ROWS)

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    records = load_records("someone/copy-digit")
    assert asked == [("someone/copy-digit", "train")] and list(records) == ROWS
    assert str(records.places[1]) == "someone/copy-digit row 2"
    prompts, _ = build_prompts(records, tokenizer, OPTIONS)
    assert prompts[2].metadata == {"rm_type": "copy-digit", "target_len": 2}
    # a datasets.Dataset itself is a sequence of dicts too
    assert build_prompts(datasets.Dataset.from_list(ROWS), tokenizer, OPTIONS)[0] == prompts

    def offline(name: str, split: str) -> None:
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(FileNotFoundError, match="not a local file.*Hub dataset failed.*offline"):
        load_records("someone/copy-digit")


# the tiny-cpu preset's rollout worker, set up as the driver sets it up (with an eval set)
NO_DATASETS_PROBE = """
import os, sys
from ppodeck.engine.config import resolve
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.rollout.manager import RolloutManager

config = resolve_preset(load_preset("tiny-cpu")).with_values(
    run_dir=sys.argv[1], synthetic_num_prompts=64, eval_interval=2,
    eval_prompt_data=["held-out", "${RUN_DIR}/data/copy-digit/eval.jsonl"])
info = RolloutManager(dict(resolve(config, os.environ))).init()
assert info["num_prompts"] == 64, info
print(sorted(name for name in sys.modules if name.split(".")[0] == "datasets"))
"""


def test_the_tiny_cpu_rollout_worker_never_imports_datasets(tmp_path: Path) -> None:
    """Importing `datasets` alone cost every run's rollout worker 1-1.5 s of CPU."""
    repo = Path(__file__).resolve().parents[2]  # the working directory: `ppodeck` from here
    result = subprocess.run([sys.executable, "-c", NO_DATASETS_PROBE, str(tmp_path)], cwd=repo,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


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
