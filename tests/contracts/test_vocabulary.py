"""The event vocabulary has one home (engine/vocabulary.py): no module restates its words.

Words that are also ordinary English or other names ("generate" is an SGLang endpoint, "save" a
flag, "log" a panel title) cannot be told apart by a scan; the metric names, step keys and the
phase names nobody else uses can, and are checked here.
"""

from __future__ import annotations

import ast

from ppodeck.engine.vocabulary import (
    EVENT_KINDS,
    FINAL_STATES,
    PHASE_NAMES,
    PHASES,
    Metric,
    Phase,
    StepKey,
    is_eval_reward,
)
from tests.contracts.import_graph import ROOT, parsed, project_modules

UNAMBIGUOUS_PHASES = {Phase.ROLLOUT_OFFLOAD, Phase.CRITIC_TRAIN, Phase.ACTOR_TRAIN,
                      Phase.ROLLOUT_ONLOAD}


def _declared(namespace: type) -> set[str]:
    return {value for name, value in vars(namespace).items() if name.isupper()}


def test_no_module_restates_a_metric_step_key_or_phase_name() -> None:
    words = _declared(Metric) | _declared(StepKey) | UNAMBIGUOUS_PHASES
    restated = []
    for module, path in project_modules().items():
        if module == "ppodeck.engine.vocabulary":
            continue
        for node in ast.walk(parsed(module)):
            if isinstance(node, ast.Constant) and node.value in words:
                restated.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not restated, "import these from engine.vocabulary:\n" + "\n".join(restated)


def test_every_phase_the_driver_runs_has_a_short_label_and_a_label() -> None:
    declared = _declared(Phase)
    assert set(PHASE_NAMES) == declared and len(PHASE_NAMES) == len(declared)
    assert all(p.short and p.label and len(p.short) <= 6 for p in PHASES)
    # miles' order: rollout memory back before the weight push (its train.py)
    assert PHASE_NAMES.index(Phase.ROLLOUT_ONLOAD) < PHASE_NAMES.index(Phase.UPDATE_WEIGHTS)
    assert PHASE_NAMES.index(Phase.CRITIC_TRAIN) < PHASE_NAMES.index(Phase.ACTOR_TRAIN)


def test_kinds_and_states_are_distinct_words() -> None:
    assert len(set(EVENT_KINDS)) == len(EVENT_KINDS) == 7
    assert "lost" in FINAL_STATES and "running" not in FINAL_STATES


def test_eval_reward_keys() -> None:
    assert is_eval_reward("eval/held-out")
    assert not any(is_eval_reward(k) for k in ("eval/a/response_len/mean",
                                              "eval/a-truncated_ratio", "eval/a-pass@4",
                                              "eval/", Metric.REWARD))


def test_init_steps_are_their_own_words_with_short_labels() -> None:
    from ppodeck.engine.vocabulary import INIT_PHASE, INIT_STEPS, InitStep

    names = [s.name for s in INIT_STEPS]
    assert set(names) == _declared(InitStep) and len(names) == len(set(names))
    assert not set(names) & (set(PHASE_NAMES) | {INIT_PHASE})  # a step never reads as a phase
    assert all(s.short and s.label and len(s.short) <= 7 for s in INIT_STEPS)
