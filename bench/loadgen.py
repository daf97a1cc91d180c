"""The open-loop generator: vegeta (a Go binary, ``make bench-tools``
installs it into ``bench/.tools/`` from the Go module proxy), and the CPU
clocks of the processes it loads.

Why vegeta and not a Python client: it sends each request at its scheduled
time whatever the answers (open loop), in compiled code — on two shared
cores a Python generator tried at 60 requests/s achieved about 14/s
(issue 18). It still shares the cores, so every run reports the rate it
achieved and the CPU it used itself (``wait4``'s resource usage of the
vegeta process), and a step is only counted where it achieved 90 % of the
offered rate (``openloop.step_held``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .procs import REPO

VEGETA_VERSION = "v12.12.0"
TOOLS = REPO / "bench" / ".tools"
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def vegeta_binary() -> str:
    """The project-local vegeta (``make bench-tools``), or one on PATH."""
    local = TOOLS / f"vegeta-{VEGETA_VERSION}"
    if local.exists():
        return str(local)
    found = shutil.which("vegeta")
    if found:
        return found
    raise FileNotFoundError(f"vegeta not found: run `make bench-tools` (installs {VEGETA_VERSION} into {TOOLS})")


@dataclass(frozen=True)
class AttackRun:
    csv: str  # ``vegeta encode --to csv`` of every result
    cpu_s: float  # the vegeta attack process's own user + system CPU
    wall_s: float
    offered: int


def rate_flag(rate: float) -> str:
    """vegeta's ``-rate`` for ``rate`` per second. vegeta takes a whole
    number of requests per duration (``-rate=37.5/1s`` is a usage error, and
    the saturation curve's steps rise by 1.5x), so a fractional rate is
    written as whole requests per whole seconds."""
    if not rate > 0:
        raise ValueError(f"rate must be positive: {rate!r}")
    for per in (1, 2, 4, 5, 8, 10, 16, 32, 64, 100, 128, 256, 512, 1000, 1024):
        count = rate * per
        if abs(count - round(count)) < 1e-9:
            return f"{round(count)}/{per}s"
    return f"{round(rate * 1000)}/1000s"


def attack(
    targets_file: Path, rate: float, duration_s: float, out_dir: Path, *, timeout_s: float = 30.0, max_workers: int = 2000
) -> AttackRun:
    """Send the targets (vegeta JSON lines, in order) at ``rate`` per second
    for ``duration_s``; vegeta adds workers as answers lag (up to
    ``max_workers``) so the schedule does not wait for the system."""
    import time

    binary = vegeta_binary()
    results = out_dir / f"results-{rate:g}.bin"
    argv = [
        binary,
        "attack",
        "-format=json",
        f"-targets={targets_file}",
        f"-rate={rate_flag(rate)}",
        f"-duration={duration_s:g}s",
        f"-timeout={timeout_s:g}s",
        f"-max-workers={max_workers}",
        "-keepalive=true",
        f"-output={results}",
    ]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"vegeta attack exited {proc.returncode}: {stderr[-500:]}")
    encoded = subprocess.run(
        [binary, "encode", "--to=csv", str(results)], capture_output=True, text=True, check=True, timeout=300
    )
    return AttackRun(csv=encoded.stdout, cpu_s=usage.ru_utime + usage.ru_stime, wall_s=wall, offered=int(rate * duration_s))


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU-seconds of a live process (/proc/<pid>/stat), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces: split after its ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14, 15)


def cpu_clocks(pids: dict[str, int]) -> dict[str, float]:
    """Each named process's CPU-seconds so far (processes gone are left out)."""
    out = {}
    for name, pid in pids.items():
        value = process_cpu_s(pid)
        if value is not None:
            out[name] = value
    return out
