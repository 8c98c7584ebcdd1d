"""Built-in tasks made locally, so runs and tests need no network.

copy-digit (the `tiny-cpu` preset): the prompt is a few random digits and a ":" separator,
e.g. "3 7 1 9 :"; the label is the FIRST digit; the ideal response is that digit K=4 times and
EOS ("3 3 3 3"). Reward `copy-digit` (engine/rollout/rewards.py) is the fraction of the first K
response tokens equal to the label, so a random policy over the 32-token vocabulary scores about
1/32, and every one of the K positions matters (per-token credit: the critic's job).

The tokenizer is a real HF tokenizer (WordLevel over a <= 32 word vocabulary, whitespace and
single-digit pre-tokenization, decoded by joining with spaces), saved with `save_pretrained`
next to the data, so the ordinary `AutoTokenizer.from_pretrained(dir)` path loads it.

arithmetic (the smollm2-135m-cpu preset): single-digit addition word problems in DAPO-Math's
jsonl layout (prompt = a chat message list with one worked example turn, label = the number),
scored by the math reward (last \\boxed{} answer); the tokenizer is the model's own.

Each task also writes a held-out split, eval.jsonl (EVAL_PROMPTS records drawn from another
seed, same layout), for evaluation during training:
    --eval-prompt-data held-out ${RUN_DIR}/data/<task>/eval.jsonl --eval-interval 5
(in a run directory the task lives under data/<task>/; any JSONL in the same layout works).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

TASKS = ("copy-digit", "arithmetic")
DATA_FILE = "train.jsonl"
EVAL_FILE = "eval.jsonl"
EVAL_PROMPTS = 64
EVAL_SEED_OFFSET = 7919  # the held-out split's seed: a prime away from the training seed
PARAMS_FILE = "task.json"

SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
DIGITS = tuple(str(d) for d in range(10))
SEPARATOR = ":"
# words for a chat template (user/assistant turns) and readable fillers; keep the total <= 32
FILLER_WORDS = ("user", "assistant", "copy", "the", "first", "digit", "answer", "is")
VOCAB = SPECIAL_TOKENS + DIGITS + (SEPARATOR,) + FILLER_WORDS
PROMPT_DIGITS = 1
TARGET_LEN = 4  # K: the label repeated K times is the ideal response
MAX_VOCAB = 32
assert len(VOCAB) <= MAX_VOCAB


def prepare_synthetic_task(name: str, out_dir: str | Path, num_prompts: int,
                           seed: int) -> Path:
    """Write task `name` into out_dir (train.jsonl, eval.jsonl, task.json, tokenizer for
    copy-digit).

    Idempotent: a directory already holding the same task and parameters is left as it is.
    """
    makers: dict[str, Callable[[int, int], list[dict[str, Any]]]] = {
        "copy-digit": _copy_digit_rows, "arithmetic": _arithmetic_rows}
    if name not in makers:
        raise ValueError(f"unknown --synthetic-task {name!r}; built-in tasks: {', '.join(TASKS)}")
    if num_prompts < 1:
        raise ValueError(f"--synthetic-num-prompts must be >= 1, got {num_prompts}")
    out = Path(out_dir)
    # version: bumped when a task's records change, so an old cached directory is rewritten
    params = {"task": name, "num_prompts": num_prompts, "seed": seed, "version": 4}
    if _already_prepared(out, params):
        return out
    out.mkdir(parents=True, exist_ok=True)
    _to_jsonl(makers[name](num_prompts, seed), out / DATA_FILE)
    _to_jsonl(makers[name](EVAL_PROMPTS, seed + EVAL_SEED_OFFSET), out / EVAL_FILE)
    if name == "copy-digit":
        build_copy_digit_tokenizer().save_pretrained(str(out))
    # written last: its presence means the rest is complete
    (out / PARAMS_FILE).write_text(json.dumps(params, sort_keys=True))
    return out


def prepare_arithmetic_task(out_dir: str | Path, num_prompts: int, seed: int) -> Path:
    return prepare_synthetic_task("arithmetic", out_dir, num_prompts, seed)


def _already_prepared(out: Path, params: dict[str, Any]) -> bool:
    try:
        stored = json.loads((out / PARAMS_FILE).read_text())
    except (OSError, ValueError):
        return False
    return stored == params and (out / DATA_FILE).is_file() and (out / EVAL_FILE).is_file()


def _to_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    """One compact object per line, keys in the row's order: the bytes `datasets`' to_json wrote
    for these rows (without importing it in the rollout worker). Written to a temporary file,
    then renamed, so a reader never sees half a file."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    tmp.replace(path)


# --------------------------------------------------------------------------------------------
# copy-digit
# --------------------------------------------------------------------------------------------
def copy_digit_record(rng: random.Random) -> dict[str, Any]:
    digits = [rng.choice(DIGITS) for _ in range(PROMPT_DIGITS)]
    return {"prompt": " ".join(digits) + f" {SEPARATOR}", "label": digits[0],
            "metadata": {"target_len": TARGET_LEN}}  # no rm_type: --rm-type reaches them


def _copy_digit_rows(num_prompts: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [copy_digit_record(rng) for _ in range(num_prompts)]


def build_copy_digit_tokenizer():  # noqa: ANN201
    """A PreTrainedTokenizerFast: one id per word of VOCAB, specials first (<pad> = 0)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(VOCAB)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    # "3719:" and "3 7 1 9 :" tokenize the same: split on spaces, then every digit alone
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.Punctuation()])
    # no decoder on purpose: tokenizers then joins tokens with single spaces, which is what
    # the copy-digit reward splits on
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
        unk_token="<unk>", model_max_length=512, padding_side="left",
        clean_up_tokenization_spaces=False)


# --------------------------------------------------------------------------------------------
# arithmetic word problems (DAPO-Math jsonl layout)
# --------------------------------------------------------------------------------------------
# Sized for SmolLM2-135M-Instruct on CPU (smollm2-135m-cpu): single-digit addition, and one
# worked example given as an earlier chat turn, which teaches the answer format (and to end the
# reply with the end-of-turn token) in ~40 prompt tokens. Base model, 64 samples each: this
# prompt 14% right at temperature 1.0 (23% at 0.8); two example turns 78% at 0.8 (little left
# to learn); the example plus an instruction inside one user message ~2%.
NAMES = ("Ava", "Ben", "Chloe", "Dan", "Emma", "Finn", "Grace", "Hugo", "Iris", "Jack")
ITEMS = ("apples", "marbles", "books", "stickers", "coins", "pencils", "cards", "shells")
EXAMPLE_QUESTION = "Dan has 2 cards and gets 3 more. How many cards now?"
EXAMPLE_ANSWER = "2 + 3 = 5. The answer is \\boxed{5}."


def arithmetic_question(name: str, item: str, a: int, b: int) -> str:
    return f"{name} has {a} {item} and gets {b} more. How many {item} now?"


def arithmetic_record(rng: random.Random) -> dict[str, Any]:
    """A prompt in DAPO-Math's layout: a chat message list (example turn, then the question),
    the label the answer as a string, metadata the operands."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    prompt = [{"role": "user", "content": EXAMPLE_QUESTION},
              {"role": "assistant", "content": EXAMPLE_ANSWER},
              {"role": "user", "content": arithmetic_question(name, item, a, b)}]
    return {"prompt": prompt, "label": str(a + b), "metadata": {"kind": "add", "a": a, "b": b}}


def _arithmetic_rows(num_prompts: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [arithmetic_record(rng) for _ in range(num_prompts)]
