"""Hostile miles launchers, generated: each is small on disk (or a few MB at most) and tries to
make a static reader spend time or memory without bound. tests/reliability/test_hostile_launchers
reads each through `ppodeck validate --from-command` in a child with a memory limit."""

from __future__ import annotations

HEAD = ("from dataclasses import dataclass\n"
        "import miles.utils.external_utils.command_utils as U\n\n"
        "@dataclass\nclass ScriptArgs(U.ExecuteTrainConfig):\n    gpus: int = 1\n\n")


# A complete small config (tiny-cpu's argv), so that a launcher read to the end validates and
# any error in the answer comes from the hostile construct.
TRAIN_ARGS = (
    "--actor-num-nodes 1 --actor-num-gpus-per-node 1 --colocate --rm-type copy-digit "
    "--input-key prompt --label-key label --num-rollout 2 --rollout-batch-size 4 "
    "--n-samples-per-prompt 2 --global-batch-size 8 --advantage-estimator ppo "
    "--num-layers 2 --hidden-size 64 --ffn-hidden-size 256 --num-attention-heads 4 "
    "--vocab-size 32 --seq-length 64 --max-position-embeddings 64 --rollout-backend hf "
    "--synthetic-task copy-digit --model-init random --rollout-max-response-len 6 ")
MARK = "  # hostile"  # ends the line a refusal must name


def _main(body: str) -> str:
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    return (HEAD + "@U.dataclass_cli\ndef main(args: ScriptArgs):\n" + lines
            + "\nif __name__ == '__main__':\n    main()\n")


def _train(extra: str = "") -> str:
    return (f"U.execute_train(train_args={TRAIN_ARGS!r}" + extra
            + ", num_gpus_per_node=1, megatron_model_type=None)")


def marked_line(text: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.endswith(MARK))


def doubled_string() -> str:
    """A string doubled 60 times: 2**60 characters if built."""
    return _main("s = 'ab '\nfor _ in range(60):\n    s = s + s  # hostile\n" + _train(" + s"))


def doubled_augassign() -> str:
    return _main("s = '--x '\nfor _ in range(80):\n    s += s  # hostile\n" + _train(" + s"))


def doubled_list() -> str:
    return _main("xs = ['--x']\nfor _ in range(70):\n    xs = xs + xs  # hostile\n"
                 + _train(" + ' '.join(xs)"))


def extend_loop() -> str:
    return _main("xs = ['--x']\nfor _ in range(200):\n    xs.extend(xs)  # hostile\n"
                 + _train(" + ' '.join(xs)"))


def huge_literal_in_os_system() -> str:
    """A 220 kB literal in a command line (within the file cap, over the text cap): quoting it
    must not cost the square of its size."""
    big = "x" * 220_000
    return _main(f"import os\nos.system('python3 train.py --num-rollout 2 {big}')  # hostile\n"
                 + _train())


def oversized_file() -> str:
    """5 MB: refused before parsing, whose memory grows with the statements."""
    return _main("x = 1\n" * 800_000 + _train())


def huge_literal_in_train_args() -> str:
    big = "--y " * 55_000
    return _main(f"extra = '{big}'  # hostile\n" + _train(" + extra"))


def many_statements() -> str:
    """7,000 statements (within the file cap): linear, not quadratic, in the file's size."""
    body = "".join(f"v{i} = 'value {i} ' + str({i})\n" for i in range(7_000))
    return _main(body + _train())


def deep_nesting() -> str:
    """Parentheses nested past what Python's parser takes."""
    return _main("x = " + "(" * 5000 + "1" + ")" * 5000 + "  # hostile\n" + _train())


def deep_expression() -> str:
    """A long chain of `+`: deeper than Python's own parser follows."""
    return _main("x = '' " + "+ 'a' " * 50_000 + "\n" + _train(" + x"))


def infinite_while() -> str:
    return _main("n = 0\nwhile True:  # hostile\n    n += 1\n" + _train())


def nested_loops() -> str:
    """Loops inside loops: each bounded, their product is not."""
    body = ""
    for depth in range(6):
        body += "    " * depth + f"for i{depth} in range(100000):\n"
    body += "    " * 6 + "t = str(i5)\n"
    return _main(body + _train())


