"""Child processes and sockets for the local launcher (``system.py``): how a
service's process is set up (dies with its supervisor, in its own process
group, at a given niceness) and how the launcher knows a port is held or a
service answers."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Ask Linux to SIGKILL this child when the supervisor dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setsid()


def child_setup(nice: int = 0) -> Callable[[], None]:
    """A child's ``preexec_fn``: die with the supervisor, in its own process
    group, at CPU niceness ``nice`` (0: unchanged). Threads the child starts
    later inherit it."""

    def setup() -> None:  # pragma: no cover - runs in the child
        _die_with_parent()
        if nice:
            os.nice(nice)

    return setup


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port(host: str) -> int:
    """A port nothing holds now, picked by the kernel."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def wait_listening(proc: subprocess.Popen[bytes], host: str, port: int, deadline: float) -> bool:
    """True once something accepts on ``host:port``; False if ``proc`` exits
    first; TimeoutError at ``deadline``."""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            if proc.poll() is not None:
                return False
            time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {host}:{port} in time")
