"""Launch scripts in miles' style, one pattern each (written for these tests), imported as a
miles user pastes or passes them. Nothing in them is run."""

from __future__ import annotations

from pathlib import Path

from ppodeck.engine.config import check
from ppodeck.engine.miles.script_import import import_script

SUBMIT = """
ray job submit --address="http://127.0.0.1:8265" \\
   --runtime-env-json="${RUNTIME_ENV_JSON}" \\
   -- python3 train.py \\
   --actor-num-gpus-per-node 2 \\
   ${MODEL_ARGS[@]} \\
   ${CKPT_ARGS[@]}
"""


def codes(report) -> list[str]:
    return [i.code for i in report.issues]


def test_multiline_runtime_env_json_is_no_quote_warning() -> None:
    text = """#!/bin/bash
RUNTIME_ENV_JSON="{
  \\"env_vars\\": {
    \\"PYTHONPATH\\": \\"/opt/Megatron-LM/\\",
    \\"CUDA_DEVICE_MAX_CONNECTIONS\\": \\"1\\"
  }
}"
CKPT_ARGS=( --hf-checkpoint /models/tiny )
ray job submit --runtime-env-json='{
     "env_vars": {"NCCL_ALGO": "Ring"}
   }' \\
   -- python3 train.py --num-rollout 4 ${CKPT_ARGS[@]}
"""
    report = import_script(text, env={})
    assert report.config.values == {"num_rollout": 4, "hf_checkpoint": "/models/tiny"}
    assert "command.syntax_error" not in codes(report) and report.unresolved == []
    assert report.train_line == 9


def test_model_args_helper_and_read_ra_resolve_the_shape() -> None:
    text = """
SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
MODEL_ARGS_LINE="$(python3 "${SCRIPT_DIR}/../miles/utils/external_utils/model_args_utils.py" \\
  "qwen3-4B")" || exit 1
read -ra MODEL_ARGS <<< "${MODEL_ARGS_LINE}"
CKPT_ARGS=(
   --hf-checkpoint /models/Qwen3-4B   # HF weights
)
""" + SUBMIT
    report = import_script(text, env={})
    values = report.config.values
    assert (values["num_layers"], values["hidden_size"], values["num_attention_heads"]) == (
        36, 2560, 32)
    assert values["rotary_base"] == 1000000 and values["qk_layernorm"] is True
    origin = report.origins["--num-layers"]
    assert origin.kind == "model" and origin.detail.startswith("qwen3-4B: built-in table")
    assert origin.line == 3
    assert not any(i.code == "model.shape_required" for i in check(report.config).issues)


def test_exported_rotary_base_reaches_the_model_args() -> None:
    text = """
export MODEL_ARGS_ROTARY_BASE=5000000
MODEL_ARGS_LINE=$(python3 model_args_utils.py qwen3-4B)
read -ra MODEL_ARGS <<< "$MODEL_ARGS_LINE"
""" + SUBMIT
    report = import_script(text, env={})
    assert report.config.values["rotary_base"] == 5000000


def test_sourced_model_file_next_to_the_script(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.sh").write_text(
        'MODEL_ARGS=(\n  --num-layers "${LAYERS:-2}"\n  --hidden-size 64\n'
        '  --num-attention-heads 4\n)\n')
    script = tmp_path / "run-tiny.sh"
    script.write_text('SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null '
                      '&& pwd)"\nsource "${SCRIPT_DIR}/models/tiny.sh"\n' + SUBMIT)
    report = import_script(script.read_text(), env={}, path=script)
    assert (report.config.values["num_layers"], report.config.values["hidden_size"]) == (2, 64)
    assert report.origins["--hidden-size"].file == "tiny.sh"


def test_sourced_published_model_without_the_file_uses_the_table() -> None:
    report = import_script('source "${SCRIPT_DIR}/models/qwen3-0.6B.sh"\n' + SUBMIT, env={})
    assert report.config.values["num_layers"] == 28
    pasted = import_script('source "${SCRIPT_DIR}/models/my-model.sh"\n' + SUBMIT, env={})
    assert "command.source_not_read" in codes(pasted)
    assert "command.unresolved_variable" in codes(pasted)  # ${MODEL_ARGS[@]}


