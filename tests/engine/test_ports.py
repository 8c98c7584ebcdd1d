"""Rendezvous ports come from below the ephemeral range, where outgoing connections never land."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ppodeck.engine.host import ports


def test_picks_below_the_ephemeral_range_and_the_port_binds() -> None:
    top = min(ports.ephemeral_low(), ports.LINUX_EPHEMERAL_LOW)
    if top <= ports.LOWEST_PORT:
        pytest.skip(f"this host's ephemeral range starts at {top}")
    picked = {ports.free_port() for _ in range(20)}
    assert all(ports.LOWEST_PORT <= p < top for p in picked)
    assert len(picked) > 1  # drawn at random: parallel runs do not agree on one port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", picked.pop()))


def test_a_range_without_room_below_falls_back_to_the_kernel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "range").write_text("1024\t65535\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", tmp_path / "range")
    assert ports.ephemeral_low() == 1024
    assert ports.free_port() >= 1024


def test_an_unreadable_range_file_means_linux_default(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert ports.ephemeral_low() == ports.LINUX_EPHEMERAL_LOW


def test_a_taken_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        first = [taken]

        class Draw:
            """The held port first, then ports the kernel just found free (a fixed neighbour
            of it may be some other process's: CI saw taken + 1 in use)."""

            def randrange(self, low: int, high: int) -> int:
                return first.pop() if first else ports._kernel_pick("127.0.0.1")

        monkeypatch.setattr(ports.random, "SystemRandom", Draw)
        monkeypatch.setattr(ports, "ephemeral_low", lambda: 65535)
        monkeypatch.setattr(ports, "LOWEST_PORT", 1)
        assert ports.free_port() != taken
