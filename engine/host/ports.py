"""Rendezvous ports that stay free until they are bound.

A run picks its torch.distributed port in the driver and rank 0 binds it seconds later, after
its imports. Meanwhile every outgoing connection on the host (Ray's, a store client's, gloo's)
takes its source port from the kernel's ephemeral range, which is also where bind(0) picks.
So the port is drawn from below that range: seen in CI as `OSError: [Errno 98] Address already
in use` on actor rank 0 with a bind(0) port.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST_PORT = 20000
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_EPHEMERAL_LOW = 32768
TRIES = 200


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it is unreadable)."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LINUX_EPHEMERAL_LOW


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, below the ephemeral range where the range leaves room."""
    top = min(ephemeral_low(), LINUX_EPHEMERAL_LOW)
    if top <= LOWEST_PORT:
        return _kernel_pick(host)
    pick = random.SystemRandom()  # not the seeded module state: parallel processes would agree
    for _ in range(TRIES):
        port = pick.randrange(LOWEST_PORT, top)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    return _kernel_pick(host)


def _kernel_pick(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
