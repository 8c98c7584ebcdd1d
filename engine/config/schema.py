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
    # Newer miles, after the snapshot the schema follows: known, so never passthrough.
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
       "Prompts sampled per request round; defaults to --rollout-batch-size and must be >= it."),
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
       "Python path of a custom reward function; overrides --rm-type.", runs_code=True),
    _f("--group-rm", "bool", False, "rollout", "Score a whole group at once."),
    _f("--rm-url", "str", None, "rollout", "URL for --rm-type remote_rm."),
    _f("--use-rollout-entropy", "bool", False, "rollout", "Log rollout entropy.",
       engine=refused(
           "the rollout backends do not compute the rollout entropy",
           "--observe-training-entropy (the trainer's entropy)")),
)

_ACTOR = (
    _choice("--optimizer", ("adam", "sgd", "muon", "dist_muon"), "adam", "actor", "Optimizer.",
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
    _f("--sequence-parallel", "bool", False, "parallelism",
       "Megatron sequence parallelism: norms and dropout split the sequence over TP (TP > 1)."),
    _f("--use-dynamic-batch-size", "bool", False, "parallelism",
       "Pack micro-batches by token count (needs --max-tokens-per-gpu)."),
    _f("--max-tokens-per-gpu", "int", None, "parallelism",
       "Token budget per GPU per micro-batch; with CP, around max_response_len // cp_size."),
    _f("--log-probs-max-tokens-per-gpu", "int", None, "parallelism",
       "Token budget for log-prob passes; defaults to --max-tokens-per-gpu."),
    _f("--log-probs-chunk-size", "int", -1, "parallelism", "Chunk size for log-probs (-1 off)."),
    _f("--allgather-cp", "bool", False, "parallelism",
       "All-gather CP: keys/values gathered over the CP group (the engine's own CP attention "
       "always does; with transformer-engine it selects TE's all_gather over p2p)."),
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
    _f("--samples-per-rollout", "int", None, "ppodeck",
       "Samples kept per rollout in the run's samples/ (responses with per-token log-probs, "
       "values, returns, advantages; `ppodeck samples`): None keeps all, N the first N by "
       "index (whole prompt groups first), 0 none.", own=True),
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
       "Python path of a reward post-processing function.", runs_code=True),
    _f("--dynamic-sampling-filter-path", "str", None, "rollout",
       "Python path of a dynamic-sampling filter (with --over-sampling-batch-size).",
       runs_code=True),
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
       "Bias on the QKV projection only (Qwen2 / Qwen2.5), with --disable-bias-linear."),
    _f("--spec", "list", None, "model", "Custom Megatron layer spec: MODULE FUNCTION.",
       runs_code=True, engine=refused("custom Megatron layer specs are not loaded")),
    _f("--apply-layernorm-1p", "bool", False, "model", "LayerNorm with (1 + weight).",
       engine=refused("zero-centred (1p) norms are not implemented")),
    _f("--attention-output-gate", "bool", False, "model", "Gated attention output.",
       engine=refused("gated attention output is not implemented")),
    _f("--no-rope-fusion", "bool", False, "model", "Disable the fused RoPE kernel.",
       engine=command_only("the engine picks its RoPE kernel itself")),
    _f("--use-rope-scaling", "bool", False, "model",
       "Llama 3 (3.1, 3.2) rope frequency scaling; Megatron fixes low/high frequency factors "
       "1 and 4 and an original context of 8192."),
    _f("--rotary-scaling-factor", "float", 8.0, "model",
       "Llama 3 rope scaling factor, used with --use-rope-scaling (Llama 3.1: 8, 3.2: 32)."),
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

# Every other flag miles declares (miles/utils/arguments.py and miles/dashboard/args.py) and
# every Megatron-LM flag miles' own launchers pass (issue #30 item 5; the names are listed in
# engine/config/data/miles_flags.txt). A Megatron `--no-X` store_false flag is a bool named as
# written, like --no-rope-fusion: set means Megatron's X is off.
_DEBUG_OUTPUT = command_only("a miles debugging or profiling output; PPO Deck's engine records "
                             "its run in the run directory (events.jsonl, samples/) instead")
_FP8 = refused("fp8/fp4 training is not implemented: bf16 on CUDA, float32 on CPU", "--bf16")
_DSA = refused("DeepSeek sparse attention (the DSA indexer) is not implemented")
_DSV4 = refused("DeepSeek-V4 attention (compressed KV, hash layers, hyper-connections) is not "
                "implemented")
_FAULT_TOLERANCE = refused("fault tolerance (engine health checks, restarts, healing) is not "
                           "implemented: a failed worker stops the run")
_SESSION = refused("the session server for multi-turn agentic rollouts is not implemented")
_FUSION = command_only("a Megatron kernel-fusion switch; the engine picks its kernels itself and "
                       "computes the same maths")
_EVAL_KEYS = refused("eval datasets are read with the training keys (--input-key, --label-key)",
                     "--input-key / --label-key")


def _only_with(parent: str) -> Engine:
    """A sub-option of a feature this engine refuses: the parent's refusal already says it."""
    return command_only(f"read only with {parent}, which this engine refuses")


