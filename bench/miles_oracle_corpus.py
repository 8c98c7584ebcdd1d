"""The oracle's corpus (bench/miles_oracle.py): configurations named by a preset, `--set`
overrides and launch environment variables. Shared with tests/miles_oracle, which rebuilds
each config from the recorded case, so the corpus is plain data plus these few functions.

A set item `FLAG=VALUE` is `ppodeck --set`; `-FLAG` unsets the flag. `{ROOT}` in a value is
the fixture directory (make_fixtures): every case gets an HF config.json written from its
preset's model flags, a reference checkpoint directory and a prompt file that exist."""
from __future__ import annotations

import json
import random
from pathlib import Path

from ppodeck.app.cli.common import apply_sets
from ppodeck.engine.config import BY_NAME, RunConfig
from ppodeck.engine.miles.drive import train_argv
from ppodeck.engine.presets import load_preset, resolve_preset

SEED = 46
PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"
BASES = ("qwen3-4b-ppo", "qwen3-0.6b-ppo-1gpu", "smollm2-135m-ppo-1gpu")


def _preset_config(name: str) -> RunConfig:
    return resolve_preset(load_preset(name))


def case_config(case: dict, root: Path) -> tuple[RunConfig, list[str]]:
    """The case's config (fixture paths in place) and the argv miles' train.py gets."""
    config = _preset_config(case["preset"])
    fixtures = [f"hf-checkpoint={root}/hf/{case['preset']}", f"ref-load={root}/ref",
                f"prompt-data={root}/prompts.jsonl"]
    if case.get("keep_paths"):
        fixtures = []
    for item in [*fixtures, *case["sets"]]:
        item = item.replace("{ROOT}", str(root))
        if item.startswith("-"):
            config = config.with_values(**{BY_NAME[f"-{item}"].dest: None})
        else:
            config = apply_sets(config, [item])
    # values PPO Deck's schema cannot type travel as raw argv (`extra_argv`)
    return config, [*train_argv(config, expand_paths=True)[0], *case.get("extra_argv", ())]


def make_fixtures(root: Path, cases: list[dict]) -> None:
    (root / "ref").mkdir(parents=True, exist_ok=True)
    (root / "prompts.jsonl").write_text(json.dumps({"prompt": "1+1?", "label": "2"}) + "\n")
    for name in sorted({c["preset"] for c in cases}):
        hf = root / "hf" / name
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "config.json").write_text(json.dumps(hf_config(_preset_config(name))))


def hf_config(config: RunConfig) -> dict:
    """The config.json a checkpoint matching the preset's model flags would carry."""
    get = config.get
    heads = get("num_attention_heads") or 8
    model_type = ("qwen3" if get("qk_layernorm") else
                  "qwen2" if get("add_qkv_bias") else "llama")
    return {"model_type": model_type, "architectures": [_ARCH[model_type]],
            "num_hidden_layers": get("num_layers"), "hidden_size": get("hidden_size"),
            "intermediate_size": get("ffn_hidden_size"), "num_attention_heads": heads,
            "num_key_value_heads": get("num_query_groups") or heads,
            "head_dim": get("kv_channels") or (get("hidden_size") or 0) // heads,
            "vocab_size": get("vocab_size"), "rope_theta": get("rotary_base") or 10000.0,
            "rms_norm_eps": get("norm_epsilon") or 1e-5,
            "tie_word_embeddings": not get("untie_embeddings_and_output_weights"),
            "max_position_embeddings": 32768, "hidden_act": "silu",
            "torch_dtype": "bfloat16"}


