"""Writes what presets/qwen3-0.6b-ppo-miles-1gpu.toml reads, for a random-init run of miles:
a Hugging Face model directory without weights (config.json of the Qwen3-0.6B shape and a
tokenizer over all 151,936 ids, so every id SGLang samples decodes to text), an empty
checkpoint directory (--load, --ref-load: miles then starts from its model provider's
initialization), and prompts.jsonl (copy-digit prompts with their label, miles' input/label keys).

    python3 bench/miles_gpu/prep_model.py [DIR]   # default ${PPODECK_HOME}/miles-qwen3-0.6b
Needs transformers and tokenizers (the carried tf/ set on the GPU machine).
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

VOCAB = 151936
PROMPTS = 512


def default_dir() -> Path:
    home = os.environ.get("PPODECK_HOME") or os.path.expanduser("~/.cache/ppodeck")
    return Path(home) / "miles-qwen3-0.6b"


def write_model(model_dir: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config

    config = Qwen3Config(
        vocab_size=VOCAB, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, tie_word_embeddings=True, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=2, eos_token_id=1, pad_token_id=0)
    config.architectures = ["Qwen3ForCausalLM"]
    config.dtype = "bfloat16"
    config.save_pretrained(model_dir)
    words = ["<pad>", "<eos>", "<bos>", "<unk>", *map(str, range(10)), ":"]
    vocab = {word: i for i, word in enumerate(words)}
    vocab.update({f"w{i}": i for i in range(len(words), VOCAB)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
        unk_token="<unk>", model_max_length=40960, clean_up_tokenization_spaces=False)
    tokenizer.save_pretrained(model_dir)


def write_prompts(path: Path, count: int = PROMPTS, seed: int = 0) -> None:
    """Digits then ':'; the label is the first digit (the copy-digit task's answer)."""
    rng = random.Random(seed)
    with open(path, "w") as out:
        for _ in range(count):
            digits = [str(rng.randrange(10)) for _ in range(rng.randint(4, 12))]
            out.write(json.dumps({"prompt": " ".join(digits) + " :", "label": digits[0]}) + "\n")


def main(argv: list[str]) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    root = Path(argv[0]) if argv else default_dir()
    for sub in ("model", "empty"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    write_model(root / "model")
    write_prompts(root / "prompts.jsonl")
    print(f"prep ok: {root} ({', '.join(sorted(os.listdir(root / 'model')))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