_CLUSTER_MILES = (
    _f("--distributed-backend", "str", "nccl", "cluster", "torch.distributed backend.",
       engine=command_only("the engine uses nccl on CUDA and gloo on CPU")),
    _f("--distributed-timeout-minutes", "int", 10, "cluster",
       "torch.distributed timeout in minutes.",
       engine=command_only("the engine keeps torch.distributed's default timeout")),
    _f("--train-env-vars", "str", "{}", "cluster",
       "JSON dict of extra environment variables for the training processes.", runs_code=True,
       engine=refused("the variables are not set on the engine's workers",
                      "export them in the shell that runs `ppodeck run` (local workers inherit "
                      "its environment)")),
    _f("--pin-rollout-manager-to-head", "bool", False, "cluster",
       "Place miles' rollout manager (and router) on the Ray head node.",
       engine=command_only("a placement of miles' rollout manager; PPO Deck places its own "
                           "processes")),
    _choice("--object-store-backend", ("ray", "mooncake"), "ray", "cluster",
            "Object store that carries rollout data between processes.",
            engine=command_only("the engine passes rollout data through Ray itself")),
    _f("--mooncake-store-init-kwargs", "str", None, "cluster",
       "JSON kwargs for the Mooncake store (--object-store-backend mooncake).",
       engine=command_only("the engine passes rollout data through Ray itself")),
    _f("--mooncake-replica-num", "int", 1, "cluster", "Mooncake replicas per stored object.",
       engine=command_only("the engine passes rollout data through Ray itself")),
    _f("--use-fault-tolerance", "bool", False, "cluster",
       "Fault tolerance for the components in --ft-components.", engine=_FAULT_TOLERANCE),
    _f("--ft-components", "list", None, "cluster",
       "Components under fault tolerance: rollout, train (default rollout).",
       engine=_only_with("--use-fault-tolerance")),
    _f("--rollout-health-check-interval", "float", 30.0, "cluster",
       "Seconds between rollout-engine health checks.",
       engine=command_only("the engine does not health-check its rollout engines over HTTP")),
    _f("--rollout-health-check-timeout", "float", 30.0, "cluster",
       "Seconds to wait for a rollout-engine health reply.",
       engine=command_only("the engine does not health-check its rollout engines over HTTP")),
    _f("--rollout-health-check-first-wait", "float", 0.0, "cluster",
       "Grace seconds before the first rollout-engine health check.",
       engine=command_only("the engine does not health-check its rollout engines over HTTP")),
    _f("--control-server-port", "int", 0, "cluster",
       "Port of miles' HTTP control server (0 = off).",
       engine=command_only("a PPO Deck run is controlled through its run directory "
                           "(`ppodeck stop`), not over HTTP")),
    _f("--mini-ft-controller-enable", "bool", False, "cluster",
       "Controller that heals failed cells automatically.", engine=_FAULT_TOLERANCE),
    _f("--mini-ft-controller-poll-interval", "float", 10.0, "cluster",
       "Seconds between cell health polls of the mini FT controller.",
       engine=_only_with("--mini-ft-controller-enable")),
    _f("--mini-ft-controller-resume-delay", "float", 10.0, "cluster",
       "Seconds between suspending and resuming a cell while healing.",
       engine=_only_with("--mini-ft-controller-enable")),
    _f("--use-miles-router", "bool", False, "cluster",
       "Route rollout requests by text through miles' router instead of SGLang's.",
       engine=command_only("request routing between engines; PPO Deck sends requests to its "
                           "engines directly")),
    _f("--miles-router-timeout", "float", None, "cluster", "miles router request timeout (s).",
       engine=command_only("request routing between engines; PPO Deck sends requests to its "
                           "engines directly")),
    _f("--miles-router-max-connections", "int", None, "cluster",
       "miles router HTTP connection limit.",
       engine=command_only("request routing between engines; PPO Deck sends requests to its "
                           "engines directly")),
    _f("--miles-router-health-check-failure-threshold", "int", 3, "cluster",
       "Failures before the miles router marks a worker unhealthy.",
       engine=command_only("request routing between engines; PPO Deck sends requests to its "
                           "engines directly")),
    _f("--http-proxy", "str", None, "cluster", "HTTP proxy for miles' rollout requests.",
       engine=command_only("the built-in rollout calls its engines in-process, not over HTTP")),
    _f("--use-distributed-post", "bool", False, "cluster",
       "Spread miles' rollout HTTP posts over Ray workers.",
       engine=command_only("the built-in rollout calls its engines in-process, not over HTTP")),
)

_TRAIN_MILES = (
    _choice("--stream-optimizer-state-moment-dtype",
            ("fp32", "bf16", "fp16", "fp8e4m3", "fp8e5m2"), "fp32", "actor",
            "On-disk dtype of Adam moments streamed to NVMe.",
            engine=_only_with("--stream-optimizer-state-to-disk")),
    _choice("--linear-attention-backend", ("fla", "flashqla"), "fla", "model",
            "Kernel for Qwen gated-delta-net linear-attention layers.",
            engine=command_only("it applies to linear-attention layers only, which this engine "
                                "does not build")),
    _choice("--miles-dsa-topk-backend", ("torch", "flashinfer"), "torch", "model",
            "Top-k kernel of the DSA indexer.",
            engine=command_only("it applies to DSA models only, which this engine does not "
                                "build")),
    _choice("--dsa-attention-backend", ("megatron", "tilelang"), "tilelang", "model",
            "Sparse-MLA kernel for DSA models under --megatron-to-hf-mode bridge.",
            engine=command_only("it applies to DSA models only, which this engine does not "
                                "build")),
    _f("--true-on-policy-mode", "bool", False, "rollout",
       "Bitwise-matching rollout and training numerics (true on-policy).",
       engine=refused("matching rollout and training kernels bitwise is not implemented")),
    _f("--recompute-logprobs-via-prefill", "bool", False, "rollout",
       "Recompute rollout log-probs with an SGLang prefill pass.",
       engine=refused("rollout log-probs come from the generation pass")),
    _f("--debug-skip-weight-update", "bool", False, "cluster",
       "Debug: keep the offload schedule but skip pushing weights to the rollout.",
       engine=refused("the actor's weights always reach the rollout after each update")),
    _f("--debug-disable-optimizer", "bool", False, "cluster",
       "Debug: build no optimizer or scheduler; forward/backward only.",
       engine=refused("every training step updates the weights")),
    _f("--check-rematerialize-param-from-master-weight", "bool", False, "parallelism",
       "Debug: hash-check the first rematerialization cycles.",
       engine=_only_with("--rematerialize-param-from-master-weight")),
    _f("--extra-high-precision-layers-hf", "list", (), "rollout",
       "HF weight-name substrings kept out of rollout quantization.",
       engine=command_only("rollout weights are not quantized, so nothing is kept out")),
    _f("--extra-high-precision-layers-megatron", "list", (), "rollout",
       "Megatron weight-name substrings kept out of quantization on conversion.",
       engine=command_only("rollout weights are not quantized, so nothing is kept out")),
    _f("--custom-model-provider-path", "str", None, "model",
       "Python path of a custom Megatron model provider.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--recompute-loss-function", "bool", False, "parallelism",
       "Recompute the loss function in backward to save memory.",
       engine=command_only("a memory saving that leaves the loss unchanged; the engine computes "
                           "its loss its own way")),
    _f("--delay-split-train-data-by-dp", "bool", False, "data",
       "Split train data across DP ranks later, in the train workers.",
       engine=command_only("where miles splits rollout data by DP rank; each rank trains on "
                           "the same samples either way")),
    _f("--low-memory-resume", "bool", False, "checkpoint",
       "Build optimizer state on CPU while loading a checkpoint.",
       engine=command_only("memory placement while loading; the resumed state is the same")),
    _f("--mfu-peak-tflops", "float", None, "logging",
       "Peak TFLOP/s of one training GPU for the MFU metric.",
       engine=command_only("the engine does not report MFU")),
)