_ARCH = {"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}

# (id, preset, sets, env): the issue's classes and miles' or Megatron's raise sites reachable
# from flags, each followed by its near miss (a config that passes)
TARGETED: list[tuple[str, str, list[str], dict]] = [
    ("save-without-interval", "qwen3-4b-ppo", ["-save-interval"], {}),
    ("save-with-interval", "qwen3-4b-ppo", ["save-interval=10"], {}),
    ("min-lr-above-lr", "qwen3-4b-ppo", ["min-lr=1e-5"], {}),
    ("min-lr-below-lr", "qwen3-4b-ppo", ["min-lr=1e-7"], {}),
    ("seq-length-vs-cp", "qwen3-4b-ppo", ["seq-length=4098"], {}),
    ("seq-length-cp-ok", "qwen3-4b-ppo", ["seq-length=4096"], {}),
    ("selective-recompute-method", "qwen3-4b-ppo", ["recompute-granularity=selective"], {}),
    ("selective-recompute-ok", "qwen3-4b-ppo",
     ["recompute-granularity=selective", "-recompute-method", "-recompute-num-layers"], {}),
    ("overlap-param-gather-alone", "qwen3-4b-ppo",
     ["overlap-param-gather=true", "use-distributed-optimizer=true"], {}),
    ("overlap-param-gather-ok", "qwen3-4b-ppo",
     ["overlap-param-gather=true", "overlap-grad-reduce=true", "use-distributed-optimizer=true"],
     {}),
    ("hf-layers", "qwen3-4b-ppo", ["num-layers=34"], {}),
    ("hf-hidden", "qwen3-4b-ppo", ["hidden-size=2048"], {}),
    ("hf-ffn", "qwen3-4b-ppo", ["ffn-hidden-size=9000"], {}),
    ("hf-heads", "qwen3-4b-ppo", ["num-attention-heads=16"], {}),
    ("hf-rope", "qwen3-4b-ppo", ["rotary-base=10000"], {}),
    ("hf-norm-eps", "qwen3-4b-ppo", ["norm-epsilon=1e-5"], {}),
    ("hf-untied", "qwen3-4b-ppo", ["untie-embeddings-and-output-weights=true"], {}),
    ("hf-matches", "qwen3-4b-ppo", [], {}),
    ("bridge-with-critic", "qwen3-4b-ppo", ["megatron-to-hf-mode=bridge"], {}),
    ("bridge-grpo", "qwen3-4b-ppo", ["megatron-to-hf-mode=bridge", "advantage-estimator=grpo"],
     {}),
    ("tito-without-session", "qwen3-4b-ppo", ["tito-model=qwen3"], {}),
    ("tito-with-session", "qwen3-4b-ppo", ["tito-model=qwen3", "use-session-server=true"], {}),
    ("ft-trainer-env", "qwen3-4b-ppo", [], {"MILES_EXPERIMENTAL_FT_TRAINER": "1"}),
    ("ft-trainer-env-off", "qwen3-4b-ppo", [], {"MILES_EXPERIMENTAL_FT_TRAINER": "0"}),
    ("indep-dp-ppo", "qwen3-4b-ppo", ["indep-dp=true"], {}),
    ("indep-dp-grpo", "qwen3-4b-ppo", ["indep-dp=true", "advantage-estimator=grpo"], {}),
    ("optimizer-muon", "qwen3-4b-ppo", ["optimizer=muon"], {}),
    ("optimizer-dist-muon", "qwen3-4b-ppo", ["optimizer=dist_muon"], {}),
    ("optimizer-sgd", "qwen3-4b-ppo", ["optimizer=sgd"], {}),
    ("session-server-v2", "qwen3-4b-ppo", [], {}),  # extra_argv: see build_corpus
    ("tp-heads-indivisible", "qwen3-4b-ppo", ["tensor-model-parallel-size=3"], {}),
    ("tp-heads-ok", "qwen3-4b-ppo", ["tensor-model-parallel-size=2"], {}),
    ("pp-layers-indivisible", "qwen3-4b-ppo", ["pipeline-model-parallel-size=5"], {}),
    ("world-vs-parallel", "qwen3-4b-ppo", ["actor-num-gpus-per-node=3"], {}),
    ("sequence-parallel-tp1", "qwen3-4b-ppo", ["sequence-parallel=true"], {}),
    ("gbs-vs-samples", "qwen3-4b-ppo", ["global-batch-size=48"], {}),
    ("micro-batch-with-dynamic", "qwen3-4b-ppo", ["micro-batch-size=2"], {}),
    ("eps-clip-high", "qwen3-4b-ppo", ["eps-clip-high=0.28"], {}),
    ("kl-type-low-var", "qwen3-4b-ppo", ["kl-loss-type=low_var_kl"], {}),
    ("opd-without-type", "qwen3-4b-ppo", ["use-opd=true"], {}),
    ("lr-cosine-warmup", "qwen3-4b-ppo", ["lr-decay-style=cosine", "lr-warmup-iters=5"], {}),
    ("clip-grad-zero", "qwen3-4b-ppo", ["clip-grad=0"], {}),
    ("gguf-checkpoint", "smollm2-135m-cpu", [], {}),
]

# the random perturbations draw from these (flag, values)
MENU: list[tuple[str, list[str]]] = [
    ("tensor-model-parallel-size", ["1", "2", "3", "4"]),
    ("pipeline-model-parallel-size", ["1", "2", "3"]),
    ("context-parallel-size", ["1", "2", "4"]),
    ("actor-num-gpus-per-node", ["1", "2", "4", "8"]),
    ("global-batch-size", ["8", "16", "32", "48", "64"]),
    ("rollout-batch-size", ["4", "8", "16"]),
    ("n-samples-per-prompt", ["1", "4", "8"]),
    ("min-lr", ["1e-8", "1e-5"]),
    ("seq-length", ["4096", "4098", "8192"]),
    ("recompute-granularity", ["full", "selective"]),
    ("norm-epsilon", ["1e-6", "1e-5"]),
    ("num-layers", ["24", "28", "36"]),
    ("eps-clip", ["0.1", "0.2", "0.3"]),
    ("kl-loss-type", ["k1", "k2", "k3", "low_var_kl"]),
    ("advantage-estimator", ["ppo", "grpo"]),
    ("save-interval", ["5", "20"]),
    ("overlap-grad-reduce", ["true", "false"]),
    ("overlap-param-gather", ["true", "false"]),
    ("use-distributed-optimizer", ["true", "false"]),
    ("sequence-parallel", ["true", "false"]),
    ("lr-decay-style", ["constant", "cosine", "linear"]),
    ("micro-batch-size", ["1", "2"]),
    ("use-dynamic-batch-size", ["true", "false"]),
]


def build_corpus(random_cases: int = 200) -> list[dict]:
    cases = [{"id": f"preset:{name}", "kind": "preset", "preset": name, "sets": [], "env": {}}
             for name in sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))]
    cases += [{"id": f"target:{ident}", "kind": "targeted", "preset": preset, "sets": sets,
               "env": env, **({"keep_paths": True} if ident == "gguf-checkpoint" else {})}
              for ident, preset, sets, env in TARGETED]
    for case in cases:
        if case["id"] == "target:session-server-v2":
            case["extra_argv"] = ["--use-session-server", "v2"]
    rng = random.Random(SEED)
    for index in range(random_cases):
        picks = rng.sample(MENU, rng.randint(1, 3))
        sets = [f"{flag}={rng.choice(values)}" for flag, values in picks]
        cases.append({"id": f"random:{index:03d}", "kind": "random",
                      "preset": rng.choice(BASES), "sets": sets, "env": {}})
    return cases
