"""engine/run/samples.py: the samples record, its JSONL file per rollout, the reader's
tolerance of a
torn last line, the cap, and the background writer (errors reported, never raised)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from ppodeck.engine.run import samples as S
from ppodeck.engine.run.samples import SampleRecord


def record(rollout_id: int = 0, index: int = 0, length: int = 3, **extra: object) -> SampleRecord:
    fields = dict(rollout_id=rollout_id, index=index, group_index=index // 2,
                  prompt=f"prompt {index}", response="ab\nc", label="7", reward=0.5,
                  raw_reward=1.0, status="completed", response_length=length,
                  tokens=["a", "b\n", "c"][:length], token_ids=list(range(length)),
                  log_probs=[-0.1] * length, rollout_log_probs=[-0.12] * length,
                  values=[0.25] * length, returns=[1.0] * length,
                  advantages=[0.75] * length, entropy=None, loss_mask=[1] * length)
    fields.update(extra)
    return SampleRecord(**fields)  # type: ignore[arg-type]


def test_a_rollout_round_trips(tmp_path: Path) -> None:
    written = [record(3, index=i, advantages=[0.1234567891, -2.0, 3.0]) for i in range(4)]
    path = S.write_rollout(tmp_path, 3, written)
    assert path == tmp_path / "samples" / "rollout_3.jsonl"
    read = S.read_samples(tmp_path, 3)
    assert [r.index for r in read] == [0, 1, 2, 3]
    assert read[0].advantages == [0.123457, -2.0, 3.0]  # rounded to 6 decimals
    assert read[0].tokens == ["a", "b\n", "c"] and read[0].entropy is None
    assert S.list_rollouts(tmp_path) == [3]
    assert S.disk_bytes(tmp_path) == path.stat().st_size > 0
    line = json.loads(path.read_text().splitlines()[0])
    assert set(line) == {f for f in SampleRecord.__dataclass_fields__}  # every key, nulls too


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = S.write_rollout(tmp_path, 0, [record(index=0), record(index=1)])
    whole = path.read_text()
    path.write_text(whole + whole.splitlines()[1][:40])  # a writer cut mid-line
    warnings: list[str] = []
    read = S.read_samples(tmp_path, 0, warnings)
    assert [r.index for r in read] == [0, 1]
    assert len(warnings) == 1 and "rollout_0.jsonl:3" in warnings[0]
    assert "incomplete last line" in warnings[0]


def test_a_bad_line_in_the_middle_is_named(tmp_path: Path) -> None:
    path = S.write_rollout(tmp_path, 0, [record(index=0), record(index=1)])
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], '{"index": "x"}', lines[1]]) + "\n")
    warnings: list[str] = []
    assert [r.index for r in S.read_samples(tmp_path, 0, warnings)] == [0, 1]
    assert "rollout_0.jsonl:2: not a sample" in warnings[0]


def test_missing_samples_say_what_exists(tmp_path: Path) -> None:
    with pytest.raises(S.SamplesNotFound, match="has no samples"):
        S.read_samples(tmp_path, 0)
    for rollout_id in (0, 1, 2, 5):
        S.write_rollout(tmp_path, rollout_id, [record(rollout_id)])
    with pytest.raises(S.SamplesNotFound, match=r"rollouts 0-2, 5\. Fix: pick one"):
        S.read_samples(tmp_path, 4)


def test_records_check_their_lengths_and_status() -> None:
    with pytest.raises(ValueError, match="2 values for 3 response tokens"):
        record(values=[0.0, 0.0])
    with pytest.raises(ValueError, match="status 'done'"):
        record(status="done")
    assert S.status_of(truncated=True) == "truncated"


def test_grpo_records_have_no_values_or_returns(tmp_path: Path) -> None:
    S.write_rollout(tmp_path, 0, [record(values=None, returns=None)])
    [read] = S.read_samples(tmp_path, 0)
    assert read.values is None and read.returns is None and read.advantages == [0.75] * 3


def test_nan_reads_back_as_null(tmp_path: Path) -> None:
    S.write_rollout(tmp_path, 0, [record(log_probs=[float("nan"), -1.0, float("-inf")])])
    assert S.read_samples(tmp_path, 0)[0].log_probs == [None, -1.0, None]


def test_cap_keeps_the_first_by_index() -> None:
    records = [record(index=i) for i in (3, 0, 2, 1)]
    assert [r.index for r in S.cap(records, 2)] == [0, 1]
    assert len(S.cap(records, None)) == 4 and S.cap(records, 0) == []


def test_the_writer_writes_off_thread_and_caps(tmp_path: Path) -> None:
    gate = threading.Event()
    done: list[tuple[int, int]] = []

    def build() -> list[SampleRecord]:
        gate.wait(5)  # the caller is not held while the records are built
        return [record(1, index=i) for i in range(5)]

    writer = S.SamplesWriter(tmp_path, limit=2,
                             on_written=lambda rid, n, wall, cpu: done.append((rid, n)))
    writer.submit(1, build)
    assert S.list_rollouts(tmp_path) == []
    gate.set()
    assert writer.close(5) == []
    assert done == [(1, 2)] and len(S.read_samples(tmp_path, 1)) == 2


def test_a_failing_rollout_is_reported_and_the_next_one_written(tmp_path: Path) -> None:
    errors: list[str] = []
    writer = S.SamplesWriter(tmp_path, on_error=errors.append)
    writer.submit(0, lambda: [record(rollout_id=7)])  # wrong rollout: refused
    writer.submit(1, lambda: [record(rollout_id=1)])
    writer.close(5)
    assert len(errors) == 1 and "samples of rollout 0 not written" in errors[0]
    assert S.list_rollouts(tmp_path) == [1]
    assert not list((tmp_path / "samples").glob(".*tmp"))  # no temporary file left behind


def test_describe_ids_and_sizes() -> None:
    assert S.describe_ids([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert S.format_bytes(512) == "512 B" and S.format_bytes(2_500_000) == "2.5 MB"


def test_rows_hold_the_scalars_without_parsing_every_list(tmp_path: Path) -> None:
    written = [record(index=i, advantages=[0.5, -1.0 * i, 2.0], loss_mask=[1, 1, 0])
               for i in range(4)]
    S.write_rollout(tmp_path, 0, written)
    rows = S.read_rows(tmp_path, 0)
    assert [r.index for r in rows] == [0, 1, 2, 3]
    assert [r.mean_advantage for r in rows] == [pytest.approx((0.5 - i) / 2) for i in range(4)]
    assert [r.record() for r in rows] == S.read_samples(tmp_path, 0)
    assert rows[1].response == "ab\nc" and rows[1].status == "completed"


def test_rows_of_another_key_order_and_of_a_torn_line(tmp_path: Path) -> None:
    """A writer with its own key order (a label holding "tokens" too) is parsed whole; a torn
    last line whose scalars are whole is still dropped, since its lists are not."""
    data = json.loads(record(index=0, label={"x": 1, "tokens": 2}).to_json())
    reordered = json.dumps(dict(reversed(list(data.items()))), separators=(",", ":"))
    second = record(index=1).to_json()
    path = S.rollout_path(tmp_path, 0)
    path.parent.mkdir(parents=True)
    path.write_text(reordered + "\n" + second[:second.rindex('"loss_mask"')])
    warnings: list[str] = []
    rows = S.read_rows(tmp_path, 0, warnings)
    assert [r.index for r in rows] == [0] and rows[0].label == {"x": 1, "tokens": 2}
    assert rows[0].mean_advantage == pytest.approx(0.75)
    assert "rollout_0.jsonl:2: incomplete last line" in warnings[0]


def test_sort_samples() -> None:
    records = [record(index=i, reward=r, length=n, tokens=None, token_ids=None,
                      log_probs=None, rollout_log_probs=None, values=None, returns=None,
                      advantages=adv, loss_mask=None)
               for i, r, n, adv in ((0, 0.0, 2, [1.0, 1.0]), (1, 1.0, 1, None),
                                    (2, None, 3, [-1.0, 0.0, 1.0]))]
    assert [r.index for r in S.sort_samples(records, "reward")] == [1, 0, 2]
    assert [r.index for r in S.sort_samples(records, "advantage")] == [0, 2, 1]
    assert [r.index for r in S.sort_samples(records, "length")] == [2, 0, 1]