_ROLLOUT_MILES = (
    _f("--model-name", "str", None, "rollout",
       "Model name for Megatron-to-HF weight conversion (default from the HF config).",
       engine=command_only("the engine converts weights by the HF config's model type")),
    _f("--rollout-skip-special-tokens", "bool", False, "rollout",
       "Drop special tokens from response text.",
       engine=command_only("the built-in rollout always decodes responses without special "
                           "tokens before scoring")),
    _f("--rollout-stop", "list", None, "rollout", "Stop strings for generation.",
       engine=refused("stop strings are not passed to generation: it ends at EOS or the "
                      "length limit")),
    _f("--rollout-stop-token-ids", "list", None, "rollout", "Stop token ids for generation.",
       engine=refused("stop token ids are not passed to generation: it ends at EOS or the "
                      "length limit")),
    _f("--partial-rollout", "bool", False, "rollout",
       "Recycle unfinished samples into the data buffer.",
       engine=refused("partial rollouts are not implemented: every sample is generated to "
                      "the end")),
    _f("--mask-offpolicy-in-partial-rollout", "bool", False, "rollout",
       "Train only on tokens generated on-policy in partial rollouts.",
       engine=_only_with("--partial-rollout")),
    _f("--async-data-buffer-capacity-factor", "float", 2.0, "ppo",
       "Fully-async: finished-group buffer size as a multiple of --rollout-batch-size.",
       engine=_SYNC_ONLY),
    _choice("--async-unused-samples-handler", ("retry", "drop"), "drop", "ppo",
            "Fully-async: what happens to a group that is not trained on.", engine=_SYNC_ONLY),
    _f("--custom-async-data-buffer-path", "str", None, "ppo",
       "Fully-async: Python path of a custom data buffer class.", runs_code=True,
       engine=_SYNC_ONLY),
    _f("--custom-rollout-log-function-path", "str", None, "logging",
       "Python path of a custom rollout logging function.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--custom-eval-rollout-log-function-path", "str", None, "logging",
       "Python path of a custom eval logging function.", runs_code=True, engine=_CUSTOM_CODE),
    _f("--buffer-filter-path", "str", None, "rollout",
       "Python path of a function selecting samples from the buffer.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--rollout-data-postprocess-path", "str", None, "rollout",
       "Python path of a function run on rollout data after log-probs.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--rollout-external", "bool", False, "rollout",
       "Use SGLang engines started outside miles.",
       engine=refused("external SGLang engines are not used: PPO Deck starts its own",
                      "--rollout-backend")),
    _f("--rollout-external-engine-addrs", "list", None, "rollout",
       "Addresses of the external engines for --rollout-external.",
       engine=_only_with("--rollout-external")),
    _f("--update-weight-disk-dir", "str", None, "rollout",
       "Shared directory for disk-delta weight sync.",
       engine=_only_with("--update-weight-transfer-mode disk-delta")),
    _f("--update-weight-local-checkpoint-dir", "str", None, "rollout",
       "Rollout-host directory holding the synced HF checkpoint (disk-delta).",
       engine=_only_with("--update-weight-transfer-mode disk-delta")),
    _choice("--update-weight-delta-encoding", ("xor", "overwrite"), "xor", "rollout",
            "Disk-delta encoding of changed weights.",
            engine=_only_with("--update-weight-transfer-mode disk-delta")),
    _choice("--update-weight-delta-checksum", ("xxh3-128", "blake3", "adler32"), "xxh3-128",
            "rollout", "Disk-delta per-tensor checksum.",
            engine=_only_with("--update-weight-transfer-mode disk-delta")),
    _f("--custom-update-weight-post-write-path", "str", None, "rollout",
       "Python path of a hook run after disk-delta files are written.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--p2p-transfer-num-workers", "int", 4, "rollout", "Threads for p2p weight transfer.",
       engine=_only_with("--update-weight-transfer-mode p2p")),
    _f("--p2p-transfer-timeout", "float", 30.0, "rollout",
       "Seconds per p2p weight-transfer operation.",
       engine=_only_with("--update-weight-transfer-mode p2p")),
    _f("--rollout-buffer-url", "str", None, "rollout",
       "URL of an external rollout buffer (agent trajectories).",
       engine=refused("trajectories from an external rollout buffer are not read")),
    _f("--fetch-trajectory-retry-times", "int", -1, "rollout",
       "Retries when fetching trajectories from the rollout buffer (-1 = forever).",
       engine=_only_with("--rollout-buffer-url")),
    _f("--min-batch-collection-ratio", "float", 1.0, "rollout",
       "Share of the batch to collect from the rollout buffer before training.",
       engine=_only_with("--rollout-buffer-url")),
    _f("--rollout-task-type", "str", "math", "rollout", "Task type sent to the rollout buffer.",
       engine=_only_with("--rollout-buffer-url")),
    _choice("--loss-mask-type", ("qwen", "qwen3", "distill_qwen"), "qwen", "rollout",
            "Chat format miles' multi-turn loss-mask builder follows.",
            engine=command_only("the built-in rollout is single-turn and masks exactly the "
                                "response tokens")),
    _f("--rollout-sample-filter-path", "str", None, "rollout",
       "Python path of a filter choosing which samples enter the loss.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--rollout-all-samples-process-path", "str", None, "rollout",
       "Python path of a function that sees all samples, filtered ones too.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--custom-convert-samples-to-train-data-path", "str", None, "rollout",
       "Python path of a custom samples-to-train-data conversion.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--prefill-num-servers", "int", None, "sglang",
       "Prefill servers for prefill/decode disaggregation.",
       engine=refused("prefill/decode disaggregation is not implemented: each engine does "
                      "both", "--rollout-num-gpus-per-engine")),
)

