"""Profiling the benchmark's services with py-spy: start ``py-spy record``
on a process, and summarize its raw collapsed stacks by area of the innermost
frame and by top self-time function.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from .procs import REPO


def py_spy() -> str | None:
    exe = Path(sys.executable).with_name("py-spy")
    return str(exe) if exe.exists() else shutil.which("py-spy")


def start_profile(pid: int, duration_s: int, out: Path, rate: int = 100) -> subprocess.Popen[bytes] | None:
    """``py-spy record --gil`` (only the thread holding the GIL, i.e. Python
    actually running) in raw collapsed-stack format; None if py-spy is missing."""
    exe = py_spy()
    if exe is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(duration_s),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--function",
            "--gil",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")

# Innermost frame's file (as py-spy prints it: relative to its sys.path
# entry) -> a readable area name; first match wins.
AREAS: tuple[tuple[str, str], ...] = (
    ("cassandra/", "cassandra-driver (Python side)"),
    ("httpcore/_synchronization", "httpcore: current_async_library (failing `import sniffio`)"),
    ("importlib", "import machinery at run time"),
    ("_distutils_hack", "import machinery at run time"),
    ("httpx/", "httpx / httpcore (HTTP client)"),
    ("httpcore/", "httpx / httpcore (HTTP client)"),
    ("h11/", "h11 (HTTP/1.1 parsing)"),
    ("uvicorn/", "uvicorn"),
    ("starlette/", "starlette"),
    ("anyio/", "anyio"),
    ("faust/", "faust / mode"),
    ("mode/", "faust / mode"),
    ("aiokafka/", "aiokafka"),
    ("kafka/", "aiokafka"),
    ("prometheus_client/", "prometheus_client"),
    ("json/", "json (stdlib)"),
    ("asyncio/", "asyncio / uvloop event loop"),
    ("uvloop/", "asyncio / uvloop event loop"),
    ("fanline_", "fanline code"),
    ("argon2/", "argon2"),
    ("concurrent/", "threads"),
    ("threading.py", "threads"),
    ("queue.py", "threads"),
    ("uuid.py", "uuid (stdlib)"),
    ("urllib/", "urllib (URL parsing)"),
)
_SHARED = {p.name for p in (REPO / "shared" / "src" / "fanline_shared").glob("*.py")}


def _area(frame: str) -> str:
    m = _FRAME.match(frame)
    path = m.group("file") if m else frame
    for needle, name in AREAS:
        if needle in path:
            return name
    if "/" not in path and path in _SHARED:
        return "fanline code"
    return "other"


def _short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    file = m.group("file")
    parts = Path(file).parts
    for anchor in ("site-packages", "src", "lib"):
        if anchor in parts:
            idx = len(parts) - 1 - parts[::-1].index(anchor)
            file = "/".join(parts[idx + 1 :])
            break
    return f"{m.group('func')} ({file})"


def summarize_profile(path: Path, top: int = 12) -> dict[str, Any]:
    """Samples, share by area of the innermost frame, and the top self-time
    functions from a py-spy raw (collapsed) file."""
    self_time: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = sniffio = 0
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {"samples": 0}
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        if any(f.startswith("current_async_library (httpcore") for f in frames) and any(
            "importlib" in f or "_distutils_hack" in f for f in frames
        ):
            sniffio += count
        leaf = frames[-1]
        self_time[_short(leaf)] += count
        areas[_area(leaf)] += count
        for f in set(frames):
            m = _FRAME.match(f)
            file = m.group("file") if m else f
            if "fanline_" in file or ("/" not in file and file in _SHARED):
                inclusive[_short(f)] += count
    if not total:
        return {"samples": 0}

    def pct(c: int) -> float:
        return round(100.0 * c / total, 1)

    return {
        "samples": total,
        "categories": [{"name": n, "percent": pct(c)} for n, c in areas.most_common(10)],
        "top_self": [{"function": n, "percent": pct(c)} for n, c in self_time.most_common(top)],
        "top_inclusive_fanline": [{"function": n, "percent": pct(c)} for n, c in inclusive.most_common(top)],
        "httpcore_sniffio_import_percent": pct(sniffio),
    }
