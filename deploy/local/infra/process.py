"""Process control over Linux ``/proc``: find our engine processes by their
marker arguments, check liveness and which process owns a listening port,
signal process groups, and poll with ``_wait_for`` (which raises
``EngineStartError`` when its ``abort`` check reports a reason)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import EngineStartError


def _wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    interval: float = 0.5,
    abort: Callable[[], str | None] | None = None,
) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` expires.

    ``abort`` is checked on every round; if it returns a message the wait stops
    early and an :class:`EngineStartError` with that message is raised.
    """
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if abort is not None:
            reason = abort()
            if reason:
                raise EngineStartError(reason)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(interval, remaining))


def _proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", errors="replace") for part in raw.split(b"\0") if part]


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # state is the first field after the parenthesised command name
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _find_pids(markers: Sequence[str]) -> list[int]:
    """PIDs whose command line contains every marker argument exactly."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        args = _proc_cmdline(int(entry.name))
        if args and all(m in args for m in markers) and _pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def _listen_inodes(port: int) -> set[str]:
    """Socket inodes of TCP listeners on ``port`` (any address), from /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # fields: sl local_address rem_address st ... inode (index 9); st 0A == LISTEN
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _pid_listens_on(pid: int, port: int) -> bool:
    """True if process ``pid`` itself owns the listening socket on ``port``.

    Guards readiness checks against answering *someone else's* server on the
    same port (e.g. a second state dir or a stray broker).
    """
    inodes = _listen_inodes(port)
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def _signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid`` (fall back to the pid alone)."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    try:
        if pgid == pid:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass
