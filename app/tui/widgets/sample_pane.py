"""One sample: its prompt, and its response token by token, each token's background coloured by
the chosen strip (advantage, value, return, the trainer/rollout log-prob gap, entropy), with the
numbers of the token under the cursor (left/right move it)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.widgets import Static

from ....engine.run.samples import SampleRecord

# strip -> (label, signed: red below 0 / green above, else one hue by magnitude)
STRIPS = {"advantage": ("advantage (raw)", True), "value": ("value", True),
          "return": ("return", True), "gap": ("log-prob gap (trainer - rollout)", True),
          "entropy": ("entropy", False)}
NEUTRAL = (38, 38, 46)
NEGATIVE, POSITIVE, MAGNITUDE = (200, 45, 45), (35, 165, 70), (215, 140, 30)
PROMPT_CHARS = 300


def strip_values(record: SampleRecord, strip: str) -> list[float | None] | None:
    """The strip's number per response token, or None when the run did not keep it."""
    if strip == "gap":
        if record.log_probs is None or record.rollout_log_probs is None:
            return None
        return [None if a is None or b is None else a - b
                for a, b in zip(record.log_probs, record.rollout_log_probs, strict=True)]
    series = {"advantage": record.advantages, "value": record.values,
              "return": record.returns, "entropy": record.entropy}[strip]
    return None if series is None else list(series)


def scale_of(values: Sequence[float | None]) -> float:
    """The largest magnitude: a sample's colours use its own range."""
    return max((abs(v) for v in values if v is not None), default=0.0) or 1e-9


def colour(value: float | None, scale: float, signed: bool) -> Color | None:
    if value is None:
        return None
    weight = min(abs(value) / scale, 1.0)
    end = (NEGATIVE if value < 0 else POSITIVE) if signed else MAGNITUDE
    return Color.from_rgb(*(n + (e - n) * weight for n, e in zip(NEUTRAL, end, strict=True)))


def token_text(record: SampleRecord, i: int) -> str:
    """What a token shows: its text (newlines as ⏎ then a line break), or ⟨id⟩ if none."""
    text = record.tokens[i] if record.tokens is not None else ""
    if not text:
        token_id = record.token_ids[i] if record.token_ids is not None else "?"
        return f"⟨{token_id}⟩"
    return text.replace("\r", "").replace("\n", "⏎\n").replace("\t", "→")


def token_joiner(record: SampleRecord) -> str:
    """" " where the tokenizer's decoder puts the spaces (word-level vocabularies: tokens
    decoded alone carry none, yet the response has them), else "" (BPE tokens carry theirs)."""
    texts = [t for t in record.tokens or () if t.strip()]  # a newline token says nothing
    if not texts or any(t[0].isspace() or t[-1].isspace() for t in texts):
        return ""
    return " " if any(ch.isspace() for ch in record.response) else ""


def _num(x: float | None, sign: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.4g}" if sign else f"{x:.4g}"


def _at(series: Sequence[float | int | None] | None, i: int) -> float | int | None:
    return None if series is None else series[i]


def token_numbers(record: SampleRecord, i: int) -> str:
    """The numbers of token i, in one line."""
    lp, rlp = _at(record.log_probs, i), _at(record.rollout_log_probs, i)
    gap = None if lp is None or rlp is None else lp - rlp
    token_id = _at(record.token_ids, i)
    return (f"token {i + 1}/{record.response_length} {token_text(record, i).strip()!r} "
            f"id {'-' if token_id is None else token_id} │ log-prob {_num(lp)} rollout "
            f"{_num(rlp)} gap {_num(gap, True)} │ value {_num(_at(record.values, i))} "
            f"return {_num(_at(record.returns, i))} adv {_num(_at(record.advantages, i), True)}"
            f" │ entropy {_num(_at(record.entropy, i))} │ mask "
            f"{'-' if record.loss_mask is None else record.loss_mask[i]}")


class SamplePane(Static, can_focus=True):
    BINDINGS = [
        Binding("left", "move(-1)", "Token left", show=False),
        Binding("right", "move(1)", "Token right", show=False),
        Binding("home", "move(-1000000)", "First token", show=False),
        Binding("end", "move(1000000)", "Last token", show=False),
    ]

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.record: SampleRecord | None = None
        self.strip = "advantage"
        self.cursor = 0

    def on_mount(self) -> None:
        self.show(None)

    def show(self, record: SampleRecord | None, strip: str | None = None) -> None:
        if record is self.record and (strip or self.strip) == self.strip and record is not None:
            return  # a row highlighted again: nothing changed
        if record is not self.record:
            self.cursor = 0
        self.record = record
        self.strip = strip or self.strip
        self.update(self.render_sample())

    def action_move(self, by: int) -> None:
        if self.record is None or not self.record.response_length:
            return
        self.cursor = max(0, min(self.record.response_length - 1, self.cursor + by))
        self.update(self.render_sample())

    def render_sample(self) -> Text:
        record = self.record
        if record is None:
            return Text("no sample selected", "dim")
        label, signed = STRIPS[self.strip]
        values = strip_values(record, self.strip)
        out = Text()
        prompt = record.prompt if len(record.prompt) <= PROMPT_CHARS else (
            "…" + record.prompt[-PROMPT_CHARS:])
        out.append("prompt ", "bold")
        out.append(prompt.replace("\n", "⏎ "), "dim")
        out.append(f"\nsample {record.index} · reward {_num(record.reward)} (raw "
                   f"{_num(record.raw_reward)}) · {record.status} · label {record.label!r}\n",
                   "bold")
        if values is None:
            out.append(f"strip {label}: not kept for this sample (GRPO keeps no values or "
                       "returns; a critic-only rollout has no advantages or trainer "
                       "log-probs)\n", "yellow")
            scale = 1.0
        else:
            scale = scale_of(values)
            low = min((v for v in values if v is not None), default=0.0)
            high = max((v for v in values if v is not None), default=0.0)
            out.append(f"strip {label}: {_num(low)} … {_num(high)}\n", "dim")
        joiner = token_joiner(record)
        for i in range(record.response_length):
            if i and joiner:
                out.append(joiner)
            bg = colour(values[i], scale, signed) if values is not None else None
            style = Style(bgcolor=bg, color="white" if bg is not None else None)
            if i == self.cursor:
                style = style + Style(reverse=True, bold=True, underline=True)
            out.append(token_text(record, i), style)
        if record.response_length:
            out.append("\n" + token_numbers(record, self.cursor), "italic")
        return out