_DATA_MILES = (
    _f("--disable-rollout-global-dataset", "bool", False, "data",
       "Do not load --prompt-data as one global dataset (custom rollout functions only).",
       engine=refused("the built-in rollout always samples --prompt-data as one global "
                      "dataset")),
    _f("--data-source-path", "str", "miles.rollout.data_source.RolloutDataSourceWithBuffer",
       "data", "Python path of the rollout data source class.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--chat-template-path", "str", None, "data",
       "Jinja chat template file used instead of the tokenizer's.",
       engine=refused("the tokenizer's own chat template is applied",
                      "--apply-chat-template (the checkpoint's template)")),
    _f("--multimodal-keys", "str", None, "data",
       "JSON dict from media type to dataset key, e.g. {\"image\": \"image_file\"}.",
       engine=refused("multimodal prompts are not implemented: prompts are text only")),
    _f("--balance-by-flops", "bool", False, "data",
       "Partition micro-batches by estimated FLOPs (needs --use-dynamic-batch-size).",
       engine=command_only("micro-batch partitioning; the gradient is the same")),
    _f("--data-pad-size-multiplier", "int", 128, "data",
       "Pad packed training data to a multiple of this size.",
       engine=command_only("padding of packed batches; the loss is the same")),
    _f("--use-dynamic-global-batch-size", "bool", False, "data",
       "Train every sample with a per-rollout global batch (no trimming); needs "
       "--use-dynamic-batch-size.",
       engine=refused("the global batch size is fixed: samples are trimmed to a multiple of "
                      "--global-batch-size", "a --global-batch-size that divides the rollout")),
    _f("--eval-input-key", "str", None, "data",
       "Prompt key of eval records (default --input-key).", engine=_EVAL_KEYS),
    _f("--eval-label-key", "str", None, "data",
       "Label key of eval records (default --label-key).", engine=_EVAL_KEYS),
    _f("--eval-tool-key", "str", None, "data", "Tools key of eval records (default --tool-key).",
       engine=command_only("prompts are built without tools; the key is not read")),
    _f("--eval-max-prompt-len", "int", None, "data", "Max eval prompt tokens.",
       engine=refused("eval prompts are not filtered by length")),
    _f("--eval-min-new-tokens", "int", None, "data", "Min new tokens per eval response.",
       engine=refused("a minimum response length is not passed to generation")),
    _f("--eval-max-context-len", "int", None, "data", "Max eval prompt + response tokens.",
       engine=refused("eval generation is bounded by --eval-max-response-len only",
                      "--eval-max-response-len")),
    _f("--eval-num-gpus", "int", 0, "data", "GPUs of a separate eval engine fleet (0 = none).",
       engine=refused("no separate eval fleet is started: eval runs on the rollout engines "
                      "between steps")),
    _f("--eval-num-gpus-per-engine", "int", 1, "data", "GPUs per eval engine.",
       engine=_only_with("--eval-num-gpus")),
    _f("--eval-hf-dir", "str", None, "data", "Staging dir of HF snapshots for the eval fleet.",
       engine=_only_with("--eval-num-gpus")),
    _f("--eval-max-in-flight", "int", 2, "data", "Async evals pending at once (eval fleet).",
       engine=_only_with("--eval-num-gpus")),
    _choice("--eval-overflow-policy", ("backpressure", "skip"), "backpressure", "data",
            "What a due eval does while --eval-max-in-flight evals are pending.",
            engine=_only_with("--eval-num-gpus")),
    _f("--eval-keep-snapshots", "int", 2, "data", "HF snapshots kept under --eval-hf-dir.",
       engine=_only_with("--eval-num-gpus")),
    _f("--eval-reward-key", "str", None, "data", "--reward-key for eval (default --reward-key).",
       engine=refused("eval scores use --reward-key", "--reward-key")),
)

_CHECKPOINT_MILES = (
    _f("--async-save", "bool", False, "checkpoint", "Write checkpoints in the background.",
       engine=command_only("checkpoints are written synchronously; what is saved is the same")),
    _f("--no-save-optim", "bool", False, "checkpoint", "Save checkpoints without optimizer state.",
       engine=command_only("checkpoints always hold the optimizer state (larger, and resumable)")),
    _f("--save-hf", "str", None, "checkpoint",
       "Also save HF-format weights at each save (path may hold {rollout_id}).",
       engine=refused("HF-format weights are not written at save time",
                      "the torch_dist checkpoint under --save")),
    _f("--padded-vocab-size", "int", None, "model", "Padded vocabulary size (set by Megatron).",
       engine=command_only("the engine builds the embedding with exactly --vocab-size rows")),
)

_ALGO_MILES = (
    _f("--custom-loss-function-path", "str", None, "actor",
       "Python path of the loss for --loss-type custom_loss.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--reset-optimizer-states", "bool", False, "actor",
       "Clear the optimizer state after each rollout.",
       engine=refused("the optimizer state carries over between rollouts")),
    _f("--skip-actor-forward-only", "bool", False, "actor",
       "Skip the actor's separate pi_old forward pass.",
       engine=refused("the actor always recomputes pi_old before its update")),
    _f("--custom-pg-loss-reducer-function-path", "str", None, "actor",
       "Python path of a custom reducer for the policy loss.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--use-routing-replay", "bool", False, "model", "MoE routing replay in training.",
       engine=_MOE),
    _f("--use-indexer-replay", "bool", False, "model", "Replay DSA indexer top-k decisions.",
       engine=_DSA),
    _f("--use-rollout-indexer-replay", "bool", False, "model",
       "Replay the rollout's DSA indexer top-k in training.", engine=_DSA),
    _f("--freeze-indexer", "bool", False, "model", "Freeze the DSA indexer weights.",
       engine=_DSA),
    _f("--opd-log-prob-top-k", "int", 0, "ppo",
       "Top-k tokens for the OPD token reward (0 = sampled token).", engine=_OPD),
    _choice("--opd-top-k-strategy",
            ("only-student", "only-teacher", "intersection", "union", "xor"), "only-student",
            "ppo", "Token set for top-k OPD.", engine=_OPD),
    _choice("--opd-reward-weight-mode", ("student_p", "teacher_p", "none"), "student_p", "ppo",
            "Weighting of top-k OPD token rewards.", engine=_OPD),
    _f("--opd-topk-per-position", "bool", False, "ppo",
       "Ask the scoring server for per-position top-k token ids.", engine=_OPD),
    _f("--opd-teacher-urls", "list", None, "ppo",
       "NAME=URL teacher servers for --opd-type sglang.", engine=_OPD),
    _f("--opd-teacher-key", "str", "opd_teacher", "ppo",
       "Metadata key naming each sample's teacher.", engine=_OPD),
    _f("--opd-teacher-ckpt-step", "int", None, "ppo", "Step of the OPD teacher checkpoint.",
       engine=_OPD),
    _f("--enable-mtp-training", "bool", False, "model", "Train the multi-token prediction layers.",
       engine=refused("multi-token prediction layers are not built")),
    _f("--mtp-loss-scaling-factor", "float", 0.2, "model", "Weight of the MTP loss.",
       engine=_only_with("--enable-mtp-training")),
)

