"""The flag schema: every flag PPO Deck knows, declared once.

Names, types and defaults follow miles (`miles/utils/arguments.py` at the snapshot described in
`reference/miles-ppo-spec.md` §3.1) and Megatron for the model/optimizer flags miles passes
through. Flags PPO Deck adds itself carry `own=True` and live in the "ppodeck" group.

Widgets, `--help`, preset comments and argv are all generated from `FLAGS`; nothing else in the
code base should hard-code a default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["int", "float", "str", "bool", "tristate", "choice", "list"]

GROUPS = (
    "cluster",
    "rollout",
    "data",
    "actor",
    "critic",
    "ppo",
    "checkpoint",
    "parallelism",
    "model",
    "sglang",
    "logging",
    "ppodeck",
)

GROUP_TITLES = {
    "cluster": "Cluster and placement",
    "rollout": "Rollout and reward",
    "data": "Data and batch",
    "actor": "Actor optimizer",
    "critic": "Critic",
    "ppo": "PPO algorithm",
    "checkpoint": "Checkpoints",
    "parallelism": "Parallelism and performance",
    "model": "Model shape (Megatron)",
    "sglang": "SGLang engines",
    "logging": "Tracking and CI",
    "ppodeck": "PPO Deck",
}


EngineClass = Literal["honoured", "refused", "command-only"]
ENGINE_CLASSES: tuple[EngineClass, ...] = ("honoured", "refused", "command-only")


@dataclass(frozen=True, slots=True)
class Engine:
    """How PPO Deck's built-in engine treats a flag (ARCHITECTURE.md, "what validates is what
    runs"): honoured (the engine reads it and acts on it, within the values check() accepts),
    refused (any value but the default is an error: `reason` says why, `nearest` what runs
    instead) or command-only (kept in the miles command for people who run miles itself; the
    engine ignores it and check() warns when it is set)."""

    cls: EngineClass = "honoured"
    reason: str = ""
    nearest: str = ""


HONOURED = Engine()


def refused(reason: str, nearest: str = "") -> Engine:
    return Engine("refused", reason, nearest)


def command_only(reason: str) -> Engine:
    return Engine("command-only", reason)


_SYNC_ONLY = refused("only miles' synchronous loop (train.py) is implemented", "")

@dataclass(frozen=True, slots=True)
class Flag:
    """One command-line flag, as miles spells it."""

    name: str  # "--kl-coef" exactly as on a miles command line
    kind: Kind
    default: Any  # None where miles' default is None; tristate default None
    group: str  # one of GROUPS
    help: str
    choices: tuple[str, ...] = ()
    own: bool = False  # a flag PPO Deck adds (not miles)
    secret: bool = False  # masked in previews, never written to files
    runs_code: bool = False  # names code that would be executed
    engine: Engine = HONOURED  # how PPO Deck's engine treats it

    @property
    def dest(self) -> str:
        return self.name[2:].replace("-", "_")

    @property
    def negative(self) -> str | None:
        return "--no-" + self.name[2:] if self.kind == "tristate" else None


def _f(name: str, kind: Kind, default: Any, group: str, help: str, **extra: Any) -> Flag:
    return Flag(name, kind, default, group, help, **extra)


def _choice(name: str, choices: tuple[str, ...], default: str | None, group: str, help: str,
            **extra: Any) -> Flag:
    return Flag(name, "choice", default, group, help, choices=choices, **extra)


_CLUSTER = (
    _f("--actor-num-nodes", "int", 1, "cluster", "Number of nodes for training actor."),
    _f("--actor-num-gpus-per-node", "int", 8, "cluster",
       "Number of GPUs per node for training actor. Actor world size = nodes x GPUs per node."),
    _f("--rollout-num-gpus", "int", None, "cluster",
       "Number of GPUs for inference. Ignored under --colocate, where it is set to the actor's "
       "GPU count."),
    _f("--num-gpus-per-node", "int", 8, "cluster",
       "Number of GPUs per node for rollout. Set it when using fewer than 8 GPUs per node "
       "under colocate mode.",
       engine=command_only(
           "miles' rollout layout hint: Ray places PPO Deck's engines on the GPUs it has")),
    _f("--colocate", "bool", False, "cluster",
       "Colocate the inference engines and the actor on the same GPUs. Also defaults "
       "--offload-train and --offload-rollout on."),
    _f("--offload", "bool", False, "cluster",
       "Equivalent to --offload-train + --offload-rollout."),
    _f("--offload-train", "tristate", None, "cluster",
       "Offload the training actor (and critic) to CPU while the rollout engines generate. "
       "Defaults to on under --colocate and under PPO; an explicit --no-offload-train is "
       "respected."),
    _f("--offload-rollout", "tristate", None, "cluster",
       "Offload the rollout generator to CPU during training. Defaults to on under --colocate."),
    _f("--offload-rollout-level", "list", ("kv_cache", "weight"), "cluster",
       "What SGLang releases during training (kv_cache, weight)."),
    _choice("--offload-train-target", ("cpu", "disk"), "cpu", "cluster",
            "Backup location for the paused trainer (Megatron only).",
            engine=refused(
                "only the cpu target is implemented (pinned host memory)",
                "--offload-train-target cpu")),
    _f("--offload-train-disk-dir", "str", None, "cluster",
       "Directory for --offload-train-target disk (default $SCRATCH/miles_train_offload_<uid>).",
       engine=refused(
           "the disk offload target is not implemented",
           "--offload-train (to pinned host memory)")),
    _f("--offload-train-disk-chunk-mb", "int", 256, "cluster",
       "Chunk size in MiB for the disk offload target; must be > 0.",
       engine=refused(
           "the disk offload target is not implemented",
           "--offload-train (to pinned host memory)")),
    _f("--train-memory-margin-bytes", "int", 1 << 30, "cluster",
       "torch_memory_saver memory margin in bytes (default 1 GiB).",
       engine=command_only(
           "a torch_memory_saver margin; PPO Deck offloads by resizing storages and keeps no "
           "margin")),
    _f("--stream-optimizer-state-to-disk", "bool", False, "cluster",
       "Stream optimizer state to NVMe.",
       engine=refused('streaming optimizer state to NVMe is not implemented', '--offload-train')),
    _f("--debug-rollout-only", "bool", False, "cluster",
       "Only run rollouts (no training). Turns --colocate and both offloads off."),
    _f("--debug-train-only", "bool", False, "cluster",
       "Only run training (no rollout engines)."),
)

_CRITIC = (
    _f("--critic-num-nodes", "int", None, "critic",
       "Number of nodes for the critic. Overwritten with --actor-num-nodes under PPO.",
       engine=command_only(
           "the critic always shares the actor's GPUs (miles overwrites this under PPO)")),
    _f("--critic-num-gpus-per-node", "int", None, "critic",
       "Number of GPUs per node for the critic. Overwritten with --actor-num-gpus-per-node "
       "under PPO.",
       engine=command_only(
           "the critic always shares the actor's GPUs (miles overwrites this under PPO)")),
    _f("--critic-lr", "float", None, "critic",
       "The lr for the critic model. Falls back to --lr."),
    _f("--critic-load", "str", None, "critic",
       "The checkpoint for the critic model. Falls back to --load (PPO Deck: to the "
       "<save>_critic sibling when it holds a checkpoint)."),
    _f("--critic-save", "str", None, "critic",
       "Where to save the critic. Defaults to --save with a '_critic' suffix, e.g. "
       "--save /ckpts/run1 saves the critic to /ckpts/run1_critic."),
    _f("--critic-lr-warmup-iters", "int", 0, "critic",
       "Number of iterations to linearly warm up the critic lr."),
    _f("--num-critic-only-steps", "int", 0, "critic",
       "Initial rollout steps where only the critic trains (value warmup) while the actor "
       "stays frozen. Only takes effect with --advantage-estimator ppo."),
)

_PPO = (
    _choice("--advantage-estimator",
            ("grpo", "gspo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo"),
            "grpo", "ppo",
            "Advantage estimator. 'ppo' builds a critic (use_critic) and computes GAE "
            "advantages."),
    _f("--eps-clip", "float", 0.2, "ppo", "PPO clip range."),
    _f("--eps-clip-high", "float", None, "ppo", "PPO clip upper range. Defaults to --eps-clip."),
    _f("--eps-clip-c", "float", None, "ppo",
       "Dual-clip lower bound (arXiv 1912.09729); must be > 1.0. None = no dual clip."),
    _f("--value-clip", "float", 0.2, "ppo", "The clip for the value loss."),
    _f("--kl-coef", "float", 0.0, "ppo",
       "KL penalty coefficient for reward shaping. Must be 0 under PPO.",
       engine=refused('reward-shaping KL is not implemented', '--use-kl-loss with --kl-loss-coef')),
    _f("--use-kl-loss", "bool", False, "ppo", "Use a loss-level KL term (needs --ref-load)."),
    _f("--kl-loss-coef", "float", 0.0, "ppo",
       "Coefficient of the KL loss added to the final PPO loss."),
    _choice("--kl-loss-type", ("k1", "k2", "k3", "low_var_kl"), "k1", "ppo",
            "KL estimator for the KL loss."),
    _f("--use-unbiased-kl", "bool", False, "ppo", "Multiply the KL by the IS ratio pi/pi_old."),
    _f("--entropy-coef", "float", 0.0, "ppo", "Entropy loss coefficient."),
    _f("--observe-training-entropy", "bool", False, "ppo",
       "Log the entropy even when --entropy-coef is 0."),
    _f("--gamma", "float", 1.0, "ppo", "PPO GAE gamma (discount), in [0, 1]."),
    _f("--lambd", "float", 1.0, "ppo", "PPO GAE lambda, in [0, 1]."),
    _f("--normalize-advantages", "bool", False, "ppo", "Whiten advantages over the batch."),
    _f("--disable-compute-advantages-and-returns", "bool", False, "ppo",
       "Skip computing advantages and returns.",
       engine=refused('advantages and returns are always computed')),
    _choice("--loss-type", ("policy_loss", "sft_loss", "custom_loss"), "policy_loss", "ppo",
            "Actor loss type (the critic always uses the value loss).",
            engine=refused(
                "only policy_loss is implemented for the actor",
                "--loss-type policy_loss")),
    _f("--ref-update-interval", "int", None, "ppo", "Copy actor -> ref every N rollouts."),
    _f("--use-rollout-logprobs", "bool", False, "ppo", "Use SGLang log-probs as pi_old."),
    _f("--keep-old-actor", "bool", False, "ppo", "Keep a copy of the old actor for pi_old.",
       engine=refused(
           "pi_old is recomputed by the actor right before its update, with the weights that "
           "generated the rollout")),
    _f("--use-tis", "bool", False, "ppo", "Truncated importance sampling correction."),
    _f("--tis-clip", "float", 2.0, "ppo", "TIS upper clip."),
    _f("--tis-clip-low", "float", 0.0, "ppo", "TIS lower clip."),
    _f("--custom-tis-function-path", "str", None, "ppo",
       "Python path of a custom TIS function.", runs_code=True,
       engine=refused('custom Python TIS functions are not run', '--use-tis')),
    _f("--get-mismatch-metrics", "bool", False, "ppo",
       "Log train/rollout mismatch metrics (needs --custom-tis-function-path).",
       engine=refused('it needs --custom-tis-function-path, which is not run', '--use-tis')),
    _f("--use-opsm", "bool", False, "ppo", "Off-policy sequence masking.",
       engine=refused('off-policy sequence masking is not implemented', '--use-tis')),
    _f("--opsm-delta", "float", 1e-4, "ppo", "OPSM delta.",
       engine=refused('off-policy sequence masking is not implemented', '--use-tis')),
    _f("--disable-rewards-normalization", "bool", False, "ppo",
       "Disable group reward normalization (no effect for ppo)."),
    _f("--disable-grpo-std-normalization", "bool", False, "ppo",
       "Disable GRPO std normalization (no effect for ppo)."),
    _f("--fully-async", "bool", False, "ppo",
       "Fully asynchronous rollouts (train_async.py; miles' README: fully-async PPO requires "
       "--use-rollout-logprobs).",
       engine=refused("only miles' synchronous loop (train.py) is implemented")),
    # Newer miles (spec 3.6), after the snapshot the schema follows: known, so never passthrough.
    _f("--async-max-concurrent-samples", "int", None, "ppo",
       "Fully-async: samples in flight at once.", engine=_SYNC_ONLY),
    _f("--rollout-submission-granularity", "str", None, "ppo",
       "Fully-async: submit rollouts per sample or per group.", engine=_SYNC_ONLY),
    _f("--max-weight-staleness", "int", None, "ppo",
       "Fully-async: how many weight versions a sample may lag.", engine=_SYNC_ONLY),
    _f("--colocate-memory-peak-device", "str", None, "cluster",
       "Where the colocated memory peak is placed (newer miles).",
       engine=refused("newer miles asserts it is not used with PPO: '--colocate-memory-peak-"
                      "device gpu is not wired for the critic path'")),
    _f("--deploy-component", "str", None, "cluster",
       "Deploy one component of the run (newer miles).",
       engine=refused("newer miles refuses '--deploy-component trainer' with a critic, and "
                      "PPO Deck deploys the whole run")),
    _f("--megatron-config", "str", None, "parallelism",
       "Megatron trainer YAML (newer miles; it rejects a critic declared there).",
       engine=refused("trainers are built from the flags; a YAML trainer config is not read")),
)

_DATA = (
    _f("--prompt-data", "str", None, "data", "Prompt dataset (JSONL or parquet)."),
    _f("--input-key", "str", "input", "data", "Key of the prompt in each record."),
    _f("--label-key", "str", None, "data", "Key of the label in each record."),
    _f("--metadata-key", "str", "metadata", "data", "Key of the metadata in each record."),
    _f("--tool-key", "str", "tools", "data", "Key of the tools in each record.",
       engine=command_only('prompts are built without tools; the key is not read')),
    _f("--apply-chat-template", "bool", False, "data",
       "Apply the tokenizer's chat template to prompts."),
    _f("--apply-chat-template-kwargs", "str", None, "data",
       "JSON dict of extra apply_chat_template kwargs."),
    _f("--rollout-shuffle", "bool", False, "data", "Shuffle prompts per epoch."),
    _f("--rollout-seed", "int", 42, "data", "Seed for rollout shuffling and sampling."),
    _f("--num-rollout", "int", None, "data",
       "Number of rollout steps. If not set, computed from the dataset size and --num-epoch."),
    _f("--num-epoch", "int", None, "data", "Epochs over the dataset; used when --num-rollout "
       "is not set.",
       engine=refused("the rollout count is not derived from the dataset size at launch",
                      "--num-rollout")),
    _f("--rollout-batch-size", "int", None, "data",
       "Number of prompts in each rollout step (required). Each step returns "
       "rollout_batch_size x n_samples_per_prompt samples."),
    _f("--n-samples-per-prompt", "int", 1, "data", "Responses sampled per prompt."),
    _f("--global-batch-size", "int", None, "data",
       "Samples per optimizer step. rollout_batch_size x n_samples / global_batch_size = "
       "optimizer steps per rollout."),
    _f("--num-steps-per-rollout", "int", None, "data",
       "Optimizer steps per rollout; implies global_batch_size = rbs x n // steps."),
    _f("--micro-batch-size", "int", 1, "data", "Micro batch size (ignored with dynamic batch)."),
    _f("--balance-data", "bool", False, "data", "Balance tokens across DP ranks.",
       engine=command_only(
           "DP ranks get equal sample counts; tokens are not balanced (the gradient is the same)")),
    _f("--start-rollout-id", "int", None, "data", "First rollout id (default from checkpoint).",
       engine=refused("the first rollout id comes from the checkpoint (0 for a fresh run)",
                      "--load (resume from its checkpoint)")),
    _f("--over-sampling-batch-size", "int", None, "data",
       "Prompts sampled per request round; defaults to --rollout-batch-size and must be >= it.",
       engine=refused(
           "over-sampling with dynamic filters is not implemented: each rollout samples exactly "
           "--rollout-batch-size prompts",
           "--rollout-batch-size")),
    _f("--disable-rollout-trim-samples", "bool", False, "data",
       "Do not trim samples to a multiple of --global-batch-size."),
    _f("--allow-partial-train-step", "bool", False, "data",
       "Train a trailing partial step (dynamic batch only).",
       engine=refused(
           "a trailing partial optimizer step is not trained: samples are trimmed to a multiple "
           "of --global-batch-size",
           "a --global-batch-size that divides the rollout")),
    _f("--eval-prompt-data", "list", None, "data", "Eval datasets as NAME PATH pairs."),
    _f("--eval-interval", "int", None, "data", "Evaluate every N rollouts."),
    _f("--n-samples-per-eval-prompt", "int", 1, "data", "Samples per eval prompt."),
    _f("--eval-max-response-len", "int", None, "data", "Max response length in eval."),
    _f("--eval-top-k", "int", None, "data", "Top-k for eval sampling."),
    _f("--eval-top-p", "float", None, "data", "Top-p for eval sampling."),
    _f("--eval-temperature", "float", None, "data", "Temperature for eval sampling."),
    _f("--skip-eval-before-train", "bool", False, "data", "Skip the eval before training."),
)

_ROLLOUT = (
    _f("--rollout-temperature", "float", 1.0, "rollout", "Sampling temperature; must be > 0."),
    _f("--rollout-top-p", "float", 1.0, "rollout", "Top-p sampling, in (0, 1]."),
    _f("--rollout-top-k", "int", -1, "rollout", "Top-k sampling (-1 = off)."),
    _f("--rollout-max-response-len", "int", None, "rollout", "Max new tokens per response."),
    _f("--rollout-max-prompt-len", "int", None, "rollout", "Max prompt tokens."),
    _f("--rollout-max-context-len", "int", None, "rollout", "Max prompt + response tokens."),
    _choice("--update-weight-transfer-mode", ("broadcast", "p2p", "disk-delta"), "broadcast",
            "rollout", "How weights reach the rollout engines when not colocated.",
            engine=refused(
                "only broadcast is implemented (CUDA tensors when colocated, an NCCL group "
                "otherwise)",
                "--update-weight-transfer-mode broadcast")),
    _f("--update-weights-interval", "int", 1, "rollout", "Push weights every N rollouts."),
    _f("--pause-generation-mode", "str", "retract", "rollout",
       "How generation pauses during weight updates.",
       engine=command_only(
           "the synchronous loop never generates during a weight update, so there is nothing to "
           "pause")),
    _f("--rm-type", "str", None, "rollout",
       "Reward model type (deepscaler, math, dapo, f1, remote_rm, ...; PPO Deck adds "
       "copy-digit)."),
    _f("--reward-key", "str", None, "rollout", "Key of the score when the RM returns a dict."),
    _f("--custom-rm-path", "str", None, "rollout",
       "Python path of a custom reward function; overrides --rm-type.", runs_code=True,
       engine=refused(
           "custom Python reward functions are not run by the built-in rollout",
           "--rm-type, or an rm_type in the sample metadata")),
    _f("--group-rm", "bool", False, "rollout", "Score a whole group at once.",
       engine=refused(
           "group reward functions are not implemented: each sample is scored alone",
           "--rm-type")),
    _f("--rm-url", "str", None, "rollout", "URL for --rm-type remote_rm.",
       engine=refused(
           "remote reward models are not implemented",
           "--rm-type (a rule-based reward)")),
    _f("--use-rollout-entropy", "bool", False, "rollout", "Log rollout entropy.",
       engine=refused(
           "the rollout backends do not compute the rollout entropy",
           "--observe-training-entropy (the trainer's entropy)")),
)

_ACTOR = (
    _choice("--optimizer", ("adam", "sgd"), "adam", "actor", "Optimizer.",
            engine=refused("only Adam is implemented", "--optimizer adam")),
    _f("--lr", "float", 1e-6, "actor", "Actor learning rate."),
    _f("--min-lr", "float", 0.0, "actor", "Minimum lr for decay schedules."),
    _choice("--lr-decay-style", ("constant", "linear", "cosine", "inverse-square-root", "WSD"),
            "linear", "actor", "Learning rate decay style (Megatron default linear)."),
    _f("--lr-decay-iters", "int", None, "actor", "Iterations to decay over (default: all)."),
    _f("--lr-warmup-iters", "int", 0, "actor", "Iterations of linear lr warmup."),
    _f("--lr-warmup-fraction", "float", None, "actor", "Warmup as a fraction of decay iters."),
    _f("--weight-decay", "float", 0.01, "actor", "Weight decay (Megatron default 0.01)."),
    _f("--adam-beta1", "float", 0.9, "actor", "Adam beta1."),
    _f("--adam-beta2", "float", 0.999, "actor", "Adam beta2."),
    _f("--adam-eps", "float", 1e-8, "actor", "Adam epsilon."),
    _f("--clip-grad", "float", 1.0, "actor", "Gradient norm clip."),
    _f("--seed", "int", 1234, "actor", "Training random seed."),
    _f("--calculate-per-token-loss", "bool", False, "actor", "Average the loss per token."),
    _f("--optimizer-cpu-offload", "bool", False, "actor", "Keep optimizer state on CPU.",
       engine=refused(
           "the optimizer state stays with its model; it moves to host memory between phases with"
           " --offload-train",
           "--offload-train")),
    _f("--overlap-cpu-optimizer-d2h-h2d", "bool", False, "actor",
       "Overlap CPU optimizer transfers.",
       engine=refused('the CPU optimizer is not implemented', '--offload-train')),
    _f("--use-precision-aware-optimizer", "bool", False, "actor", "Precision-aware optimizer.",
       engine=refused(
           "not implemented: bf16 params with fp32 master weights (Megatron's default) are used")),
    _f("--use-distributed-optimizer", "bool", False, "actor",
       "Shard optimizer state over DP (miles turns it on for adam)."),
)

_CHECKPOINT = (
    _f("--hf-checkpoint", "str", None, "checkpoint",
       "HuggingFace checkpoint dir (tokenizer, HF config, SGLang weights)."),
    _f("--ref-load", "str", None, "checkpoint",
       "Reference model checkpoint (Megatron torch_dist). When --load is not set it is also "
       "the initial checkpoint for training."),
    _f("--ref-ckpt-step", "int", None, "checkpoint", "Step of the ref checkpoint to load.",
       engine=refused(
           "the reference checkpoint's latest iteration is always loaded",
           "--ref-load")),
    _f("--load", "str", None, "checkpoint", "Checkpoint to resume the actor from."),
    _f("--save", "str", None, "checkpoint", "Where to save actor checkpoints."),
    _f("--save-interval", "int", None, "checkpoint", "Save every N rollouts (needs --save)."),
    _f("--save-trigger-sentinel", "str", None, "checkpoint",
       "Save when this file exists (needs --save).",
       engine=refused('sentinel-triggered saves are not implemented', '--save-interval')),
    _f("--custom-megatron-post-save-hook-path", "str", None, "checkpoint",
       "Python path of a post-save hook (needs --save).", runs_code=True,
       engine=refused('post-save hooks are not run')),
    _f("--no-load-optim", "bool", False, "checkpoint", "Do not load optimizer state.",
       engine=refused('a resumed run always restores the optimizer state')),
    _f("--no-load-rng", "bool", False, "checkpoint", "Do not load RNG state.",
       engine=refused('a resumed run always restores the RNG state')),
    _f("--ckpt-format", "str", "torch_dist", "checkpoint", "Megatron checkpoint format.",
       engine=refused(
           "only torch_dist (Megatron dist_checkpointing) is written and read",
           "--ckpt-format torch_dist")),
)

_PARALLELISM = (
    _choice("--train-backend", ("megatron", "fsdp"), "megatron", "parallelism",
            "Training backend. PPO requires megatron.",
            engine=refused('only the Megatron backend is implemented', '--train-backend megatron')),
    _choice("--megatron-to-hf-mode", ("raw", "bridge"), "raw", "parallelism",
            "How Megatron weights are converted to HF weights for SGLang."),
    _f("--indep-dp", "bool", False, "parallelism",
       "Launch each DP replica as an independent Megatron instance.",
       engine=refused('independent DP replicas are not implemented')),
    _f("--tensor-model-parallel-size", "int", 1, "parallelism", "Tensor parallel size (TP)."),
    _f("--pipeline-model-parallel-size", "int", 1, "parallelism", "Pipeline parallel size (PP)."),
    _f("--context-parallel-size", "int", 1, "parallelism", "Context parallel size (CP)."),
    _f("--sequence-parallel", "bool", False, "parallelism", "Megatron sequence parallelism.",
       engine=refused(
           "Megatron sequence parallelism is not wired into the engine",
           "--tensor-model-parallel-size without it")),
    _f("--use-dynamic-batch-size", "bool", False, "parallelism",
       "Pack micro-batches by token count (needs --max-tokens-per-gpu)."),
    _f("--max-tokens-per-gpu", "int", None, "parallelism",
       "Token budget per GPU per micro-batch; with CP, around max_response_len // cp_size."),
    _f("--log-probs-max-tokens-per-gpu", "int", None, "parallelism",
       "Token budget for log-prob passes; defaults to --max-tokens-per-gpu."),
    _f("--log-probs-chunk-size", "int", -1, "parallelism", "Chunk size for log-probs (-1 off)."),
    _f("--allgather-cp", "bool", False, "parallelism", "All-gather CP.",
       engine=refused('context parallelism is not implemented')),
    _choice("--qkv-format", ("thd", "bshd"), "thd", "parallelism",
            "Attention layout; bshd needs megatron and no dynamic batch.",
            engine=command_only(
                "the engine picks its attention layout itself (SDPA; transformer-engine's "
                "with PPODECK_TE=1 on CUDA)")),
    _choice("--recompute-granularity", ("full", "selective"), None, "parallelism",
            "Activation recomputation granularity."),
    _choice("--recompute-method", ("uniform", "block"), None, "parallelism",
            "Activation recomputation method."),
    _f("--recompute-num-layers", "int", None, "parallelism", "Layers per recompute unit."),
    _choice("--attention-backend", ("flash", "fused", "unfused", "local", "auto"), "auto",
            "parallelism", "Attention kernel (remove 'flash' for MLA models).",
            engine=command_only(
                "the engine picks its attention kernel itself (SDPA; transformer-engine's "
                "with PPODECK_TE=1 on CUDA)")),
    _f("--accumulate-allreduce-grads-in-fp32", "bool", False, "parallelism",
       "Accumulate and all-reduce gradients in fp32."),
    _f("--attention-softmax-in-fp32", "bool", False, "parallelism", "Softmax in fp32.",
       engine=command_only(
           "the engine's fused attention kernels compute the softmax in fp32 internally")),
    _f("--rematerialize-param-from-master-weight", "bool", False, "parallelism",
       "Rebuild bf16 params from fp32 master weights on wake-up.",
       engine=refused('not implemented: offloaded params are restored as they were')),
)

_MODEL = (
    _f("--num-layers", "int", None, "model", "Number of transformer layers."),
    _f("--hidden-size", "int", None, "model", "Hidden size."),
    _f("--ffn-hidden-size", "int", None, "model", "MLP hidden size (default 4 x hidden)."),
    _f("--num-attention-heads", "int", None, "model", "Attention heads."),
    _f("--group-query-attention", "bool", False, "model", "Grouped-query attention."),
    _f("--num-query-groups", "int", None, "model", "KV groups for GQA."),
    _f("--kv-channels", "int", None, "model", "Head dim (default hidden / heads)."),
    _f("--swiglu", "bool", False, "model", "SwiGLU MLP."),
    _choice("--normalization", ("LayerNorm", "RMSNorm"), "LayerNorm", "model", "Norm type."),
    _f("--norm-epsilon", "float", 1e-5, "model", "Norm epsilon."),
    _f("--disable-bias-linear", "bool", False, "model", "No biases in linear layers."),
    _f("--qk-layernorm", "bool", False, "model", "Norm on queries and keys."),
    _f("--use-rotary-position-embeddings", "bool", False, "model", "Rotary embeddings."),
    _choice("--position-embedding-type", ("learned_absolute", "rope", "mrope", "relative", "none"),
            "learned_absolute", "model", "Position embedding type."),
    _f("--rotary-base", "int", 10000, "model", "RoPE base."),
    _f("--vocab-size", "int", None, "model", "Vocabulary size (before padding)."),
    _f("--make-vocab-size-divisible-by", "int", 128, "model", "Vocab padding multiple.",
       engine=command_only('the engine builds the embedding with exactly --vocab-size rows')),
    _f("--untie-embeddings-and-output-weights", "bool", False, "model",
       "Separate input embedding and output layer weights."),
    _f("--seq-length", "int", None, "model", "Sequence length (miles default 4096)."),
    _f("--max-position-embeddings", "int", None, "model", "Max position embeddings."),
    _f("--num-experts", "int", None, "model", "MoE experts (None = dense).",
       engine=refused('MoE models are not implemented (dense GPTModel only)')),
    _f("--moe-ffn-hidden-size", "int", None, "model", "MoE expert MLP hidden size.",
       engine=refused('MoE models are not implemented (dense GPTModel only)')),
    _f("--moe-router-topk", "int", 2, "model", "Experts per token.",
       engine=refused('MoE models are not implemented (dense GPTModel only)')),
    _f("--attention-dropout", "float", 0.1, "model", "Attention dropout (Megatron 0.1)."),
    _f("--hidden-dropout", "float", 0.1, "model", "Hidden dropout (Megatron 0.1)."),
    _f("--fp16", "bool", False, "model", "fp16 training (miles uses bf16 otherwise).",
       engine=refused('fp16 training is not implemented: bf16 on CUDA, float32 on CPU', '--bf16')),
    _f("--bf16", "bool", False, "model", "bf16 training (miles default)."),
)

_SGLANG = (
    _f("--rollout-num-gpus-per-engine", "int", 1, "sglang",
       "GPUs per inference engine (SGLang tp_size)."),
    _f("--sglang-mem-fraction-static", "float", None, "sglang",
       "Fraction of GPU memory SGLang reserves for weights + KV cache."),
    _f("--sglang-max-running-requests", "int", None, "sglang", "Max concurrent requests."),
    _f("--sglang-enable-metrics", "bool", False, "sglang", "Expose SGLang metrics.",
       engine=command_only("SGLang's metrics endpoint is not started by PPO Deck")),
    _f("--sglang-cuda-graph-backend-prefill", "str", None, "sglang",
       "Prefill CUDA-graph backend (miles sets 'disabled' under colocate).",
       engine=command_only('PPO Deck starts SGLang with its default CUDA-graph settings')),
    _f("--sglang-config", "str", None, "sglang", "SGLang deployment YAML.",
       engine=refused(
           "SGLang deployment YAML is not read: engines come from --rollout-num-gpus-per-engine "
           "and --sglang-mem-fraction-static",
           "--rollout-num-gpus-per-engine")),
)

_LOGGING = (
    _f("--use-wandb", "bool", False, "logging", "Log to Weights & Biases."),
    _f("--wandb-project", "str", None, "logging", "W&B project."),
    _f("--wandb-group", "str", None, "logging", "W&B group."),
    _f("--wandb-key", "str", None, "logging", "W&B API key (secret: masked, never saved).",
       secret=True),
    _f("--wandb-host", "str", None, "logging", "W&B host."),
    _f("--wandb-team", "str", None, "logging", "W&B team."),
    _f("--wandb-dir", "str", None, "logging", "W&B local dir."),
    _choice("--wandb-mode", ("online", "offline", "disabled"), None, "logging", "W&B mode."),
    _f("--wandb-run-id", "str", None, "logging", "W&B run id."),
    _f("--disable-wandb-random-suffix", "bool", False, "logging", "No random run-name suffix."),
    _f("--wandb-always-use-train-step", "bool", False, "logging", "Use train/step everywhere."),
    _f("--use-tensorboard", "bool", False, "logging", "Log to TensorBoard."),
    _f("--tb-project-name", "str", None, "logging", "TensorBoard project."),
    _f("--tb-experiment-name", "str", None, "logging", "TensorBoard experiment."),
    _f("--use-mlflow", "bool", False, "logging", "Log to MLflow.",
       engine=refused('MLflow logging is not implemented', '--use-wandb or --use-tensorboard')),
    _f("--use-prometheus", "bool", False, "logging", "Expose Prometheus metrics.",
       engine=refused(
           "Prometheus metrics are not exported",
           "the run's events.jsonl (`ppodeck tail --json`)")),
    _f("--use-miles-dashboard", "bool", False, "logging", "Enable the miles dashboard.",
       engine=refused('the miles dashboard is not started', 'the TUI monitor (`ppodeck attach`)')),
    _f("--ci-test", "bool", False, "logging",
       "CI mode: weight-update, KL and log-prob checks inside the framework."),
    _f("--ci-disable-kl-checker", "bool", False, "logging", "CI: skip the KL check."),
    _f("--ci-disable-logprobs-checker", "bool", False, "logging", "CI: skip log-prob checks."),
    _f("--ci-disable-weight-update-checker", "bool", False, "logging",
       "CI: skip the weight-update check."),
    _f("--ci-save-grad-norm", "str", None, "logging", "CI: save grad norms to this path."),
    _f("--ci-load-grad-norm", "str", None, "logging", "CI: compare grad norms to this path."),
)

_PPODECK = (
    _choice("--rollout-backend", ("auto", "hf", "sglang"), "auto", "ppodeck",
            "Rollout backend: sglang on GPUs, hf (transformers) for CPU and small runs, auto "
            "picks sglang when CUDA is present.", own=True),
    _f("--ray-address", "str", None, "ppodeck",
       "Ray cluster address; None starts a local Ray on 127.0.0.1. [env var: RAY_ADDRESS]",
       own=True),
    _f("--run-dir", "str", None, "ppodeck",
       "Run directory (default runs/<run-id> under $PPODECK_RUNS_DIR).", own=True),
    _choice("--synthetic-task", ("copy-digit", "arithmetic"), None, "ppodeck",
            "Built-in synthetic task instead of --prompt-data: copy-digit (tiny random "
            "models), arithmetic (DAPO-Math-style word problems for small pretrained models).",
            own=True),
    _f("--synthetic-num-prompts", "int", 256, "ppodeck",
       "Prompts generated for --synthetic-task.", own=True),
    _choice("--model-init", ("random",), None, "ppodeck",
            "'random': random initialization when no checkpoint is given.", own=True),
    _f("--max-prompt-len", "int", None, "ppodeck",
       "Max prompt tokens for the built-in rollout (longer prompts are dropped).", own=True),
)

# Flags real miles launch scripts use (issue #18: MoE and expert parallelism, LoRA, on-policy
# distillation, model-shape extras, SGLang server arguments), with their miles / Megatron types
# and defaults, so that check() says what this engine does with them instead of "unknown".
_MOE = refused("MoE models are not implemented (dense GPTModel only)")
_MLA = refused("multi-latent attention (DeepSeek/Kimi/GLM-5 style) is not implemented")
_YARN = refused("YaRN rope scaling is not implemented")
_LORA = refused("LoRA training is not implemented: the actor trains all its weights")
_OPD = refused("on-policy distillation is not implemented")
_SGLANG_TUNING = command_only("PPO Deck starts its SGLang engines with its own server arguments")
_SGLANG_LAYOUT = refused("data-parallel attention / expert-parallel SGLang engines are not "
                         "started: one engine per --rollout-num-gpus-per-engine GPUs",
                         "--rollout-num-gpus-per-engine")
_CUSTOM_CODE = refused("custom Python functions named on the command line are not run")

_ROLLOUT_IMPORTED = (
    _f("--update-weight-buffer-size", "int", 512 * 1024**2, "rollout",
       "Bytes per bucket when pushing actor weights to the rollout engines.",
       engine=command_only("the engine groups its weight pushes itself")),
    _f("--custom-generate-function-path", "str", None, "rollout",
       "Python path of a custom generate function.", runs_code=True, engine=_CUSTOM_CODE),
    _f("--rollout-function-path", "str", None, "rollout",
       "Python path of a custom rollout function.", runs_code=True, engine=_CUSTOM_CODE),
    _f("--custom-reward-post-process-path", "str", None, "rollout",
       "Python path of a reward post-processing function.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--dynamic-sampling-filter-path", "str", None, "rollout",
       "Python path of a dynamic-sampling filter (with --over-sampling-batch-size).",
       runs_code=True, engine=_CUSTOM_CODE),
    _f("--check-weight-update-equal", "bool", False, "rollout",
       "Check that the rollout engines' weights equal the trainer's after the first push "
       "(on under --ci-test)."),
)

_DATA_IMPORTED = (
    _f("--eval-config", "str", None, "data",
       "OmegaConf YAML/JSON of eval datasets (overrides --eval-prompt-data).",
       engine=refused("eval datasets from a config file are not read", "--eval-prompt-data")),
    _f("--eval-function-path", "str", None, "data",
       "Python path of a custom eval rollout function.", runs_code=True,
       engine=_CUSTOM_CODE),
)

_ACTOR_IMPORTED = (
    _f("--lora-rank", "int", 0, "actor", "LoRA rank (0 = no LoRA).", engine=_LORA),
    _f("--lora-alpha", "int", 16, "actor", "LoRA alpha (scaling).", engine=_LORA),
    _f("--lora-dropout", "float", 0.0, "actor", "LoRA dropout.", engine=_LORA),
    _f("--target-modules", "str", None, "actor",
       "LoRA target modules: 'all-linear' or comma-separated module names.", engine=_LORA),
)

_PPO_IMPORTED = (
    _f("--use-opd", "bool", False, "ppo", "On-policy distillation (needs --opd-type).",
       engine=_OPD),
    _choice("--opd-type", ("sglang", "megatron"), None, "ppo",
            "Where teacher log-probs come from: an SGLang server or a Megatron teacher.",
            engine=_OPD),
    _f("--opd-kl-coef", "float", 1.0, "ppo", "On-policy distillation KL coefficient.",
       engine=_OPD),
    _f("--opd-teacher-load", "str", None, "ppo",
       "Teacher checkpoint for --opd-type megatron.", engine=_OPD),
)

_PARALLELISM_IMPORTED = (
    _f("--expert-model-parallel-size", "int", 1, "parallelism", "Expert parallel size (EP).",
       engine=_MOE),
    _f("--expert-tensor-parallel-size", "int", None, "parallelism",
       "Tensor parallel size inside experts (Megatron default: TP).",
       engine=command_only("it applies to MoE layers only, which this engine does not build")),
    _f("--decoder-last-pipeline-num-layers", "int", None, "parallelism",
       "Layers on the last pipeline stage (uneven PP split).",
       engine=refused("layers are split evenly across pipeline stages",
                      "a --pipeline-model-parallel-size that divides --num-layers")),
)

_MODEL_IMPORTED = (
    _f("--rotary-percent", "float", 1.0, "model", "Share of the head dim that is rotated.",
       engine=refused("partial rotary embeddings are not implemented", "--rotary-percent 1.0")),
    _f("--add-qkv-bias", "bool", False, "model",
       "Bias on the QKV projection only (Qwen2.5), with --disable-bias-linear.",
       engine=refused("the engine builds QKV biases only together with every other linear "
                      "bias (without --disable-bias-linear)")),
    _f("--spec", "list", None, "model", "Custom Megatron layer spec: MODULE FUNCTION.",
       runs_code=True, engine=refused("custom Megatron layer specs are not loaded")),
    _f("--apply-layernorm-1p", "bool", False, "model", "LayerNorm with (1 + weight).",
       engine=refused("zero-centred (1p) norms are not implemented")),
    _f("--attention-output-gate", "bool", False, "model", "Gated attention output.",
       engine=refused("gated attention output is not implemented")),
    _f("--no-rope-fusion", "bool", False, "model", "Disable the fused RoPE kernel.",
       engine=command_only("the engine picks its RoPE kernel itself")),
    _f("--use-rope-scaling", "bool", False, "model", "Llama 3 rope scaling.",
       engine=refused("Llama 3 rope scaling is not implemented")),
    _f("--rotary-scaling-factor", "float", 8.0, "model", "Rope scaling factor (Megatron 8.0).",
       engine=refused("rope scaling is not implemented")),
    _f("--mtp-num-layers", "int", None, "model", "Multi-token prediction layers.",
       engine=refused("multi-token prediction layers are not built")),
    _f("--multi-latent-attention", "bool", False, "model", "Multi-latent attention (MLA).",
       engine=_MLA),
    _f("--q-lora-rank", "int", None, "model", "MLA query low-rank dim.", engine=_MLA),
    _f("--kv-lora-rank", "int", 32, "model", "MLA key/value low-rank dim.", engine=_MLA),
    _f("--qk-head-dim", "int", 128, "model", "MLA QK head dim.", engine=_MLA),
    _f("--qk-pos-emb-head-dim", "int", 64, "model", "MLA rotary QK head dim.", engine=_MLA),
    _f("--v-head-dim", "int", 128, "model", "MLA value head dim.", engine=_MLA),
    _f("--rope-type", "str", None, "model", "Rope type for MLA (rope or yarn).", engine=_YARN),
    _f("--original-max-position-embeddings", "int", None, "model",
       "YaRN: original context length.", engine=_YARN),
    _f("--beta-fast", "float", 32.0, "model", "YaRN beta fast.", engine=_YARN),
    _f("--beta-slow", "float", 1.0, "model", "YaRN beta slow.", engine=_YARN),
    _f("--mscale", "float", 1.0, "model", "YaRN mscale.", engine=_YARN),
    _f("--mscale-all-dim", "float", 0.0, "model", "YaRN mscale over all dims.", engine=_YARN),
    _f("--moe-layer-freq", "str", None, "model",
       "Which layers are MoE: a list such as [0,1,1] or an expression.", engine=_MOE),
    _f("--moe-shared-expert-intermediate-size", "int", None, "model",
       "Shared expert hidden size.", engine=_MOE),
    _f("--moe-shared-expert-gate", "bool", False, "model", "Gate on the shared expert.",
       engine=_MOE),
    _f("--moe-grouped-gemm", "bool", False, "model", "Grouped GEMM for experts.",
       engine=_MOE),
    _f("--moe-permute-fusion", "bool", False, "model", "Fused token permutation.",
       engine=_MOE),
    _f("--moe-enable-deepep", "bool", False, "model", "DeepEP token dispatch.", engine=_MOE),
    _choice("--moe-router-score-function", ("softmax", "sigmoid"), "softmax", "model",
            "Router score function.", engine=_MOE),
    _f("--moe-router-pre-softmax", "bool", False, "model", "Softmax before top-k.",
       engine=_MOE),
    _f("--moe-router-dtype", "str", None, "model", "Router dtype (fp32, fp64).",
       engine=_MOE),
    _f("--moe-router-topk-scaling-factor", "float", None, "model", "Top-k score scaling.",
       engine=_MOE),
    _f("--moe-router-enable-expert-bias", "bool", False, "model",
       "Aux-loss-free expert bias.", engine=_MOE),
    _f("--moe-router-bias-update-rate", "float", 1e-3, "model", "Expert bias update rate.",
       engine=_MOE),
    _f("--moe-router-load-balancing-type", "str", "aux_loss", "model",
       "Load balancing (aux_loss, seq_aux_loss, sinkhorn, none).", engine=_MOE),
    _f("--moe-router-num-groups", "int", None, "model", "Group-limited routing groups.",
       engine=_MOE),
    _f("--moe-router-group-topk", "int", None, "model", "Groups chosen per token.",
       engine=_MOE),
    _f("--moe-aux-loss-coeff", "float", 0.0, "model", "Aux loss coefficient.", engine=_MOE),
    _choice("--moe-token-dispatcher-type", ("allgather", "alltoall", "flex"), "allgather",
            "model", "Token dispatcher.", engine=_MOE),
    _choice("--moe-token-drop-policy", ("probs", "position"), "probs", "model",
            "Token drop policy.", engine=_MOE),
    _f("--use-rollout-routing-replay", "bool", False, "model",
       "Replay the rollout's MoE routing in training (R3).", engine=_MOE),
)

_SGLANG_IMPORTED = (
    _f("--sglang-cuda-graph-bs", "list", None, "sglang", "SGLang CUDA-graph batch sizes.",
       engine=_SGLANG_TUNING),
    _f("--sglang-cuda-graph-max-bs", "int", None, "sglang", "SGLang largest CUDA-graph batch.",
       engine=_SGLANG_TUNING),
    _f("--sglang-disable-cuda-graph", "bool", False, "sglang", "SGLang without CUDA graphs.",
       engine=_SGLANG_TUNING),
    _f("--sglang-attention-backend", "str", None, "sglang", "SGLang attention backend.",
       engine=_SGLANG_TUNING),
    _f("--sglang-chunked-prefill-size", "int", None, "sglang", "SGLang chunked prefill size.",
       engine=_SGLANG_TUNING),
    _f("--sglang-enable-deterministic-inference", "bool", False, "sglang",
       "SGLang deterministic inference.", engine=_SGLANG_TUNING),
    _f("--sglang-watchdog-timeout", "float", 300.0, "sglang", "SGLang watchdog timeout (s).",
       engine=_SGLANG_TUNING),
    _f("--sglang-decode-log-interval", "int", 40, "sglang", "SGLang decode log interval.",
       engine=_SGLANG_TUNING),
    _f("--sglang-server-concurrency", "int", 512, "sglang",
       "Concurrent requests miles sends to each SGLang server.",
       engine=command_only("the built-in rollout batches its requests itself")),
    _f("--sglang-ep-size", "int", 1, "sglang", "SGLang expert parallel size.",
       engine=_SGLANG_LAYOUT),
    _f("--sglang-dp-size", "int", 1, "sglang", "SGLang data parallel size.",
       engine=_SGLANG_LAYOUT),
    _f("--sglang-enable-dp-attention", "bool", False, "sglang", "SGLang DP attention.",
       engine=_SGLANG_LAYOUT),
    _f("--sglang-enable-dp-lm-head", "bool", False, "sglang", "SGLang DP LM head.",
       engine=_SGLANG_LAYOUT),
)

FLAGS: tuple[Flag, ...] = (
    _CLUSTER + _ROLLOUT + _ROLLOUT_IMPORTED + _DATA + _DATA_IMPORTED + _ACTOR + _ACTOR_IMPORTED
    + _CRITIC + _PPO + _PPO_IMPORTED + _CHECKPOINT + _PARALLELISM + _PARALLELISM_IMPORTED
    + _MODEL + _MODEL_IMPORTED + _SGLANG + _SGLANG_IMPORTED + _LOGGING + _PPODECK
)

BY_DEST: dict[str, Flag] = {f.dest: f for f in FLAGS}
BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}
BY_NAME.update({f.negative: f for f in FLAGS if f.negative})

DEFAULTS: dict[str, Any] = {f.dest: f.default for f in FLAGS}

# Flags whose value is a filesystem path: resolve() expands ~ and ${PPODECK_HOME} in them.
PATH_DESTS = frozenset({
    "hf_checkpoint", "ref_load", "load", "save", "critic_load", "critic_save", "prompt_data",
    "run_dir", "offload_train_disk_dir", "wandb_dir", "save_trigger_sentinel",
    "ci_save_grad_norm", "ci_load_grad_norm", "sglang_config",
})

# Prefixes of flags miles accepts that PPO Deck does not model; kept as passthrough.
MILES_PREFIXES = (
    "--sglang-", "--wandb-", "--eval-", "--rollout-", "--critic-", "--actor-", "--ci-", "--tb-",
    "--offload-", "--use-", "--disable-", "--custom-", "--moe-", "--lr-", "--recompute-",
    "--num-", "--train-", "--ref-", "--kl-", "--tis-", "--opd-", "--async-", "--max-",
)


def _check_schema() -> None:
    """Import-time guard: a duplicate name or an unknown group is a programming error."""
    assert len(BY_DEST) == len(FLAGS), "duplicate flag dest in schema"
    for flag in FLAGS:
        assert flag.group in GROUPS, flag
        assert flag.name.startswith("--"), flag
        assert flag.kind != "choice" or flag.default is None or flag.default in flag.choices, flag
        assert flag.engine.cls in ENGINE_CLASSES, flag
        assert flag.engine.cls == "honoured" or flag.engine.reason, flag


_check_schema()
