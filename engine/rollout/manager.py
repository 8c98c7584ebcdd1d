"""RolloutManager (api.md section 6): prompts -> responses -> rewards -> RolloutBatch.

A plain class; the driver wraps it with ray.remote. Per rollout, as in miles: take
rollout_batch_size prompts, sample n_samples_per_prompt responses each, score them with the
rule-based reward (a sample's metadata rm_type wins over --rm-type), keep PPO's raw rewards,
loss masks of all ones over the response, and trim the samples to a multiple of the global
batch size (reported, never silent).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.part_clock import PartClock
from engine.rollout.types import GenOut, Prompt, RolloutBatch, Sample
from engine.vocabulary import Metric

# miles: these estimators train on group-normalized rewards (train_data_conversion.py)
GROUP_NORMALIZED = ("grpo", "gspo", "reinforce_plus_plus_baseline")


class RolloutManager:
    def __init__(self, args: dict[str, Any]) -> None:
        self.args = dict(args)
        self.tokenizer: Any = None
        self.source: Any = None
        self.generator: Any = None
        self.backend: str | None = None
        self.last_trimmed = 0
        self.eval_sets: list[Any] = []  # engine.rollout.evaluation.EvalSet, one per dataset
        self.reused_batch: RolloutBatch | None = None  # --debug-train-only's one batch
        self.weights_compared = False  # --ci-test: the first push is compared tensor by tensor

    # ---- setup --------------------------------------------------------------------------
    def init(self, warm_up: bool = False) -> dict[str, Any]:
        """Tokenizer, prompt data and generation engine; the notes say what was chosen and the
        parts where the time went (the rollout_start step's parts, like the trainers').
        `warm_up`: the driver starts the trainers alongside (engine/driver/roles.py plan_init),
        so the first rollout's decoder compile is done here, hidden behind them."""
        clock = PartClock()
        from engine.rollout.data import (
            PromptOptions,
            PromptSource,
            build_prompts,
            load_records,
            load_tokenizer,
        )
        from engine.train.convert import arch_for
        from engine.train.model import ModelShape

        clock.done("imports")
        self._check_required()
        notes: list[str] = []
        prompt_data, tokenizer_path = self._data_paths(notes)
        clock.done("prompt data")
        self.tokenizer = load_tokenizer(tokenizer_path)
        clock.done("tokenizer")
        options = PromptOptions.from_args(self.args)
        if self.args.get("synthetic_task"):
            options = self._synthetic_options(options, notes)
        prompts, dropped = build_prompts(load_records(prompt_data), self.tokenizer, options)
        if dropped:
            notes.append(f"{dropped} prompts longer than --max-prompt-len "
                         f"{options.max_prompt_len} tokens were dropped ({len(prompts)} left)")
        self.source = PromptSource(prompts, shuffle=bool(self.args.get("rollout_shuffle")),
                                   seed=self._rollout_seed())
        self._check_rewards(prompts)
        self.eval_sets = self._load_eval_sets(options, notes)
        shape = ModelShape.from_args(self.args)
        self._check_vocab(shape.vocab_size)
        # the driver has chosen (engine/driver/roles.py choose_backend); standalone use picks here
        self.backend, backend_note = pick_backend(self.args["rollout_backend"])
        if self.backend != self.args["rollout_backend"]:
            notes.append(backend_note)
        clock.done("prompts")
        self.generator = build_generator(self.backend, shape, arch_for(shape), self.args)
        notes.extend(getattr(self.generator, "notes", []))  # e.g. SGLang engine start times
        clock.done("engine start")
        if warm_up and getattr(self.generator, "compiles_at_first_use", lambda: False)():
            self._warm_up_decoder()
            clock.done("decoder warm-up")
        return {"notes": notes, "backend": self.backend, "num_prompts": len(prompts),
                "dropped_prompts": dropped, "prompt_data": str(prompt_data),
                "tokenizer": str(tokenizer_path), "tokenizer_vocab": len(self.tokenizer),
                "parts": init_parts(clock.parts, getattr(self.generator, "parts", None))}

    def _warm_up_decoder(self) -> None:
        """Rollout 0's prompts through the decoder once, the result dropped: its layer
        kernels compile (or load from the compile cache) for exactly the shapes rollout 0
        runs (batch, prompt width, response length, sampling). The weights may be the zeros
        the initial push will overwrite: the samples are then uniform, and unused."""
        rbs, n = int(self.args["rollout_batch_size"]), int(self.args["n_samples_per_prompt"])
        prompts = self.source.prompts_at(0, rbs)
        self.generator.generate([p.token_ids for p in prompts], n_samples=n,
                                **self._sampling_params(0))

    def _load_eval_sets(self, options: Any, notes: list[str]) -> list[Any]:  # noqa: ANN401
        """--eval-prompt-data, read only when evaluation will run (miles: an --eval-interval,
        and never under --debug-train-only)."""
        if self.args["eval_interval"] is None or self.args["debug_train_only"]:
            return []
        from engine.rollout.evaluation import load_eval_sets

        sets = load_eval_sets(self.args["eval_datasets"], self.tokenizer, options)
        self._check_rewards([p for eval_set in sets for p in eval_set.prompts])
        notes.extend(f"eval set {s.name!r}: {len(s.prompts)} prompts from {s.path}"
                     for s in sets)
        return sets

    def _check_required(self) -> None:
        for dest, flag in (("rollout_batch_size", "--rollout-batch-size"),
                           ("rollout_max_response_len", "--rollout-max-response-len")):
            value = self.args.get(dest)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{flag} must be a positive integer for the built-in rollout, "
                                 f"got {value!r}")

    def _data_paths(self, notes: list[str]) -> tuple[str, str]:
        """(--prompt-data, tokenizer source), preparing --synthetic-task data when set."""
        task = self.args.get("synthetic_task")
        hf_checkpoint = installed_file(self.args.get("hf_checkpoint"))
        if not task:
            if not self.args.get("prompt_data"):
                raise ValueError("no prompt data: set --prompt-data (or --synthetic-task)")
            if not hf_checkpoint:
                raise ValueError("no tokenizer: set --hf-checkpoint to the HF model directory")
            return str(self.args["prompt_data"]), str(hf_checkpoint)
        from engine.rollout.synthetic import DATA_FILE, prepare_synthetic_task

        num = int(self.args["synthetic_num_prompts"])
        task_dir = prepare_synthetic_task(task, self._synthetic_dir(task, num), num,
                                          seed=self._rollout_seed())
        notes.append(f"synthetic task {task!r}: {num} prompts in {task_dir}")
        if self.args.get("prompt_data"):
            notes.append(f"--prompt-data ignored: --synthetic-task {task} provides the prompts")
        has_tokenizer = (task_dir / "tokenizer_config.json").is_file()
        if not has_tokenizer and not hf_checkpoint:
            raise ValueError(f"--synthetic-task {task} needs --hf-checkpoint for its tokenizer")
        return str(task_dir / DATA_FILE), str(hf_checkpoint or task_dir)

    def _synthetic_options(self, options: Any, notes: list[str]) -> Any:  # noqa: ANN401
        """A built-in task writes its own fields; the data flags cannot point elsewhere."""
        from dataclasses import replace

        task_keys = {"input_key": "prompt", "label_key": "label", "metadata_key": "metadata"}
        miles_defaults = {"input_key": "input", "label_key": None, "metadata_key": "metadata"}
        for dest, key in task_keys.items():
            value = getattr(options, dest)
            if value not in (key, miles_defaults[dest]):
                notes.append(f"--{dest.replace('_', '-')} {value} ignored: --synthetic-task "
                             f"records keep it under {key!r}")
        return replace(options, **task_keys)

    def _synthetic_dir(self, task: str, num: int) -> Path:
        if self.args.get("run_dir"):
            return Path(self.args["run_dir"]) / "data" / task
        from platformdirs import user_cache_dir

        cache = Path(user_cache_dir("ppodeck")) / "synthetic"
        return cache / f"{task}-{num}-{self._rollout_seed()}"

    def _rollout_seed(self) -> int:
        return int(self.args["rollout_seed"])

    def _check_rewards(self, prompts: Sequence[Prompt]) -> None:
        """Fail at init, not mid-run, on an unknown rm type (or a custom RM we cannot run)."""
        from engine.rollout.rewards import get_reward_fn, resolve_rm_type

        for rm_type in {resolve_rm_type(p.metadata, self.args.get("rm_type")) for p in prompts}:
            get_reward_fn(rm_type)

    def _check_vocab(self, model_vocab: int) -> None:
        if len(self.tokenizer) > model_vocab:
            raise ValueError(f"the tokenizer has {len(self.tokenizer)} tokens but the model only "
                             f"{model_vocab} (--vocab-size): token ids would fall off the "
                             "embedding")

    # ---- one rollout --------------------------------------------------------------------
    def generate(self, rollout_id: int) -> RolloutBatch:
        if self.reused_batch is not None:  # --debug-train-only: no rollout metrics, as miles
            return replace(self.reused_batch, metrics={})
        start = time.perf_counter()
        rbs = int(self.args["rollout_batch_size"])
        n = int(self.args["n_samples_per_prompt"])
        prompts = self.source.prompts_at(rollout_id * rbs, rbs)
        samples = _expand(prompts, n)
        outs = self.generator.generate([p.token_ids for p in prompts], n_samples=n,
                                       **self._sampling_params(rollout_id))
        gen_seconds = time.perf_counter() - start
        texts = self.tokenizer.batch_decode([o.response_ids for o in outs],
                                            skip_special_tokens=True)
        rewards = [self._reward(s.prompt, text) for s, text in zip(samples, texts, strict=True)]
        train_rewards = self._post_process_rewards(samples, rewards)
        keep = self._trimmed_count(len(samples))
        self.last_trimmed = len(samples) - keep
        batch = to_batch(samples[:keep], outs[:keep], train_rewards[:keep])
        batch.metrics = rollout_metrics(outs[:keep], rewards[:keep], self.last_trimmed)
        response_tokens = sum(len(o.response_ids) for o in outs)
        batch.metrics["perf/rollout_time"] = time.perf_counter() - start
        batch.metrics["perf/tokens_per_sec"] = response_tokens / max(gen_seconds, 1e-9)
        if self.args["debug_train_only"]:
            self._keep_for_training_only(batch)
        return batch

    def _keep_for_training_only(self, batch: RolloutBatch) -> None:
        """--debug-train-only: this batch is the one every rollout trains on; the generator
        is released (miles starts no engines; PPO Deck has no --load-debug-rollout-data)."""
        self.reused_batch = batch
        self.shutdown()

    def eval(self, rollout_id: int) -> dict[str, float]:
        """Eval rollouts of every --eval-prompt-data set with the current weights."""
        from engine.rollout.evaluation import evaluate_set

        metrics: dict[str, float] = {}
        for eval_set in self.eval_sets:
            metrics.update(evaluate_set(eval_set, self.args, self._generate_eval,
                                        self._score, rollout_id))
        return metrics

    def _generate_eval(self, prompt_ids: list[list[int]], n: int, **sampling: Any) -> list[GenOut]:
        return self.generator.generate(prompt_ids, n_samples=n, **self._token_ids(), **sampling)

    def _score(self, prompt: Prompt, out: GenOut) -> float:
        return self._reward(prompt, self.tokenizer.decode(out.response_ids,
                                                          skip_special_tokens=True))

    def _token_ids(self) -> dict[str, Any]:
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        return {"eos_token_id": eos,
                "pad_token_id": pad if pad is not None else (eos if eos is not None else 0)}

    def _post_process_rewards(self, samples: Sequence[Sample],
                              rewards: list[float]) -> list[float]:
        """miles' train_data_conversion: group-normalized rewards for grpo (whole prompt groups,
        before trimming); ppo keeps the raw ones. rollout/raw_reward stays raw."""
        estimator = self.args["advantage_estimator"]
        if estimator not in GROUP_NORMALIZED or not self.args["rewards_normalization"]:
            return rewards
        from engine.algo.grpo import group_normalized_rewards

        std = self.args["grpo_std_normalization"] and estimator in ("grpo", "gspo")
        return group_normalized_rewards(rewards, [s.group_index for s in samples], std)

    def _sampling_params(self, rollout_id: int) -> dict[str, Any]:
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        return {
            "temperature": float(self.args["rollout_temperature"]),
            "top_p": float(self.args["rollout_top_p"]),
            "top_k": int(self.args["rollout_top_k"]),
            "max_new_tokens": int(self.args["rollout_max_response_len"]),
            "eos_token_id": eos,
            "pad_token_id": pad if pad is not None else (eos if eos is not None else 0),
            # a different, reproducible stream per rollout (and the same one on resume)
            "seed": self._rollout_seed() * 1_000_003 + rollout_id,
        }

    def _reward(self, prompt: Prompt, response: str) -> float:
        from engine.rollout.rewards import get_reward_fn, resolve_rm_type

        fn = get_reward_fn(resolve_rm_type(prompt.metadata, self.args.get("rm_type")))
        value = fn(response, prompt.label, prompt.metadata)
        if isinstance(value, Mapping):  # e.g. dapo: {"score": ...} picked by --reward-key
            key = self.args.get("reward_key")
            if not key:
                raise ValueError("the reward function returned a dict: set --reward-key")
            value = value[key]
        return float(value)

    def _trimmed_count(self, total: int) -> int:
        """miles drops the tail so every optimizer step gets a full global batch."""
        if self.args.get("disable_rollout_trim_samples"):
            return total
        gbs = self.args["global_batch_size"]  # resolve(): also from --num-steps-per-rollout
        keep = total // int(gbs) * int(gbs)
        if keep == 0:
            raise ValueError(f"a rollout has {total} samples, fewer than --global-batch-size "
                             f"{gbs}: nothing left to train on after trimming")
        return keep

    # ---- weights and memory -------------------------------------------------------------
    def update_weights(self, hf_weights: Any) -> dict[str, Any]:  # noqa: ANN401
        """Load the actor's HF weights: a state dict, or the packed buffer the driver passes."""
        from engine.train.ipc_sync import TorchIpcWeights, open_state, sync_path_of
        from engine.train.weight_transfer import as_loadable

        start = time.perf_counter()
        # a torch IPC handle maps the actor's device buffer: views copied in place below
        loadable = (open_state(hf_weights) if isinstance(hf_weights, TorchIpcWeights)
                    else as_loadable(hf_weights))
        compare = self.args["check_weight_update_equal"] and not self.weights_compared
        if compare and hasattr(self.generator, "model"):
            from engine.rollout.weight_check import reset_tensors

            reset_tensors(self.generator.model)
        size = self.generator.load_weights(loadable)
        path = sync_path_of(hf_weights)
        report = {"seconds": time.perf_counter() - start, "bytes": int(size), "path": path}
        if self.args["check_weight_update_equal"]:
            report["weight_check"] = self._weight_check(loadable, compare)
        return report

    def _weight_check(self, sent: Any, compare: bool) -> dict[str, Any]:  # noqa: ANN401
        """--ci-test: the first push compared tensor by tensor, every push's digest."""
        from engine.rollout.weight_check import compare_loaded, digest

        if not isinstance(sent, Mapping) or not hasattr(self.generator, "model"):
            return {"skipped": f"the {self.backend} backend's weights cannot be read back"}
        check: dict[str, Any] = {"digest": digest(sent)}
        if compare:
            self.weights_compared = True
            check.update(compare_loaded(self.generator.model, sent))
        return check

    def offload(self) -> dict[str, Any]:
        return self.generator.offload() if self.generator is not None else released()

    def onload(self) -> dict[str, Any]:
        return self.generator.onload() if self.generator is not None else released()

    def shutdown(self) -> None:
        if self.generator is not None:
            self.generator.shutdown()
            self.generator = None


