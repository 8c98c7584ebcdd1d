"""RolloutManager: prompts -> responses -> rewards -> RolloutBatch (the roles' interface:
docs/architecture.md).

A plain class; the driver wraps it with ray.remote. Per rollout, as in miles: take
--over-sampling-batch-size prompts (default --rollout-batch-size), sample n_samples_per_prompt
responses each, score them all at once (engine/rollout/user_rewards.py: --custom-rm-path, a
remote RM, or the rule reward of the sample's metadata rm_type / --rm-type), keep the prompt
groups that --dynamic-sampling-filter-path passes (engine/rollout/filters.py), drawing more
rounds until --rollout-batch-size groups are kept, then PPO's raw rewards (or the custom
post-process's), loss masks of all ones over the response, and the samples trimmed to a
multiple of the global batch size (reported, never silent).

The prompt stream's position: without a filter every rollout draws exactly one round, so
rollout r starts at r x over-sampling batch (stateless, as data.PromptSource). With a filter
the rounds vary; each rollout's end position is appended to <run dir>/rollout_data_state.jsonl
and a resumed run continues from the entry of the rollout before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..host.clock import PartClock
from ..vocabulary import Metric
from .types import GenOut, Prompt, RolloutBatch, Sample

if TYPE_CHECKING:
    from .user_rewards import UserSample

# miles: these estimators train on group-normalized rewards (train_data_conversion.py)
GROUP_NORMALIZED = ("grpo", "gspo", "reinforce_plus_plus_baseline")
DATA_STATE_FILE = "rollout_data_state.jsonl"
ROUND_SEED_STRIDE = 104_729  # round k > 0 of a rollout samples with seed + k x this prime
MIN_ROUNDS = 8  # a filter may drop groups for this many rounds (or an epoch) before failing


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
        self.scorer: Any = None  # engine.rollout.user_rewards.RewardScorer, made at init
        self.post_process_fn: Any = None  # --custom-reward-post-process-path
        self.filter_fn: Any = None  # --dynamic-sampling-filter-path
        self.next_position: tuple[int, int] | None = None  # (next rollout id, stream position)

    # ---- setup --------------------------------------------------------------------------
    def init(self, warm_up: bool = False) -> dict[str, Any]:
        """Tokenizer, prompt data and generation engine; the notes say what was chosen and the
        parts where the time went (the rollout_start step's parts, like the trainers').
        `warm_up`: the driver starts the trainers alongside (engine/driver/roles.py plan_init),
        so the first rollout's decoder compile is done here, hidden behind them."""
        clock = PartClock()
        from ..model.convert import arch_for
        from ..model.shape import ModelShape
        from .data import (
            PromptOptions,
            PromptSource,
            build_prompts,
            load_records,
            load_tokenizer,
        )

        clock.done("imports")
        self._check_required()
        notes: list[str] = []
        # what overrides a value the user set: announced as warnings (Telemetry.announce)
        overrides: list[str] = []
        prompt_data, tokenizer_path = self._data_paths(notes, overrides)
        clock.done("prompt data")
        self.tokenizer = load_tokenizer(tokenizer_path)
        clock.done("tokenizer")
        options = PromptOptions.from_args(self.args)
        if self.args.get("synthetic_task"):
            options = self._synthetic_options(options, overrides)
        prompts, dropped = build_prompts(load_records(prompt_data), self.tokenizer, options)
        if dropped:
            notes.append(f"{dropped} prompts longer than --max-prompt-len "
                         f"{options.max_prompt_len} tokens were dropped ({len(prompts)} left)")
        self.source = PromptSource(prompts, shuffle=bool(self.args.get("rollout_shuffle")),
                                   seed=self._rollout_seed())
        self._check_rewards(prompts)
        overrides.extend(metadata_rm_notes(prompts, self.args))
        self._load_reward_code(notes)
        self.eval_sets = self._load_eval_sets(options, notes, overrides)
        shape = ModelShape.from_args(self.args)
        self._check_vocab(shape.vocab_size)
        # the driver has chosen (engine/driver/roles.py choose_backend); standalone use picks here
        self.backend, backend_note = pick_backend(self.args["rollout_backend"])
        if self.backend != self.args["rollout_backend"]:
            notes.append(backend_note)
        clock.done("prompts")
        self.generator = build_generator(self.backend, shape, arch_for(shape), self.args)
        notes.extend(getattr(self.generator, "notes", []))  # e.g. SGLang engine start times
        overrides.extend(getattr(self.generator, "overrides", []))  # e.g. a decoder fallback
        clock.done("engine start")
        if warm_up and getattr(self.generator, "compiles_at_first_use", lambda: False)():
            self._warm_up_decoder()
            clock.done("decoder warm-up")
        return {"notes": notes, "overrides": overrides, "backend": self.backend,
                "num_prompts": len(prompts), "dropped_prompts": dropped,
                "prompt_data": str(prompt_data), "tokenizer": str(tokenizer_path),
                "tokenizer_vocab": len(self.tokenizer),
                "parts": init_parts(clock.parts, getattr(self.generator, "parts", None))}

    def _warm_up_decoder(self) -> None:
        """Rollout 0's prompts through the decoder once, the result dropped: its layer
        kernels compile (or load from the compile cache) for exactly the shapes rollout 0
        runs (batch, prompt width, response length, sampling). The weights may be the zeros
        the initial push will overwrite: the samples are then uniform, and unused."""
        rbs, n = int(self.args["rollout_batch_size"]), int(self.args["n_samples_per_prompt"])
        prompts = self.source.prompts_at(0, int(self.args.get("over_sampling_batch_size") or rbs))
        self.generator.generate([p.token_ids for p in prompts], n_samples=n,
                                **self._sampling_params(0))

    def _load_eval_sets(self, options: Any, notes: list[str],  # noqa: ANN401
                        overrides: list[str]) -> list[Any]:
        """--eval-prompt-data, read only when evaluation will run (miles: an --eval-interval,
        and never under --debug-train-only)."""
        if self.args["eval_interval"] is None or self.args["debug_train_only"]:
            return []
        from .evaluation import load_eval_sets

        sets = load_eval_sets(self.args["eval_datasets"], self.tokenizer, options)
        self._check_rewards([p for eval_set in sets for p in eval_set.prompts])
        notes.extend(f"eval set {s.name!r}: {len(s.prompts)} prompts from {s.path}"
                     for s in sets)
        overrides += [f"eval set {s.name!r}: {line}" for s in sets  # scored like training
                      for line in metadata_rm_notes(s.prompts, self.args)]
        return sets

    def _check_required(self) -> None:
        for dest, flag in (("rollout_batch_size", "--rollout-batch-size"),
                           ("rollout_max_response_len", "--rollout-max-response-len")):
            value = self.args.get(dest)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{flag} must be a positive integer for the built-in rollout, "
                                 f"got {value!r}")

    def _data_paths(self, notes: list[str], overrides: list[str]) -> tuple[str, str]:
        """(--prompt-data, tokenizer source), preparing --synthetic-task data when set."""
        task = self.args.get("synthetic_task")
        hf_checkpoint = installed_file(self.args.get("hf_checkpoint"))
        if not task:
            if not self.args.get("prompt_data"):
                raise ValueError("no prompt data: set --prompt-data (or --synthetic-task)")
            if not hf_checkpoint:
                raise ValueError("no tokenizer: set --hf-checkpoint to the HF model directory")
            return str(self.args["prompt_data"]), str(hf_checkpoint)
        from .synthetic import DATA_FILE, prepare_synthetic_task

        num = int(self.args["synthetic_num_prompts"])
        task_dir = prepare_synthetic_task(task, self._synthetic_dir(task, num), num,
                                          seed=self._rollout_seed())
        notes.append(f"synthetic task {task!r}: {num} prompts in {task_dir}")
        if self.args.get("prompt_data"):
            overrides.append(f"--prompt-data ignored: --synthetic-task {task} provides the prompts")
        has_tokenizer = (task_dir / "tokenizer_config.json").is_file()
        if not has_tokenizer and not hf_checkpoint:
            raise ValueError(f"--synthetic-task {task} needs --hf-checkpoint for its tokenizer")
        return str(task_dir / DATA_FILE), str(hf_checkpoint or task_dir)

    def _synthetic_options(self, options: Any, overrides: list[str]) -> Any:  # noqa: ANN401
        """A built-in task writes its own fields; the data flags cannot point elsewhere."""
        from dataclasses import replace

        from ..config.rules_overrides import SYNTHETIC_KEYS, synthetic_keys_ignored

        asked = {dest: getattr(options, dest) for dest in SYNTHETIC_KEYS}
        overrides += [f"{flag} ignored: --synthetic-task records keep it under "
                      f"{SYNTHETIC_KEYS[flag.split()[0][2:].replace('-', '_')]!r}"
                      for flag in synthetic_keys_ignored(asked)]
        return replace(options, **SYNTHETIC_KEYS)

    def _synthetic_dir(self, task: str, num: int) -> Path:
        if self.args.get("run_dir"):
            return Path(self.args["run_dir"]) / "data" / task
        from platformdirs import user_cache_dir

        cache = Path(user_cache_dir("ppodeck")) / "synthetic"
        return cache / f"{task}-{num}-{self._rollout_seed()}"

    def _rollout_seed(self) -> int:
        return int(self.args["rollout_seed"])

    def _check_rewards(self, prompts: Sequence[Prompt]) -> None:
        """Fail at init, not mid-run, on an unknown rm type (a custom RM overrides them all)."""
        from ..config.reward_types import is_remote
        from .rewards import flag_rm_type, get_reward_fn, resolve_rm_type

        if self.args.get("custom_rm_path"):
            return
        for rm_type in {resolve_rm_type(p.metadata, flag_rm_type(self.args)) for p in prompts}:
            if not is_remote(rm_type):
                get_reward_fn(rm_type)
            elif not self.args.get("rm_url"):
                raise ValueError(f"rm type {rm_type!r} (from --rm-type or a sample's "
                                 "metadata) needs --rm-url, the reward server's URL")

    def _load_reward_code(self, notes: list[str]) -> None:
        """Import the functions the flags name, once, so a bad path fails the run at init."""
        from .user_rewards import (
            RewardScorer,
            load_post_process,
            load_user_function,
        )

        self.scorer = RewardScorer.from_args(self.args)
        self.post_process_fn = load_post_process(self.args)
        path = self.args.get("dynamic_sampling_filter_path")
        if path:
            self.filter_fn = load_user_function(path, "--dynamic-sampling-filter-path")
        for flag, dest in (("--custom-rm-path", "custom_rm_path"),
                           ("--custom-reward-post-process-path",
                            "custom_reward_post_process_path"),
                           ("--dynamic-sampling-filter-path", "dynamic_sampling_filter_path")):
            if self.args.get(dest):
                notes.append(f"{flag} {self.args[dest]}: loaded")
        if self.scorer.remote is not None:
            from ..config.reward_types import is_remote
            from .rewards import flag_rm_type

            # only what the flag reaches: samples whose metadata names another type say so
            # in metadata_rm_notes, and a custom RM overrides the server altogether
            used = is_remote(flag_rm_type(self.args)) and not self.args.get("custom_rm_path")
            notes.append(f"remote reward model: {self.args['rm_url']} (at most "
                         f"{self.scorer.remote.concurrency} requests at once)" if used else
                         f"--rm-url {self.args['rm_url']} is set, but --rm-type "
                         f"{flag_rm_type(self.args)} does not post to it; only samples whose "
                         "metadata names rm_type remote_rm do")

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
        drawn = self._draw_groups(rollout_id)
        groups = drawn.kept
        samples = [Sample(prompt=g.prompt, group_index=i, sample_index=i * len(g.outs) + k)
                   for i, g in enumerate(groups) for k in range(len(g.outs))]
        outs = [o for g in groups for o in g.outs]
        rewards, train_rewards = self._final_rewards(samples, groups)
        keep = self._trimmed_count(len(samples))
        self.last_trimmed = len(samples) - keep
        batch = to_batch(samples[:keep], outs[:keep], train_rewards[:keep])
        batch.metrics = rollout_metrics(outs[:keep], rewards[:keep], self.last_trimmed)
        batch.metrics.update(drawn.metrics)
        seen = [u for g in groups for u in g.samples]
        batch.details = sample_details(samples[:keep], seen[:keep], rewards[:keep])
        batch.metrics["perf/rollout_time"] = time.perf_counter() - start
        batch.metrics["perf/tokens_per_sec"] = drawn.response_tokens / max(drawn.gen_seconds,
                                                                           1e-9)
        batch.metrics["perf/reward_time"] = drawn.reward_seconds
        if self.args["debug_train_only"]:
            self._keep_for_training_only(batch)
        return batch

    def _draw_groups(self, rollout_id: int) -> Drawn:
        """Rounds of --over-sampling-batch-size prompt groups, generated and scored, until
        --rollout-batch-size groups pass the filter (miles' generate_rollout_async); the
        groups kept are the first to pass, in stream order."""
        rbs = int(self.args["rollout_batch_size"])
        over = int(self.args.get("over_sampling_batch_size") or rbs)
        position = self._start_position(rollout_id, over)
        drawn = Drawn()
        drops = None
        if self.filter_fn is not None:
            from .filters import DropCounter

            drops = DropCounter()
        limit = max(MIN_ROUNDS * over, len(self.source.prompts))
        while len(drawn.kept) < rbs:
            if drawn.sampled >= limit:
                raise ValueError(self._filter_starved(drawn, drops, rbs))
            round_groups = self._sample_round(rollout_id, drawn.rounds, position, over, drawn)
            position += over
            drawn.rounds += 1
            drawn.sampled += len(round_groups)
            for group in round_groups:
                if drops is not None and not self._passes(group, drops):
                    continue
                if len(drawn.kept) < rbs:
                    drawn.kept.append(group)
        drawn.metrics = drops.metrics() if drops is not None else {}
        if over > rbs or drops is not None:
            drawn.metrics["rollout/over_sampling_rounds"] = float(drawn.rounds)
        self._record_position(rollout_id, position)
        return drawn

    def _sample_round(self, rollout_id: int, round_no: int, position: int, count: int,
                      drawn: Drawn) -> list[Group]:
        """`count` prompts from stream `position`, n responses each, every sample scored."""
        n = int(self.args["n_samples_per_prompt"])
        prompts = self.source.prompts_at(position, count)
        start = time.perf_counter()
        params = self._sampling_params(rollout_id)
        params["seed"] += round_no * ROUND_SEED_STRIDE
        outs = self.generator.generate([p.token_ids for p in prompts], n_samples=n, **params)
        drawn.gen_seconds += time.perf_counter() - start
        drawn.response_tokens += sum(len(o.response_ids) for o in outs)
        texts = self.tokenizer.batch_decode([o.response_ids for o in outs],
                                            skip_special_tokens=True)
        user = [user_sample(p, position + g, n, k, outs[g * n + k], texts[g * n + k])
                for g, p in enumerate(prompts) for k in range(n)]
        start = time.perf_counter()
        rewards = self.scorer.score(user, n, rollout_id)
        drawn.reward_seconds += time.perf_counter() - start
        return [Group(p, outs[g * n:(g + 1) * n], user[g * n:(g + 1) * n],
                      rewards[g * n:(g + 1) * n]) for g, p in enumerate(prompts)]

    def _passes(self, group: Group, drops: Any) -> bool:  # noqa: ANN401 - a DropCounter
        from argparse import Namespace

        from .filters import call_filter

        out = call_filter(self.filter_fn, self.args["dynamic_sampling_filter_path"],
                          Namespace(**self.args), group.samples)
        drops.record(out)
        return out.keep

    def _filter_starved(self, drawn: Drawn, drops: Any, rbs: int) -> str:  # noqa: ANN401
        reasons = dict(drops.reasons) if drops is not None else {}
        return (f"dynamic sampling: --dynamic-sampling-filter-path "
                f"{self.args.get('dynamic_sampling_filter_path')} kept {len(drawn.kept)} of the "
                f"{rbs} prompt groups needed after {drawn.sampled} groups in {drawn.rounds} "
                f"rounds (drops by reason: {reasons or 'none given'}). Fix: loosen the filter, "
                "or drop it until the policy's rewards vary within a group")

    def _start_position(self, rollout_id: int, over: int) -> int:
        """Where rollout `rollout_id` starts in the prompt stream (see the module docstring)."""
        if self.filter_fn is None:
            return rollout_id * over
        if self.next_position is not None and self.next_position[0] == rollout_id:
            return self.next_position[1]
        if rollout_id == 0:
            return 0
        return self._resumed_position(rollout_id)

    def _resumed_position(self, rollout_id: int) -> int:
        path = self._data_state_path()
        entries = []
        if path is not None and path.exists():
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    entries.append(json.loads(line))
        ends = [e["next_position"] for e in entries if e.get("rollout_id") == rollout_id - 1]
        if not ends:
            raise ValueError(f"dynamic sampling: rollout {rollout_id} continues the prompt "
                             f"stream where rollout {rollout_id - 1} stopped, but {path} has no "
                             "entry for it. Fix: resume the run in its own run directory")
        return int(ends[-1])

    def _record_position(self, rollout_id: int, position: int) -> None:
        self.next_position = (rollout_id + 1, position)
        path = self._data_state_path()
        if self.filter_fn is None or path is None:
            return
        with open(path, "a") as out:
            out.write(json.dumps({"rollout_id": rollout_id, "next_position": position}) + "\n")

    def _data_state_path(self) -> Path | None:
        run_dir = self.args.get("run_dir")
        return Path(run_dir) / DATA_STATE_FILE if run_dir else None

    def _final_rewards(self, samples: Sequence[Sample],
                       groups: Sequence[Group]) -> tuple[list[float], list[float]]:
        """(raw rewards, rewards to train on): the custom post-process's, else miles'
        built-in one (group-normalized for grpo; raw for ppo)."""
        rewards = [r for g in groups for r in g.rewards]
        if self.post_process_fn is None:
            return rewards, self._post_process_rewards(samples, rewards)
        from .user_rewards import post_process

        return post_process(self.post_process_fn, self.args,
                            [s for g in groups for s in g.samples])

    def _keep_for_training_only(self, batch: RolloutBatch) -> None:
        """--debug-train-only: this batch is the one every rollout trains on; the generator
        is released (miles starts no engines; PPO Deck has no --load-debug-rollout-data)."""
        self.reused_batch = batch
        self.shutdown()

    def eval(self, rollout_id: int) -> dict[str, float]:
        """Eval rollouts of every --eval-prompt-data set with the current weights."""
        from .evaluation import evaluate_set

        metrics: dict[str, float] = {}
        for eval_set in self.eval_sets:
            metrics.update(evaluate_set(eval_set, self.args, self._generate_eval,
                                        self._score, rollout_id))
        return metrics

    def _generate_eval(self, prompt_ids: list[list[int]], n: int, **sampling: Any) -> list[GenOut]:
        return self.generator.generate(prompt_ids, n_samples=n, **self._token_ids(), **sampling)

    def _score(self, prompt: Prompt, out: GenOut) -> float:
        """One eval sample, with the training reward (miles: --group-rm has no eval)."""
        text = self.tokenizer.decode(out.response_ids, skip_special_tokens=True)
        return self.scorer.score([user_sample(prompt, prompt.index, 1, 0, out, text)], 1)[0]

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
        from ..algo.grpo import group_normalized_rewards

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
        from ..model.ipc_sync import TorchIpcWeights, open_state, sync_path_of
        from ..model.weight_transfer import as_loadable

        start = time.perf_counter()
        # a torch IPC handle maps the actor's device buffer: views copied in place below
        loadable = (open_state(hf_weights) if isinstance(hf_weights, TorchIpcWeights)
                    else as_loadable(hf_weights))
        compare = self.args["check_weight_update_equal"] and not self.weights_compared
        if compare and hasattr(self.generator, "model"):
            from .weight_check import reset_tensors

            reset_tensors(self.generator.model)
        size = self.generator.load_weights(loadable)
        path = sync_path_of(hf_weights)
        report = {"seconds": time.perf_counter() - start, "bytes": int(size), "path": path}
        if self.args["check_weight_update_equal"]:
            report["weight_check"] = self._weight_check(loadable, compare)
        return report

    def _weight_check(self, sent: Any, compare: bool) -> dict[str, Any]:  # noqa: ANN401
        """--ci-test: the first push compared tensor by tensor, every push's digest."""
        from .weight_check import compare_loaded, digest

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
    from ..config.pypi_files import is_pypi_path, pypi_file

    return str(pypi_file(value)) if is_pypi_path(value) else value


# --------------------------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------------------------
def pick_backend(requested: str) -> tuple[str, str]:
    """(backend, note): auto is sglang only where CUDA and sglang exist (sglang_backend's rule)."""
    from .sglang_backend import (
        host_has_gpu,
        select_backend,
        sglang_importable,
    )

    # this process may hold no GPU share (SGLang engines hold it): ask NVML, not torch
    return select_backend(requested, host_has_gpu(), sglang_importable())


def build_generator(backend: str, shape: Any, arch: str, args: Mapping[str, Any]) -> Any:  # noqa: ANN401
    import torch

    if backend == "hf":
        from .hf_backend import HFGenerator

        cuda = torch.cuda.is_available()
        if not cuda:
            # Ray gives this fractional-CPU actor OMP_NUM_THREADS=1, but the colocated phases
            # take turns, so generation may use every core (about 2x on 2 cores)
            torch.set_num_threads(os.cpu_count() or 1)
        dtype = torch.bfloat16 if cuda and args.get("bf16") else torch.float32
        # the actor's weights overwrite every parameter before the first rollout: no init
        return HFGenerator(shape, arch, device="cuda" if cuda else "cpu", dtype=dtype,
                           init_weights=not args["initial_weight_push"],
                           max_context_len=args.get("rollout_max_context_len"))
    if backend == "sglang":
        from .sglang_backend import SGLangGenerator

        return SGLangGenerator(shape, arch, dict(args))
    raise ValueError(f"unknown --rollout-backend {backend!r}; expected auto, hf or sglang")


# --------------------------------------------------------------------------------------------
# batch assembly
# --------------------------------------------------------------------------------------------
def metadata_rm_notes(prompts: Sequence[Prompt], args: Mapping[str, Any]) -> list[str]:
    """Say where a sample's metadata rm_type overrides --rm-type (miles' order), or where
    --custom-rm-path overrides both."""
    named = [p.metadata.get("rm_type") for p in prompts if isinstance(p.metadata, dict)]
    counts = {t: named.count(t) for t in set(named) if t}
    if not counts:
        return []
    listed = ", ".join(f"{t} ({n} prompts)" for t, n in sorted(counts.items()))
    if args.get("custom_rm_path"):
        return [f"--custom-rm-path scores every sample; the rm_type in the prompt metadata "
                f"({listed}) is not used"]
    flag = args.get("rm_type")
    if flag and set(counts) != {flag}:  # check() warned before launch: rm_type_overridden
        return [f"the prompt metadata names rm_type {listed}, which wins over --rm-type "
                f"{flag} for those prompts (miles' order)"]
    return []


@dataclass
class Group:
    """One prompt's n samples: generator outputs, what reward code saw, the float rewards."""

    prompt: Prompt
    outs: list[GenOut]
    samples: list[UserSample]
    rewards: list[float]


@dataclass
class Drawn:
    """A rollout's rounds: the groups kept, and what it took to get them."""

    kept: list[Group] = field(default_factory=list)
    rounds: int = 0
    sampled: int = 0  # prompt groups generated
    gen_seconds: float = 0.0
    reward_seconds: float = 0.0
    response_tokens: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


def user_sample(prompt: Prompt, group_index: int, n: int, k: int, out: GenOut,
                text: str) -> UserSample:
    """The sample as reward code sees it (miles' Sample fields)."""
    from .user_rewards import SampleStatus, UserSample

    return UserSample(
        group_index=group_index, index=group_index * n + k, prompt=prompt.text,
        tokens=list(prompt.token_ids) + list(out.response_ids), response=text,
        response_length=len(out.response_ids), label=prompt.label,
        metadata=dict(prompt.metadata),
        status=SampleStatus.TRUNCATED if out.truncated else SampleStatus.COMPLETED,
        rollout_log_probs=list(out.log_probs), loss_mask=[1] * len(out.response_ids))


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


def sample_details(samples: Sequence[Sample], seen: Sequence[Any],
                   raw_rewards: Sequence[float]) -> list[dict[str, Any]]:
    """What the run's samples files keep per sample beyond the training data
    (engine/run/samples.py):
    `seen` are the UserSamples reward code saw, in the samples' order."""
    return [{"prompt": u.prompt, "response": u.response, "label": u.label,
             "raw_reward": float(r), "group_index": s.group_index,
             "status": getattr(u.status, "value", u.status)}
            for s, u, r in zip(samples, seen, raw_rewards, strict=True)]


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
