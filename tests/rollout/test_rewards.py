"""The --rm-type reward registry: copy-digit, deepscaler and math (miles' rollout/rm_hub)."""

from __future__ import annotations

import pytest

from ppodeck.engine.rollout.rewards import (
    REWARDS,
    answers_match,
    copy_digit_reward,
    deepscaler_reward,
    extract_boxed,
    get_reward_fn,
    math_reward,
    mathd_normalize,
    resolve_rm_type,
)

# --------------------------------------------------------------------------- registry


def test_registry_holds_the_documented_types():
    assert set(REWARDS) == {"copy-digit", "deepscaler", "math"}
    assert get_reward_fn("deepscaler") is deepscaler_reward


def test_unknown_rm_type_names_the_flag_and_lists_known_types():
    with pytest.raises(ValueError) as info:
        get_reward_fn("dapo")
    message = str(info.value)
    assert "--rm-type 'dapo'" in message
    assert "copy-digit, deepscaler, math" in message


def test_missing_rm_type_is_reported_as_not_set():
    with pytest.raises(ValueError, match="No --rm-type set"):
        get_reward_fn("")


def test_sample_metadata_rm_type_wins_over_the_flag():
    assert resolve_rm_type({"rm_type": "math"}, "deepscaler") == "math"
    assert resolve_rm_type({"other": 1}, " deepscaler ") == "deepscaler"
    assert resolve_rm_type(None, None) == ""
    assert resolve_rm_type({"rm_type": ""}, "copy-digit") == "copy-digit"


def test_boxed_prefix_grades_only_the_boxed_answer():
    # The box holds "7 7 7 7"; the text around it would otherwise break copy-digit.
    reward = get_reward_fn("boxed_copy-digit")
    assert reward("I will answer \\boxed{7 7 7 7} now", "7", None) == 1.0
    assert reward("no box: 7 7 7 7", "7", None) == 0.0


# --------------------------------------------------------------------------- copy-digit


def test_copy_digit_gives_full_credit_for_k_copies():
    assert copy_digit_reward("3 3 3 3", "3", {"target_len": 4}) == 1.0


def test_copy_digit_gives_partial_credit_per_position():
    # K = 4 (default): tokens "3 1 3" -> positions 0 and 2 right, 3 missing -> 2/4.
    assert copy_digit_reward("3 1 3", "3", None) == 0.5
    # Tokens past K are ignored: "5 5 9 9 5 5" with K = 2 -> 2/2.
    assert copy_digit_reward("5 5 9 9 5 5", 5, {"target_len": 2}) == 1.0
    assert copy_digit_reward("", "5", {"target_len": 3}) == 0.0


def test_copy_digit_rejects_a_non_positive_target_len():
    with pytest.raises(ValueError, match="target_len"):
        copy_digit_reward("1", "1", {"target_len": 0})


# --------------------------------------------------------------------------- deepscaler


def test_deepscaler_without_think_tag_or_response_marker_scores_zero():
    assert deepscaler_reward("The answer is \\boxed{3}.", "3") == 0.0


def test_deepscaler_grades_the_text_after_the_last_think_tag():
    assert deepscaler_reward("<think>maybe \\boxed{4}</think> so \\boxed{3}", "3") == 1.0
    # The only box is inside the thinking block: nothing to grade after </think>.
    assert deepscaler_reward("<think>\\boxed{3}</think> done", "3") == 0.0


def test_deepscaler_truncated_inside_thinking_scores_zero():
    assert deepscaler_reward("<think>long reasoning ... \\boxed{3}", "3") == 0.0


def test_deepscaler_without_a_box_scores_zero():
    assert deepscaler_reward("<think>x</think> the answer is 3", "3") == 0.0


def test_deepscaler_response_marker_branch():
    assert deepscaler_reward("Question ###Response the answer is \\boxed{12}", "12") == 1.0
    # miles keeps the text between the first and a second marker.
    text = "###Response \\boxed{1} ###Response \\boxed{2}"
    assert deepscaler_reward(text, "1") == 1.0