_LORA_ONLY = _only_with("LoRA (--lora-rank > 0)")
_MULTI_LORA_ONLY = _only_with("multi-LoRA (--multi-lora-n-adapters > 0)")

_LORA_MILES = (
    _choice("--lora-type", ("lora", "canonical_lora"), "lora", "actor",
            "LoRA variant: lora, or canonical_lora (separate Q/K/V).", engine=_LORA_ONLY),
    _f("--exclude-modules", "str", None, "actor", "Modules left out of LoRA (comma-separated).",
       engine=_LORA_ONLY),
    _f("--lora-adapter-path", "str", None, "actor", "Pre-trained LoRA adapter to start from.",
       engine=_LORA_ONLY),
    _f("--lora-sync-from-tensor", "bool", False, "actor",
       "Push LoRA weights to SGLang as tensors, not files.", engine=_LORA_ONLY),
    _f("--lora-base-cpu-backup", "bool", False, "actor",
       "LoRA + colocate: keep a CPU copy of the base weights on the SGLang side.",
       engine=_LORA_ONLY),
    _f("--lora-train-only", "bool", False, "actor",
       "Train LoRA adapters but roll out with the frozen base weights.", engine=_LORA_ONLY),
    _f("--experts-shared-outer-loras", "bool", False, "actor",
       "Grouped-expert LoRA with outer matrices shared across experts.", engine=_LORA_ONLY),
    _f("--no-sglang-lora-use-virtual-experts", "bool", False, "sglang",
       "Serve MoE-expert LoRA through SGLang's fused path, not virtual experts.",
       engine=_LORA_ONLY),
    _f("--check-lora-weight-equal", "bool", False, "logging",
       "Hash-check LoRA adapter weights on each sync.", engine=_LORA_ONLY),
    _f("--multi-lora-n-adapters", "int", 0, "actor",
       "Concurrent adapter slots for multi-LoRA (0 = off).", engine=_LORA),
    _f("--multi-lora-adapter", "list", None, "actor", "Multi-LoRA adapter: NAME CONFIG.",
       engine=_MULTI_LORA_ONLY),
    _f("--multi-lora-idle-poll-s", "float", 5.0, "actor",
       "Seconds between polls for new adapters while idle.", engine=_MULTI_LORA_ONLY),
    _f("--multi-lora-http-server-path", "str", None, "actor",
       "Python path of the multi-LoRA controller's HTTP server class.", runs_code=True,
       engine=_MULTI_LORA_ONLY),
    _f("--multi-lora-backend-path", "str", None, "actor",
       "Python path of the multi-LoRA backend class.", runs_code=True,
       engine=_MULTI_LORA_ONLY),
    _f("--multi-lora-api-port", "int", 8068, "actor", "Port of the multi-LoRA control API.",
       engine=_MULTI_LORA_ONLY),
    _f("--multi-lora-disable-service-mode", "bool", False, "actor",
       "Exit once every adapter is done instead of waiting for more.",
       engine=_MULTI_LORA_ONLY),
    _f("--multi-lora-max-adapter-global-batch-size", "int", None, "actor",
       "Largest samples per optimizer step an adapter may register.",
       engine=_MULTI_LORA_ONLY),
    _f("--multi-lora-max-coalesce-wait-s", "float", 0.5, "actor",
       "Seconds ready groups wait for a fuller batch.", engine=_MULTI_LORA_ONLY),
    _f("--multi-lora-max-empty-wait-s", "float", 30.0, "actor",
       "Seconds a generate call waits for its first group.", engine=_MULTI_LORA_ONLY),
)

_MLFLOW_ONLY = _only_with("--use-mlflow")
_PROMETHEUS_ONLY = _only_with("--use-prometheus")
_DASHBOARD_ONLY = _only_with("--use-miles-dashboard")
_SESSION_ONLY = _only_with("--use-session-server")
_EXTRA_METRIC = command_only("an extra miles metric the engine does not log")

