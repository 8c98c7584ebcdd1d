"""engine.* rules for the reward side the user brings: reward functions, remote reward models,
dynamic-sampling filters. PURE and fast (check() runs per keystroke): the code is found with
engine/config/code_paths.py, which never imports or runs it; its file scans are cached.
"""

from __future__ import annotations

from collections.abc import Mapping

from .code_paths import ENGINE_CODE_FLAGS, check_code_path
from .issues import Out
from .issues import add as _issue
from .issues import fl as _fl
from .prompt_metadata import metadata_rm_types
from .reward_types import REMOTE_RM, is_remote


def user_code_rules(r: dict, out: Out, env: Mapping[str, str]) -> None:
    """`env`: the run's environment (PPODECK_CODE_DIR, where its user code is looked up)."""
    for dest in ENGINE_CODE_FLAGS:
        if r[dest]:
            _code_path(dest, r[dest], out, env)
    _reward_choice(r, out)
    remote_reward_rules(r, out)
    _over_sampling(r, out)


def _code_path(dest: str, path: str, out: Out, env: Mapping[str, str]) -> None:
    found = check_code_path(path, env)
    flag = _fl(dest)
    if found.problem:
        _issue(out, "error", "engine.user_code_missing", (dest,),
               f"{flag} {path}: {found.problem}; the run would fail at start.", found.fix)
    elif found.mapped_to:
        _issue(out, "info", "engine.miles_builtin_mapped", (dest,),
               f"{flag} {path} is miles' built-in: PPO Deck's engine runs its own equivalent, "
               f"{found.mapped_to} (same rule, same drop reasons).")
    elif dest == "custom_rm_path" and found.is_async is False:
        _issue(out, "info", "engine.reward_fn_sync", (dest,),
               f"{flag} {path} is a plain `def`: PPO Deck runs it in worker threads, "
               "concurrently; miles awaits it, so under miles it must be `async def`.",
               "make it `async def` to run the same under miles")


def _reward_choice(r: dict, out: Out) -> None:
    if r["custom_rm_path"] and r["rm_type"]:
        _issue(out, "info", "rollout.custom_rm_overrides", ("custom_rm_path", "rm_type"),
               f"--custom-rm-path scores every sample: --rm-type {r['rm_type']} (and any "
               "rm_type in the sample metadata) is not used, as in miles.",
               "drop --rm-type to say so")
    if r["group_rm"] and not r["custom_rm_path"]:
        _issue(out, "info", "rollout.group_rm_rule_reward", ("group_rm", "custom_rm_path"),
               "--group-rm without --custom-rm-path: each sample of the group is still scored "
               "alone by the rule reward (miles' batched_async_rm does the same).")
    if r["group_rm"] and r["eval_interval"] is not None:
        _issue(out, "error", "rollout.group_rm_eval", ("group_rm", "eval_interval"),
               "--group-rm has no eval rollout: miles asserts that group RM is not used for "
               "evaluation.", "drop --eval-interval, or score samples one by one")


def remote_reward_rules(r: dict, out: Out) -> None:
    """The reward server and where --rm-type reaches: both engines (miles posts the same)."""
    _remote(r, out)
    _metadata_overrides(r, out)


def _remote(r: dict, out: Out) -> None:
    url, rm = r["rm_url"], r["rm_type"]
    if is_remote(rm) and not url and not r["custom_rm_path"]:
        _issue(out, "error", "rollout.rm_url_required", ("rm_type", "rm_url"),
               f"--rm-type {rm} posts every sample to a reward server, but --rm-url is not "
               "set; the run would fail at start.",
               "set --rm-url to the server's URL, e.g. http://127.0.0.1:8000/score")
    if not url:
        return
    if not url.startswith(("http://", "https://")):
        _issue(out, "error", "rollout.rm_url_scheme", ("rm_url",),
               f"--rm-url {url} is not an http:// or https:// URL.",
               "give the reward server's URL, e.g. http://127.0.0.1:8000/reward")
    if r["custom_rm_path"] or (rm and not is_remote(rm)):
        what = "--custom-rm-path" if r["custom_rm_path"] else f"--rm-type {rm}"
        _issue(out, "warning", "rollout.rm_url_unused", ("rm_url", "rm_type"),
               f"--rm-url is only posted to for --rm-type {REMOTE_RM}; with {what} it is "
               f"unused (unless a sample's metadata names rm_type {REMOTE_RM}).",
               f"set --rm-type {REMOTE_RM}, or drop --rm-url")


def _metadata_overrides(r: dict, out: Out) -> None:
    """miles' order: a sample's metadata rm_type wins over --rm-type. Say so before launch,
    with both values and how many samples, when the user's --rm-type would not reach them:
    in --prompt-data, and in each eval set that will be scored (the same reward)."""
    rm = r["rm_type"]
    if not rm or r["custom_rm_path"]:
        return  # a custom RM overrides both (rollout.custom_rm_overrides says so)
    sources = [] if r["synthetic_task"] else [(r["prompt_data"], "prompt_data")]
    if r["eval_interval"] is not None and not r["debug_train_only"]:
        sources += [(path, "eval_prompt_data") for _, path in r["eval_datasets"]]
    for path, dest in sources:
        _metadata_override(r, rm, path, dest, out)


def _metadata_override(r: dict, rm: str, path: str | None, dest: str, out: Out) -> None:
    found = metadata_rm_types(path, r["metadata_key"] or "metadata")
    if found is None:
        return
    other = [(named, n) for named, n in found.counts if named != rm]
    if not other:
        return
    touched = sum(n for _, n in other)
    listed = ", ".join(f"{named} ({n})" for named, n in other)
    of = f"of the {found.samples:,} samples" + ("" if found.complete else " read so far")
    _issue(out, "warning", "rollout.rm_type_overridden", ("rm_type", dest),
           f"--rm-type {rm} is not used for {touched:,} {of} in {path}: their "
           f"metadata names rm_type {listed}, which wins over the flag (miles' order).",
           f"to make --rm-type {rm} win, remove rm_type from those samples' "
           f"\"{r['metadata_key'] or 'metadata'}\" (or set it to {rm}); or score every sample "
           "with --custom-rm-path")


def _over_sampling(r: dict, out: Out) -> None:
    over, rbs = r["over_sampling_batch_size"], r["rollout_batch_size"]
    if over is None or rbs is None or over <= rbs or r["dynamic_sampling_filter_path"]:
        return
    _issue(out, "warning", "rollout.over_sampling_unfiltered",
           ("over_sampling_batch_size", "dynamic_sampling_filter_path"),
           f"--over-sampling-batch-size {over} without --dynamic-sampling-filter-path: each "
           f"rollout generates {over} prompt groups and keeps the first {rbs}; the other "
           f"{over - rbs} are generated for nothing (miles does the same).",
           "set --dynamic-sampling-filter-path (e.g. miles.rollout.filter_hub."
           "dynamic_sampling_filters.check_reward_nonzero_std), or drop "
           "--over-sampling-batch-size")
