"""miles' model arguments by name, without running miles' Python.

miles launch scripts get the Megatron model shape from
`$(python3 miles/utils/external_utils/model_args_utils.py NAME)`, which imports
`scripts/models/NAME.py` and prints its `model_args()`; older scripts `source
scripts/models/NAME.sh`, which defines `MODEL_ARGS=( ... )`. PPO Deck resolves NAME in two ways:

- `BUILTIN`: the published names, with the numbers miles' own files produce with no environment
  overrides (radixark/miles at commit `MILES_COMMIT`, `scripts/models/NAME.py`; the same strings
  are miles' snapshots in `tests/snapshots/model_args/NAME.txt`). Only the numbers are kept here.
- `DECK_ADDED`: a few models PPO work starts from that miles has no file for (Qwen2.5-Math,
  the base Llama 3.1 / 3.2 models), from their HF config.json, said as such wherever used.
- a miles checkout (`--miles-root`): `scripts/models/NAME.py` is read as text with `ast` (string
  literals, f-strings, module constants, `os.environ.get`, the two helpers miles provides to model
  files) and never imported; `scripts/models/NAME.sh` is read by the shell reader.

The environment variables miles' model files read (`MODEL_ARGS_ROTARY_BASE`,
`MODEL_ARGS_NUM_LAYERS`) are applied to the built-in args the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MILES_COMMIT = "31f1ca961a94cb860cec3b2dea34ec332bfa8f76"
MODEL_DIR = Path("scripts") / "models"


@dataclass(frozen=True)
class BuiltinModel:
    """A published model's args: the default line, the env vars its file reads, and the number
    of dense layers before the MoE ones (--moe-layer-freq is rebuilt from it)."""

    args: str
    reads_env: tuple[str, ...] = ()
    first_k_dense: int | None = None


class ModelFileError(Exception):
    """A model file that cannot be read without running it (the message names the line)."""


def checkout_beside(path: Path | None, levels: int = 6) -> Path | None:
    """The miles checkout a launcher sits in (`scripts/run_x.py`, `examples/a/b/run.py`): the
    nearest folder above it holding both `scripts/models` and the `miles` package."""
    if path is None:
        return None
    for parent in list(path.expanduser().resolve().parents)[:levels]:
        if (parent / MODEL_DIR).is_dir() and (parent / "miles").is_dir():
            return parent
    return None


def lookup(name: str, env: Mapping[str, str], miles_root: Path | None = None
           ) -> tuple[str | None, str]:
    """NAME -> (one-line model args, where they came from) or (None, why not)."""
    if miles_root is not None:
        found = _from_checkout(name, env, miles_root)
        if found[0] is not None:
            return found
        if name not in BUILTIN and name not in DECK_ADDED:
            return found
    if name not in BUILTIN and name in DECK_ADDED:
        return (_apply_env(DECK_ADDED[name], env),
                "built-in table, PPO Deck's entry from the model's HF config.json "
                "(miles has no such file)")
    model = BUILTIN.get(name)
    if model is None:
        close = _close_names(name)
        hint = f" (did you mean {close}?)" if close else ""
        return None, (f"{name!r} is not one of the {len(BUILTIN)} built-in miles model "
                      f"names{hint}; point --miles-root at a miles checkout to read "
                      f"{MODEL_DIR}/{name}.py")
    return (_apply_env(model, env),
            f"built-in table, miles {MODEL_DIR}/{name}.py @ {MILES_COMMIT[:9]}")


def _close_names(name: str) -> str:
    import difflib

    return ", ".join(difflib.get_close_matches(name, [*BUILTIN, *DECK_ADDED], n=2,
                                               cutoff=0.75))


def _apply_env(model: BuiltinModel, env: Mapping[str, str]) -> str:
    tokens = model.args.split()
    layers_now = tokens[tokens.index("--num-layers") + 1] if "--num-layers" in tokens else "0"
    if model.first_k_dense is not None:  # the table writes the layer list as a placeholder
        _set_value(tokens, "--moe-layer-freq", moe_layer_freq(int(layers_now),
                                                              model.first_k_dense))
    if "MODEL_ARGS_ROTARY_BASE" in model.reads_env and env.get("MODEL_ARGS_ROTARY_BASE"):
        _set_value(tokens, "--rotary-base", env["MODEL_ARGS_ROTARY_BASE"])
    layers = env.get("MODEL_ARGS_NUM_LAYERS")
    if "MODEL_ARGS_NUM_LAYERS" in model.reads_env and layers and layers.strip().isdigit():
        count = int(layers)
        _set_value(tokens, "--num-layers", str(count))
        if model.first_k_dense is not None:
            _set_value(tokens, "--moe-layer-freq", moe_layer_freq(count, model.first_k_dense))
    return " ".join(tokens)


def _set_value(tokens: list[str], flag: str, value: str) -> None:
    if flag in tokens:
        index = tokens.index(flag)
        if index + 1 < len(tokens):
            tokens[index + 1] = value


def moe_layer_freq(layers: int, first_k_dense: int) -> str:
    """Megatron's --moe-layer-freq list: the first K layers dense (0), the others MoE (1)."""
    dense = min(first_k_dense, layers)
    return "[" + ",".join(["0"] * dense + ["1"] * (layers - dense)) + "]"


# --- a miles checkout, read as text ----------------------------------------------------------

def _from_checkout(name: str, env: Mapping[str, str], root: Path) -> tuple[str | None, str]:
    py_file = root / MODEL_DIR / f"{name}.py"
    sh_file = root / MODEL_DIR / f"{name}.sh"
    if py_file.is_file():
        try:
            return " ".join(read_model_py(py_file, env).split()), str(py_file)
        except ModelFileError as exc:
            return None, f"{py_file}: {exc}"
    if sh_file.is_file():
        return read_model_sh(sh_file, env)
    return None, f"no {MODEL_DIR}/{name}.py or .sh under --miles-root {root}"


def read_model_sh(path: Path, env: Mapping[str, str]) -> tuple[str | None, str]:
    """An older `MODEL_ARGS=( ... )` file, through the shell reader."""
    from .shell import ScriptReader

    reader = ScriptReader(env=env)
    reader.read(path.read_text(encoding="utf-8", errors="replace"), path.name, path)
    var = reader.vars.get("MODEL_ARGS")
    if var is None:
        return None, f"{path} defines no MODEL_ARGS"
    bad = [u for w in var.items for u in w.unresolved]
    if bad:
        return None, f"{path}: {bad[0].describe()}"
    return " ".join(w.text for w in var.items), str(path)


def read_model_py(path: Path, env: Mapping[str, str], kwargs: Mapping[str, Any] | None = None,
                  depth: int = 0) -> str:
    """`model_args(**kwargs)` of a miles model file, evaluated over its syntax tree only."""
    if depth > 4:
        raise ModelFileError("load_sibling_model_args nests too deeply")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError) as exc:
        raise ModelFileError(f"not readable: {exc}") from exc
    reader = _PyModel(path, env, depth)
    function = None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            reader.assign(node, reader.module)
        elif isinstance(node, ast.FunctionDef) and node.name == "model_args":
            function = node
    if function is None:
        raise ModelFileError("no model_args() function")
    return str(reader.call(function, dict(kwargs or {})))


class _PyModel:
    """Evaluates the small subset of Python miles' model files are written in."""

    def __init__(self, path: Path, env: Mapping[str, str], depth: int) -> None:
        self.path, self.env, self.depth = path, env, depth
        self.module: dict[str, Any] = {"__file__": str(path)}

    def call(self, function: ast.FunctionDef, kwargs: dict[str, Any]) -> Any:
        scope: dict[str, Any] = {}
        positional = function.args.args
        defaults = [None] * (len(positional) - len(function.args.defaults)) + [
            self.value(d, self.module) for d in function.args.defaults]
        for arg, default in zip(positional, defaults, strict=True):
            scope[arg.arg] = kwargs.pop(arg.arg, default)
        for arg, default_node in zip(function.args.kwonlyargs, function.args.kw_defaults,
                                     strict=True):
            default = self.value(default_node, self.module) if default_node else None
            scope[arg.arg] = kwargs.pop(arg.arg, default)
        for statement in function.body:
            if isinstance(statement, ast.Assign):
                self.assign(statement, scope)
            elif isinstance(statement, ast.Return) and statement.value is not None:
                return self.value(statement.value, scope)
            elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # a docstring
            else:
                raise ModelFileError(f"line {statement.lineno}: statement not read")
        raise ModelFileError("model_args() returns nothing")

    def assign(self, node: ast.Assign, scope: dict[str, Any]) -> None:
        value = self.value(node.value, scope)
        for target in node.targets:
            if isinstance(target, ast.Name):
                scope[target.id] = value

    def value(self, node: ast.AST, scope: dict[str, Any]) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise ModelFileError(f"line {getattr(node, 'lineno', '?')}: "
                                 f"{type(node).__name__} not read")
        return method(node, scope)

    def _Constant(self, node: ast.Constant, scope: dict[str, Any]) -> Any:
        return node.value

    def _Name(self, node: ast.Name, scope: dict[str, Any]) -> Any:
        if node.id in scope:
            return scope[node.id]
        if node.id in self.module:
            return self.module[node.id]
        raise ModelFileError(f"line {node.lineno}: {node.id} is not defined")

    def _JoinedStr(self, node: ast.JoinedStr, scope: dict[str, Any]) -> str:
        return "".join(str(self.value(v, scope)) for v in node.values)

    def _FormattedValue(self, node: ast.FormattedValue, scope: dict[str, Any]) -> str:
        value = self.value(node.value, scope)
        spec = self.value(node.format_spec, scope) if node.format_spec else ""
        return format(value, spec)

    def _BinOp(self, node: ast.BinOp, scope: dict[str, Any]) -> Any:
        left, right = self.value(node.left, scope), self.value(node.right, scope)
        ops = {ast.Add: lambda: left + right, ast.Sub: lambda: left - right,
               ast.Mult: lambda: left * right, ast.FloorDiv: lambda: left // right,
               ast.Div: lambda: left / right}
        op = ops.get(type(node.op))
        if op is None:
            raise ModelFileError(f"line {node.lineno}: operator not read")
        return op()

    def _UnaryOp(self, node: ast.UnaryOp, scope: dict[str, Any]) -> Any:
        if isinstance(node.op, ast.USub):
            return -self.value(node.operand, scope)
        raise ModelFileError(f"line {node.lineno}: operator not read")

    def _IfExp(self, node: ast.IfExp, scope: dict[str, Any]) -> Any:
        test = self.value(node.test, scope)
        return self.value(node.body if test else node.orelse, scope)

    def _Compare(self, node: ast.Compare, scope: dict[str, Any]) -> bool:
        if len(node.ops) != 1:
            raise ModelFileError(f"line {node.lineno}: comparison not read")
        left, right = self.value(node.left, scope), self.value(node.comparators[0], scope)
        compare = {ast.Is: lambda: left is right, ast.IsNot: lambda: left is not right,
                   ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right}
        op = compare.get(type(node.ops[0]))
        if op is None:
            raise ModelFileError(f"line {node.lineno}: comparison not read")
        return op()

    def _BoolOp(self, node: ast.BoolOp, scope: dict[str, Any]) -> Any:
        result: Any = None
        for item in node.values:
            result = self.value(item, scope)
            if isinstance(node.op, ast.Or) and result:
                return result
            if isinstance(node.op, ast.And) and not result:
                return result
        return result

    def _Call(self, node: ast.Call, scope: dict[str, Any]) -> Any:
        name = ast.unparse(node.func)
        args = [self.value(a, scope) for a in node.args]
        kwargs = {k.arg: self.value(k.value, scope) for k in node.keywords if k.arg}
        if name in ("os.environ.get", "os.getenv"):
            return self.env.get(args[0], args[1] if len(args) > 1 else None)
        if name in ("int", "str", "float"):
            return {"int": int, "str": str, "float": float}[name](*args)
        if name == "moe_layer_freq":
            return moe_layer_freq(int(kwargs["nlayers"]), int(kwargs["first_k_dense_replace"]))
        if name == "load_sibling_model_args":
            sibling = self.path.parent / f"{args[1]}.py"
            return read_model_py(sibling, self.env, kwargs, self.depth + 1)
        raise ModelFileError(f"line {node.lineno}: call to {name}() not read")


# --- the built-in table ----------------------------------------------------------------------
# Values: radixark/miles @ MILES_COMMIT, scripts/models/<name>.py (model_args() with no
# overrides; identical to tests/snapshots/model_args/<name>.txt there). A MoE model's
# --moe-layer-freq list is written `{moe_layer_freq}` and rebuilt from --num-layers and
# first_k_dense (miles' own files build it the same way).

BUILTIN: dict[str, BuiltinModel] = {
    "llama3.1-8B-Instruct": BuiltinModel(
        "--swiglu --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--max-position-embeddings 131072 --use-rotary-position-embeddings "
        "--disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-5 --rotary-base "
        "500000 --vocab-size 128256 --kv-channels 128 --use-rope-scaling "
        "--rotary-scaling-factor 8.0 --untie-embeddings-and-output-weights"),
    "llama3.2-3B-Instruct-amd": BuiltinModel(
        "--swiglu --num-layers 28 --hidden-size 3072 --ffn-hidden-size 8192 "
        "--num-attention-heads 24 --group-query-attention --num-query-groups 8 "
        "--max-position-embeddings 131072 --use-rotary-position-embeddings "
        "--disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-5 --rotary-base "
        "500000 --vocab-size 128256 --kv-channels 128 --use-rope-scaling "
        "--rotary-scaling-factor 32.0"),
    "llama3.2-3B-Instruct": BuiltinModel(
        "--swiglu --num-layers 28 --hidden-size 3072 --ffn-hidden-size 8192 "
        "--num-attention-heads 24 --group-query-attention --num-query-groups 8 "
        "--max-position-embeddings 131072 --use-rotary-position-embeddings "
        "--disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-5 --rotary-base "
        "500000 --vocab-size 128256 --kv-channels 128 --use-rope-scaling "
        "--rotary-scaling-factor 32.0"),
    "mimo-7B-rl": BuiltinModel(
        "--swiglu --num-layers 36 --hidden-size 4096 --ffn-hidden-size 11008 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --add-qkv-bias "
        "--normalization RMSNorm --norm-epsilon 1e-05 --rotary-base 640000 --vocab-size "
        "151680 --untie-embeddings-and-output-weights --max-position-embeddings 32768 "
        "--mtp-num-layers 1"),
    "qwen2.5-0.5B": BuiltinModel(
        "--swiglu --num-layers 24 --hidden-size 896 --ffn-hidden-size 4864 "
        "--num-attention-heads 14 --use-rotary-position-embeddings --disable-bias-linear "
        "--add-qkv-bias --normalization RMSNorm --norm-epsilon 1e-6 --rotary-base 1000000 "
        "--group-query-attention --num-query-groups 2 --vocab-size 151936"),
    "qwen2.5-1.5B": BuiltinModel(
        "--swiglu --num-layers 28 --hidden-size 1536 --ffn-hidden-size 8960 "
        "--num-attention-heads 12 --use-rotary-position-embeddings --disable-bias-linear "
        "--add-qkv-bias --normalization RMSNorm --norm-epsilon 1e-6 --rotary-base 10000 "
        "--group-query-attention --num-query-groups 2 --vocab-size 151936"),
    "qwen2.5-32B": BuiltinModel(
        "--swiglu --num-layers 64 --hidden-size 5120 --ffn-hidden-size 27648 "
        "--num-attention-heads 40 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --add-qkv-bias "
        "--normalization RMSNorm --norm-epsilon 1e-5 --rotary-base 1000000 --vocab-size "
        "152064 --untie-embeddings-and-output-weights"),
    "qwen2.5-3B": BuiltinModel(
        "--swiglu --num-layers 36 --hidden-size 2048 --ffn-hidden-size 11008 "
        "--num-attention-heads 16 --use-rotary-position-embeddings --disable-bias-linear "
        "--add-qkv-bias --normalization RMSNorm --norm-epsilon 1e-6 --rotary-base 1000000 "
        "--group-query-attention --num-query-groups 2 --vocab-size 151936"),
    "qwen2.5-7B": BuiltinModel(
        "--swiglu --num-layers 28 --hidden-size 3584 --ffn-hidden-size 18944 "
        "--num-attention-heads 28 --group-query-attention --num-query-groups 4 "
        "--use-rotary-position-embeddings --disable-bias-linear --add-qkv-bias "
        "--normalization RMSNorm --norm-epsilon 1e-06 --rotary-base 1000000 --vocab-size "
        "152064 --untie-embeddings-and-output-weights"),
    "qwen3-0.6B": BuiltinModel(
        "--swiglu --num-layers 28 --hidden-size 1024 --ffn-hidden-size 3072 "
        "--num-attention-heads 16 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --normalization RMSNorm "
        "--norm-epsilon 1e-6 --rotary-base 1000000 --vocab-size 151936 --kv-channels 128 "
        "--qk-layernorm"),
    "qwen3-1.7B": BuiltinModel(
        "--swiglu --num-layers 28 --hidden-size 2048 --ffn-hidden-size 6144 "
        "--num-attention-heads 16 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --normalization RMSNorm "
        "--norm-epsilon 1e-6 --rotary-base 1000000 --vocab-size 151936 --kv-channels 128 "
        "--qk-layernorm",
        reads_env=('MODEL_ARGS_ROTARY_BASE',)),
    "qwen3-14B": BuiltinModel(
        "--swiglu --num-layers 40 --hidden-size 5120 --ffn-hidden-size 17408 "
        "--num-attention-heads 40 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --normalization RMSNorm "
        "--norm-epsilon 1e-6 --rotary-base 1000000 --vocab-size 151936 --kv-channels 128 "
        "--qk-layernorm --untie-embeddings-and-output-weights"),
    "qwen3-235B-A22B": BuiltinModel(
        "--disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads "
        "64 --num-query-groups 4 --kv-channels 128 --num-layers 94 --hidden-size 4096 "
        "--ffn-hidden-size 12288 --normalization RMSNorm --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 1.0 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 151936 --rotary-base 1000000 "
        "--moe-ffn-hidden-size 1536 --moe-router-score-function softmax "
        "--moe-token-dispatcher-type alltoall --moe-router-topk 8 --moe-layer-freq "
        "{moe_layer_freq} --num-experts 128 --moe-grouped-gemm --moe-token-drop-policy probs "
        "--moe-router-dtype fp32 --moe-permute-fusion --moe-aux-loss-coeff 0",
        reads_env=('MODEL_ARGS_ROTARY_BASE',), first_k_dense=0),
    "qwen3-30B-A3B-5layer": BuiltinModel(
        "--disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads "
        "32 --num-query-groups 4 --kv-channels 128 --num-layers 5 --hidden-size 2048 "
        "--ffn-hidden-size 6144 --normalization RMSNorm --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 1.0 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 151936 --rotary-base 1000000 "
        "--moe-ffn-hidden-size 768 --moe-router-score-function softmax "
        "--moe-token-dispatcher-type alltoall --moe-router-topk 8 --moe-layer-freq "
        "{moe_layer_freq} --num-experts 128 --moe-grouped-gemm --moe-token-drop-policy probs "
        "--moe-router-dtype fp32 --moe-permute-fusion --moe-aux-loss-coeff 0",
        first_k_dense=0),
    "qwen3-30B-A3B": BuiltinModel(
        "--disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads "
        "32 --num-query-groups 4 --kv-channels 128 --num-layers 48 --hidden-size 2048 "
        "--ffn-hidden-size 6144 --normalization RMSNorm --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 1.0 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 151936 --rotary-base 1000000 "
        "--moe-ffn-hidden-size 768 --moe-router-score-function softmax "
        "--moe-token-dispatcher-type alltoall --moe-router-topk 8 --moe-layer-freq "
        "{moe_layer_freq} --num-experts 128 --moe-grouped-gemm --moe-token-drop-policy probs "
        "--moe-router-dtype fp32 --moe-permute-fusion --moe-aux-loss-coeff 0",
        reads_env=('MODEL_ARGS_NUM_LAYERS', 'MODEL_ARGS_ROTARY_BASE'), first_k_dense=0),
    "qwen3-32B": BuiltinModel(
        "--swiglu --num-layers 64 --hidden-size 5120 --ffn-hidden-size 25600 "
        "--num-attention-heads 64 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --normalization RMSNorm "
        "--norm-epsilon 1e-6 --rotary-base 1000000 --vocab-size 151936 --kv-channels 128 "
        "--qk-layernorm --untie-embeddings-and-output-weights"),
    "qwen3-4B-Instruct-2507": BuiltinModel(
        "--swiglu --num-layers 36 --hidden-size 2560 --ffn-hidden-size 9728 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --normalization RMSNorm "
        "--norm-epsilon 1e-6 --rotary-base 5000000 --vocab-size 151936 --kv-channels 128 "
        "--qk-layernorm"),
    "qwen3-4B": BuiltinModel(
        "--swiglu --num-layers 36 --hidden-size 2560 --ffn-hidden-size 9728 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --normalization RMSNorm "
        "--norm-epsilon 1e-6 --rotary-base 1000000 --vocab-size 151936 --kv-channels 128 "
        "--qk-layernorm",
        reads_env=('MODEL_ARGS_ROTARY_BASE',)),
    "qwen3-8B": BuiltinModel(
        "--swiglu --num-layers 36 --hidden-size 4096 --ffn-hidden-size 12288 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--use-rotary-position-embeddings --disable-bias-linear --normalization RMSNorm "
        "--norm-epsilon 1e-6 --rotary-base 1000000 --vocab-size 151936 --kv-channels 128 "
        "--qk-layernorm --untie-embeddings-and-output-weights",
        reads_env=('MODEL_ARGS_ROTARY_BASE',)),
    "qwen3-next-80B-A3B": BuiltinModel(
        "--spec miles_plugins.models.qwen3_next get_qwen3_next_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 16 --num-query-groups 2 "
        "--kv-channels 256 --num-layers 48 --hidden-size 2048 --ffn-hidden-size 5120 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 151936 --rotary-base 10000000 "
        "--moe-ffn-hidden-size 512 --moe-shared-expert-intermediate-size 512 "
        "--moe-router-score-function softmax --moe-token-dispatcher-type alltoall "
        "--moe-router-topk 10 --moe-layer-freq {moe_layer_freq} --num-experts 512 "
        "--moe-grouped-gemm --moe-token-drop-policy probs --moe-router-dtype fp32 "
        "--moe-permute-fusion --moe-aux-loss-coeff 0 --attention-output-gate "
        "--moe-shared-expert-gate --mtp-num-layers 1",
        first_k_dense=0),
    "qwen3.5-27B": BuiltinModel(
        "--spec miles_plugins.models.qwen3_5 get_qwen3_5_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 24 --num-query-groups 4 "
        "--kv-channels 256 --num-layers 64 --hidden-size 5120 --ffn-hidden-size 17408 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 248320 --rotary-base 10000000 "
        "--attention-output-gate"),
    "qwen3.5-35B-A3B": BuiltinModel(
        "--spec miles_plugins.models.qwen3_5 get_qwen3_5_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 16 --num-query-groups 2 "
        "--kv-channels 256 --num-layers 40 --hidden-size 2048 --ffn-hidden-size 512 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 248320 --rotary-base 10000000 "
        "--moe-ffn-hidden-size 512 --moe-shared-expert-intermediate-size 512 "
        "--moe-router-score-function softmax --moe-token-dispatcher-type alltoall "
        "--moe-router-topk 8 --moe-layer-freq {moe_layer_freq} --num-experts 256 "
        "--moe-grouped-gemm --moe-token-drop-policy probs --moe-router-dtype fp32 "
        "--moe-permute-fusion --moe-aux-loss-coeff 0 --attention-output-gate "
        "--moe-shared-expert-gate --mtp-num-layers 1",
        first_k_dense=0),
    "qwen3.5-4B": BuiltinModel(
        "--spec miles_plugins.models.qwen3_5 get_qwen3_5_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 16 --num-query-groups 4 "
        "--kv-channels 256 --num-layers 32 --hidden-size 2560 --ffn-hidden-size 9216 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu --vocab-size 248320 --rotary-base "
        "10000000 --attention-output-gate"),
    "qwen3.5-9B": BuiltinModel(
        "--spec miles_plugins.models.qwen3_5 get_qwen3_5_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 16 --num-query-groups 4 "
        "--kv-channels 256 --num-layers 32 --hidden-size 4096 --ffn-hidden-size 12288 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 248320 --rotary-base 10000000 "
        "--attention-output-gate"),
    "qwen3.6-27B": BuiltinModel(
        "--spec miles_plugins.models.qwen3_5 get_qwen3_5_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 24 --num-query-groups 4 "
        "--kv-channels 256 --num-layers 64 --hidden-size 5120 --ffn-hidden-size 17408 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 248320 --rotary-base 10000000 "
        "--attention-output-gate"),
    "qwen3.6-35B-A3B": BuiltinModel(
        "--spec miles_plugins.models.qwen3_5 get_qwen3_5_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 16 --num-query-groups 2 "
        "--kv-channels 256 --num-layers 40 --hidden-size 2048 --ffn-hidden-size 512 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 248320 --rotary-base 10000000 "
        "--moe-ffn-hidden-size 512 --moe-shared-expert-intermediate-size 512 "
        "--moe-router-score-function softmax --moe-token-dispatcher-type alltoall "
        "--moe-router-topk 8 --moe-layer-freq {moe_layer_freq} --num-experts 256 "
        "--moe-grouped-gemm --moe-token-drop-policy probs --moe-router-dtype fp32 "
        "--moe-permute-fusion --moe-aux-loss-coeff 0 --attention-output-gate "
        "--moe-shared-expert-gate --mtp-num-layers 1",
        first_k_dense=0),
    "qwen3.6-35B-A3B_lora": BuiltinModel(
        "--spec miles_plugins.models.qwen3_5 get_qwen3_5_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 16 --num-query-groups 2 "
        "--kv-channels 256 --num-layers 40 --hidden-size 2048 --ffn-hidden-size 512 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 248320 --rotary-base 10000000 "
        "--moe-ffn-hidden-size 512 --moe-shared-expert-intermediate-size 512 "
        "--moe-router-score-function softmax --moe-token-dispatcher-type alltoall "
        "--moe-router-topk 8 --moe-layer-freq {moe_layer_freq} --num-experts 256 "
        "--moe-grouped-gemm --moe-token-drop-policy probs --moe-router-dtype fp32 "
        "--moe-permute-fusion --moe-aux-loss-coeff 0 --attention-output-gate "
        "--moe-shared-expert-gate --mtp-num-layers 1",
        first_k_dense=0),
    "qwen3.8-27B": BuiltinModel(
        "--spec miles_plugins.models.qwen3_5 get_qwen3_5_spec --disable-bias-linear "
        "--qk-layernorm --group-query-attention --num-attention-heads 24 --num-query-groups 4 "
        "--kv-channels 256 --num-layers 64 --hidden-size 5120 --ffn-hidden-size 17408 "
        "--normalization RMSNorm --apply-layernorm-1p --position-embedding-type rope "
        "--norm-epsilon 1e-6 --rotary-percent 0.25 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 248320 --rotary-base 10000000 "
        "--attention-output-gate"),
    "kimi-k2": BuiltinModel(
        "--disable-bias-linear --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 "
        "--num-attention-heads 64 --kv-channels 64 --normalization RMSNorm "
        "--position-embedding-type rope --rope-type yarn --norm-epsilon 1e-6 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 163840 --multi-latent-attention "
        "--q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 "
        "--v-head-dim 128 --qk-layernorm --rotary-scaling-factor 32.0 --rotary-base 50000 "
        "--original-max-position-embeddings 4096 --beta-fast 1 --beta-slow 1 --mscale 1.0 "
        "--mscale-all-dim 1.0 --attention-softmax-in-fp32 --no-rope-fusion --num-experts 384 "
        "--moe-layer-freq {moe_layer_freq} --moe-ffn-hidden-size 2048 --moe-router-topk 8 "
        "--moe-shared-expert-intermediate-size 2048 --moe-router-pre-softmax "
        "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
        "--moe-router-load-balancing-type seq_aux_loss --moe-token-dispatcher-type alltoall "
        "--moe-aux-loss-coeff 0 --moe-router-bias-update-rate 0 --moe-router-group-topk 1 "
        "--moe-router-num-groups 1 --moe-grouped-gemm --moe-router-topk-scaling-factor 2.827 "
        "--moe-router-dtype fp32 --moe-permute-fusion",
        first_k_dense=1),
    "kimi-k2-thinking": BuiltinModel(
        "--disable-bias-linear --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 "
        "--num-attention-heads 64 --kv-channels 64 --normalization RMSNorm "
        "--position-embedding-type rope --rope-type yarn --norm-epsilon 1e-5 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 163840 --multi-latent-attention "
        "--q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 "
        "--v-head-dim 128 --qk-layernorm --rotary-scaling-factor 64.0 --rotary-base 50000 "
        "--original-max-position-embeddings 4096 --beta-fast 1 --beta-slow 1 --mscale 1.0 "
        "--mscale-all-dim 1.0 --attention-softmax-in-fp32 --no-rope-fusion --num-experts 384 "
        "--moe-layer-freq {moe_layer_freq} --moe-ffn-hidden-size 2048 --moe-router-topk 8 "
        "--moe-shared-expert-intermediate-size 2048 --moe-router-pre-softmax "
        "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
        "--moe-router-load-balancing-type seq_aux_loss --moe-token-dispatcher-type alltoall "
        "--moe-aux-loss-coeff 0 --moe-router-bias-update-rate 0 --moe-router-group-topk 1 "
        "--moe-router-num-groups 1 --moe-grouped-gemm --moe-router-topk-scaling-factor 2.827 "
        "--moe-router-dtype fp32 --moe-permute-fusion",
        first_k_dense=1),
    "kimi-k25": BuiltinModel(
        "--disable-bias-linear --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 "
        "--num-attention-heads 64 --kv-channels 64 --normalization RMSNorm "
        "--position-embedding-type rope --rope-type yarn --norm-epsilon 1e-5 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 163840 --multi-latent-attention "
        "--q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 "
        "--v-head-dim 128 --qk-layernorm --rotary-scaling-factor 64.0 --rotary-base 50000 "
        "--original-max-position-embeddings 4096 --beta-fast 32 --beta-slow 1 --mscale 1.0 "
        "--mscale-all-dim 1.0 --attention-softmax-in-fp32 --no-rope-fusion --num-experts 384 "
        "--moe-layer-freq {moe_layer_freq} --moe-ffn-hidden-size 2048 --moe-router-topk 8 "
        "--moe-shared-expert-intermediate-size 2048 --moe-router-pre-softmax "
        "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
        "--moe-router-load-balancing-type seq_aux_loss --moe-token-dispatcher-type alltoall "
        "--moe-aux-loss-coeff 0 --moe-router-bias-update-rate 0 --moe-router-group-topk 1 "
        "--moe-router-num-groups 1 --moe-grouped-gemm --moe-router-topk-scaling-factor 2.827 "
        "--moe-router-dtype fp32 --moe-permute-fusion",
        first_k_dense=1),
    "gpt-oss-20b": BuiltinModel(
        "--num-layers 24 --hidden-size 2880 --ffn-hidden-size 2880 --num-attention-heads 64 "
        "--group-query-attention --num-query-groups 8 --kv-channels 64 "
        "--use-rotary-position-embeddings --rotary-percent 1.0 --rotary-base 150000 "
        "--max-position-embeddings 131072 --normalization RMSNorm --norm-epsilon 1e-5 "
        "--swiglu --untie-embeddings-and-output-weights --vocab-size 201088 --softmax-type "
        "learnable --window-size 128,0 --window-attn-skip-freq 2 --no-masked-softmax-fusion "
        "--no-rope-fusion --num-experts 32 --moe-router-topk 4 --moe-aux-loss-coeff 0.0 "
        "--moe-token-dispatcher-type alltoall --moe-router-dtype fp32 --moe-grouped-gemm"),
    "nemotron-3-nano-4b": BuiltinModel(
        "--disable-bias-linear --group-query-attention --num-attention-heads 40 "
        "--num-query-groups 8 --kv-channels 128 --num-layers 42 --hidden-size 3136 "
        "--ffn-hidden-size 12544 --normalization RMSNorm --position-embedding-type none "
        "--vocab-size 131072 --make-vocab-size-divisible-by 128 "
        "--untie-embeddings-and-output-weights"),
    "nemotron-3-nano-30b-a3b": BuiltinModel(
        "--disable-bias-linear --group-query-attention --num-attention-heads 32 "
        "--num-query-groups 2 --kv-channels 128 --num-layers 52 --hidden-size 2688 "
        "--ffn-hidden-size 1856 --normalization RMSNorm --position-embedding-type none "
        "--vocab-size 131072 --make-vocab-size-divisible-by 128 "
        "--untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 6 "
        "--moe-ffn-hidden-size 1856 --moe-shared-expert-intermediate-size 3712 "
        "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
        "--moe-grouped-gemm --moe-router-dtype fp32 --moe-router-num-groups 1 "
        "--moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5 "
        "--moe-router-pre-softmax --moe-router-load-balancing-type seq_aux_loss "
        "--moe-router-bias-update-rate 0 --moe-aux-loss-coeff 0"),
    "nemotron-3-super-120b-a12b": BuiltinModel(
        "--disable-bias-linear --group-query-attention --num-attention-heads 32 "
        "--num-query-groups 2 --kv-channels 128 --num-layers 88 --hidden-size 4096 "
        "--ffn-hidden-size 2688 --normalization RMSNorm --position-embedding-type none "
        "--vocab-size 131072 --make-vocab-size-divisible-by 128 "
        "--untie-embeddings-and-output-weights --num-experts 512 --moe-router-topk 22 "
        "--moe-ffn-hidden-size 2688 --moe-shared-expert-intermediate-size 5376 "
        "--moe-latent-size 1024 --moe-router-score-function sigmoid "
        "--moe-router-enable-expert-bias --moe-grouped-gemm --moe-router-dtype fp32 "
        "--moe-router-num-groups 1 --moe-router-group-topk 1 --moe-router-topk-scaling-factor "
        "5.0 --moe-router-pre-softmax --moe-router-load-balancing-type seq_aux_loss "
        "--moe-router-bias-update-rate 0 --moe-aux-loss-coeff 0"),
    "glm4.7-flash": BuiltinModel(
        "--moe-layer-freq [0]*1+[1]*46 --num-experts 64 --moe-shared-expert-intermediate-size "
        "1536 --moe-router-topk 4 --moe-grouped-gemm --moe-permute-fusion "
        "--moe-ffn-hidden-size 1536 --moe-router-score-function sigmoid "
        "--moe-router-pre-softmax --moe-router-enable-expert-bias "
        "--moe-router-bias-update-rate 0 --moe-router-load-balancing-type seq_aux_loss "
        "--moe-router-topk-scaling-factor 1.8 --moe-aux-loss-coeff 0 --moe-router-dtype fp32 "
        "--make-vocab-size-divisible-by 64 --num-layers 47 --hidden-size 2048 "
        "--ffn-hidden-size 10240 --num-attention-heads 20 --disable-bias-linear "
        "--add-qkv-bias --swiglu --untie-embeddings-and-output-weights "
        "--position-embedding-type rope --no-position-embedding --normalization RMSNorm "
        "--norm-epsilon 1e-5 --qk-layernorm --multi-latent-attention --q-lora-rank 768 "
        "--kv-lora-rank 512 --qk-head-dim 192 --v-head-dim 256 --kv-channels 192 "
        "--qk-pos-emb-head-dim 64 --vocab-size 154880 --rotary-base 1000000 --no-rope-fusion "
        "--mtp-num-layers 1"),
    "glm4.5-106B-A12B": BuiltinModel(
        "--disable-bias-linear --group-query-attention --num-attention-heads 96 "
        "--num-query-groups 8 --kv-channels 128 --num-layers 46 --hidden-size 4096 "
        "--ffn-hidden-size 10944 --add-qkv-bias --normalization RMSNorm "
        "--position-embedding-type rope --rotary-percent 0.5 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 151552 --rotary-base 1000000 "
        "--moe-ffn-hidden-size 1408 --moe-shared-expert-intermediate-size 1408 "
        "--moe-router-pre-softmax --moe-router-score-function sigmoid "
        "--moe-router-enable-expert-bias --moe-router-bias-update-rate 0 "
        "--moe-router-load-balancing-type seq_aux_loss --moe-token-dispatcher-type alltoall "
        "--moe-router-topk 8 --moe-layer-freq [0]*1+[1]*45 --num-experts 128 "
        "--moe-grouped-gemm --moe-router-dtype fp32 --moe-permute-fusion --moe-aux-loss-coeff "
        "0"),
    "glm4.5-355B-A32B": BuiltinModel(
        "--disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads "
        "96 --num-query-groups 8 --kv-channels 128 --num-layers 92 --hidden-size 5120 "
        "--ffn-hidden-size 12288 --add-qkv-bias --normalization RMSNorm "
        "--position-embedding-type rope --rotary-percent 0.5 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 151552 --rotary-base 1000000 "
        "--moe-ffn-hidden-size 1536 --moe-shared-expert-intermediate-size 1536 "
        "--moe-router-pre-softmax --moe-router-score-function sigmoid "
        "--moe-router-enable-expert-bias --moe-router-bias-update-rate 0 "
        "--moe-router-load-balancing-type seq_aux_loss --moe-token-dispatcher-type alltoall "
        "--moe-router-topk 8 --moe-router-topk-scaling-factor 2.5 --moe-layer-freq "
        "[0]*3+[1]*89 --num-experts 160 --moe-grouped-gemm --moe-router-dtype fp32 "
        "--moe-permute-fusion --moe-aux-loss-coeff 0"),
    "deepseek-v3": BuiltinModel(
        "--disable-bias-linear --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 "
        "--num-attention-heads 128 --kv-channels 128 --normalization RMSNorm "
        "--position-embedding-type rope --norm-epsilon 1e-6 --swiglu "
        "--untie-embeddings-and-output-weights --vocab-size 129280 --multi-latent-attention "
        "--q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 "
        "--v-head-dim 128 --qk-layernorm --rotary-scaling-factor 40 --rotary-base 10000 "
        "--mscale 1.0 --mscale-all-dim 1.0 --attention-softmax-in-fp32 --no-rope-fusion "
        "--num-experts 256 --moe-layer-freq {moe_layer_freq} --moe-ffn-hidden-size 2048 "
        "--moe-router-topk 8 --moe-shared-expert-intermediate-size 2048 "
        "--moe-router-pre-softmax --moe-router-score-function sigmoid "
        "--moe-router-enable-expert-bias --moe-router-load-balancing-type seq_aux_loss "
        "--moe-token-dispatcher-type alltoall --moe-aux-loss-coeff 0 "
        "--moe-router-bias-update-rate 0 --moe-router-group-topk 4 --moe-router-num-groups 8 "
        "--moe-grouped-gemm --moe-router-topk-scaling-factor 2.5 --moe-router-dtype fp32 "
        "--moe-permute-fusion",
        reads_env=('MODEL_ARGS_NUM_LAYERS',), first_k_dense=3),
}
# miles' LoRA model file passes exactly its base model's arguments
BUILTIN["qwen3.5-35B-A3B_lora"] = BUILTIN["qwen3.5-35B-A3B"]