def test_defaults_arithmetic_and_known_if_branches() -> None:
    text = """
export NUM_GPUS=${NUM_GPUS:-8}
HALF=$((NUM_GPUS / 2))
if [ "$NUM_GPUS" -gt 4 ]; then
  TP=2
else
  TP=1
fi
case "$MODE" in
  debug) ROLLOUTS=2 ;;
  *) ROLLOUTS=100 ;;
esac
python3 train.py --actor-num-gpus-per-node $HALF --tensor-model-parallel-size ${TP} \\
  --num-rollout "$ROLLOUTS"
"""
    report = import_script(text, env={"MODE": "prod"})
    assert report.config.values == {"actor_num_gpus_per_node": 4,
                                    "tensor_model_parallel_size": 2, "num_rollout": 100}
    assert "command.assumed" not in codes(report)


def test_unresolved_pieces_are_named_with_their_line() -> None:
    text = """
NVLINK=$(nvidia-smi topo -m | grep -c NV)
python3 train.py --num-rollout $NVLINK --save "$OUT_DIR/ckpt" --lr 1e-6
"""
    report = import_script(text, env={})
    [sub, var] = report.unresolved
    assert sub.line == 2 and "not run" in sub.why
    assert var.variable == "OUT_DIR" and var.line == 3
    assert report.config.values["save"] == "$OUT_DIR/ckpt"
    assert {"command.unresolved", "command.unresolved_variable"} <= set(codes(report))


def test_tree_sitter_split_url_is_joined_back() -> None:
    text = 'IP=10.0.0.1\nPORT=30000\nARGS=(\n  --rm-url http://$IP:$PORT/generate\n)\n' \
           'python3 train.py ${ARGS[@]}\n'
    assert import_script(text, env={}).config.values["rm_url"] == \
        "http://10.0.0.1:30000/generate"


def test_moe_and_lora_flags_are_refused_not_unknown() -> None:
    text = """
MODEL_ARGS_LINE=$(python3 model_args_utils.py qwen3-30B-A3B)
read -ra MODEL_ARGS <<< "$MODEL_ARGS_LINE"
LORA=( --lora-rank 16 --target-modules all-linear )
python3 train.py ${MODEL_ARGS[@]} ${LORA[@]} --expert-model-parallel-size 4 \\
  --sglang-cuda-graph-bs 1 2 4
"""
    report = import_script(text, env={})
    assert report.config.values["moe_layer_freq"] == "[" + ",".join(["1"] * 48) + "]"
    assert report.config.passthrough == ()  # every flag is known to the schema
    refused = {i.flags[0] for i in check(report.config).issues if i.code == "engine.refused"}
    assert {"--num-experts", "--lora-rank", "--expert-model-parallel-size",
            "--moe-grouped-gemm"} <= refused
    command_only, refused_lines, unknown = report.engine_classes()
    assert "--sglang-cuda-graph-bs" in command_only and unknown == []


def test_miles_root_model_file_is_read_not_run(tmp_path: Path) -> None:
    models = tmp_path / "scripts" / "models"
    models.mkdir(parents=True)
    (models / "toy-moe.py").write_text('''import os
from model_args_utils import moe_layer_freq
raise SystemExit("this file must not be imported")
FIRST_K = 1
def model_args(nlayers=None):
    nlayers = nlayers if nlayers is not None else int(os.environ.get("MODEL_ARGS_NUM_LAYERS") or 3)
    return (
        f"--num-layers {nlayers} --hidden-size {32 * 2} "
        f"--moe-layer-freq {moe_layer_freq(nlayers=nlayers, first_k_dense_replace=FIRST_K)} "
    )
''')
    (models / "toy-moe-2layer.py").write_text(
        "from model_args_utils import load_sibling_model_args\n"
        "def model_args():\n    return load_sibling_model_args(__file__, 'toy-moe', nlayers=2)\n")
    text = "L=$(python3 model_args_utils.py toy-moe-2layer)\nread -ra M <<< \"$L\"\n" \
           "python3 train.py ${M[@]}\n"
    report = import_script(text, env={}, miles_root=tmp_path)
    values = report.config.values
    assert (values["num_layers"], values["hidden_size"], values["moe_layer_freq"]) == (
        2, 64, "[0,1]")
    missing = import_script(text, env={})
    assert "command.model_args_unresolved" in codes(missing)
    assert "--miles-root" in next(i.fix for i in missing.issues
                                  if i.code == "command.model_args_unresolved")