def init_parts(parts: dict[str, float], engine_parts: Mapping[str, float] | None
               ) -> dict[str, float]:
    """The manager's parts with "engine start" split into the generator's own, where it
    reports them (hf: model build, weights init, to device); what they leave out stays
    under "engine start" (for hf: torch's CUDA start and the transformers model import)."""
    if not engine_parts:
        return dict(parts)
    total = parts.get("engine start", 0.0)
    rest = round(max(0.0, total - sum(engine_parts.values())), 3)
    out = {k: v for k, v in parts.items() if k != "engine start"}
    return {**out, "engine setup": rest, **engine_parts}


def released() -> dict[str, Any]:
    """The offload report once the generator is gone (--debug-train-only): nothing moves."""
    return {"noop": True, "bytes": 0, "seconds": 0.0, "where": "cpu"}


def installed_file(value: Any) -> Any:  # noqa: ANN401
    """A `pypi:` value that resolve() left unexpanded names a package that is not installed:
    fail here, at init, with the fix (pip install / make setup), not later in a loader."""
    from engine.config.pypi_files import is_pypi_path, pypi_file

    return str(pypi_file(value)) if is_pypi_path(value) else value


# --------------------------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------------------------
def pick_backend(requested: str) -> tuple[str, str]:
    """(backend, note): auto is sglang only where CUDA and sglang exist (sglang_backend's rule)."""
    from engine.rollout.sglang_backend import host_has_gpu, select_backend, sglang_importable

    # this process may hold no GPU share (SGLang engines hold it): ask NVML, not torch
    return select_backend(requested, host_has_gpu(), sglang_importable())