_LOGGING_MILES = (
    _f("--log-multi-turn", "bool", False, "logging", "Log multi-turn rollout details.",
       engine=_EXTRA_METRIC),
    _f("--log-passrate", "bool", False, "logging", "Log pass@n of each rollout.",
       engine=_EXTRA_METRIC),
    _f("--log-reward-category", "str", None, "logging",
       "Reward-dict key whose categories are counted.", engine=_EXTRA_METRIC),
    _f("--log-correct-samples", "bool", False, "logging", "Log metrics of correct samples.",
       engine=_EXTRA_METRIC),
    _f("--mlflow-tracking-uri", "str", None, "logging", "MLflow tracking URI.",
       engine=_MLFLOW_ONLY),
    _f("--mlflow-experiment-name", "str", "miles", "logging", "MLflow experiment.",
       engine=_MLFLOW_ONLY),
    _f("--mlflow-run-name", "str", None, "logging", "MLflow run name (default --wandb-group).",
       engine=_MLFLOW_ONLY),
    _f("--mlflow-run-id", "str", None, "logging", "MLflow run id to resume.",
       engine=_MLFLOW_ONLY),
    _f("--prometheus-port", "int", 9090, "logging",
       "Prometheus metrics port (miles: $PROMETHEUS_PORT, else 9090).", engine=_PROMETHEUS_ONLY),
    _f("--prometheus-run-name", "str", None, "logging",
       "run_name label of the Prometheus metrics.", engine=_PROMETHEUS_ONLY),
    _f("--dashboard-flush-interval", "float", 5.0, "logging",
       "Seconds between dashboard flushes to disk.", engine=_DASHBOARD_ONLY),
    _f("--dashboard-gpu-sample-interval", "float", 1.0, "logging",
       "Seconds between dashboard GPU samples.", engine=_DASHBOARD_ONLY),
    _f("--dashboard-sglang-scrape-interval", "float", 2.0, "logging",
       "Seconds between dashboard scrapes of the engines' metrics.", engine=_DASHBOARD_ONLY),
    _choice("--dashboard-sglang-scrape-mode", ("auto", "router", "direct"), "auto", "logging",
            "Scrape each engine (auto, direct) or the router.", engine=_DASHBOARD_ONLY),
    _f("--dashboard-sglang-metrics", "str", None, "logging",
       "Comma-separated SGLang metrics the dashboard scrapes.", engine=_DASHBOARD_ONLY),
    _f("--dashboard-forward-prometheus", "bool", False, "logging",
       "Also export dashboard gauges to Prometheus.", engine=_DASHBOARD_ONLY),
    _f("--dump-details", "str", None, "logging",
       "Directory for miles' full run dump (rollout and train data, dashboard streams).",
       engine=_DEBUG_OUTPUT),
    _f("--save-debug-rollout-data", "str", None, "logging",
       "Save each rollout's data to this path ({rollout_id} in it).", engine=_DEBUG_OUTPUT),
    _f("--save-debug-trajectory-data", "str", None, "logging",
       "Save each rollout's role-tagged trajectories (JSONL) to this path.",
       engine=_DEBUG_OUTPUT),
    _f("--save-debug-train-data", "str", None, "logging",
       "Save each rank's train data to this path.", engine=_DEBUG_OUTPUT),
    _f("--save-debug-event-data", "str", None, "logging", "Save miles' event log to this path.",
       engine=_DEBUG_OUTPUT),
    _f("--load-debug-rollout-data", "str", None, "logging",
       "Train on recorded rollout data instead of generating.",
       engine=refused("rollouts are always generated; recorded rollout data is not loaded",
                      "--debug-train-only")),
    _f("--load-debug-rollout-data-subsample", "float", None, "logging",
       "Share of the recorded rollout data to load.",
       engine=_only_with("--load-debug-rollout-data")),
    _f("--dumper-enable", "bool", False, "logging",
       "SGLang tensor dumper for inference, forward-only and forward-backward.",
       engine=_DEBUG_OUTPUT),
    _f("--dumper-dir", "str", "/tmp/dumper", "logging", "Output directory of the dumper.",
       engine=_DEBUG_OUTPUT),
    _f("--dumper-inference", "list", None, "logging", "Inference dumper config (key=value).",
       engine=_DEBUG_OUTPUT),
    _f("--dumper-fwd-only", "list", None, "logging", "Forward-only dumper config (key=value).",
       engine=_DEBUG_OUTPUT),
    _f("--dumper-fwd-bwd", "list", None, "logging",
       "Forward-backward dumper config (key=value).", engine=_DEBUG_OUTPUT),
    _f("--dumper-source-patcher-config-inference", "str", None, "logging",
       "YAML source-patcher config for the inference engines.", runs_code=True,
       engine=_DEBUG_OUTPUT),
    _f("--dumper-source-patcher-config-train", "str", None, "logging",
       "YAML source-patcher config for the training actors.", runs_code=True,
       engine=_DEBUG_OUTPUT),
    _f("--memory-snapshot-dir", "str", ".", "logging", "Directory of memory snapshots.",
       engine=_DEBUG_OUTPUT),
    _f("--memory-snapshot-num-steps", "int", None, "logging", "Steps to record memory over.",
       engine=_DEBUG_OUTPUT),
    _f("--profile-target", "list", ("train_overall",), "logging",
       "What to profile: train_overall, train_actor, train_log_probs.", engine=_DEBUG_OUTPUT),
    _choice("--memory-recorder", ("torch", "memray"), "torch", "logging", "Memory recorder.",
            engine=_DEBUG_OUTPUT),
    _choice("--check-weight-update-selector", ("all", "target", "draft"), "all", "logging",
            "Which model the post-update weight check covers.",
            engine=command_only("the engine's --check-weight-update-equal compares every "
                                "weight of its one model")),
    _f("--check-weight-update-skip-list", "list", None, "logging",
       "Weight-name substrings the post-update check skips.",
       engine=command_only("the engine's --check-weight-update-equal compares every weight")),
    _f("--check-weight-update-allow-quant-error", "bool", False, "logging",
       "Allow 1-ULP differences of quantized weights in the update check.",
       engine=command_only("rollout weights are not quantized")),
    _f("--save-local-weight-checksum", "bool", False, "logging",
       "Save per-rank weight checksums each step.", engine=_DEBUG_OUTPUT),
    _f("--enable-event-analyzer", "bool", False, "logging",
       "Sanity checks (cross-replica checksums) before each step.", engine=_DEBUG_OUTPUT),
    _f("--enable-witness", "bool", False, "logging", "Forward/backward pass witness.",
       engine=_DEBUG_OUTPUT),
    _f("--witness-buffer-size", "int", 1048576, "logging", "Witness ids kept before recycling.",
       engine=_DEBUG_OUTPUT),
    _f("--ci-ft-test-actions", "str", None, "logging", "CI: JSON fault-injection actions.",
       engine=_only_with("--use-fault-tolerance")),
    _f("--ci-inject-rollout-data-path", "str", None, "logging",
       "CI: replace rollout data with recordings from this path.",
       engine=refused("recorded rollout data is not injected")),
    _f("--ci-inject-rollout-data-start-rollout-id", "int", None, "logging",
       "CI: first rollout whose data is injected.",
       engine=_only_with("--ci-inject-rollout-data-path")),
    _f("--ci-inject-rollout-data-min-match-ratio", "float", 0.9, "logging",
       "CI: least token match between generated and injected data.",
       engine=_only_with("--ci-inject-rollout-data-path")),
    _f("--ci-metric-checker-key", "str", None, "logging", "CI: metric to check at the end.",
       engine=command_only("a miles CI check the engine does not run")),
    _f("--ci-metric-checker-threshold", "float", None, "logging",
       "CI: threshold for --ci-metric-checker-key.",
       engine=command_only("a miles CI check the engine does not run")),
    _f("--ci-save-model-hash", "bool", False, "logging", "CI: save a hash of the model.",
       engine=command_only("a miles CI check the engine does not run")),
    _f("--ci-check-model-hash", "bool", False, "logging", "CI: compare the model hash.",
       engine=command_only("a miles CI check the engine does not run")),
    _f("--env-report", "str", None, "logging",
       "JSON environment report from a launcher (miles: $MILES_SCRIPT_ENV_REPORT).",
       engine=command_only("a launcher's environment report for miles' logs")),
    _f("--debug-deterministic-collective", "bool", False, "logging",
       "Debug: fixed-order reductions so runs compare bitwise.",
       engine=refused("fixed-order (bitwise-comparable) reductions are not implemented")),
    _f("--debug-exit-after-rollout", "int", None, "logging",
       "Debug: exit after this many rollouts.",
       engine=refused("the run stops after --num-rollout rollouts only", "--num-rollout")),
)

