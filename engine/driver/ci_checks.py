"""--ci-test: the checks miles' CI mode runs inside the framework, as failures of the run.

Each failed check raises CIFailure, which the driver turns into status `failed` with the check's
name and the numbers in the detail (and a `log` error event). As miles (spec §2):

- kl (`--ci-disable-kl-checker` skips it; miles' check_kl): at the first optimizer step of every
  actor train, old and current log-probs are the same weights, so |train/ppo_kl| < 1e-9 and
  |train/pg_clipfrac| < 1e-10; at the run's first step (accumulated step 0) with
  --use-kl-loss, ref == actor, so |train/kl_loss| < 1e-9.
- logprobs (`--ci-disable-logprobs-checker`; miles' log_rollout_data): at rollout 0
  rollout/log_probs == rollout/ref_log_probs (abs 1e-8), and rollout/log_probs is within 0.03
  of rollout/rollout_log_probs (the generator's own log-probs of the same tokens).
- weight update (`--ci-disable-weight-update-checker`, off in the debug modes; miles'
  check_weights snapshot / reset_tensors / compare; the rollout side's half is
  engine/rollout/weight_check.py): before the first push the rollout model's
  tensors are zeroed; after it every tensor must equal what the actor sent, bit for bit. Then,
  after every rollout in which the actor trained, the pushed weights must differ from the
  previous push (the update reached the rollout side).
- grad norm (`--ci-save-grad-norm PATH` / `--ci-load-grad-norm PATH`, each formatted with
  {role}, {rollout_id}, {step_id} as miles does): save each step's grad norm (torch.save of a
  float), or compare against a saved run within rel 0.03 / abs 0.03.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..vocabulary import Metric

KL_TOL, CLIPFRAC_TOL, KL_LOSS_TOL = 1e-9, 1e-10, 1e-9
REF_LOGPROB_TOL, ROLLOUT_LOGPROB_TOL = 1e-8, 0.03
GRAD_NORM_REL_TOL = GRAD_NORM_ABS_TOL = 0.03
GRAD_NORM_KEYS = {"actor": Metric.GRAD_NORM, "critic": Metric.CRITIC_GRAD_NORM}


class CIFailure(AssertionError):
    """A --ci-test check failed; the message names the check and the numbers."""


def fail(check: str, detail: str) -> None:
    raise CIFailure(f"--ci-test {check} check failed: {detail}")


class CIChecks:
    """The driver-side checks, fed with what the driver already has (metrics, push reports)."""

    def __init__(self, args: Mapping[str, Any], log: Callable[..., None]) -> None:
        self.args = args
        self.log = log
        self.kl = not args["ci_disable_kl_checker"]
        self.logprobs = not args["ci_disable_logprobs_checker"]
        self.weights = bool(args["check_weight_update_equal"])
        self.last_digest: str | None = None
        self.trained_unpushed = False  # the actor trained in a rollout without a push
        checks = [name for name, on in (("kl", self.kl), ("logprobs", self.logprobs),
                                        ("weight update", self.weights)) if on]
        if args["ci_save_grad_norm"] or args["ci_load_grad_norm"]:
            checks.append("grad norm")
        log("info", f"--ci-test: checks on: {', '.join(checks) or 'none'}", "ci")

    def after_rollout(self, rollout_id: int, critic_out: Mapping[str, Any] | None,
                      actor_out: Mapping[str, Any] | None, metrics: Mapping[str, Any],
                      pushed: bool) -> None:
        """The step metrics of both models and the merged rollout metrics of one rollout."""
        if critic_out is not None:
            check_grad_norms(self.args, "critic", rollout_id, critic_out["step_metrics"])
        if actor_out is not None:
            if self.kl:
                check_kl(actor_out["step_metrics"], rollout_id,
                         first_rollout=rollout_id == self._first_actor_rollout())
            check_grad_norms(self.args, "actor", rollout_id, actor_out["step_metrics"])
            self.trained_unpushed = self.trained_unpushed or not pushed
        if self.logprobs:
            check_logprobs(rollout_id, metrics)

    def _first_actor_rollout(self) -> int:
        return int(self.args["num_critic_only_steps"]) if self.args["use_critic"] else 0

    def weight_push(self, report: Mapping[str, Any], actor_trained: bool) -> None:
        """After a push: the first one compared tensor by tensor; later ones must move."""
        if not self.weights:
            return
        check = report.get("weight_check") or {}
        if check.get("skipped"):
            self.log("warning", f"--ci-test weight update check skipped: {check['skipped']}",
                     "ci")
            self.weights = False
            return
        actor_trained = actor_trained or self.trained_unpushed
        self.trained_unpushed = False
        if check.get("mismatched"):
            fail("weight update", f"after the push, {len(check['mismatched'])} of "
                 f"{check['checked']} rollout tensors differ from the actor's, e.g. "
                 f"{', '.join(check['mismatched'][:3])}")
        digest = check.get("digest")
        if digest is None:
            return
        if actor_trained and digest == self.last_digest:
            fail("weight update", "the actor trained, but the weights pushed to the rollout "
                 f"are bit-identical to the previous push (sha256 {digest[:12]})")
        self.last_digest = digest


def check_kl(steps: Sequence[Mapping[str, Any]], rollout_id: int, first_rollout: bool) -> None:
    if not steps:
        return
    first = steps[0]
    for key, tol in ((Metric.PPO_KL, KL_TOL), (Metric.PG_CLIPFRAC, CLIPFRAC_TOL)):
        value = first.get(key)
        if value is not None and not abs(value) < tol:
            fail("kl", f"{key} = {value:.3e} at the first step of rollout {rollout_id}; "
                 f"expected |{key}| < {tol:g} (old and current log-probs come from the same "
                 "weights there)")
    kl_loss = first.get(Metric.KL_LOSS)
    if first_rollout and kl_loss is not None and not abs(kl_loss) < KL_LOSS_TOL:
        fail("kl", f"train/kl_loss = {kl_loss:.3e} at the run's first actor step; expected "
             f"< {KL_LOSS_TOL:g} (the reference is the initial actor)")


def check_logprobs(rollout_id: int, metrics: Mapping[str, Any]) -> None:
    train = metrics.get("rollout/log_probs")
    if train is None:
        return
    ref = metrics.get("rollout/ref_log_probs")
    if rollout_id == 0 and ref is not None and not math.isclose(train, ref,
                                                                abs_tol=REF_LOGPROB_TOL):
        fail("logprobs", f"rollout/log_probs {train:.9f} != rollout/ref_log_probs {ref:.9f} at "
             f"rollout 0 (|diff| {abs(train - ref):.2e} > {REF_LOGPROB_TOL:g})")
    rollout = metrics.get("rollout/rollout_log_probs")
    if rollout is not None and not math.isclose(train, rollout, abs_tol=ROLLOUT_LOGPROB_TOL):
        fail("logprobs", f"rollout/log_probs {train:.5f} vs rollout/rollout_log_probs "
             f"{rollout:.5f} at rollout {rollout_id}: the trainer and the generator disagree "
             f"by {abs(train - rollout):.4f} nats per token (> {ROLLOUT_LOGPROB_TOL})")


def check_grad_norms(args: Mapping[str, Any], role: str, rollout_id: int,
                     steps: Sequence[Mapping[str, Any]]) -> None:
    save, load = args["ci_save_grad_norm"], args["ci_load_grad_norm"]
    if save is None and load is None:
        return
    import torch

    for step_id, metrics in enumerate(steps):
        grad_norm = metrics.get(GRAD_NORM_KEYS[role])
        if grad_norm is None:
            continue
        fields = {"role": role, "rollout_id": rollout_id, "step_id": step_id}
        if save is not None:  # miles: save wins when both are given
            torch.save(float(grad_norm), save.format(**fields))
            continue
        path = load.format(**fields)
        try:
            expected = float(torch.load(path, weights_only=True))  # a float (or a 0-d tensor)
        except FileNotFoundError:
            fail("grad norm", f"no saved grad norm at {path} (--ci-load-grad-norm)")
        except pickle.UnpicklingError:  # never run code from a file that should hold a number
            fail("grad norm", f"{path} holds more than a saved grad norm (a float); it was not "
                 "loaded (--ci-load-grad-norm)")
        if not math.isclose(grad_norm, expected, rel_tol=GRAD_NORM_REL_TOL,
                            abs_tol=GRAD_NORM_ABS_TOL):
            fail("grad norm", f"{role} rollout {rollout_id} step {step_id}: {grad_norm:.6f} vs "
                 f"{expected:.6f} saved in {path}")