def build_generator(backend: str, shape: Any, arch: str, args: Mapping[str, Any]) -> Any:  # noqa: ANN401
    import torch

    if backend == "hf":
        from engine.rollout.hf_backend import HFGenerator

        cuda = torch.cuda.is_available()
        if not cuda:
            # Ray gives this fractional-CPU actor OMP_NUM_THREADS=1, but the colocated phases
            # take turns, so generation may use every core (about 2x on 2 cores)
            torch.set_num_threads(os.cpu_count() or 1)
        dtype = torch.bfloat16 if cuda and args.get("bf16") else torch.float32
        # the actor's weights overwrite every parameter before the first rollout: no init
        return HFGenerator(shape, arch, device="cuda" if cuda else "cpu", dtype=dtype,
                           init_weights=not args["initial_weight_push"])
    if backend == "sglang":
        from engine.rollout.sglang_backend import SGLangGenerator

        return SGLangGenerator(shape, arch, dict(args))
    raise ValueError(f"unknown --rollout-backend {backend!r}; expected auto, hf or sglang")


# --------------------------------------------------------------------------------------------
# batch assembly
# --------------------------------------------------------------------------------------------
def _expand(prompts: Sequence[Prompt], n: int) -> list[Sample]:
    from engine.rollout.data import expand_samples

    return expand_samples(prompts, n)


