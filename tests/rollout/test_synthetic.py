"""The built-in synthetic tasks: data, tokenizer, idempotence."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ppodeck.engine.rollout.rewards import get_reward_fn
from ppodeck.engine.rollout.synthetic import (
    DATA_FILE,
    EXAMPLE_ANSWER,
    MAX_VOCAB,
    PROMPT_DIGITS,
    TARGET_LEN,
    prepare_arithmetic_task,
    prepare_synthetic_task,
)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def copy_digit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic_task("copy-digit", tmp_path_factory.mktemp("cd"), 50, seed=3)


def test_copy_digit_records(copy_digit: Path) -> None:
    rows = read_jsonl(copy_digit / DATA_FILE)
    assert len(rows) == 50
    for row in rows:
        tokens = row["prompt"].split()
        assert len(tokens) == PROMPT_DIGITS + 1 and tokens[-1] == ":"
        assert row["label"] == tokens[0]  # the label is the FIRST digit
        assert row["metadata"] == {"target_len": TARGET_LEN}  # no rm_type: --rm-type wins
    assert len({row["prompt"] for row in rows}) >= min(10 ** PROMPT_DIGITS, 50) // 2


def test_tokenizer_loads_through_auto_tokenizer(copy_digit: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(copy_digit))
    assert len(tok) <= MAX_VOCAB
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 1)
    ids = tok("3 7 1 9 :", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and tok.unk_token_id not in ids
    assert tok("3719:", add_special_tokens=False)["input_ids"] == ids
    ideal = tok("3 3 3 3", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    text = tok.decode(ideal, skip_special_tokens=True)
    assert text == "3 3 3 3"
    assert get_reward_fn("copy-digit")(text, "3", {"target_len": TARGET_LEN}) == 1.0


def test_prepare_is_idempotent_and_notices_new_parameters(tmp_path: Path) -> None:
    out = prepare_synthetic_task("copy-digit", tmp_path, 20, seed=1)
    data = out / DATA_FILE
    before = (data.stat().st_mtime_ns, data.read_text())
    prepare_synthetic_task("copy-digit", tmp_path, 20, seed=1)
    assert (data.stat().st_mtime_ns, data.read_text()) == before
    prepare_synthetic_task("copy-digit", tmp_path, 20, seed=2)
    assert data.read_text() != before[1]
    assert len(read_jsonl(data)) == 20


def test_same_seed_same_data(tmp_path: Path) -> None:
    a = prepare_synthetic_task("copy-digit", tmp_path / "a", 30, seed=9)
    b = prepare_synthetic_task("copy-digit", tmp_path / "b", 30, seed=9)
    assert (a / DATA_FILE).read_text() == (b / DATA_FILE).read_text()


def test_unknown_task_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--synthetic-task"):
        prepare_synthetic_task("nope", tmp_path, 5, seed=0)


def test_arithmetic_records_are_dapo_like_and_correct(tmp_path: Path) -> None:
    rows = read_jsonl(prepare_arithmetic_task(tmp_path, 60, seed=0) / DATA_FILE)
    assert len(rows) == 60
    math = get_reward_fn("math")
    for row in rows:
        _example, shown, question = row["prompt"]  # a chat message list, as in DAPO-Math
        assert [m["role"] for m in row["prompt"]] == ["user", "assistant", "user"]
        assert shown["content"] == EXAMPLE_ANSWER and "\\boxed{5}" in EXAMPLE_ANSWER
        a, b = (int(x) for x in re.findall(r"\d+", question["content"]))
        assert (a, b) == (row["metadata"]["a"], row["metadata"]["b"]) and 1 <= a <= 9
        assert row["label"] == str(a + b)
        assert math(f"{a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}.", row["label"]) == 1
    assert len({row["label"] for row in rows}) > 8