# --- models miles publishes no file for -------------------------------------------------------
# Checkpoints PPO work often starts from whose shape is not among miles' files: the numbers
# are those of each model's HF config.json (an entry's comment names it), written as miles
# writes its own. Qwen2.5-Math differs from Qwen2.5 in its RoPE base (10000) and context
# (4096); the base Llama 3.x models have their Instruct models' shapes. Note miles' own
# qwen2.5-1.5B file says --rotary-base 10000, Qwen2.5-Math-1.5B's base; Qwen2.5-1.5B's
# config.json says 1000000 (a run from that checkpoint stops, naming the flag).
DECK_ADDED: dict[str, BuiltinModel] = {
    # Qwen/Qwen2.5-Math-1.5B (tied embeddings)
    "qwen2.5-math-1.5B": BuiltinModel(
        "--swiglu --num-layers 28 --hidden-size 1536 --ffn-hidden-size 8960 "
        "--num-attention-heads 12 --use-rotary-position-embeddings --disable-bias-linear "
        "--add-qkv-bias --normalization RMSNorm --norm-epsilon 1e-6 --rotary-base 10000 "
        "--group-query-attention --num-query-groups 2 --vocab-size 151936 "
        "--max-position-embeddings 4096"),
    # Qwen/Qwen2.5-Math-7B
    "qwen2.5-math-7B": BuiltinModel(
        "--swiglu --num-layers 28 --hidden-size 3584 --ffn-hidden-size 18944 "
        "--num-attention-heads 28 --group-query-attention --num-query-groups 4 "
        "--use-rotary-position-embeddings --disable-bias-linear --add-qkv-bias "
        "--normalization RMSNorm --norm-epsilon 1e-6 --rotary-base 10000 --vocab-size 152064 "
        "--untie-embeddings-and-output-weights --max-position-embeddings 4096"),
    # meta-llama/Llama-3.1-8B (as miles' llama3.1-8B-Instruct)
    "llama3.1-8B": BUILTIN["llama3.1-8B-Instruct"],
    # meta-llama/Llama-3.2-1B (tied embeddings, head dim 64)
    "llama3.2-1B": BuiltinModel(
        "--swiglu --num-layers 16 --hidden-size 2048 --ffn-hidden-size 8192 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--max-position-embeddings 131072 --use-rotary-position-embeddings "
        "--disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-5 --rotary-base "
        "500000 --vocab-size 128256 --kv-channels 64 --use-rope-scaling "
        "--rotary-scaling-factor 32.0"),
    # meta-llama/Llama-3.2-3B (as miles' llama3.2-3B-Instruct)
    "llama3.2-3B": BUILTIN["llama3.2-3B-Instruct"],
}