def to_batch(samples: Sequence[Sample], outs: Sequence[GenOut],
             rewards: Sequence[float]) -> RolloutBatch:
    return RolloutBatch(
        tokens=[s.prompt.token_ids + o.response_ids for s, o in zip(samples, outs, strict=True)],
        prompt_lengths=[len(s.prompt.token_ids) for s in samples],
        response_lengths=[len(o.response_ids) for o in outs],
        loss_masks=[[1] * len(o.response_ids) for o in outs],  # miles: all ones over the response
        rewards=[float(r) for r in rewards],  # ppo: raw; grpo: group-normalized
        truncated=[o.truncated for o in outs],
        rollout_log_probs=[list(o.log_probs) for o in outs],
        sample_indices=[s.sample_index for s in samples],
    )


def rollout_metrics(outs: Sequence[GenOut], rewards: Sequence[float],
                    trimmed: int) -> dict[str, float]:
    lengths = [len(o.response_ids) for o in outs]
    return {
        Metric.REWARD: statistics.fmean(rewards),
        Metric.REWARD_MIN: min(rewards),
        Metric.REWARD_MAX: max(rewards),
        Metric.RESPONSE_LEN: statistics.fmean(lengths),
        "rollout/response_len/median": float(statistics.median(lengths)),
        "rollout/response_len/max": float(max(lengths)),
        "rollout/response_len/min": float(min(lengths)),
        Metric.TRUNCATED: sum(o.truncated for o in outs) / len(outs),
        # the generator's log-probs, as the trainer's rollout/log_probs: a token mean per
        # sample, averaged over samples (--ci-test compares the two)
        "rollout/rollout_log_probs": statistics.fmean(
            statistics.fmean(o.log_probs) for o in outs if o.log_probs),
        "rollout/trimmed_samples": float(trimmed),
    }
