"""The driver's side of the run's samples files (engine/run/samples.py holds the format).

After a rollout has trained, `SamplesKeeper.keep` queues one closure on the samples writer's
thread: the joining of the batch, the rollout manager's per-sample details and the trainers'
per-token series, the token texts (the rollout's tokenizer, loaded once on that thread) and
the JSON all happen there, so the training loop only pays for the queue put. The trainers
send their series only when samples are kept (--samples-per-rollout 0 turns it all off).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from ..run.samples import (
    DECIMALS,
    YIELD_EVERY,
    SampleRecord,
    SamplesWriter,
    disk_bytes,
    format_bytes,
    status_of,
    yield_gil,
)
from ..vocabulary import Kind

CLOSE_TIMEOUT_S = 120.0


class SamplesKeeper:
    def __init__(self, args: Mapping[str, Any], run_dir: str, log: Callable[..., None],
                 tokenizer_path: str | None) -> None:
        self.limit = args.get("samples_per_rollout")
        self.on = self.limit != 0
        self.run_dir = run_dir
        self.log = log
        self.tokenizer_path = tokenizer_path
        self._tokenizer: Any = None
        self._token_texts: dict[int, str] = {}
        self.writer = (SamplesWriter(run_dir, self.limit, on_error=self._error,
                                     on_written=self._written) if self.on else None)
        self.seconds: list[tuple[float, float]] = []  # the writer's (wall, CPU) per rollout
        self.closed = False
        if not self.on:
            log("info", "--samples-per-rollout 0: no samples are kept", source="samples")

    @classmethod
    def for_run(cls, args: Mapping[str, Any], rundir: Any, tm: Any,  # noqa: ANN401
                roles: Any) -> SamplesKeeper:  # noqa: ANN401
        """The run's keeper: token texts from the tokenizer the rollout side loaded."""
        info = getattr(roles.rollout, "info", None) or {}

        def log(level: str, msg: str, source: str = "samples", **fields: Any) -> None:
            tm.writer.emit(Kind.LOG, level=level, source=source, msg=msg, **fields)

        return cls(args, str(rundir.path), log, info.get("tokenizer"))

    @staticmethod
    def take_details(batch: Any) -> list[dict[str, Any]] | None:  # noqa: ANN401
        """The batch's text details, taken off it: the trainers need none of them."""
        details = getattr(batch, "details", None)
        if details is not None:
            batch.details = None
        return details

    def keep(self, rollout_id: int, batch: Any, details: list[dict[str, Any]] | None,  # noqa: ANN401
             critic_out: dict[str, Any] | None, actor_out: dict[str, Any] | None) -> None:
        if self.writer is None:
            return
        self.writer.submit(rollout_id, lambda: self._records(rollout_id, batch, details,
                                                             critic_out, actor_out))

    def close(self) -> None:
        """Wait for the queued rollouts and report the samples' size on disk (once)."""
        if self.writer is None or self.closed:
            return
        self.closed = True
        left = self.writer.close(CLOSE_TIMEOUT_S)
        if left:
            self.log("warning", f"samples of rollouts {left} were not written within "
                                f"{CLOSE_TIMEOUT_S:.0f} s of the run's end", source="samples")
        if self.writer.written:
            size = disk_bytes(self.run_dir)
            # the median: the first rollout also loads the tokenizer (transformers' import)
            wall = statistics.median(w for w, _ in self.seconds)
            cpu = statistics.median(c for _, c in self.seconds)
            first = self.seconds[0][0]
            self.log("info", f"samples: {len(self.writer.written)} rollouts kept, "
                             f"{format_bytes(size)} on disk (samples/); the writer thread took "
                             f"{wall * 1000:.1f} ms per rollout ({cpu * 1000:.1f} ms CPU, "
                             f"median; the first, with the tokenizer's load, {first:.2f} s)",
                     source="samples", samples_bytes=size, writer_seconds=wall,
                     writer_cpu_seconds=cpu, writer_first_seconds=first)

    # ---- on the writer thread ----------------------------------------------------------------

    def _error(self, message: str) -> None:
        self.log("warning", f"{message} (training goes on)", source="samples")

    def _written(self, rollout_id: int, count: int, seconds: float, cpu: float) -> None:
        self.seconds.append((seconds, cpu))

    def _records(self, rollout_id: int, batch: Any, details: list[dict[str, Any]] | None,  # noqa: ANN401
                 critic_out: dict[str, Any] | None, actor_out: dict[str, Any] | None
                 ) -> list[SampleRecord]:
        values = (critic_out or {}).get("values") or {}
        from_critic = by_sample((critic_out or {}).get("samples") or [])
        from_actor = by_sample((actor_out or {}).get("samples") or [])
        count = len(batch) if self.limit is None else min(len(batch), self.limit)
        records = []
        for i in range(count):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                yield_gil()  # the training loop's thread first (engine/run/samples.py)
            index = int(batch.sample_indices[i])
            prompt_len = int(batch.prompt_lengths[i])
            token_ids = [int(t) for t in batch.tokens[i][prompt_len:]]
            detail = details[i] if details is not None else self._decoded_detail(batch, i)
            critic, actor = from_critic.get(index, {}), from_actor.get(index, {})
            records.append(SampleRecord(
                rollout_id=rollout_id, index=index, group_index=detail.get("group_index"),
                prompt=detail["prompt"], response=detail["response"], label=detail.get("label"),
                reward=float(batch.rewards[i]), raw_reward=detail.get("raw_reward"),
                status=detail.get("status") or status_of(bool(batch.truncated[i])),
                response_length=int(batch.response_lengths[i]),
                tokens=self._texts(token_ids), token_ids=token_ids,
                log_probs=_floats(actor.get("log_probs")),
                rollout_log_probs=_floats(None if batch.rollout_log_probs is None
                                          else batch.rollout_log_probs[i]),
                values=_floats(values.get(index)), returns=_floats(critic.get("returns")),
                advantages=_floats(actor.get("advantages")),
                entropy=_floats(actor.get("entropy")),
                loss_mask=[int(m) for m in batch.loss_masks[i]]))
        return records

    def _decoded_detail(self, batch: Any, i: int) -> dict[str, Any]:  # noqa: ANN401
        """No details from the rollout side: the texts decoded here, no raw reward."""
        tokenizer = self._load_tokenizer()
        prompt_len = int(batch.prompt_lengths[i])
        ids = list(batch.tokens[i])
        decode = (lambda part: "") if tokenizer is None else (
            lambda part: tokenizer.decode(part, skip_special_tokens=True))
        return {"prompt": decode(ids[:prompt_len]), "response": decode(ids[prompt_len:])}

    def _texts(self, token_ids: list[int]) -> list[str] | None:
        """Each token's text decoded alone (cached by id: a vocabulary repeats)."""
        tokenizer = self._load_tokenizer()
        if tokenizer is None:
            return None
        missing = sorted({t for t in token_ids if t not in self._token_texts})
        if missing:
            texts = tokenizer.batch_decode([[t] for t in missing], skip_special_tokens=False)
            self._token_texts.update(zip(missing, texts, strict=True))
        return [self._token_texts[t] for t in token_ids]

    def _load_tokenizer(self) -> Any:  # noqa: ANN401
        if self._tokenizer is None and self.tokenizer_path:
            try:
                from ..rollout.data import load_tokenizer

                self._tokenizer = load_tokenizer(self.tokenizer_path)
            except Exception as exc:  # noqa: BLE001 - token texts are optional: said, not fatal
                self.log("warning", f"samples: no token texts (tokenizer {self.tokenizer_path} "
                                    f"did not load: {exc})", source="samples")
                self.tokenizer_path = None
                return None
        return self._tokenizer


def by_sample(parts: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """{sample index: {series: its row}} from the ranks' parts: each holds the samples'
    "index" and "lengths", and per series one flat array of their rows end to end."""
    out: dict[int, dict[str, Any]] = {}
    for part in parts:
        # rounded once per series, not per sample: numpy's per-call cost on 6-token rows was
        # most of the writer's time on tiny-cpu
        series = {k: rounded_list(v) for k, v in part.items() if k not in ("index", "lengths")}
        start = 0
        for index, length in zip(part["index"], part["lengths"], strict=True):
            out[int(index)] = {name: flat[start:start + length] for name, flat in series.items()}
            start += length
    return out


def rounded_list(flat: Any) -> list[float]:  # noqa: ANN401 - a numpy array or a list
    if hasattr(flat, "astype"):
        return (flat.astype("float64").round(DECIMALS) + 0.0).tolist()
    return [float(x) for x in flat]


def _floats(row: Any) -> Any:  # noqa: ANN401
    """A worker's numpy row as it is (the writer rounds it at C speed), a list as floats."""
    if row is None or hasattr(row, "astype"):
        return row
    return [float(x) for x in row]
