"""`make run`'s supervisor as a user runs it: it prints the URLs, serves the
gateway, Ctrl-C leaves no process behind, and the data survives a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .client import Api
from .conftest import PORT_OFFSET, REPO

pytestmark = [pytest.mark.e2e]
BASE = 19600 + PORT_OFFSET


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children of children too)."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    frontier.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def start(data_dir: Path) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "deploy/local/system.py"), "--data-dir", str(data_dir), "--base-port", str(BASE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "FANLINE_ARGON2_MEMORY_KIB": "8192", "FANLINE_ARGON2_TIME_COST": "1"},
    )
    lines: list[str] = []
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Press Ctrl-C"):
            return proc, lines
    proc.kill()
    raise AssertionError("supervisor did not come up:\n" + "".join(lines))


def interrupt(proc: subprocess.Popen[str]) -> set[int]:
    children = descendants(proc.pid)
    assert len(children) >= 5, children  # broker + four services
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    try:
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()  # its children die with it (PR_SET_PDEATHSIG)
        raise
    return children


def test_make_run_serves_stops_cleanly_and_keeps_data(tmp_path: Path) -> None:
    proc, lines = start(tmp_path / "data")
    text = "".join(lines)
    assert f"http://127.0.0.1:{BASE}" in text and "Fanline is up" in text
    assert httpx.get(f"http://127.0.0.1:{BASE}/readyz").status_code == 200
    api = Api(f"http://127.0.0.1:{BASE}")
    name, token = api.user("keep")
    tweet = api.post(token, "still here after a restart")
    api.close()

    children = interrupt(proc)
    assert proc.returncode == 0
    time.sleep(0.5)
    assert not [pid for pid in children if alive(pid)], "processes left behind after Ctrl-C"

    proc, _ = start(tmp_path / "data")
    try:
        api = Api(f"http://127.0.0.1:{BASE}")
        assert api.page(f"/v1/tweets/{tweet['id']}")["body"] == "still here after a restart"
        assert api.login(name)  # the user and the password hash survived
        api.close()
    finally:
        interrupt(proc)