_SESSION_MILES = (
    _f("--use-session-server", "bool", False, "rollout",
       "Standalone session server for multi-turn agentic rollouts (miles also takes v1/v2).",
       engine=_SESSION),
    _f("--session-server-ip", "str", None, "rollout", "Session server IP.",
       engine=_SESSION_ONLY),
    _f("--session-server-port", "list", None, "rollout", "Session server port, or a port range.",
       engine=_SESSION_ONLY),
    _f("--tito-model", "str", "default", "rollout",
       "Tokenizer template for session prefix reuse.", engine=_SESSION_ONLY),
    _f("--session-message-matcher", "str", "strict", "rollout",
       "Session history matcher, or the Python path of one.", runs_code=True,
       engine=_SESSION_ONLY),
    _f("--session-sample-picker-path", "str",
       "miles.rollout.session.v2.picker_hub.drop_retries", "rollout",
       "Python path of the session sample-pick hook.", runs_code=True, engine=_SESSION_ONLY),
    _f("--session-sample-postprocessor-path", "str",
       "miles.rollout.session.v2.postprocessor_hub.default_postprocess", "rollout",
       "Python path of the session post-process hook.", runs_code=True, engine=_SESSION_ONLY),
    _f("--custom-config-path", "str", None, "rollout",
       "YAML (or base64:) arguments for custom functions.", runs_code=True,
       engine=command_only("arguments for custom Python functions, which this engine does "
                           "not run")),
    _f("--custom-megatron-init-path", "str", None, "model",
       "Python path of a hook run when Megatron is initialized.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--custom-megatron-before-log-prob-hook-path", "str", None, "model",
       "Python path of a hook run before each log-prob pass.", runs_code=True,
       engine=_CUSTOM_CODE),
    _f("--custom-megatron-before-train-step-hook-path", "str", None, "model",
       "Python path of a hook run before each train step.", runs_code=True,
       engine=_CUSTOM_CODE),
)

_FSDP_ONLY = _only_with("--train-backend fsdp")

# FSDP backend flags (miles/backends/fsdp_utils/arguments.py, BooleanOptionalAction for bools)
# that miles' launchers pass.
_FSDP_LAUNCHERS = (
    _f("--attn-implementation", "str", "flash_attention_2", "parallelism",
       "HF attention implementation of the FSDP backend.", engine=_FSDP_ONLY),
    _f("--gradient-checkpointing", "tristate", None, "parallelism",
       "Activation checkpointing in the FSDP backend (miles default off).", engine=_FSDP_ONLY),
    _f("--fsdp-cpu-offload", "tristate", None, "parallelism",
       "FSDP: parameters, gradients and optimizer on CPU (miles default off).",
       engine=_FSDP_ONLY),
)

