"""The job's event relay and the local mirror: every event once, in order, whatever way the
log stream is cut, re-read or reconnected (no Ray here)."""

from __future__ import annotations

import json
import threading

from ppodeck.engine.driver import job_entry
from ppodeck.engine.launch import jobs
from ppodeck.engine.run.rundir import RunDir, read_status, write_status


def event(i: int, **extra) -> str:
    return json.dumps({"v": 1, "kind": "metrics", "rollout_id": i, "i": i, **extra})


def job_log(n: int) -> str:
    lines = ["ppodeck: job run directory /tmp/x", "some ray warning"]
    for i in range(n):
        lines.append(f"{jobs.EVENT_PREFIX}{i} {event(i)}")
        lines.append("(ActorWorker pid=1) a worker log line")
    return "\n".join(lines) + "\n"


def test_relay_numbers_complete_lines_and_drains_at_the_end(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(event(0) + "\n" + event(1)[:10])  # the second line is still being written
    out: list[tuple[int, str]] = []
    done = threading.Event()
    thread = threading.Thread(target=job_entry.relay_events,
                              args=(path, done, lambda seq, line: out.append((seq, line)), 0.01))
    thread.start()
    with open(path, "a") as file:
        file.write(event(1)[10:] + "\n" + event(2) + "\n")
    done.set()
    thread.join(5)
    assert out == [(0, event(0)), (1, event(1)), (2, event(2))]


def test_mirror_survives_cut_chunks_rereads_and_reconnects(tmp_path):
    rundir = RunDir(tmp_path)
    write_status(rundir, state="starting")
    mirror = jobs.EventMirror(rundir)
    log = job_log(30)
    cut = log.index(f"{jobs.EVENT_PREFIX}12 ") + 7  # the stream breaks inside event 12
    for start in range(0, cut, 37):  # chunks cut anywhere
        mirror.feed(log[start:min(start + 37, cut)])
    # reconnect: the whole log so far is read first (a line still being written is left out),
    # then the new stream starts again from the beginning
    mirror.reset_partial()
    mirror.apply(jobs.complete_lines(log[: log.index(f"{jobs.EVENT_PREFIX}20 ") + 5]))
    mirror.reset_partial()
    for start in range(0, len(log), 101):
        mirror.feed(log[start:start + 101])
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["i"] for line in lines] == list(range(30))
    assert mirror.gaps == 0
    assert read_status(rundir)["rollout_id"] == 29
    # a fresh follower (restarted) continues from what is on disk
    again = jobs.EventMirror(rundir)
    assert again.next_seq == 30 and again.apply(jobs.complete_lines(log)) == 0


def test_a_stream_that_skips_events_waits_for_the_full_read(tmp_path):
    mirror = jobs.EventMirror(RunDir(tmp_path))
    log = job_log(5).splitlines()
    assert mirror.apply([line for line in log if not line.startswith(
        f"{jobs.EVENT_PREFIX}2 ")]) == 2  # 0 and 1; 3 and 4 wait behind the gap
    assert mirror.gaps == 1
    assert mirror.apply(log) == 3


def test_auth_headers_come_from_the_environment_only():
    assert jobs.auth_headers({}) is None
    assert jobs.auth_headers({jobs.HEADERS_ENV: '{"Authorization": "Bearer t"}'}) == {
        "Authorization": "Bearer t"}
    try:
        jobs.auth_headers({jobs.HEADERS_ENV: "Bearer t"})
    except jobs.JobError as exc:
        assert "JSON" in str(exc)
    else:
        raise AssertionError("a non-JSON header value must be refused")


def test_entrypoint_and_environment_forwarding():
    assert jobs.entrypoint("r1", {}) == "python -m ppodeck.engine.driver.job_entry --run-id r1"
    assert jobs.entrypoint("r1", {jobs.SUBMIT_PYTHON_ENV: "/opt/py/bin/python"}).startswith(
        "/opt/py/bin/python -m ppodeck.engine.driver.job_entry")
    env = jobs.forwarded_env({"PPODECK_FUSED": "0", "PPODECK_RUNS_DIR": "/r", "HOME": "/h",
                              jobs.HEADERS_ENV: "{}", "HF_HUB_OFFLINE": "1"})
    assert env == {"PPODECK_FUSED": "0", "HF_HUB_OFFLINE": "1"}


def test_a_dead_follower_of_an_active_job_is_started_again(tmp_path, monkeypatch):
    rundir = RunDir(tmp_path / "run")
    rundir.path.mkdir()
    started: list[RunDir] = []
    monkeypatch.setattr(jobs, "start_follower", started.append)
    write_status(rundir, state="running", pid=2**22 + 12345, job={"address": "http://h:8265"})
    assert jobs.revive_follower(rundir) and started == [rundir]
    write_status(rundir, state="succeeded")
    assert not jobs.revive_follower(rundir) and len(started) == 1


class FakeJobs:
    """The Jobs API as the follower sees it: each stream ends mid-line with a dropped
    connection, the job then ends; get_job_logs returns everything logged so far."""

    def __init__(self, log: str) -> None:
        self.log, self.written, self.calls = log, len(log) // 3, 0

    def get_job_status(self, _id: str) -> str:
        return "SUCCEEDED" if self.written >= len(self.log) else "RUNNING"

    def get_job_logs(self, _id: str) -> str:
        return self.log[:self.written]

    async def tail_job_logs(self, _id: str):
        self.calls += 1
        yield self.log[:self.written]
        before, self.written = self.written, min(len(self.log),
                                                 self.written + len(self.log) // 3 + 5)
        yield self.log[before:self.written]  # ends mid-line, then the connection drops
        raise ConnectionError("websocket closed")

    def get_job_info(self, _id: str):
        from types import SimpleNamespace

        return SimpleNamespace(message="Job finished successfully.")


def test_follow_mirrors_a_job_through_dropped_streams(tmp_path, monkeypatch):
    rundir = RunDir(tmp_path)
    write_status(rundir, state="starting", job={"address": "http://h:8265",
                                                "submission_id": "r1", "status": "PENDING"})
    log = job_log(40) + f"{jobs.EVENT_PREFIX}40 " + json.dumps(
        {"v": 1, "kind": "status", "state": "succeeded", "detail": "all rollouts done"}) + "\n"
    fake = FakeJobs(log)
    monkeypatch.setattr(jobs, "client", lambda address: fake)
    assert jobs.follow(rundir, poll_s=0) == "succeeded"
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e.get("i") for e in events[:-1]] == list(range(40)) and fake.calls >= 2
    status = read_status(rundir)
    assert status["state"] == "succeeded" and status["job"]["status"] == "SUCCEEDED"
    assert status["detail"] == "all rollouts done"  # the driver's own words are kept


def test_a_garbled_event_line_is_never_written():
    assert jobs.parse_event_line(f"{jobs.EVENT_PREFIX}3 " + '{"kind": "met') == (None, "")
    assert jobs.parse_event_line(f"{jobs.EVENT_PREFIX}3 " + event(3)) == (3, event(3))