def recursion() -> str:
    return _main("def f(n):\n    return f(n + 1) + f(n + 2)\n" + _train(" + f(0)"))


def mutual_recursion() -> str:
    return _main("def f(n):\n    return g(n) + g(n)\ndef g(n):\n    return f(n) + f(n)\n"
                 + _train(" + f(0)"))


def fstring_doubling() -> str:
    return _main("s = 'x'\nfor _ in range(70):\n    s = f'{s}{s}'  # hostile\n"
                 + _train(" + s"))


def integer_squaring() -> str:
    return _main("n = 10\nfor _ in range(40):\n    n = n * n  # hostile\n"
                 + _train(" + str(n)"))


def join_doubling() -> str:
    return _main("s = 'ab'\nfor _ in range(64):\n    s = ' '.join([s, s])  # hostile\n"
                 + _train(" + s"))


def replace_doubling() -> str:
    return _main("s = 'aa'\nfor _ in range(64):\n    s = s.replace('a', 'aa')  # hostile\n"
                 + _train(" + s"))


def comprehension_product() -> str:
    return _main("xs = [a * b for a in range(100000) for b in range(100000)]\n" + _train())


def width_padding() -> str:
    return _main("s = 'x'.center(10 ** 9)  # hostile\n" + _train(" + s"))


def format_width() -> str:
    return _main("s = f'{1:>999999999}'  # hostile\n" + _train(" + s"))


def regex_backtracking() -> str:
    return _main("import re\nm = re.findall('(a+)+$', 'a' * 60 + 'b')  # hostile\n"
                 + _train(" + str(m)"))


def json_depth() -> str:
    return _main("import json\nv = json.loads('[' * 90000 + ']' * 90000)\n" + _train(" + str(v)"))


def many_functions() -> str:
    """A chain of 60 functions each calling the next twice: 2**60 calls if followed."""
    defs = "".join(f"def f{i}():\n    return f{i + 1}() + f{i + 1}()\n" for i in range(60))
    defs += "def f60():\n    return 'x'\n"
    return (HEAD + defs + "\n@U.dataclass_cli\ndef main(args: ScriptArgs):\n    "
            + _train(" + f0()") + "\n")


HOSTILE = {fn.__name__: fn for fn in (
    doubled_string, doubled_augassign, doubled_list, extend_loop, huge_literal_in_os_system,
    oversized_file, huge_literal_in_train_args, many_statements, deep_nesting, deep_expression,
    infinite_while, nested_loops, recursion, mutual_recursion, fstring_doubling, integer_squaring,
    join_doubling, replace_doubling, comprehension_product, width_padding, format_width,
    regex_backtracking, json_depth, many_functions)}


# --- bash launch scripts --------------------------------------------------------------------

TRAIN_SH = f"python3 train.py {TRAIN_ARGS}"


def sh_doubled_variable() -> str:
    """Doubled from 1 character, the 18th doubling passes 200,000: that line is named."""
    return ("A=x\n" + 'A="$A$A"\n' * 17 + 'A="$A$A"  # hostile\n' + 'A="$A$A"\n' * 62
            + TRAIN_SH + " $A\n")


def sh_doubled_array() -> str:
    return "ARGS=(--x)\n" + 'ARGS+=("${ARGS[@]}")\n' * 60 + TRAIN_SH + " ${ARGS[@]}\n"


def sh_oversized() -> str:
    return "".join(f"V{i}=value{i}\n" for i in range(100_000)) + TRAIN_SH + "\n"


def sh_heredoc() -> str:
    return "cat <<EOF\n" + "x\n" * 200_000 + "EOF\n" + TRAIN_SH + "\n"


def sh_nested_substitution() -> str:
    return "A=" + "$(" * 3000 + "echo x" + ")" * 3000 + "\n" + TRAIN_SH + " $A\n"


def sh_sources_itself() -> str:
    return "source ./sh_sources_itself.sh\n" + TRAIN_SH + "\n"


HOSTILE_SCRIPTS = {fn.__name__: fn for fn in (
    sh_doubled_variable, sh_doubled_array, sh_oversized, sh_heredoc, sh_nested_substitution,
    sh_sources_itself)}