def test_report_lines_name_each_section() -> None:
    text = "MODEL_ARGS_LINE=$(python3 model_args_utils.py qwen2.5-0.5B)\n" \
           "read -ra MODEL_ARGS <<< \"$MODEL_ARGS_LINE\"\n" \
           "python3 train.py ${MODEL_ARGS[@]} --save $CKPT --attention-backend flash\n"
    text_lines = "\n".join(import_script(text, env={}).lines())
    assert "model qwen2.5-0.5B: built-in table" in text_lines
    assert "$CKPT" in text_lines and "CKPT is not defined" in text_lines
    assert "--attention-backend" in text_lines  # command-only
    assert "--add-qkv-bias" in text_lines  # Qwen2.5's qkv bias: honoured, so not refused
    assert "refused by PPO Deck's engine (0)" in text_lines


def test_an_unclosed_quote_keeps_its_last_character_whole() -> None:
    """A cut paste ends inside "...": the last character is kept, not split mid-UTF-8 into a
    surrogate that no preset file can hold (found by tests/reliability/test_fuzz.py)."""
    assert import_script('--x 0"\u00e9', env={}).config.passthrough == ("--x", "0\u00e9")
    report = import_script('python3 train.py --wandb-group "run\u00e9"', env={})
    assert report.config.values["wandb_group"] == "run\u00e9"


def test_a_second_train_command_is_named_by_its_line() -> None:
    """Found by the property test: the info about the ignored commands named no place."""
    from ppodeck.engine.miles.script_import import parse_command_line

    _config, issues = parse_command_line("python3 train.py --lr 1e-5\npython3 train.py --lr 2e-5\n")
    (several,) = [i for i in issues if i.code == "command.several_train_commands"]
    assert several.flags == ("<pasted>:2",) and "<pasted>:1" in several.message


# found by the slow property test: tree-sitter-bash 0.25.1's scanner crashed the process
# (SIGSEGV, about 2 runs in 3) on `{` followed by this private-use character
SCANNER_CRASH = "python3 train.py --synthetic-num-prompts \U000c9c66\u008e6{\U000c34c3"


def test_a_line_that_crashed_the_bash_grammar_is_read_in_a_fresh_process() -> None:
    import subprocess
    import sys

    code = ("import sys; from ppodeck.engine.miles.script_import import parse_command_line; "
            "parse_command_line(sys.argv[1]); print('read')")
    for _ in range(5):  # the crash read uninitialized memory: not every run fell
        done = subprocess.run([sys.executable, "-c", code, SCANNER_CRASH],
                              cwd=Path(__file__).resolve().parents[2], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0 and done.stdout.strip() == "read", done.stderr[-2000:]


def test_non_ascii_text_is_read_as_written() -> None:
    """The grammar reads non-ASCII bytes as `.` (engine/miles/shell.py); the words, a literal
    `$` before them and a syntax problem's text still come from what was written."""
    report = import_script('python3 train.py --wandb-project caf\u00e9-\U0001F600 '
                           '--wandb-group "\u00fc $\u00e9" --lr 1e-6', env={})
    assert report.config.values["wandb_project"] == "caf\u00e9-\U0001F600"
    assert report.config.values["wandb_group"] == "\u00fc $\u00e9"
    assert report.unresolved == []
    broken = import_script('python3 train.py --wandb-group "caf\u00e9\n', env={})
    problems = [i.message for i in broken.issues if i.code == "command.syntax_error"]
    assert problems and any("caf\u00e9" in m for m in problems), problems


def test_flags_of_other_programs_are_not_train_flags() -> None:
    text = ("hf download Qwen/Qwen3-0.6B --local-dir /m/Qwen3-0.6B\n"
            "srun --nodes 2 --ntasks-per-node 1 python3 \"$TRAIN\" --lr 1e-6\n")
    report = import_script(text, env={})
    assert report.config.values == {"lr": 1e-6} and report.config.passthrough == ()
    other = next(i for i in report.issues if i.code == "command.other_programs")
    assert "hf download (<pasted>:1)" in other.message
    assert "srun's own flags (<pasted>:2)" in other.message
    with_train = import_script("srun --nodes 2 python3 train.py --lr 2e-6\n", env={})
    assert with_train.config.values == {"lr": 2e-6}