def test_deepscaler_wrong_answer_scores_zero():
    assert deepscaler_reward("</think> \\boxed{4}", "3") == 0.0


def test_deepscaler_unboxes_a_boxed_label_and_rejects_an_empty_one():
    assert deepscaler_reward("</think> \\boxed{5}", "\\boxed{5}") == 1.0
    assert deepscaler_reward("</think> \\boxed{}", "") == 0.0


@pytest.mark.parametrize(
    "given,label",
    [
        ("\\frac{1}{2}", "0.5"),
        ("0.5", "\\frac{1}{2}"),
        ("\\dfrac{1}{2}", "\\frac12"),
        ("2/4", "\\frac{2}{4}"),
        ("x = 3", "3"),
        ("3.0", "3"),
        ("90^\\circ", "90"),
        ("\\$5", "5"),
        ("50\\%", "50"),
        ("12 \\text{ cm}", "12"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("1,000", "1000"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
        ("(x+1)^2", "x^2+2x+1"),
        ("\\frac{\\pi}{2}", "\\pi/2"),
        ("7\\frac{3}{4}", "\\frac{31}{4}"),
        ("\\text{Evelyn}", "Evelyn"),
    ],
)
def test_equivalent_answer_forms_score_one(given, label):
    assert deepscaler_reward(f"<think>...</think> so \\boxed{{{given}}}", label) == 1.0


@pytest.mark.parametrize(
    "given,label,why",
    [
        ("2/4", "\\frac{1}{2}", "unreduced fraction for a reduced one (miles)"),
        ("\\sqrt[3]{8}", "2", "an integer label needs an integer answer (miles)"),
        ("[1,2]", "(1,2)", "closed vs open interval"),
        ("4", "3", "wrong"),
        ("x", "3", "unknown symbol"),
    ],
)
def test_non_equivalent_answer_forms_score_zero(given, label, why):
    assert deepscaler_reward(f"</think>\\boxed{{{given}}}", label) == 0.0, why


def test_nested_braces_in_the_box_are_balanced():
    assert extract_boxed("so \\boxed{\\frac{1}{\\sqrt{2}}} done") == "\\frac{1}{\\sqrt{2}}"
    response = "</think> \\boxed{\\frac{1}{\\sqrt{2}}}"
    assert deepscaler_reward(response, "\\frac{\\sqrt{2}}{2}") == 1.0


def test_box_extraction_takes_the_last_box_and_fails_on_unclosed_braces():
    assert extract_boxed("\\boxed{1} then \\boxed{2}") == "2"
    assert extract_boxed("\\boxed{1} then \\boxed{2") is None
    assert extract_boxed("\\fbox{9}") == "9"
    assert extract_boxed("\\boxed 9") is None
    assert extract_boxed("no box") is None


def test_huge_or_unsafe_expressions_are_not_sent_to_sympy():
    # A power tower would hang sympy; Python syntax must never reach parse_expr's eval.
    assert not answers_match("2^(1+999999999)", "1")
    assert not answers_match("2^9^9", "1")
    assert not answers_match("__import__('os')", "0")
    assert not answers_match("1+" * 60 + "1", "61")  # > 100 characters


def test_mathd_normalization_examples():
    assert mathd_normalize(" \\dfrac{1}{2} ") == "\\frac{1}{2}"
    assert mathd_normalize("0.5") == "\\frac{1}{2}"
    assert mathd_normalize("k = 7") == "7"
    assert mathd_normalize("\\left(3\\right)") == "(3)"
    assert mathd_normalize("\\sqrt3") == "\\sqrt{3}"


# --------------------------------------------------------------------------- math


def test_math_grades_the_last_box_without_a_think_tag():
    assert math_reward("The answer is \\boxed{\\dfrac{1}{2}}.", "0.5") == 1.0
    assert math_reward("The answer is \\boxed{3}.", "\\boxed{4}") == 0.0
    assert math_reward("The answer is 3.", "3") == 0.0


def test_rewards_are_floats():
    assert isinstance(math_reward("\\boxed{3}", 3), float)
    assert isinstance(deepscaler_reward("no tag", "3"), float)