_MEGATRON_LAUNCHERS = (
    _choice("--transformer-impl", ("local", "transformer_engine", "inference_optimized"),
            "transformer_engine", "parallelism", "Megatron layer implementation.",
            engine=command_only("the engine picks its layer implementation itself (Megatron's "
                                "local layers with SDPA; transformer-engine's with PPODECK_TE=1 "
                                "on CUDA), computing the same maths")),
    _f("--deterministic-mode", "bool", False, "parallelism",
       "Deterministic Megatron kernels (bitwise reproducible training).",
       engine=refused("deterministic kernels are not enforced: runs are seeded but not "
                      "bitwise reproducible", "--seed")),
    _f("--no-check-for-nan-in-loss-and-grad", "bool", False, "parallelism",
       "Turn off Megatron's stop on a NaN loss or gradient.",
       engine=command_only("the engine has no NaN stop to turn off")),
    _f("--no-gradient-accumulation-fusion", "bool", False, "parallelism",
       "Turn off fused weight-gradient accumulation.", engine=_FUSION),
    _f("--no-bias-dropout-fusion", "bool", False, "parallelism",
       "Turn off the fused bias + dropout kernel.", engine=_FUSION),
    _f("--no-bias-swiglu-fusion", "bool", False, "parallelism",
       "Turn off the fused bias + SwiGLU kernel.", engine=_FUSION),
    _f("--no-masked-softmax-fusion", "bool", False, "parallelism",
       "Turn off the fused masked softmax.", engine=_FUSION),
    _f("--use-flash-attn", "bool", False, "parallelism", "FlashAttention kernels.",
       engine=command_only("the engine picks its attention kernel itself")),
    _f("--overlap-grad-reduce", "bool", False, "parallelism",
       "Overlap the DP gradient reduction with backward.",
       engine=command_only("communication overlap; the gradient is the same")),
    _f("--overlap-param-gather", "bool", False, "parallelism",
       "Overlap the distributed optimizer's parameter gather with forward.",
       engine=command_only("communication overlap; the parameters are the same")),
    _f("--grad-reduce-in-bf16", "bool", False, "parallelism", "Reduce gradients in bf16.",
       engine=refused("gradients are reduced in the precision --accumulate-allreduce-grads-in-"
                      "fp32 picks; a bf16 reduction is not implemented")),
    _f("--cp-comm-type", "list", ("p2p",), "parallelism",
       "Context-parallel communication: p2p, a2a, allgather or a2a+p2p (per layer).",
       engine=command_only("how attention exchanges K/V across the CP group; the result is "
                           "the same")),
    _f("--decoder-first-pipeline-num-layers", "int", None, "parallelism",
       "Layers on the first pipeline stage (uneven PP split).",
       engine=refused("layers are split evenly across pipeline stages",
                      "a --pipeline-model-parallel-size that divides --num-layers")),
    _f("--offload-optimizer-states", "bool", False, "actor", "Offload optimizer states to CPU.",
       engine=refused("the optimizer state stays with its model; it moves to host memory "
                      "between phases with --offload-train", "--offload-train")),
    _f("--optimizer-offload-fraction", "float", 1.0, "actor",
       "Share of the optimizer state on CPU (with --optimizer-cpu-offload).",
       engine=_only_with("--optimizer-cpu-offload")),
    _f("--muon-momentum", "float", 0.9, "actor", "Muon optimizer momentum.",
       engine=command_only("read only by the Muon optimizer, which this engine does not "
                           "implement")),
    _f("--finetune", "bool", False, "checkpoint",
       "Load only the weights of --load: no optimizer, RNG or iteration.",
       engine=refused("a resumed run restores optimizer, RNG and iteration from --load",
                      "--ref-load (a fresh run from those weights)")),
    _f("--save-retain-interval", "int", None, "checkpoint",
       "Keep every N-th checkpoint; delete the others except the latest.",
       engine=command_only("the engine keeps every checkpoint it saves")),
    _f("--enable-experimental", "bool", False, "model", "Megatron's experimental features.",
       engine=command_only("the gate of Megatron's experimental features; the engine uses "
                           "none of them")),
    _f("--no-position-embedding", "bool", False, "model",
       "No learned absolute position embedding (rotary models).",
       engine=command_only("the engine builds position embeddings from "
                           "--position-embedding-type; rope has no learned table")),
    _f("--rotary-interleaved", "bool", False, "model", "Interleaved rotary embedding.",
       engine=refused("interleaved rotary embeddings are not implemented")),
    _f("--post-self-attn-layernorm", "bool", False, "model",
       "Norm after the self-attention block.",
       engine=refused("post-attention norms are not implemented")),
    _f("--post-mlp-layernorm", "bool", False, "model", "Norm after the MLP block.",
       engine=refused("post-MLP norms are not implemented")),
    _choice("--softmax-type", ("vanilla", "off-by-one", "learnable"), "vanilla", "model",
            "Attention softmax variant.",
            engine=refused("only the vanilla attention softmax is implemented",
                           "--softmax-type vanilla")),
    _f("--window-size", "str", None, "model", "Sliding attention window (LEFT,RIGHT).",
       engine=refused("sliding-window attention is not implemented")),
    _f("--window-attn-skip-freq", "str", None, "model",
       "Which layers skip window attention (N or a list).",
       engine=refused("sliding-window attention is not implemented")),
    _f("--activation-func-clamp-value", "float", None, "model",
       "Clamp of the MLP activation input.",
       engine=refused("clamped MLP activations are not implemented")),
    _f("--no-activation-func-clamp-shared-expert", "bool", False, "model",
       "Leave the shared expert's activation unclamped.", engine=_MOE),
    _choice("--experimental-attention-variant", ("gated_delta_net", "dsa", "dsv4"), None,
            "model", "Attention variant (gated delta net, DSA, DSV4).",
            engine=refused("only standard softmax attention is implemented")),
    _f("--dsa-indexer-n-heads", "int", None, "model", "DSA indexer heads.", engine=_DSA),
    _f("--dsa-indexer-head-dim", "int", None, "model", "DSA indexer head dim.", engine=_DSA),
    _f("--dsa-indexer-topk", "int", None, "model", "DSA indexer top-k tokens.", engine=_DSA),
    _f("--dsv4-compress-ratios", "list", None, "model", "DSV4 KV compression ratio per layer.",
       engine=_DSV4),
    _f("--dsv4-compress-rope-theta", "float", 40000.0, "model", "DSV4 compressed rope theta.",
       engine=_DSV4),
    _f("--dsv4-hc-mult", "int", None, "model", "DSV4 hyper-connection multiplier.",
       engine=_DSV4),
    _f("--dsv4-hc-sinkhorn-iters", "int", 20, "model", "DSV4 hyper-connection Sinkhorn steps.",
       engine=_DSV4),
    _f("--dsv4-n-hash-layers", "int", 0, "model", "DSV4 hash-routed layers.", engine=_DSV4),
    _f("--dsv4-o-groups", "int", None, "model", "DSV4 output projection groups.",
       engine=_DSV4),
    _f("--dsv4-o-lora-rank", "int", None, "model", "DSV4 output low-rank dim.", engine=_DSV4),
    _f("--dsv4-window-size", "int", 4096, "model", "DSV4 local attention window.",
       engine=_DSV4),
    _choice("--moe-flex-dispatcher-backend", ("deepep", "hybridep"), "deepep", "model",
            "Backend of the flex token dispatcher.", engine=_MOE),
    _f("--moe-latent-size", "int", None, "model", "Latent size of MoE experts.", engine=_MOE),
    _f("--moe-router-freeze-gate", "bool", False, "model", "Freeze the router gate.",
       engine=_MOE),
    _f("--moe-router-padding-for-quantization", "bool", False, "model",
       "Pad routing maps for quantized experts.", engine=_MOE),
    _f("--freeze-e-score-correction-bias", "bool", False, "model",
       "Freeze the router's expert score bias.", engine=_MOE),
    _choice("--fp8-format", ("e4m3", "hybrid"), None, "model", "fp8 training format.",
            engine=_FP8),
    _choice("--fp8-recipe", ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
            "delayed", "model", "fp8 scaling recipe.", engine=_only_with("--fp8-format")),
    _f("--fp8-param-gather", "bool", False, "model", "Gather parameters in fp8.",
       engine=_only_with("--fp8-format")),
    _f("--reuse-grad-buf-for-mxfp8-param-ag", "bool", False, "model",
       "Reuse the gradient buffer for the mxfp8 parameter all-gather.",
       engine=_only_with("--fp8-format")),
    _f("--first-last-layers-bf16", "bool", False, "model",
       "Keep the first and last layers in bf16 under fp8/fp4.",
       engine=_only_with("--fp8-format / --fp4-format")),
    _f("--num-layers-at-start-in-bf16", "int", 1, "model",
       "Leading layers kept in bf16 (--first-last-layers-bf16).",
       engine=_only_with("--fp8-format / --fp4-format")),
    _f("--num-layers-at-end-in-bf16", "int", 1, "model",
       "Trailing layers kept in bf16 (--first-last-layers-bf16).",
       engine=_only_with("--fp8-format / --fp4-format")),
    _choice("--fp4-format", ("e2m1",), None, "model", "fp4 training format.", engine=_FP8),
    _choice("--fp4-recipe", ("nvfp4", "custom"), "nvfp4", "model", "fp4 scaling recipe.",
            engine=_only_with("--fp4-format")),
    _f("--te-precision-config-file", "str", None, "model",
       "Per-module transformer-engine precision overrides.", engine=_FP8),
)

FLAGS: tuple[Flag, ...] = (
    _CLUSTER + _ROLLOUT + _ROLLOUT_IMPORTED + _DATA + _DATA_IMPORTED + _ACTOR + _ACTOR_IMPORTED
    + _CRITIC + _PPO + _PPO_IMPORTED + _CHECKPOINT + _PARALLELISM + _PARALLELISM_IMPORTED
    + _MODEL + _MODEL_IMPORTED + _SGLANG + _SGLANG_IMPORTED + _LOGGING
    + _CLUSTER_MILES + _TRAIN_MILES + _ROLLOUT_MILES + _DATA_MILES + _CHECKPOINT_MILES
    + _ALGO_MILES + _LORA_MILES + _LOGGING_MILES + _SESSION_MILES + _MEGATRON_LAUNCHERS
    + _FSDP_LAUNCHERS
    + _PPODECK
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
